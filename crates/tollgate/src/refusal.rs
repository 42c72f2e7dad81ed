//! A refusal as the limiter states it, in no protocol's terms: why, when to come back, and a
//! sentence for humans. The renderers (`headers` for fields, `problem` for status and
//! problem+json, the Envoy service for its codes) turn it into an answer.

use std::time::Duration;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A quota is used up, or too many requests already wait their turn.
    OverLimit,
    /// The client sits in a penalty box after repeated violations.
    Blocked,
    /// The client is on the deny list: refused as forbidden, or, where the policies ask for it
    /// (`deny_status: 429`), as over a limit, so that the client cannot tell that it is listed.
    DenyListed {
        /// Answered as over a limit instead of as forbidden.
        as_over_limit: bool,
    },
    /// The limiter cannot decide (its store is down) and fails closed.
    Unavailable,
    /// A policy counts body bytes and the request's body has no length to count up front (it
    /// is chunked): it must say its `Content-Length`, or it would pass uncounted.
    LengthRequired,
    /// The request is refused as it is sent (a path servers read in different ways): it must
    /// be sent another way, not later.
    BadRequest,
    /// The request repeats an idempotent one whose answer cannot be given: still under way,
    /// or not kept. It is never passed on afresh (it was charged once already).
    Conflict,
    /// The limiter is set up so that it cannot decide this request (a policy keyed by client
    /// address where the server gives no address): the operator's mistake, not the client's.
    Misconfigured,
}

impl Reason {
    /// A short name for logs and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::OverLimit => "over_limit",
            Reason::Blocked => "blocked",
            Reason::DenyListed { .. } => "deny_listed",
            Reason::Unavailable => "unavailable",
            Reason::LengthRequired => "length_required",
            Reason::BadRequest => "bad_request",
            Reason::Conflict => "conflict",
            Reason::Misconfigured => "misconfigured",
        }
    }
}

/// A refusal, before any frontend renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub reason: Reason,
    /// When the same request would be admitted, if ever and if known.
    pub retry_after: Option<Duration>,
    /// A sentence for humans.
    pub detail: String,
}

/// Whole seconds to wait, rounded up (at least 1), so that a client waiting that long is
/// admitted: `Retry-After`, and the "retry in N s" of a refusal's detail.
pub(crate) fn seconds_to_wait(wait: Duration) -> u64 {
    let micros = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
    micros
        .div_ceil(tollgate_core::clock::MICROS_PER_SECOND)
        .max(1)
}
