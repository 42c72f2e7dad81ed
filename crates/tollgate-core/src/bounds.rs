//! How large a question may be: the caps a check and a count are validated against, in a
//! module of their own so that the check, the count and the limit (which caps its debt at the
//! largest cost) read them without reading each other.

/// The largest cost a single item may carry (2^40); larger costs are refused by
/// [`Check::validate`](crate::Check::validate) rather than wrapped or saturated.
pub const MAX_COST: u64 = 1 << 40;

/// The most items one check may hold.
pub const MAX_ITEMS: usize = 64;

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The most counters one count may hold (envoyproxy/ratelimit has no cap; Tollgate's rate
/// limit service takes at most this many descriptors a request).
pub const MAX_COUNTERS: usize = 4_096;

/// The longest counter key, in bytes. Upstream keys are the descriptor's entries verbatim, so
/// they are not shortened: a longer key is refused.
pub const MAX_COUNTER_KEY_BYTES: usize = 1 << 20;
