//! Limits: a named quota and the algorithm that enforces it.

use std::fmt;
use std::sync::Arc;

use crate::calendar::Calendar;
use crate::clock::Micros;
use crate::kind::{Algorithm, Kind, LeakyMode};
use crate::quota::Quota;
use crate::scope::Scope;

mod builder;
mod error;

pub use builder::LimitBuilder;
pub use error::LimitError;

/// The largest number of entries a sliding log may keep per key: the quota count of a
/// sliding-log limit may not exceed it, because the log costs memory and time per entry.
pub const MAX_SLIDING_LOG_COUNT: u64 = 10_000;

/// Rate algorithms must keep `burst × interval` below this, so that twice that plus the
/// current time stays below 2^53 microseconds, where Lua's numbers are exact.
const MAX_TOLERANCE_MICROS: Micros = 1 << 50;

/// The longest a limit's state may take to pay off its debt and its capacity together, so
/// that the instant it is fresh again, added to the current time, stays below 2^53
/// microseconds (where Lua's numbers are exact).
const MAX_DEBT_SPAN_MICROS: Micros = 1 << 51;

/// A named quota and the algorithm that enforces it.
///
/// Build one with [`Limit::new`] or [`Limit::builder`]; both validate the combination so that
/// every check against a `Limit` is well defined.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    shape: Shape,
    state_name: Arc<str>,
    state_id: u64,
}

impl Limit {
    /// A limit with the algorithm's defaults: the burst of a rate algorithm is the quota count,
    /// and a leaky bucket is a meter.
    pub fn new(
        name: impl Into<Arc<str>>,
        algorithm: Algorithm,
        quota: Quota,
    ) -> Result<Self, LimitError> {
        Self::builder(name, algorithm, quota).build()
    }

    /// A builder for a limit with a burst or a leaky-bucket mode.
    pub fn builder(name: impl Into<Arc<str>>, algorithm: Algorithm, quota: Quota) -> LimitBuilder {
        LimitBuilder::new(name.into(), algorithm, quota)
    }

    /// The limit's name, which also tells its state apart from other limits on the same key.
    pub fn name(&self) -> &str {
        &self.shape.name
    }

    /// The name the limit's state is kept under: its name and its shape (an algorithm letter,
    /// the quota, a burst or queue that differ from the defaults), as in `per-user|g10/s:b20`. Two limits of one name but another
    /// shape never read or reset each other's state: a state kept by one algorithm means
    /// something else to another, and a client that could switch between them would start
    /// afresh each time. The shape holds no `|`, so the text after the last `|` is the shape.
    pub fn state_name(&self) -> &str {
        &self.state_name
    }

    /// A 64-bit digest of [`state_name`](Self::state_name), computed once, so that stores can
    /// tell limits apart without hashing it on every check.
    pub fn state_id(&self) -> u64 {
        self.state_id
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.shape.algorithm
    }

    /// The calendar whose periods a fixed window counts by, if it has one.
    pub fn calendar(&self) -> Option<&Calendar> {
        self.shape.calendar.as_deref()
    }

    /// The transition its states go through.
    pub(crate) fn kind(&self) -> Kind {
        self.shape.kind
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.shape.quota
    }

    /// The most the limit admits back to back: the burst of a rate algorithm, the quota count
    /// of a window algorithm.
    pub fn capacity(&self) -> u64 {
        self.shape.burst
    }

    /// The burst as configured, if the algorithm has one.
    pub fn burst(&self) -> Option<u64> {
        self.shape.algorithm.is_rate().then_some(self.shape.burst)
    }

    /// The leaky bucket's mode (always [`LeakyMode::Meter`] for other algorithms).
    pub fn mode(&self) -> LeakyMode {
        self.shape.mode
    }

    /// Microseconds between two requests at the steady rate: the period divided by the count,
    /// rounded up so that rounding never admits more than the quota. Zero for window algorithms.
    pub fn interval(&self) -> Micros {
        self.shape.interval
    }

    /// The quota's period in microseconds.
    pub fn period(&self) -> Micros {
        self.shape.quota.period_micros()
    }

    /// The quota's count.
    pub fn count(&self) -> u64 {
        self.shape.quota.count()
    }

    /// The units a node leases at a time, if this limit is leased.
    pub fn lease(&self) -> Option<u64> {
        (self.shape.lease > 0).then_some(self.shape.lease)
    }

    /// Where this limit counts.
    pub fn scope(&self) -> Scope {
        self.shape.scope
    }

    /// Whether a window algorithm carries debt into the windows that follow (the default), or
    /// forgets what it counted past its quota when its window ends, as envoyproxy/ratelimit's
    /// counters do (see [`LimitBuilder::debt_expires_with_window`]).
    pub fn carries_debt(&self) -> bool {
        !self.shape.debt_expires
    }

