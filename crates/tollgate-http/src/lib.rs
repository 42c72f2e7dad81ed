//! Tollgate over HTTP: the listeners (TLS, connection bounds), the check API, the
//! rate-limiting reverse proxy, the admin API and its dashboard, each deciding through the
//! limiter it is given. Nothing here reads flags, the environment or configuration files;
//! the `tollgate` binary (`tollgate-server`) builds the parts from those and serves them.
//!
//! ```no_run
//! # async fn run() -> Result<(), String> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use tollgate::secret::Secret;
//! use tollgate::{AnyStore, Limiter, MemoryStore, Policies};
//! use tollgate_envoy::rls::{Rls, RlsConfig};
//! use tollgate_http::api::{AppState, Charges, Shared, app};
//! use tollgate_http::health::{Readiness, Stopping};
//! use tollgate_http::http_server::{ConnectionLimits, listen, serve};
//!
//! let policies = Policies::from_yaml("inline", "policies: []").map_err(|e| e.to_string())?;
//! let limiter = Limiter::with_policies(AnyStore::Memory(MemoryStore::new()), policies);
//! let readiness = Readiness {
//!     stopping: Stopping::default(),
//!     store: tollgate_http::store_health::watch(&limiter, Duration::from_secs(1), None),
//!     needs_store: false,
//!     rls_domains: None,
//! };
//! let app = app(AppState::new(Shared {
//!     rls: Arc::new(Rls::new(limiter.clone(), RlsConfig::default(), false)),
//!     quotas: None,
//!     charges: Arc::new(Charges::new(Secret::random(), Duration::from_secs(3_600))?),
//!     readiness,
//!     limiter,
//! }));
//! let limits = ConnectionLimits {
//!     max_connections: 1_000,
//!     header_timeout: Duration::from_secs(10),
//!     max_header_bytes: 32 * 1024,
//!     max_header_fields: 100,
//!     shutdown_timeout: Duration::from_secs(30),
//!     max_connection_age: Duration::from_secs(600),
//!     max_connection_age_grace: Duration::from_secs(30),
//!     // The shared runtime; `Some(Workers::start(4)?)` for four threads each serving its
//!     // own connections (see `Workers`).
//!     workers: None,
//! };
//! let (listener, _address) = listen("127.0.0.1:8080".parse().expect("an address"), "HTTP").await?;
//! serve(listener, app, &limits, None, std::future::pending()).await;
//! # Ok(())
//! # }
//! ```

pub mod admin;
pub mod api;
pub mod exposition;
pub mod forward;
pub mod health;
mod http1_pool;
pub mod http_server;
pub mod lane;
#[cfg(feature = "otel")]
pub mod otel;
pub mod process_metrics;
pub mod proxy;
pub mod proxy_metrics;
pub mod side_listeners;
pub mod store_health;
pub mod tls;
mod tls_client_name;
