//! The waits between attempts to reach the management server: exponential from the first
//! wait to the longest, doubling, optionally spread at random (as envoyproxy/ratelimit's
//! XDS_CLIENT_BACKOFF_* settings describe it).

use std::time::Duration;

/// Successive waits; [`reset`](Self::reset) once the server answered.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: bool,
    attempt: u32,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration, jitter: bool) -> Self {
        Self {
            initial,
            max,
            jitter,
            attempt: 0,
        }
    }

    /// The next wait: with jitter, a random point between the first wait and this attempt's
    /// ceiling.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        if self.jitter {
            spread(self.initial, ceiling, fastrand::f64())
        } else {
            ceiling
        }
    }

    /// Starts again from the first wait.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// `initial` doubled once per attempt so far, at most `max`.
    fn ceiling(&self) -> Duration {
        let doubled = self
            .initial
            .checked_mul(1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.max);
        doubled.min(self.max)
    }
}

/// The point `fraction` (0 to 1) of the way from `low` to `high`.
fn spread(low: Duration, high: Duration, fraction: f64) -> Duration {
    low + high.saturating_sub(low).mul_f64(fraction.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest_and_start_again_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(60), false);
        let waits: Vec<u64> = (0..6).map(|_| backoff.next_wait().as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 60, 60, 60]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), Duration::from_secs(10));
    }

    #[test]
    fn many_attempts_do_not_overflow() {
        let mut backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(60), false);
        for _ in 0..100 {
            assert!(backoff.next_wait() <= Duration::from_secs(60));
        }
    }

    #[test]
    fn jitter_stays_between_the_first_wait_and_the_ceiling() {
        let (low, high) = (Duration::from_secs(10), Duration::from_secs(40));
        assert_eq!(spread(low, high, 0.0), low);
        assert_eq!(spread(low, high, 1.0), high);
        assert_eq!(spread(low, high, 0.5), Duration::from_secs(25));
        let mut backoff = Backoff::new(low, Duration::from_secs(60), true);
        for _ in 0..20 {
            let wait = backoff.next_wait();
            assert!((low..=Duration::from_secs(60)).contains(&wait), "{wait:?}");
        }
    }
}
