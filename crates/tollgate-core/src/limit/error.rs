//! Why a limit was refused: each error names the limit and what to do instead.

use super::MAX_SLIDING_LOG_COUNT;
use crate::calendar::CalendarError;
use crate::clock::Micros;
use crate::kind::Algorithm;

/// Why a limit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// A quota of zero, which would admit nothing, ever.
    #[error(
        "limit {name:?}: {algorithm} needs a quota count of at least 1 (a quota of 0 admits nothing, ever; to refuse a client, put it on the deny list)"
    )]
    ZeroQuota {
        /// The limit's name.
        name: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
    /// A burst of zero.
    #[error("limit {name:?}: the burst must be at least 1")]
    ZeroBurst {
        /// The limit's name.
        name: String,
    },
    /// A burst was given to a window algorithm, which has none.
    #[error(
        "limit {name:?}: burst applies only to token_bucket, leaky_bucket and gcra, not {algorithm}"
    )]
    BurstNotApplicable {
        /// The limit's name.
        name: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
    /// A leaky-bucket mode was given to another algorithm.
    #[error("limit {name:?}: mode applies only to leaky_bucket, not {algorithm}")]
    ModeNotApplicable {
        /// The limit's name.
        name: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
    /// The queue's `delay_after` is zero or larger than the burst.
    #[error(
        "limit {name:?}: delay_after must be between 1 and the burst ({burst}), got {delay_after}"
    )]
    DelayAfterOutOfRange {
        /// The limit's name.
        name: String,
        /// The burst.
        burst: u64,
        /// The value given.
        delay_after: u64,
    },
    /// The burst and the interval between requests are too large together.
    #[error(
        "limit {name:?}: burst {burst} at one request every {interval}us spans more than 2^50us; lower the burst or the period"
    )]
    Overflow {
        /// The limit's name.
        name: String,
        /// The burst.
        burst: u64,
        /// The interval between requests in microseconds.
        interval: Micros,
    },
    /// A sliding log with too large a count.
    #[error(
        "limit {name:?}: sliding_log keeps one entry per request, so its count may not exceed {MAX_SLIDING_LOG_COUNT}; use sliding_window or gcra for larger quotas"
    )]
    LogTooLarge {
        /// The limit's name.
        name: String,
    },
    /// An empty name.
    #[error("a limit needs a name")]
    EmptyName,
    /// A lease larger than the limit can ever grant at once, or on a queueing leaky bucket.
    #[error(
        "limit {name:?}: a lease takes units in advance, so it must be at most the limit's capacity ({capacity}) and not on a leaky bucket in queue mode"
    )]
    LeaseNotApplicable {
        /// The limit's name.
        name: String,
        /// The most the limit grants at once.
        capacity: u64,
    },
    /// A calendar on an algorithm other than the fixed window.
    #[error(
        "limit {name:?}: calendar applies only to fixed_window (a quota per calendar period), not {algorithm}"
    )]
    CalendarNotApplicable {
        /// The limit's name.
        name: String,
        /// Its algorithm.
        algorithm: Algorithm,
    },
    /// A calendar that does not fit the quota.
    #[error("limit {name:?}: {error}")]
    Calendar {
        /// The limit's name.
        name: String,
        /// What is wrong with it.
        error: CalendarError,
    },
    /// A global limit with a fixed lease, or on a queueing leaky bucket.
    #[error(
        "limit {name:?}: a global limit is leased in sizes that adapt to demand, so it takes no fixed lease, and it cannot be a leaky bucket in queue mode"
    )]
    GlobalNotApplicable {
        /// The limit's name.
        name: String,
    },
}
