//! Counters as envoyproxy/ratelimit keeps them: one plain count per fixed window, under a key
//! that ends with the window's start, raised by every hit (refused ones too) and left to expire.
//!
//! Tollgate's own limits keep their state under keys of their own ([`store`](crate::store));
//! these exist so that Tollgate and envoyproxy/ratelimit, sharing one Redis while one replaces
//! the other, count every hit in the same place. The window is read from the caller's clock
//! (the node's, as upstream reads it), not the store's: both sides must name the same key.
//!
//! ```
//! use tollgate_core::counter::{Tally, window_key};
//!
//! // Upstream's key for domain `rl`, descriptor `generic_key=api`, a minute's limit, at 1234 s.
//! assert_eq!(window_key("rl_generic_key_api_", 60, 1_234), "rl_generic_key_api_1200");
//! // Eleven hits counted there: over a limit of ten until the minute ends, 26 s later.
//! let tally = Tally::new(11, 10, 60, 1_234, false);
//! assert!(tally.is_over());
//! assert_eq!(tally.reset_after(), 26);
//! ```
//!
//! [`Count`] is the question a limiter answers with a [`Tally`] per counter; a store reads and
//! raises the counters themselves ([`CounterOp`], `Store::counters`).

use std::borrow::Cow;
use std::time::Duration;

use smallvec::SmallVec;

use crate::bounds::MAX_COST;
pub use crate::bounds::{MAX_COUNTER_KEY_BYTES, MAX_COUNTERS};
use crate::check::CheckError;

/// One counter of a [`Count`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter<'a> {
    /// The key before the window's start (upstream's prefix, `domain_` and `key_value_` per
    /// entry).
    pub key: Cow<'a, str>,
    /// The window's length in seconds: upstream's unit divider.
    pub window: u64,
    /// The most hits a window admits.
    pub limit: u64,
    /// Hits this request adds; 0 looks.
    pub hits: u64,
}

/// The question: one request's counters, counted together as upstream counts a request's
/// descriptors.
#[derive(Debug, Clone, Default)]
pub struct Count<'a> {
    counters: SmallVec<[Counter<'a>; 4]>,
    stop_over_limit: bool,
    local_cache: bool,
    jitter: u64,
}

impl<'a> Count<'a> {
    /// An empty count: every counter raised by its hits, no jitter, no local cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a counter.
    pub fn counter(
        mut self,
        key: impl Into<Cow<'a, str>>,
        window: u64,
        limit: u64,
        hits: u64,
    ) -> Self {
        self.push(Counter {
            key: key.into(),
            window,
            limit,
            hits,
        });
        self
    }

    /// Adds a counter in place.
    pub fn push(&mut self, counter: Counter<'a>) {
        self.counters.push(counter);
    }

    /// The counters, in the order they were added; answers follow the same order.
    pub fn counters(&self) -> &[Counter<'a>] {
        &self.counters
    }

    /// Upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: read the counters first, and when
    /// some would go over their limit raise only those (see [`Count::addends`]).
    pub fn stop_increment_over_limit(mut self, stop: bool) -> Self {
        self.stop_over_limit = stop;
        self
    }

    /// Whether counters are read first (see [`Count::stop_increment_over_limit`]).
    pub fn stops_increment_over_limit(&self) -> bool {
        self.stop_over_limit
    }

    /// Upstream's `LOCAL_CACHE_SIZE_IN_BYTES`: a counter found over its limit is answered in
    /// process, without raising it, until its window ends.
    pub fn local_cache(mut self, cached: bool) -> Self {
        self.local_cache = cached;
        self
    }

    /// Whether the local over-limit cache answers (see [`Count::local_cache`]).
    pub fn uses_local_cache(&self) -> bool {
        self.local_cache
    }

    /// Upstream's `EXPIRATION_JITTER_MAX_SECONDS`: a counter lives its window and a random
    /// extra in whole seconds below `max` (none for less than a second), so that the keys of
    /// one window do not all expire at once.
    pub fn expiration_jitter(mut self, max: Duration) -> Self {
        self.jitter = max.as_secs();
        self
    }

    /// The bound of the extra seconds a counter lives, in seconds (0: none).
    pub fn jitter_seconds(&self) -> u64 {
        self.jitter
    }

