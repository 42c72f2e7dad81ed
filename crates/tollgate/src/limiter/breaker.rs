//! The store's circuit breaker: after repeated failures the limiter stops calling the store for
//! a cool-down and answers by the policies' failure modes at once, instead of making every
//! request wait out a timeout; then one probe goes through, and the store is used again as soon
//! as it answers.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When the breaker opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive store failures that open the breaker. Default 5.
    pub failures: u32,
    /// How long it stays open before a probe. Default 1 s.
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            cooldown: Duration::from_secs(1),
        }
    }
}

/// Whether to call the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// The breaker is closed: call.
    Normal,
    /// The cool-down is over: this call probes the store.
    Probe,
    /// Open: do not call.
    Skip,
}

/// A lock-free breaker; times are microseconds since `epoch`, and 0 means closed.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: AtomicU32,
    cooldown_micros: AtomicU64,
    epoch: Instant,
    failures: AtomicU32,
    open_until: AtomicU64,
    probing: AtomicBool,
    opened: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            threshold: AtomicU32::new(config.failures.max(1)),
            cooldown_micros: AtomicU64::new(micros_of(config.cooldown)),
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            opened: AtomicU64::new(0),
        }
    }

    /// Changes when it opens and for how long, from the next failure on.
    pub(crate) fn configure(&self, config: BreakerConfig) {
        self.threshold
            .store(config.failures.max(1), Ordering::Release);
        self.cooldown_micros
            .store(micros_of(config.cooldown), Ordering::Release);
    }

    /// How long it stays open.
    pub(crate) fn cooldown(&self) -> Duration {
        Duration::from_micros(self.cooldown_micros.load(Ordering::Acquire))
    }

    fn micros(&self, now: Instant) -> u64 {
        // Shifted by one so it is never 0, which means closed.
        u64::try_from(now.saturating_duration_since(self.epoch).as_micros())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// Whether a call at `now` should go to the store.
    pub(crate) fn call(&self, now: Instant) -> Call {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Call::Normal;
        }
        if self.micros(now) < open_until {
            return Call::Skip;
        }
        match self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Call::Probe,
            Err(_) => Call::Skip,
        }
    }

    /// Records how a call that went to the store ended.
    pub(crate) fn record(&self, call: Call, succeeded: bool, now: Instant) {
        if succeeded {
            self.failures.store(0, Ordering::Release);
            if call == Call::Probe || self.open_until.load(Ordering::Acquire) != 0 {
                self.open_until.store(0, Ordering::Release);
                self.probing.store(false, Ordering::Release);
            }
            return;
        }
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        if call == Call::Probe || failures >= self.threshold.load(Ordering::Acquire) {
            let until = self
                .micros(now)
                .saturating_add(self.cooldown_micros.load(Ordering::Acquire));
            if self.open_until.swap(until, Ordering::AcqRel) == 0 {
                self.opened.fetch_add(1, Ordering::Relaxed);
            }
            self.probing.store(false, Ordering::Release);
        }
    }

    /// Whether the breaker is open (or probing).
    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    /// How many times it has opened.
    pub(crate) fn times_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

fn micros_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> (Breaker, Instant) {
        let breaker = Breaker::new(BreakerConfig {
            failures: 3,
            cooldown: Duration::from_secs(1),
        });
        let start = breaker.epoch;
        (breaker, start)
    }

    #[test]
    fn opens_after_consecutive_failures_and_a_success_resets_the_count() {
        let (breaker, t) = breaker();
        breaker.record(Call::Normal, false, t);
        breaker.record(Call::Normal, false, t);
        breaker.record(Call::Normal, true, t);
        breaker.record(Call::Normal, false, t);
        breaker.record(Call::Normal, false, t);
        assert_eq!(
            breaker.call(t),
            Call::Normal,
            "two failures in a row, not three"
        );
        breaker.record(Call::Normal, false, t);
        assert_eq!(breaker.call(t), Call::Skip);
        assert!(breaker.is_open());
        assert_eq!(breaker.times_opened(), 1);
    }

    #[test]
    fn after_the_cooldown_one_probe_goes_through_and_decides() {
        let (breaker, t) = breaker();
        for _ in 0..3 {
            breaker.record(Call::Normal, false, t);
        }
        let later = t + Duration::from_millis(999);
        assert_eq!(breaker.call(later), Call::Skip);
        let after = t + Duration::from_secs(1);
        assert_eq!(breaker.call(after), Call::Probe);
        assert_eq!(breaker.call(after), Call::Skip, "one probe at a time");
        // A failed probe opens it for another cool-down.
        breaker.record(Call::Probe, false, after);
        assert_eq!(breaker.call(after + Duration::from_millis(500)), Call::Skip);
        let again = after + Duration::from_secs(1);
        assert_eq!(breaker.call(again), Call::Probe);
        breaker.record(Call::Probe, true, again);
        assert_eq!(breaker.call(again), Call::Normal);
        assert!(!breaker.is_open());
        assert_eq!(
            breaker.times_opened(),
            1,
            "a failed probe re-opens, it does not open anew"
        );
    }
}
