//! The circuit breaker, a store layer: after repeated failures it stops calling the store for
//! a cool-down and fails at once with [`StoreError::CircuitOpen`], so that the policies'
//! failure modes answer instead of every request waiting out a timeout; then one probe goes
//! through, and the store is used again as soon as it answers. Time comes from the injected
//! clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::counter::CounterOp;
use crate::store::{Store, StoreError};
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::{Clock, Micros, Stopwatch, duration_to_micros};

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
enum Call {
    /// The breaker is closed: call.
    Normal,
    /// The cool-down is over: this call probes the store.
    Probe,
    /// Open: do not call.
    Skip,
}

/// A change of the breaker's state, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transition {
    /// It opened after this many failures in a row.
    Opened(u32),
    /// It closed after being open this long.
    Closed(Micros),
}

/// The breaker's state, lock-free; `open_until` is a clock time, and 0 means closed.
#[derive(Debug)]
struct State {
    threshold: AtomicU32,
    cooldown_micros: AtomicU64,
    failures: AtomicU32,
    open_until: AtomicU64,
    probing: AtomicBool,
    opened: AtomicU64,
    /// When it last opened.
    opened_at: AtomicU64,
}

impl State {
    fn new(config: BreakerConfig) -> Self {
        Self {
            threshold: AtomicU32::new(config.failures.max(1)),
            cooldown_micros: AtomicU64::new(duration_to_micros(config.cooldown)),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            opened: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
        }
    }

    fn configure(&self, config: BreakerConfig) {
        self.threshold
            .store(config.failures.max(1), Ordering::Release);
        self.cooldown_micros
            .store(duration_to_micros(config.cooldown), Ordering::Release);
    }

    /// Whether it is closed and counts no failures: a healthy answer would change nothing.
    fn is_clear(&self) -> bool {
        self.open_until.load(Ordering::Acquire) == 0 && self.failures.load(Ordering::Acquire) == 0
    }

    /// Whether a call at `now` should go to the store.
    fn call(&self, now: Micros) -> Call {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Call::Normal;
        }
        if now < open_until {
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

    /// Records how a call that went to the store ended; returns the change it made, if any.
    fn record(&self, call: Call, succeeded: bool, now: Micros) -> Option<Transition> {
        if succeeded {
            self.failures.store(0, Ordering::Release);
            if call == Call::Probe || self.open_until.load(Ordering::Acquire) != 0 {
                let was_open = self.open_until.swap(0, Ordering::AcqRel) != 0;
                self.probing.store(false, Ordering::Release);
                let opened_at = self.opened_at.load(Ordering::Acquire);
                return was_open.then(|| Transition::Closed(now.saturating_sub(opened_at)));
            }
            return None;
        }
        let failures = self
            .failures
            .fetch_add(1, Ordering::AcqRel)
            .saturating_add(1);
        if call == Call::Probe || failures >= self.threshold.load(Ordering::Acquire) {
            // Never 0, which means closed.
            let until = now
                .saturating_add(self.cooldown_micros.load(Ordering::Acquire))
                .max(1);
            self.probing.store(false, Ordering::Release);
            if self.open_until.swap(until, Ordering::AcqRel) == 0 {
                self.opened.fetch_add(1, Ordering::Relaxed);
                self.opened_at.store(now, Ordering::Release);
                return Some(Transition::Opened(failures));
            }
        }
        None
    }
}

/// A store behind a circuit breaker.
pub(crate) struct CircuitBreaker<S> {
    inner: S,
    state: State,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn super::StoreObserver>,
}

impl<S> std::fmt::Debug for CircuitBreaker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<S: Store> CircuitBreaker<S> {
    /// `inner` behind a breaker that reads `clock` and reports store calls to `observer`.
    pub(crate) fn new(
        inner: S,
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        observer: Arc<dyn super::StoreObserver>,
    ) -> Self {
        Self {
            inner,
            state: State::new(config),
            clock,
            observer,
        }
    }

    /// The store behind the breaker.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    /// Changes when it opens and for how long, from the next failure on.
    pub(crate) fn configure(&self, config: BreakerConfig) {
        self.state.configure(config);
    }

    /// How long it stays open.
    pub(crate) fn cooldown(&self) -> Duration {
        Duration::from_micros(self.state.cooldown_micros.load(Ordering::Acquire))
    }

    /// Whether the breaker is open (or probing): the store failed repeatedly and is resting.
    pub(crate) fn is_open(&self) -> bool {
        self.state.open_until.load(Ordering::Acquire) != 0
    }

    /// How many times it has opened.
    pub(crate) fn times_opened(&self) -> u64 {
        self.state.opened.load(Ordering::Relaxed)
    }
}

impl<S: Store> CircuitBreaker<S> {
    /// The kind of call the store may take now, or the open breaker's refusal.
    fn admit(&self) -> Result<Call, StoreError> {
        // Closed: the store is called, and the time does not matter.
        if !self.is_open() {
            return Ok(Call::Normal);
        }
        let call = self.state.call(self.clock.now());
        if call == Call::Skip {
            self.observer.store_skipped();
            return Err(StoreError::CircuitOpen);
        }
        Ok(call)
    }

