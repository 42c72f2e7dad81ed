//! Tollgate as tower middleware.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use tollgate::{Limiter, MemoryStore, Policies};
//! use tollgate_tower::RateLimitLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let policies = Policies::from_yaml("inline", r#"
//! policies:
//!   - name: api
//!     key: ip
//!     limits: [{ name: per-second, algorithm: gcra, quota: 10/s }]
//! "#)?;
//! let limiter = Limiter::with_policies(MemoryStore::new(), policies);
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limiter));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every request is decided by the limiter's policies before the inner service sees it:
//!
//! - refused requests get `429` (or `403` for the deny list, `503` when the store fails) with
//!   `Retry-After`, `Cache-Control: no-store`, the configured rate-limit fields and an
//!   `application/problem+json` body; gRPC requests get `RESOURCE_EXHAUSTED` instead;
//! - delayed requests (leaky bucket in queue mode, soft-limit tarpit) wait, then proceed; at most
//!   `max_delayed` wait at once, and past that they are refused;
//! - admitted requests reach the inner service and their responses carry the rate-limit fields;
//!   a response whose status a policy refunds on gives the request's cost back, and concurrency
//!   slots are released when the response body ends or is dropped (the client went away).
//! - a policy with `usage` is charged its estimate up front and settled at the figure the
//!   response reports (a header, a trailer, or a member of a JSON body or of server-sent events,
//!   read as the body streams) when the body ends; a body cut short keeps its estimate.
//! - a request whose body has no length up front (chunked) gets `411` where a policy counts
//!   body bytes, rather than pass uncounted.
//!
//! The layer is `Clone` and every clone shares one limiter, so wrapping it in `Buffer` or
//! cloning it per connection never splits a limit.

mod body;
#[cfg(feature = "axum")]
mod digest;
mod layer;
mod replay;
mod request;
mod response;
mod service;

pub use body::RateLimitBody;
#[cfg(feature = "axum")]
pub use digest::{BodyDigestLayer, BodyDigestService};
pub use layer::RateLimitLayer;
pub use request::{BodyDigest, PeerAddr};
pub use response::add_fields;
pub use service::RateLimitService;
