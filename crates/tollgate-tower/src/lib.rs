//! Tollgate as tower middleware, in two forms.
//!
//! The short form: a rate and a burst per client address (or per key of your choosing), and
//! your own answer to refused requests if you want one:
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use tollgate_tower::RateLimitLayer;
//!
//! /// Who is calling, as the authentication layer in front put it in the extensions.
//! #[derive(Clone)]
//! struct User(String);
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = RateLimitLayer::per_second(10)
//!     .burst(20)
//!     .key(|request| request.extensions.get::<User>().map(|user| user.0.clone()))
//!     .on_refusal(|refused| {
//!         http::Response::builder()
//!             .status(refused.status())
//!             .body(format!("slow down: {}", refused.detail()))
//!             .unwrap_or_default()
//!     })
//!     .build()?;
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! It makes one policy (GCRA: an exact rate with a burst) and decides it as the policy form
//! does; see [`RateLimitBuilder`]. The policy form takes a [`Limiter`](tollgate::Limiter) with
//! policies (from a file or built in code), for several limits, routes, plans, penalties, costs
//! and everything else a policy can say:
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
//! Either way, every request is decided before the inner service sees it:
//!
//! - refused requests get `429` (or `403` for the deny list, `503` when the store fails) with
//!   `Retry-After`, `Cache-Control: no-store`, the configured rate-limit fields and an
//!   `application/problem+json` body, or the [`on_refusal`](RateLimitLayer::on_refusal) hook's
//!   answer with those fields; gRPC requests get `RESOURCE_EXHAUSTED` instead;
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
mod builder;
#[cfg(feature = "axum")]
mod digest;
mod grpc_status;
mod hooks;
mod layer;
mod replay;
mod request;
mod response;
mod service;

pub use body::RateLimitBody;
pub use builder::{BuildError, RateLimitBuilder};
#[cfg(feature = "axum")]
pub use digest::{BodyDigestLayer, BodyDigestService};
pub use hooks::Refused;
pub use layer::RateLimitLayer;
pub use request::{BodyDigest, PeerAddr};
pub use response::add_fields;
pub use service::RateLimitService;
