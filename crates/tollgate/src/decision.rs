//! One limit's answer to one check.

use std::time::Duration;

/// One limit's answer: whether it admits the request and how much room is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether this limit admits the request.
    pub allowed: bool,
    /// The most this limit can ever admit at once: the quota count for window algorithms,
    /// the burst for token bucket, leaky bucket and GCRA.
    pub limit: u64,
    /// How much is left right now (after this request, when it was admitted and counted).
    pub remaining: u64,
    /// Time until the limit is fully restored, as if it had never been used.
    pub reset_after: Duration,
    /// Time until a request of the same cost would be admitted, given the state after this
    /// decision (zero when one would be admitted right away). `None` means never: the cost is
    /// larger than this limit can ever admit.
    pub retry_after: Option<Duration>,
    /// How long an admitted request should wait before it proceeds (leaky bucket in queue mode).
    pub delay: Duration,
}

impl Decision {
    /// Whether a denied request may ever succeed by waiting.
    pub fn is_retryable(&self) -> bool {
        self.retry_after.is_some()
    }
}
