//! Time, injected.
//!
//! Library code never reads the system clock directly: it asks a [`Clock`]. Time is an integer
//! count of microseconds since the Unix epoch ([`Micros`]), the same unit the Redis scripts use,
//! so fixed windows line up across stores and a test can drive everything with a
//! [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (or, for durations, a count of microseconds).
pub type Micros = u64;

/// Microseconds in one second.
pub const MICROS_PER_SECOND: Micros = 1_000_000;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time in microseconds since the Unix epoch.
    fn now(&self) -> Micros;
}

/// The system's wall clock, made monotonic: if the wall clock steps back (an NTP correction),
/// time stands still until it catches up instead of running backwards.
#[derive(Debug, Default)]
pub struct SystemClock {
    latest: AtomicU64,
}

impl SystemClock {
    /// A new system clock.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one place that reads the wall clock.
    fn now(&self) -> Micros {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_to_micros);
        let previous = self.latest.fetch_max(wall, Ordering::Relaxed);
        previous.max(wall)
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock standing at `start` microseconds.
    pub fn new(start: Micros) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.advance_micros(duration_to_micros(by));
    }

    /// Moves the clock forward by `micros` microseconds.
    pub fn advance_micros(&self, micros: Micros) {
        self.now.fetch_add(micros, Ordering::SeqCst);
    }

    /// Sets the clock to `now` (which may be earlier than the current time).
    pub fn set(&self, now: Micros) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.now.load(Ordering::SeqCst)
    }
}

/// Measures how long something took, for metrics: a monotonic stopwatch, never a decision
/// time (decisions read a [`Clock`]).
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts measuring.
    #[allow(clippy::disallowed_methods)] // The one place that reads the monotonic clock.
    pub fn start() -> Self {
        Self(std::time::Instant::now())
    }

    /// How long since the start.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// Converts a duration to whole microseconds, saturating at `u64::MAX`.
pub fn duration_to_micros(duration: Duration) -> Micros {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Converts microseconds to a duration.
pub fn micros_to_duration(micros: Micros) -> Duration {
    Duration::from_micros(micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let clock = ManualClock::new(5);
        let other = clock.clone();
        clock.advance(Duration::from_millis(2));
        assert_eq!(other.now(), 2_005);
        other.set(1);
        assert_eq!(clock.now(), 1);
    }

    #[test]
    fn system_clock_never_runs_backwards() {
        let clock = SystemClock::new();
        let first = clock.now();
        clock
            .latest
            .store(first + 10 * MICROS_PER_SECOND, Ordering::Relaxed);
        assert_eq!(clock.now(), first + 10 * MICROS_PER_SECOND);
    }
}
