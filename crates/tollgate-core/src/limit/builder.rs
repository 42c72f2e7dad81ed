//! Building a limit: the parts beyond its algorithm and quota, checked as a whole.

use std::sync::Arc;

use super::{Limit, LimitError, MAX_SLIDING_LOG_COUNT, MAX_TOLERANCE_MICROS, Shape};
use crate::calendar::{Calendar, CalendarSpec};
use crate::kind::{Algorithm, Kind, LeakyMode};
use crate::quota::Quota;
use crate::scope::Scope;

/// Builds a [`Limit`] with a burst or a leaky-bucket mode.
#[derive(Debug, Clone)]
pub struct LimitBuilder {
    name: Arc<str>,
    algorithm: Algorithm,
    quota: Quota,
    burst: Option<u64>,
    mode: Option<LeakyMode>,
    lease: u64,
    scope: Scope,
    max_debt: Option<u64>,
    pinned: bool,
    debt_expires: bool,
    calendar: Option<CalendarSpec>,
}

impl LimitBuilder {
    /// A builder with the algorithm's defaults (see [`Limit::builder`]).
    pub(super) fn new(name: Arc<str>, algorithm: Algorithm, quota: Quota) -> Self {
        Self {
            name,
            algorithm,
            quota,
            burst: None,
            mode: None,
            lease: 0,
            scope: Scope::Region,
            max_debt: None,
            pinned: false,
            debt_expires: false,
            calendar: None,
        }
    }

    /// Counts a fixed window by the periods of a calendar (the quota's day, week, month or
    /// year, in a time zone, from an anchor) instead of windows of the quota's period aligned
    /// to the Unix epoch. Only a fixed window takes one. A calendar window carries at most one
    /// quota of debt (`max_debt` is capped at the quota count), so a state is paid off within
    /// two periods: a store handed the period starts around its time knows every window a
    /// state can still owe for.
    pub fn calendar(mut self, calendar: Option<CalendarSpec>) -> Self {
        self.calendar = calendar;
        self
    }

    /// Makes a window algorithm (fixed window, sliding window counter) forget what it counted
    /// past its quota when its window ends, instead of carrying that debt into the windows that
    /// follow: envoyproxy/ratelimit's counters, which count hits over the limit within their
    /// window and start afresh in the next. Rate algorithms and the sliding log owe by time and
    /// ignore it.
    pub fn debt_expires_with_window(mut self, expires: bool) -> Self {
        self.debt_expires = expires;
        self
    }

    /// Pins the limit's states: a store that must evict to stay within its key bound takes
    /// them only when nothing else can go. For states whose loss would undo something, such as
    /// the claims that let a charge be refunded once; states of limits clients count by are
    /// kept by use (the least recently used go first), not by pins.
    pub fn pinned(mut self, pinned: bool) -> Self {
        self.pinned = pinned;
        self
    }

    /// The most units a forced charge may leave owing beyond the capacity, paid off at the
    /// quota's rate before anything more is admitted. Default: the largest cost a check may
    /// carry (2^40), so a usage report is charged in full; within what keeps the state's span
    /// below 2^51 us (a `1/d` window owes at most about 26 000 units). 0 forgives any usage
    /// above the capacity.
    pub fn max_debt(mut self, units: u64) -> Self {
        self.max_debt = Some(units);
        self
    }

    /// Where the limit counts: [`Scope::Region`] (the default) or [`Scope::Global`].
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Lets each node lease this many units at a time from a shared store and spend them
    /// locally (see `Limiter`'s lease mode); 0, the default, asks the store every time.
    pub fn lease(mut self, units: u64) -> Self {
        self.lease = units;
        self
    }

