//! The `tollgate` server: composes the check API, the proxy, the admin API and the listeners
//! (`tollgate-http`) and Envoy's rate limit services (`tollgate-envoy`, served and traced
//! here) on the Tollgate library, from flags, environment and files. The binary (`main.rs`)
//! only calls [`cli::main`].

pub mod admin_flags;
// A global allocator is unsafe by its trait; its module says what each call relies on.
#[allow(unsafe_code)]
pub mod allocator;
pub mod cli;
pub mod connection_flags;
mod flag_count;
pub mod health_flags;
#[cfg(feature = "otel")]
pub mod otel;
pub mod overrides;
pub mod policies;
pub mod proxy;
pub mod refund_flags;
pub mod reload;
mod runtime_threads;
pub mod serve;
pub mod serve_args;
pub mod shutdown;
pub mod side_listener_flags;
pub mod store;
pub mod tls_flags;
pub mod upstream;