    /// Checks what came from outside: the number of counters, key lengths, windows and hits.
    pub fn validate(&self) -> Result<(), CheckError> {
        if self.counters.len() > MAX_COUNTERS {
            return Err(CheckError::TooManyCounters(self.counters.len()));
        }
        for (index, counter) in self.counters.iter().enumerate() {
            if counter.key.is_empty() || counter.key.len() > MAX_COUNTER_KEY_BYTES {
                return Err(CheckError::CounterKeyLength {
                    index,
                    len: counter.key.len(),
                });
            }
            if counter.window == 0 {
                return Err(CheckError::ZeroWindow { index });
            }
            if counter.hits > MAX_COST {
                return Err(CheckError::CostTooLarge {
                    index,
                    key: counter.key.chars().take(64).collect(),
                    limit: counter.limit.to_string(),
                    cost: counter.hits,
                });
            }
        }
        Ok(())
    }

    /// What each counter is raised by, as upstream's `getHitsAddend` says. Without
    /// [`Count::stop_increment_over_limit`], its hits. With it: nothing at all when a counter
    /// is `cached` over its limit; otherwise, given the `current` counts read first, its hits
    /// when no counter would go over its limit, and when some would, only theirs (the others
    /// keep their room).
    pub fn addends(&self, cached: &[bool], current: Option<&[u64]>) -> SmallVec<[u64; 4]> {
        let hits = self.counters.iter().map(|counter| counter.hits);
        if !self.stop_over_limit {
            return hits.collect();
        }
        if cached.contains(&true) {
            return self.counters.iter().map(|_| 0).collect();
        }
        let Some(current) = current else {
            return hits.collect();
        };
        let exceeds: SmallVec<[bool; 4]> = self
            .counters
            .iter()
            .zip(current)
            .map(|(counter, count)| count.saturating_add(counter.hits) > counter.limit)
            .collect();
        if !exceeds.contains(&true) {
            return hits.collect();
        }
        hits.zip(exceeds)
            .map(|(hits, exceeds)| if exceeds { hits } else { 0 })
            .collect()
    }
}

/// The key of a counter's window at `now` (seconds since the epoch): `key` followed by the
/// window's start, `(now / window) * window`, in decimal.
pub fn window_key(key: &str, window: u64, now: u64) -> String {
    use std::fmt::Write as _;
    let mut windowed = String::with_capacity(key.len() + 20);
    windowed.push_str(key);
    let _ = write!(windowed, "{}", window_start(window, now));
    windowed
}

/// The start of the window of `window` seconds that holds `now`, in seconds.
pub fn window_start(window: u64, now: u64) -> u64 {
    let window = window.max(1);
    now / window * window
}

/// One counter's answer, decided from the count as upstream decides: over its limit once the
/// count passes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    count: u64,
    limit: u64,
    window: u64,
    at: u64,
    cached: bool,
}

impl Tally {
    /// The answer for a counter of `limit` per `window` seconds that stands at `count` at `at`
    /// (seconds since the epoch); `cached` when the local over-limit cache answered.
    pub fn new(count: u64, limit: u64, window: u64, at: u64, cached: bool) -> Self {
        Self {
            count,
            limit,
            window: window.max(1),
            at,
            cached,
        }
    }

    /// The count after this request's hits (0 when the local cache answered: it was not asked).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether the counter is over its limit.
    pub fn is_over(&self) -> bool {
        self.cached || self.count > self.limit
    }

    /// Hits left in the window (0 when over).
    pub fn remaining(&self) -> u64 {
        if self.is_over() {
            0
        } else {
            self.limit - self.count
        }
    }

    /// Whether the local over-limit cache answered, without the store.
    pub fn from_cache(&self) -> bool {
        self.cached
    }

    /// Whole seconds until the window ends, 1 to the window's length (never 0), as upstream
    /// computes its reset.
    pub fn reset_after(&self) -> u64 {
        self.window - self.at % self.window
    }

    /// When the window ends, in seconds since the epoch.
    pub fn window_end(&self) -> u64 {
        window_start(self.window, self.at).saturating_add(self.window)
    }
}

/// What a store does to one plain counter: read it (`GET`), or raise it and set how long it
/// lives (`INCRBY`, then `EXPIRE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterOp<'a> {
    /// The whole key, window and all.
    pub key: &'a str,
    /// What to add; `None` reads.
    pub add: Option<CounterAdd>,
}