    /// The most requests admitted back to back (token bucket capacity, leaky bucket size,
    /// GCRA burst). Defaults to the quota count.
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The leaky bucket's mode.
    pub fn mode(mut self, mode: LeakyMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Validates and builds the limit.
    pub fn build(self) -> Result<Limit, LimitError> {
        if self.name.is_empty() {
            return Err(LimitError::EmptyName);
        }
        if self.quota.count() == 0 {
            return Err(LimitError::ZeroQuota {
                name: self.name.to_string(),
                algorithm: self.algorithm,
            });
        }
        if self.mode.is_some() && self.algorithm != Algorithm::LeakyBucket {
            return Err(LimitError::ModeNotApplicable {
                name: self.name.to_string(),
                algorithm: self.algorithm,
            });
        }
        let (debt, pinned, debt_expires) = (self.max_debt, self.pinned, self.debt_expires);
        let calendar = self.built_calendar()?;
        let shape = if self.algorithm.is_rate() {
            self.rate_shape()?
        } else {
            self.window_shape()?
        };
        Shape {
            pinned,
            debt_expires,
            kind: Kind::of(shape.algorithm, calendar.is_some()),
            calendar,
            ..shape
        }
        .with_debt(debt)
        .into_limit()
    }

    /// The calendar, checked against the algorithm and the quota.
    fn built_calendar(&self) -> Result<Option<Arc<Calendar>>, LimitError> {
        let Some(spec) = &self.calendar else {
            return Ok(None);
        };
        if self.algorithm != Algorithm::FixedWindow {
            return Err(LimitError::CalendarNotApplicable {
                name: self.name.to_string(),
                algorithm: self.algorithm,
            });
        }
        spec.build(self.quota)
            .map(|calendar| Some(Arc::new(calendar)))
            .map_err(|error| LimitError::Calendar {
                name: self.name.to_string(),
                error,
            })
    }

    /// A window algorithm's shape: no burst (its capacity is the quota count), no mode.
    fn window_shape(self) -> Result<Shape, LimitError> {
        let Self {
            name,
            algorithm,
            quota,
            burst,
            lease,
            scope,
            ..
        } = self;
        if burst.is_some() {
            return Err(LimitError::BurstNotApplicable {
                name: name.to_string(),
                algorithm,
            });
        }
        if algorithm == Algorithm::SlidingLog && quota.count() > MAX_SLIDING_LOG_COUNT {
            return Err(LimitError::LogTooLarge {
                name: name.to_string(),
            });
        }
        Ok(Shape {
            name,
            algorithm,
            quota,
            burst: quota.count(),
            mode: LeakyMode::Meter,
            interval: 0,
            lease,
            scope,
            debt: 0,
            pinned: false,
            debt_expires: false,
            calendar: None,
            kind: Kind::of(algorithm, false),
        })
    }

    /// A rate algorithm's shape: the burst (the quota count unless given) and the interval
    /// between requests must span at most 2^50 us, and a queue's `delay_after` fits the burst.
    fn rate_shape(self) -> Result<Shape, LimitError> {
        let Self {
            name,
            algorithm,
            quota,
            burst,
            mode,
            lease,
            scope,
            ..
        } = self;
        let burst = burst.unwrap_or(quota.count());
        if burst == 0 {
            return Err(LimitError::ZeroBurst {
                name: name.to_string(),
            });
        }
        let interval = quota.period_micros().div_ceil(quota.count());
        if burst
            .checked_mul(interval)
            .is_none_or(|span| span > MAX_TOLERANCE_MICROS)
        {
            return Err(LimitError::Overflow {
                name: name.to_string(),
                burst,
                interval,
            });
        }
        let mode = mode.unwrap_or(LeakyMode::Meter);
        if let LeakyMode::Queue { delay_after } = mode
            && (delay_after == 0 || delay_after > burst)
        {
            return Err(LimitError::DelayAfterOutOfRange {
                name: name.to_string(),
                burst,
                delay_after,
            });
        }
        Ok(Shape {
            name,
            algorithm,
            quota,
            burst,
            mode,
            interval,
            lease,
            scope,
            debt: 0,
            pinned: false,
            debt_expires: false,
            calendar: None,
            kind: Kind::of(algorithm, false),
        })
    }
}
