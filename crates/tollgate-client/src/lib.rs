//! Calling Tollgate, and being a good citizen on 429.
//!
//! - [`TollgateClient`]: a typed client for the server's check API (policy checks, inline
//!   limits, refunds), with pooled connections, a timeout and errors that carry the server's
//!   problem detail. [`TollgateClient::builder`] sets the timeout and, with the `rustls`
//!   feature, TLS: `https://` URLs, a private CA (`ca_pem`) and client
//!   certificates; [`TollgateClient::with_http_client`] calls through a `reqwest::Client` of the
//!   caller's own (its pool, proxy and TLS settings).
//! - [`RetryLayer`] for any tower/hyper client, and [`send_with_retry`] for reqwest: retry 429
//!   and 503 as long as `Retry-After` (seconds or an HTTP-date) or the `RateLimit` field's `t`
//!   advises, else with exponential backoff and full jitter; within a number of attempts and a
//!   deadline; never a non-idempotent request unless told to.
//! - [`PacingLayer`]: spaces requests by what `RateLimit` (and the older fields) say is left, so
//!   a client stays under the limit instead of running into it.
//! - [`advice`]: the header parsing, which ignores malformed, negative and absurd values and
//!   caps every wait.
//!
//! The `rustls` feature builds reqwest with `rustls-no-provider` and hands this crate's clients
//! a rustls configuration on the ring provider, with no OpenSSL. Any other `reqwest::Client`
//! in the same program then needs a crypto provider of its own: reqwest's `rustls` feature, or
//! `rustls::crypto::ring::default_provider().install_default()` at start.

pub mod advice;
mod api;
mod builder;
mod pacing;
mod reqwest_retry;
mod retry;
#[cfg(feature = "rustls")]
mod tls;
mod usage;

pub use api::{
    Attributes, Calendar, CheckAnswer, ClientError, DecisionAnswer, InlineLimit, TollgateClient,
};
pub use builder::{DEFAULT_TIMEOUT, TollgateClientBuilder};
pub use pacing::{Pacer, PacingLayer, PacingService};
pub use reqwest_retry::send_with_retry;
pub use retry::{RetryLayer, RetryLog, RetryPolicy, RetryService};
pub use usage::{LimitUsage, UsageAnswer, UsageRefused};