/// Raising a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterAdd {
    /// Added to the count (0 creates the counter and renews its life, as `INCRBY key 0` does).
    pub hits: u64,
    /// Seconds the counter lives from now.
    pub ttl: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_keys_are_upstreams() {
        // envoyproxy/ratelimit's own cases (test/redis/fixed_cache_impl_test.go).
        assert_eq!(
            window_key("domain_key_value_", 1, 1_234),
            "domain_key_value_1234"
        );
        assert_eq!(
            window_key("domain_key2_value2_subkey2_subvalue2_", 60, 1_234),
            "domain_key2_value2_subkey2_subvalue2_1200"
        );
        assert_eq!(
            window_key("domain_key3_value3_", 3_600, 1_000_000),
            "domain_key3_value3_997200"
        );
        assert_eq!(
            window_key("domain_key3_value3_subkey3_subvalue3_", 86_400, 1_000_000),
            "domain_key3_value3_subkey3_subvalue3_950400"
        );
    }

    #[test]
    fn a_tally_is_over_past_its_limit_and_resets_at_the_window_end() {
        let at_limit = Tally::new(10, 10, 60, 1_700_000_123, false);
        assert!(!at_limit.is_over());
        assert_eq!(at_limit.remaining(), 0);
        assert_eq!(at_limit.reset_after(), 37);
        assert_eq!(at_limit.window_end(), 1_700_000_160);
        let past = Tally::new(11, 10, 60, 1_700_000_123, false);
        assert!(past.is_over());
        assert_eq!(Tally::new(0, 10, 1, 5, true).remaining(), 0);
        assert_eq!(Tally::new(0, 10, 1, 5, false).reset_after(), 1);
        assert_eq!(Tally::new(0, 0, 60, 120, false).reset_after(), 60);
        assert!(
            !Tally::new(0, 0, 60, 120, false).is_over(),
            "a look at zero"
        );
    }

    fn count(limits: &[(u64, u64)], stop: bool) -> Count<'static> {
        let mut count = Count::new().stop_increment_over_limit(stop);
        for (index, &(limit, hits)) in limits.iter().enumerate() {
            count.push(Counter {
                key: format!("k{index}_").into(),
                window: 3_600,
                limit,
                hits,
            });
        }
        count
    }

    #[test]
    fn addends_follow_upstreams_stop_increment_rules() {
        // Upstream's TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig: limits 15 and 14.
        let request = count(&[(15, 1), (14, 1)], true);
        let fresh = request.addends(&[false, false], Some(&[10, 10]));
        assert_eq!(fresh.as_slice(), [1, 1]);
        let request = count(&[(15, 2), (14, 2)], true);
        assert_eq!(
            request.addends(&[false, false], Some(&[11, 11])).as_slice(),
            [2, 2]
        );
        // 13 + 2 passes 14 only: only that counter is raised.
        assert_eq!(
            request.addends(&[false, false], Some(&[13, 13])).as_slice(),
            [0, 2]
        );
        // A counter the local cache holds over its limit: nothing is raised.
        assert_eq!(request.addends(&[true, false], None).as_slice(), [0, 0]);
        // Without the option, every counter takes its hits whatever.
        let plain = count(&[(15, 2), (14, 2)], false);
        assert_eq!(
            plain.addends(&[true, false], Some(&[13, 13])).as_slice(),
            [2, 2]
        );
    }

    #[test]
    fn counts_refuse_what_no_store_should_take() {
        assert!(count(&[(1, 1)], false).validate().is_ok());
        assert_eq!(
            Count::new().counter("", 60, 1, 1).validate(),
            Err(CheckError::CounterKeyLength { index: 0, len: 0 })
        );
        assert_eq!(
            Count::new().counter("k_", 0, 1, 1).validate(),
            Err(CheckError::ZeroWindow { index: 0 })
        );
        let long = "k".repeat(MAX_COUNTER_KEY_BYTES + 1);
        assert!(Count::new().counter(long, 1, 1, 1).validate().is_err());
        assert!(
            Count::new()
                .counter("k_", 1, 1, MAX_COST + 1)
                .validate()
                .is_err()
        );
        let many = count(&vec![(1, 1); MAX_COUNTERS + 1], false);
        assert_eq!(
            many.validate(),
            Err(CheckError::TooManyCounters(MAX_COUNTERS + 1))
        );
    }
}
