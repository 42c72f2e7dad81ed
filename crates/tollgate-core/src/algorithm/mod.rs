//! The six algorithms, each a pure state transition in its own file.
//!
//! An algorithm knows nothing of stores, clocks or keys: it takes a state, the time and a
//! cost, and returns a [`Decision`] and the next state. Every store runs the same transitions
//! (the memory store here in Rust, the Redis store in Lua), so their answers never fork.
//!
//! Each algorithm implements [`Transition`] as a handful of small pieces; [`Transition::step`]
//! composes them the same way for all six: bring the state forward to `now`, admit if the cost
//! fits, consume, and describe the result.

pub mod calendar_window;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use std::fmt;

use crate::clock::Micros;
use crate::decision::Decision;
use crate::limit::Limit;

pub(crate) use crate::kind::Kind;
pub use crate::kind::{Algorithm, LeakyMode, UnknownAlgorithm};

pub use calendar_window::CalendarWindow;
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;

/// One algorithm as a pure state transition, split into the pieces every store runs in the
/// same order. The Lua scripts of the Redis store implement the same pieces, line for line.
///
/// A store decides a check in two phases: bring each state forward and ask whether it admits
/// the cost; then, only if every item admits, consume. Bringing a state forward never changes
/// what it means, so a store may keep the advanced state even when the check is denied.
pub trait Transition {
    /// The per-key state.
    type State: Clone + fmt::Debug + PartialEq;

    /// The state of a key nobody has used yet.
    fn fresh(limit: &Limit, now: Micros) -> Self::State;

    /// Brings a stored state forward to `now` (refills, drains, rolls windows).
    fn advance(state: &mut Self::State, limit: &Limit, now: Micros);

    /// Whether a request of `cost` fits now. Never true for a cost above the capacity.
    fn admits(state: &Self::State, limit: &Limit, now: Micros, cost: u64) -> bool;

    /// Takes `cost` unconditionally. The debt a forced charge can build is capped at the
    /// limit's [`max_debt`](Limit::max_debt) beyond empty.
    fn consume(state: &mut Self::State, limit: &Limit, now: Micros, cost: u64);

    /// Gives back `amount` of a charge taken at `charged_at`, but only what of it still counts:
    /// a window algorithm forgets a charge once its window (or log entry) has passed, and a
    /// rate algorithm has been draining it since it was taken. Giving back more would hand
    /// newer requests room that was never theirs.
    fn refund(state: &mut Self::State, limit: &Limit, now: Micros, amount: u64, charged_at: Micros);

    /// How much is left now.
    fn remaining(state: &Self::State, limit: &Limit, now: Micros) -> u64;

    /// Time until the state is as good as fresh.
    fn reset_after(state: &Self::State, limit: &Limit, now: Micros) -> Micros;

    /// Time until a request of `cost` is admitted, or `None` if it never will be.
    fn wait_for(state: &Self::State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros>;

    /// How long an admitted request waits before it proceeds (leaky-bucket queue mode).
    fn delay(_state: &Self::State, _limit: &Limit, _now: Micros) -> Micros {
        0
    }

    /// Decides a request of `cost` at `now` in place: brings the state forward and, if the
    /// request is admitted, counts it.
    fn step(state: &mut Self::State, limit: &Limit, now: Micros, cost: u64) -> Decision {
        Self::advance(state, limit, now);
        let allowed = Self::admits(state, limit, now, cost);
        if allowed {
            Self::consume(state, limit, now, cost);
        }
        describe::<Self>(state, limit, now, cost, allowed)
    }
}

/// The decision a state (already brought forward, and already charged if `allowed`) gives a
/// request of `cost`.
#[inline(always)]
fn describe<T: Transition + ?Sized>(
    state: &T::State,
    limit: &Limit,
    now: Micros,
    cost: u64,
    allowed: bool,
) -> Decision {
    Decision::new(
        allowed,
        limit.capacity(),
        T::remaining(state, limit, now),
        T::reset_after(state, limit, now),
        T::wait_for(state, limit, now, cost),
        if allowed {
            T::delay(state, limit, now)
        } else {
            0
        },
    )
}

/// The state of one key under one limit, for any algorithm.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "algorithm", rename_all = "snake_case")]
pub enum State {
    /// Fixed window state.
    FixedWindow(fixed_window::State),
    /// Sliding log state (boxed: it is the one that grows).
    SlidingLog(Box<sliding_log::State>),
    /// Sliding window counter state.
    SlidingWindow(sliding_window::State),
    /// Token bucket state.
    TokenBucket(token_bucket::State),
    /// Leaky bucket state.
    LeakyBucket(leaky_bucket::State),
    /// GCRA state.
    Gcra(gcra::State),
    /// A fixed window's state, its windows those of a calendar.
    CalendarWindow(fixed_window::State),
}

/// Runs `$body` with `$alg` bound to the state's algorithm type and `$s` to the typed state,
/// borrowed shared or (with `mut`) exclusively.
macro_rules! dispatch {
    (mut $state:expr, |$alg:ident, $s:ident| $body:expr) => {
        dispatch!(@arms [mut] $state, $alg, $s, $body)
    };
    ($state:expr, |$alg:ident, $s:ident| $body:expr) => {
        dispatch!(@arms [] $state, $alg, $s, $body)
    };
    (@arms [$($m:tt)?] $state:expr, $alg:ident, $s:ident, $body:expr) => {
        match $state {
            State::FixedWindow($s) => { type $alg = FixedWindow; $body }
            State::SlidingLog(boxed) => { type $alg = SlidingLog; let $s = &$($m)? **boxed; $body }
            State::SlidingWindow($s) => { type $alg = SlidingWindow; $body }
            State::TokenBucket($s) => { type $alg = TokenBucket; $body }
            State::LeakyBucket($s) => { type $alg = LeakyBucket; $body }
            State::Gcra($s) => { type $alg = Gcra; $body }
            State::CalendarWindow($s) => { type $alg = CalendarWindow; $body }
        }
    };
}

impl State {
    /// The state of a key nobody has used yet under `limit`.
    pub fn fresh(limit: &Limit, now: Micros) -> Self {
        match limit.kind() {
            Kind::FixedWindow => State::FixedWindow(FixedWindow::fresh(limit, now)),
            Kind::SlidingLog => State::SlidingLog(Box::new(SlidingLog::fresh(limit, now))),
            Kind::SlidingWindow => State::SlidingWindow(SlidingWindow::fresh(limit, now)),
            Kind::TokenBucket => State::TokenBucket(TokenBucket::fresh(limit, now)),
            Kind::LeakyBucket => State::LeakyBucket(LeakyBucket::fresh(limit, now)),
            Kind::Gcra => State::Gcra(Gcra::fresh(limit, now)),
            Kind::CalendarWindow => State::CalendarWindow(CalendarWindow::fresh(limit, now)),
        }
    }

