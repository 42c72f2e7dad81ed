//! The `tollgate` server: an HTTP check API, Envoy's rate limit services (from
//! `tollgate-envoy`, served and traced here), and a rate-limiting reverse proxy, on the
//! Tollgate library. The binary (`main.rs`) only calls [`cli::main`].

pub mod admin;
pub mod api;
pub mod cli;
pub mod exposition;
pub mod forward;
pub mod health;
pub mod http_server;
#[cfg(feature = "otel")]
pub mod otel;
pub mod overrides;
pub mod policies;
pub mod process_metrics;
pub mod proxy;
pub mod proxy_metrics;
pub mod reload;
pub mod serve;
pub mod shutdown;
pub mod side_listeners;
pub mod store;
pub mod store_health;
pub mod tls;
mod tls_client_name;
pub mod upstream;
