//! One limit's answer to one check.

use std::time::Duration;

use crate::clock::Micros;

/// One limit's answer: whether it admits the request and how much room is left.
///
/// Kept to six words (times as integer microseconds) because a verdict carries one per limit
/// and sits on the hot path; the accessors hand out [`Duration`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after: Micros,
    retry_after: Micros,
    delay: Micros,
}

/// `retry_after` of a request that can never be admitted.
const NEVER: Micros = Micros::MAX;

impl Decision {
    /// A decision; times in microseconds, `retry_after` `None` for never.
    pub fn new(
        allowed: bool,
        limit: u64,
        remaining: u64,
        reset_after: Micros,
        retry_after: Option<Micros>,
        delay: Micros,
    ) -> Self {
        Self {
            allowed,
            limit,
            remaining,
            reset_after,
            retry_after: retry_after.map_or(NEVER, |wait| wait.min(NEVER - 1)),
            delay,
        }
    }

    /// The same decision `elapsed` later, with nothing else happening: the waits shortened.
    pub fn aged(&self, elapsed: Micros) -> Self {
        Self {
            reset_after: self.reset_after.saturating_sub(elapsed),
            retry_after: if self.retry_after == NEVER {
                NEVER
            } else {
                self.retry_after.saturating_sub(elapsed)
            },
            ..*self
        }
    }

    /// Whether this limit admits the request.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The most this limit can ever admit at once: the quota count for window algorithms,
    /// the burst for token bucket, leaky bucket and GCRA.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How much is left right now (after this request, when it was admitted and counted).
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until the limit is fully restored, as if it had never been used.
    pub fn reset_after(&self) -> Duration {
        Duration::from_micros(self.reset_after)
    }

    /// [`reset_after`](Self::reset_after) in microseconds.
    pub fn reset_after_micros(&self) -> Micros {
        self.reset_after
    }

    /// Time until a request of the same cost would be admitted, given the state after this
    /// decision (zero when one would be admitted right away). `None` means never: the cost is
    /// larger than this limit can ever admit.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_micros().map(Duration::from_micros)
    }

    /// [`retry_after`](Self::retry_after) in microseconds.
    pub fn retry_after_micros(&self) -> Option<Micros> {
        (self.retry_after != NEVER).then_some(self.retry_after)
    }

    /// How long an admitted request should wait before it proceeds (leaky bucket in queue mode).
    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.delay)
    }

    /// [`delay`](Self::delay) in microseconds.
    pub fn delay_micros(&self) -> Micros {
        self.delay
    }

    /// Whether a denied request may ever succeed by waiting.
    pub fn is_retryable(&self) -> bool {
        self.retry_after != NEVER
    }
}
