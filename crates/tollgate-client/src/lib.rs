//! Calling Tollgate, and being a good citizen on 429.
//!
//! - [`TollgateClient`]: a typed client for the server's check API (policy checks, inline
//!   limits, refunds), with pooled connections, a timeout and errors that carry the server's
//!   problem detail.
//! - [`RetryLayer`] for any tower/hyper client, and [`send_with_retry`] for reqwest: retry 429
//!   and 503 as long as `Retry-After` (seconds or an HTTP-date) or the `RateLimit` field's `t`
//!   advises, else with exponential backoff and full jitter; within a number of attempts and a
//!   deadline; never a non-idempotent request unless told to.
//! - [`PacingLayer`]: spaces requests by what `RateLimit` (and the older fields) say is left, so
//!   a client stays under the limit instead of running into it.
//! - [`advice`]: the header parsing, which ignores malformed, negative and absurd values and
//!   caps every wait.

pub mod advice;
mod api;
mod pacing;
mod reqwest_retry;
mod retry;

pub use api::{Attributes, CheckAnswer, ClientError, DecisionAnswer, InlineLimit, TollgateClient};
pub use pacing::{Pacer, PacingLayer, PacingService};
pub use reqwest_retry::send_with_retry;
pub use retry::{RetryLayer, RetryLog, RetryPolicy, RetryService};