    /// Whether the limit's states are pinned: a store that must evict to stay within its bound
    /// takes them only when nothing else can go (see [`LimitBuilder::pinned`]).
    pub fn pinned(&self) -> bool {
        self.shape.pinned
    }

    /// The most units a forced charge (a settlement above the estimate, a usage report) may
    /// leave owing beyond the capacity. Debt is paid off at the quota's rate: a window
    /// algorithm carries it into the windows that follow, a rate algorithm's state reaches that
    /// far into the future. See [`LimitBuilder::max_debt`].
    pub fn max_debt(&self) -> u64 {
        self.shape.debt
    }

    fn with_valid_lease(self) -> Result<Limit, LimitError> {
        let queueing = matches!(self.shape.mode, LeakyMode::Queue { .. });
        if self.shape.scope == Scope::Global && (self.shape.lease > 0 || queueing) {
            return Err(LimitError::GlobalNotApplicable {
                name: self.shape.name.to_string(),
            });
        }
        if self.shape.lease > self.shape.burst || (self.shape.lease > 0 && queueing) {
            return Err(LimitError::LeaseNotApplicable {
                name: self.shape.name.to_string(),
                capacity: self.shape.burst,
            });
        }
        Ok(self)
    }

    /// This limit's share on one of `nodes` nodes deciding alone: the quota count and burst
    /// divided by `nodes` (rounded down, at least 1 for what was at least 1), same name, period,
    /// algorithm and mode.
    pub fn divided(&self, nodes: u64) -> Limit {
        if nodes <= 1 {
            return self.clone();
        }
        // A share that would not validate (it always does) keeps the whole limit.
        self.resized(|n| if n == 0 { 0 } else { (n / nodes).max(1) })
            .unwrap_or_else(|| self.clone())
    }

    /// This limit with its quota count, burst, lease and debt bound multiplied by `factor`
    /// (rounded down, at least 1 for what was at least 1), same name, period, algorithm, mode
    /// and calendar; `None` for a factor that is not a positive number or a limit that would
    /// not validate so (a count past [`crate::MAX_COUNT`], a sliding log past its entries).
    pub fn multiplied(&self, factor: f64) -> Option<Limit> {
        if !factor.is_finite() || factor <= 0.0 {
            return None;
        }
        let mut too_large = false;
        let limit = self.resized(|n| {
            let scaled = (n as f64 * factor).floor();
            too_large |= scaled >= u64::MAX as f64;
            if n == 0 { 0 } else { (scaled as u64).max(1) }
        })?;
        (!too_large).then_some(limit)
    }

    /// This limit with each of its counts (quota count, burst, lease, debt bound) resized by
    /// `resize`; `None` when the result does not validate.
    fn resized(&self, mut resize: impl FnMut(u64) -> u64) -> Option<Limit> {
        let quota = Quota::new(resize(self.shape.quota.count()), self.shape.quota.period()).ok()?;
        let mut builder = Limit::builder(Arc::clone(&self.shape.name), self.shape.algorithm, quota);
        if self.shape.algorithm == Algorithm::LeakyBucket {
            builder = builder.mode(self.shape.mode);
        }
        if let Some(burst) = self.burst() {
            builder = builder.burst(resize(burst));
        }
        builder
            .lease(resize(self.shape.lease))
            .scope(self.shape.scope)
            .max_debt(resize(self.shape.debt))
            .pinned(self.shape.pinned)
            .debt_expires_with_window(self.shape.debt_expires)
            .calendar(self.shape.calendar.as_ref().map(|c| c.spec().clone()))
            .build()
            .ok()
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Limit({self})")
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.shape.name, self.shape.algorithm, self.shape.quota
        )?;
        if self.shape.algorithm.is_rate() && self.shape.burst != self.shape.quota.count() {
            write!(f, " burst {}", self.shape.burst)?;
        }
        if let LeakyMode::Queue { delay_after } = self.shape.mode {
            write!(f, " queue delay_after {delay_after}")?;
        }
        if let Some(calendar) = &self.shape.calendar {
            write!(f, " calendar {calendar}")?;
        }
        Ok(())
    }
}

/// A fixed (unkeyed) hash of a limit's state name. Stores mix the digest into a keyed hash
/// with the client-supplied key.
fn state_id(state_name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    state_name.hash(&mut hasher);
    hasher.finish()
}