    /// Records how the store answered `call`, timed by `watch`.
    fn record(&self, call: Call, watch: Stopwatch, error: Option<&StoreError>) {
        self.recorded(call, watch.elapsed(), error);
    }

    /// Reports a call that took `took` and moves the breaker by its outcome.
    fn recorded(&self, call: Call, took: Duration, error: Option<&StoreError>) {
        self.observer.store_called(took, error);
        let healthy = !matches!(error, Some(error) if error.is_store_failure());
        // A healthy answer to a closed breaker that counts no failures changes nothing.
        if healthy && call == Call::Normal && self.state.is_clear() {
            return;
        }
        match self.state.record(call, healthy, self.clock.now()) {
            Some(Transition::Opened(failures)) => {
                let cause = error.map(ToString::to_string);
                tracing::warn!(
                    failures,
                    cooldown_ms = self.cooldown().as_millis() as u64,
                    "the circuit breaker opens: the store failed {failures} times in a row ({}); \
                     requests are decided by their policies' failure modes until a probe \
                     after the cool-down succeeds",
                    cause.as_deref().unwrap_or("unknown cause")
                );
            }
            Some(Transition::Closed(open)) => {
                let open = tollgate_core::clock::micros_to_duration(open);
                tracing::info!(
                    open_ms = open.as_millis() as u64,
                    "the circuit breaker closes: the store answers again after {open:?}"
                );
            }
            None => {}
        }
    }
}

impl<S: Store> Store for CircuitBreaker<S> {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        let call = self.admit()?;
        let watch = Stopwatch::start();
        let result = self.inner.check(check, at).await;
        self.record(call, watch, result.as_ref().err());
        result
    }

    /// Only while closed: an open breaker's probe and refusals take the `check` way. A
    /// decision made in process is no call to a store: it is neither timed nor counted as
    /// one (the check's own time is), and only a failure moves the breaker.
    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        if self.is_open() {
            return None;
        }
        // Matched rather than inspected in place, so that a verdict moves straight through.
        match self.inner.check_now(check) {
            Some(Err(error)) => {
                self.recorded(Call::Normal, Duration::ZERO, Some(&error));
                Some(Err(error))
            }
            decided => decided,
        }
    }

    async fn counters(&self, ops: &[CounterOp<'_>]) -> Result<Vec<u64>, StoreError> {
        let call = self.admit()?;
        let watch = Stopwatch::start();
        let result = self.inner.counters(ops).await;
        self.record(call, watch, result.as_ref().err());
        result
    }

    // Adjustments go through whatever the breaker says: a refund that reaches a recovering
    // store is one less unit stranded.
    pass_to_inner!(writes);

    pass_to_inner!(describe);
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Micros = 1_700_000_000_000_000;

    fn state() -> State {
        State::new(BreakerConfig {
            failures: 3,
            cooldown: Duration::from_secs(1),
        })
    }

    #[test]
    fn opens_after_consecutive_failures_and_a_success_resets_the_count() {
        let state = state();
        state.record(Call::Normal, false, T);
        state.record(Call::Normal, false, T);
        state.record(Call::Normal, true, T);
        state.record(Call::Normal, false, T);
        state.record(Call::Normal, false, T);
        assert_eq!(
            state.call(T),
            Call::Normal,
            "two failures in a row, not three"
        );
        state.record(Call::Normal, false, T);
        assert_eq!(state.call(T), Call::Skip);
        assert_eq!(state.opened.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn after_the_cooldown_one_probe_goes_through_and_decides() {
        let state = state();
        for _ in 0..3 {
            state.record(Call::Normal, false, T);
        }
        assert_eq!(state.call(T + 999_999), Call::Skip);
        let after = T + 1_000_000;
        assert_eq!(state.call(after), Call::Probe);
        assert_eq!(state.call(after), Call::Skip, "one probe at a time");
        // A failed probe opens it for another cool-down.
        state.record(Call::Probe, false, after);
        assert_eq!(state.call(after + 500_000), Call::Skip);
        let again = after + 1_000_000;
        assert_eq!(state.call(again), Call::Probe);
        state.record(Call::Probe, true, again);
        assert_eq!(state.call(again), Call::Normal);
        assert_eq!(
            state.opened.load(Ordering::Relaxed),
            1,
            "a failed probe re-opens, it does not open anew"
        );
    }

    #[test]
    fn it_reports_opening_once_and_closing_with_how_long_it_was_open() {
        let state = state();
        assert_eq!(state.record(Call::Normal, false, T), None);
        assert_eq!(state.record(Call::Normal, false, T), None);
        assert_eq!(
            state.record(Call::Normal, false, T),
            Some(Transition::Opened(3))
        );
        let after = T + 1_000_000;
        assert_eq!(state.call(after), Call::Probe);
        assert_eq!(
            state.record(Call::Probe, false, after),
            None,
            "a failed probe is not a new opening to report"
        );
        let again = after + 1_000_000;
        assert_eq!(state.call(again), Call::Probe);
        assert_eq!(
            state.record(Call::Probe, true, again),
            Some(Transition::Closed(2_000_000))
        );
        assert_eq!(state.record(Call::Normal, true, again), None);
    }
}