    /// The algorithm this state belongs to.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            State::FixedWindow(_) | State::CalendarWindow(_) => Algorithm::FixedWindow,
            State::SlidingLog(_) => Algorithm::SlidingLog,
            State::SlidingWindow(_) => Algorithm::SlidingWindow,
            State::TokenBucket(_) => Algorithm::TokenBucket,
            State::LeakyBucket(_) => Algorithm::LeakyBucket,
            State::Gcra(_) => Algorithm::Gcra,
        }
    }

    /// The transition this state goes through.
    fn kind(&self) -> Kind {
        match self {
            State::FixedWindow(_) => Kind::FixedWindow,
            State::SlidingLog(_) => Kind::SlidingLog,
            State::SlidingWindow(_) => Kind::SlidingWindow,
            State::TokenBucket(_) => Kind::TokenBucket,
            State::LeakyBucket(_) => Kind::LeakyBucket,
            State::Gcra(_) => Kind::Gcra,
            State::CalendarWindow(_) => Kind::CalendarWindow,
        }
    }

    /// A stored state brought forward to `now`; a fresh one when nothing is stored or the
    /// stored state belongs to another algorithm (the limit was reconfigured).
    pub fn current(stored: Option<State>, limit: &Limit, now: Micros) -> Self {
        match stored {
            Some(mut state) => {
                state.bring_forward(limit, now);
                state
            }
            None => State::fresh(limit, now),
        }
    }

    /// Brings this state forward to `now` in place; a state of another algorithm (the limit
    /// was reconfigured, or given a calendar) starts fresh.
    pub fn bring_forward(&mut self, limit: &Limit, now: Micros) {
        if self.kind() == limit.kind() {
            dispatch!(mut self, |A, s| A::advance(s, limit, now));
        } else {
            *self = State::fresh(limit, now);
        }
    }

    /// Decides a request of `cost` at `now` in place: brings the state forward (a state of
    /// another algorithm starts fresh), admits the request if it fits and counts it. The same
    /// as [`bring_forward`](State::bring_forward), [`admits`](State::admits),
    /// [`consume`](State::consume) and [`describe`](State::describe) in turn, with one match
    /// on the algorithm instead of four. Always inlined: with two callers in the memory store
    /// (the hot path and the cold new-key path) the compiler stopped inlining it into the hot
    /// one, which cost 14-23 instructions a check (`N=20000 scripts/instructions`).
    #[inline(always)]
    pub fn step(&mut self, limit: &Limit, now: Micros, cost: u64) -> Decision {
        if self.kind() != limit.kind() {
            self.start_afresh(limit, now);
        }
        dispatch!(mut self, |A, s| A::step(s, limit, now, cost))
    }

    /// Replaces a state of another kind (the limit was reconfigured) with a fresh one: rare,
    /// and kept out of [`State::step`], where its code for seven kinds made the compiler spill
    /// registers on every kind's path.
    #[cold]
    #[inline(never)]
    fn start_afresh(&mut self, limit: &Limit, now: Micros) {
        *self = State::fresh(limit, now);
    }

    /// Whether a request of `cost` fits now (the state must be [current](State::current)).
    pub fn admits(&self, limit: &Limit, now: Micros, cost: u64) -> bool {
        dispatch!(self, |A, s| A::admits(s, limit, now, cost))
    }

    /// Takes `cost` unconditionally.
    pub fn consume(&mut self, limit: &Limit, now: Micros, cost: u64) {
        dispatch!(mut self, |A, s| A::consume(s, limit, now, cost))
    }

    /// Gives back what still counts of `amount` charged at `charged_at`.
    pub fn refund(&mut self, limit: &Limit, now: Micros, amount: u64, charged_at: Micros) {
        dispatch!(mut self, |A, s| A::refund(s, limit, now, amount, charged_at))
    }

    /// Applies an adjustment of `amount`.
    pub fn adjust(&mut self, limit: &Limit, now: Micros, adjustment: Adjustment, amount: u64) {
        match adjustment {
            Adjustment::Refund { charged_at } => self.refund(limit, now, amount, charged_at),
            Adjustment::Charge => self.consume(limit, now, amount),
        }
    }

    /// The decision this state gives a request of `cost` (already counted if `allowed`).
    pub fn describe(&self, limit: &Limit, now: Micros, cost: u64, allowed: bool) -> Decision {
        dispatch!(self, |A, s| describe::<A>(s, limit, now, cost, allowed))
    }

    /// Time until this state is as good as fresh.
    pub fn reset_after(&self, limit: &Limit, now: Micros) -> Micros {
        dispatch!(self, |A, s| A::reset_after(s, limit, now))
    }
}