/// What a limit is, as validated: the parts that give it its identity in a store, and its
/// lease.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Shape {
    name: Arc<str>,
    algorithm: Algorithm,
    quota: Quota,
    burst: u64,
    mode: LeakyMode,
    interval: Micros,
    lease: u64,
    scope: Scope,
    /// Units a forced charge may owe beyond the capacity (see [`Limit::max_debt`]); not part
    /// of the state's name, since it changes how far a state may go, not what it means.
    debt: u64,
    /// Evicted last (see [`Limit::pinned`]); not part of the state's name either.
    pinned: bool,
    /// A window algorithm forgets its debt when its window ends (see
    /// [`Limit::carries_debt`]).
    debt_expires: bool,
    /// The calendar a fixed window counts by.
    calendar: Option<Arc<Calendar>>,
    /// The transition its states go through, from the algorithm and the calendar.
    kind: Kind,
}

impl Shape {
    /// The debt bound: as asked (by default the largest cost a check may carry, so that any
    /// usage a policy can report is charged in full), within what keeps the state's span below
    /// [`MAX_DEBT_SPAN_MICROS`].
    fn with_debt(mut self, asked: Option<u64>) -> Self {
        let asked = asked.unwrap_or(crate::bounds::MAX_COST);
        let fits = if self.algorithm.is_rate() {
            (MAX_DEBT_SPAN_MICROS / self.interval.max(1)).saturating_sub(self.burst)
        } else if self.calendar.is_some() {
            // See [`LimitBuilder::calendar`].
            self.quota.count()
        } else {
            (MAX_DEBT_SPAN_MICROS / self.quota.period_micros().max(1))
                .saturating_mul(self.quota.count())
                .saturating_sub(self.quota.count())
        };
        self.debt = asked.min(fits);
        self
    }

    /// The limit, named for its state by its name and shape.
    fn into_limit(self) -> Result<Limit, LimitError> {
        use std::fmt::Write as _;
        // Short, because it is part of every Redis key: an algorithm letter, then the quota
        // as written canonically, then what differs from the defaults.
        let code = match self.algorithm {
            Algorithm::FixedWindow => 'f',
            Algorithm::SlidingLog => 'l',
            Algorithm::SlidingWindow => 'w',
            Algorithm::TokenBucket => 't',
            Algorithm::LeakyBucket => 'b',
            Algorithm::Gcra => 'g',
        };
        let mut state_name = format!("{}|{code}{}", self.name, self.quota);
        if self.algorithm.is_rate() && self.burst != self.quota.count() {
            let _ = write!(state_name, ":b{}", self.burst);
        }
        if let LeakyMode::Queue { delay_after } = self.mode {
            let _ = write!(state_name, ":q{delay_after}");
        }
        if let Some(calendar) = &self.calendar {
            let _ = write!(state_name, ":{calendar}");
        }
        Limit {
            state_id: state_id(&state_name),
            state_name: state_name.into(),
            shape: self,
        }
        .with_valid_lease()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_of_one_name_but_another_shape_keep_their_state_apart() {
        let shapes = [
            Limit::new("l", Algorithm::Gcra, quota("10/s")),
            Limit::builder("l", Algorithm::Gcra, quota("10/s"))
                .burst(20)
                .build(),
            Limit::new("l", Algorithm::Gcra, quota("10/2s")),
            Limit::new("l", Algorithm::Gcra, quota("20/2s")),
            Limit::new("l", Algorithm::TokenBucket, quota("10/s")),
            Limit::new("l", Algorithm::FixedWindow, quota("10/s")),
            Limit::new("l", Algorithm::SlidingLog, quota("10/s")),
            Limit::new("l", Algorithm::SlidingWindow, quota("10/s")),
            Limit::new("l", Algorithm::LeakyBucket, quota("10/s")),
            Limit::builder("l", Algorithm::LeakyBucket, quota("10/s"))
                .mode(LeakyMode::Queue { delay_after: 2 })
                .build(),
            Limit::new("l|g10/s", Algorithm::Gcra, quota("10/s")),
        ];
        let mut names = std::collections::HashSet::new();
        let mut ids = std::collections::HashSet::new();
        for limit in shapes {
            let limit = limit.expect("valid");
            assert!(names.insert(limit.state_name().to_owned()), "{limit:?}");
            assert!(ids.insert(limit.state_id()), "{limit:?}");
        }
        let burst = Limit::builder("per-user", Algorithm::Gcra, quota("10/s")).burst(20);
        assert_eq!(burst.build().unwrap().state_name(), "per-user|g10/s:b20");
        // A lease changes how a limit is spent, not what its state means.
        let leased = Limit::builder("l", Algorithm::Gcra, quota("10/s"))
            .lease(2)
            .build();
        let plain = Limit::new("l", Algorithm::Gcra, quota("10/s")).unwrap();
        assert_eq!(leased.unwrap().state_id(), plain.state_id());
    }

    #[test]
    fn a_divided_limit_keeps_its_name_period_and_kind() {
        let limit = Limit::builder("l", Algorithm::LeakyBucket, quota("10/m"))
            .burst(6)
            .mode(LeakyMode::Queue { delay_after: 1 })
            .build()
            .expect("valid");
        let share = limit.divided(3);
        assert_eq!((share.name(), share.count(), share.capacity()), ("l", 3, 2));
        assert_eq!(share.period(), limit.period());
        assert_eq!(share.mode(), limit.mode());
        let gcra = Limit::builder("g", Algorithm::Gcra, quota("4/h"))
            .burst(4)
            .build()
            .expect("valid");
        assert_eq!(gcra.divided(2).capacity(), 2);
        assert_eq!(gcra.divided(100).capacity(), 1, "never below one");
        assert_eq!(gcra.divided(1).capacity(), 4);
    }

    #[test]
    fn a_multiplied_limit_scales_its_counts_and_keeps_the_rest() {
        let limit = Limit::builder("l", Algorithm::Gcra, quota("10/m"))
            .burst(4)
            .build()
            .expect("valid");
        let five = limit.multiplied(5.0).expect("valid");
        assert_eq!((five.name(), five.count(), five.capacity()), ("l", 50, 20));
        assert_eq!(five.period(), limit.period());
        assert_ne!(five.state_id(), limit.state_id(), "its own state");
        let half = limit.multiplied(0.01).expect("valid");
        assert_eq!((half.count(), half.capacity()), (1, 1), "never below one");
        assert!(limit.multiplied(0.0).is_none());
        assert!(limit.multiplied(f64::NAN).is_none());
        assert!(limit.multiplied(1e30).is_none(), "past the largest count");
        let log = Limit::new("s", Algorithm::SlidingLog, quota("5000/h")).expect("valid");
        assert!(log.multiplied(3.0).is_none(), "a log past its entries");
    }

    fn quota(text: &str) -> Quota {
        text.parse().expect("valid quota")
    }

    #[test]
    fn rate_algorithms_default_the_burst_to_the_count_and_round_the_interval_up() {
        let limit = Limit::new("l", Algorithm::Gcra, quota("3/s")).unwrap();
        assert_eq!(limit.capacity(), 3);
        assert_eq!(limit.interval(), 333_334);
        assert_eq!(limit.burst(), Some(3));
        let window = Limit::new("w", Algorithm::FixedWindow, quota("5/m")).unwrap();
        assert_eq!((window.capacity(), window.burst()), (5, None));
    }

    #[test]
    fn refuses_combinations_that_make_no_sense() {
        let cases: Vec<(LimitBuilder, &str)> = vec![
            (
                Limit::builder("a", Algorithm::TokenBucket, quota("0/s")),
                "at least 1",
            ),
            (
                Limit::builder("a", Algorithm::FixedWindow, quota("0/s")),
                "a quota of 0 admits nothing, ever",
            ),
            (
                Limit::builder("a", Algorithm::SlidingLog, quota("0/h")),
                "a quota of 0 admits nothing, ever",
            ),
            (
                Limit::builder("a", Algorithm::SlidingWindow, quota("0/m")),
                "a quota of 0 admits nothing, ever",
            ),
            (
                Limit::builder("a", Algorithm::Gcra, quota("1/s")).burst(0),
                "burst must be at least 1",
            ),
            (
                Limit::builder("a", Algorithm::FixedWindow, quota("1/s")).burst(3),
                "burst applies only",
            ),
            (
                Limit::builder("a", Algorithm::Gcra, quota("1/s"))
                    .mode(LeakyMode::Queue { delay_after: 1 }),
                "mode applies only",
            ),
            (
                Limit::builder("a", Algorithm::LeakyBucket, quota("5/s"))
                    .mode(LeakyMode::Queue { delay_after: 6 }),
                "delay_after must be between 1 and the burst (5)",
            ),
            (
                Limit::builder("a", Algorithm::Gcra, quota("1/3650d")).burst(1_000_000),
                "more than 2^50us",
            ),
            (
                Limit::builder("a", Algorithm::SlidingLog, quota("10001/h")),
                "may not exceed 10000",
            ),
            (
                Limit::builder("", Algorithm::SlidingLog, quota("1/h")),
                "needs a name",
            ),
        ];
        for (builder, message) in cases {
            let error = builder.clone().build().expect_err(message).to_string();
            assert!(error.contains(message), "{builder:?}: {error}");
        }
    }

    #[test]
    fn displays_what_it_enforces() {
        let limit = Limit::builder("api", Algorithm::LeakyBucket, quota("10/s"))
            .burst(20)
            .mode(LeakyMode::Queue { delay_after: 5 })
            .build()
            .unwrap();
        assert_eq!(
            limit.to_string(),
            "api leaky_bucket 10/s burst 20 queue delay_after 5"
        );
    }
}