/// Decides a request of `cost` under `limit` without touching `stored`: the decision, and the
/// state to keep if the request is admitted.
pub fn step(stored: Option<&State>, limit: &Limit, now: Micros, cost: u64) -> (Decision, State) {
    let mut state = stored.cloned().unwrap_or_else(|| State::fresh(limit, now));
    let decision = state.step(limit, now, cost);
    (decision, state)
}

/// Describes what a request of `cost` would get under `limit`, without counting it.
pub fn peek(stored: Option<&State>, limit: &Limit, now: Micros, cost: u64) -> Decision {
    let state = State::current(stored.cloned(), limit, now);
    state.describe(limit, now, cost, state.admits(limit, now, cost))
}

/// How much of a charge that filled `poured` microseconds of a rate algorithm's timeline still
/// certainly counts at `now`, when it was taken at `charged_at`. A charge can drain no faster
/// than time passes, whatever else was poured or refunded around it, so this is never more
/// than what remains of it, and it is all of it when the refund comes at once.
pub(crate) fn outstanding(poured: Micros, charged_at: Micros, now: Micros) -> Micros {
    poured.saturating_sub(now.saturating_sub(charged_at))
}

/// The farthest a rate algorithm's state may reach past now: its capacity and its debt bound,
/// in time at the steady rate (below 2^51 us by [`Limit::max_debt`]'s bound).
pub(crate) fn owed_span(limit: &Limit) -> Micros {
    (limit.capacity() + limit.max_debt()) * limit.interval()
}

/// How one stored state changes outside a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Give back what an earlier check took (a request that failed upstream).
    Refund {
        /// When that check was decided: [`Verdict::at`](crate::Verdict::at).
        charged_at: Micros,
    },
    /// Take the amount unconditionally (the real cost turned out higher than charged).
    Charge,
}

/// Applies an adjustment of `amount` at `now` without touching `stored`: the new state and the
/// time until it is as good as fresh.
pub fn adjust(
    stored: Option<&State>,
    limit: &Limit,
    now: Micros,
    adjustment: Adjustment,
    amount: u64,
) -> (State, Micros) {
    let mut state = State::current(stored.cloned(), limit, now);
    state.adjust(limit, now, adjustment, amount);
    let reset_after = state.reset_after(limit, now);
    (state, reset_after)
}

/// The start of the window of length `period` that holds `now`, windows being aligned to the
/// Unix epoch so that every node and every store agrees on them.
pub(crate) fn window_start(now: Micros, period: Micros) -> Micros {
    now - now % period
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.as_str().parse::<Algorithm>(), Ok(algorithm));
        }
        let error = "tokenbucket".parse::<Algorithm>().unwrap_err().to_string();
        assert!(
            error.contains("unknown algorithm \"tokenbucket\" (expected one of"),
            "{error}"
        );
    }

    #[test]
    fn a_state_of_another_algorithm_starts_fresh() {
        let quota = "2/s".parse().unwrap();
        let gcra = Limit::new("x", Algorithm::Gcra, quota).unwrap();
        let window = Limit::new("x", Algorithm::FixedWindow, quota).unwrap();
        let (_, window_state) = step(None, &window, 0, 2);
        let (decision, _) = step(Some(&window_state), &gcra, 0, 2);
        assert!(decision.allowed());
    }
}
