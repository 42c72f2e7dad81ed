//! Sliding window counter: the current window's count plus the previous window's, weighted by
//! how much of the previous window the sliding window still covers.
//!
//! Two counters per key, close to exact when traffic is spread out. Its error bound: it never
//! admits more than the quota within one aligned window, and never more than twice the quota in
//! any span of one period (a client that fills the end of one window and paces itself through
//! the next can approach that bound; even traffic stays at the quota).
//!
//! The weighting uses IEEE doubles, evaluated in exactly the same order as in the Lua script,
//! so both stores agree to the bit. [`fits`] is the one predicate; `remaining` and
//! `wait_for` search it, so they can never disagree with it.

use super::{Transition, window_start};
use crate::clock::Micros;
use crate::limit::Limit;

/// Sliding window counter.
#[derive(Debug, Clone, Copy)]
pub struct SlidingWindow;

/// A sliding window counter's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// Start of the current window.
    pub start: Micros,
    /// Units counted in the window before it.
    pub previous: u64,
    /// Units counted in the current window.
    pub current: u64,
}

/// The previous window's count weighted by how much of it the sliding window still covers,
/// `elapsed` into the current window.
fn weighted(limit: &Limit, previous: u64, elapsed: Micros) -> f64 {
    let period = limit.period();
    previous as f64 * (period - elapsed) as f64 / period as f64
}

/// The one predicate: whether `current` and `cost` fit beside the `weighted` previous count.
fn fits(limit: &Limit, weighted: f64, current: u64, cost: u64) -> bool {
    weighted + (current + cost) as f64 <= limit.count() as f64
}

/// The first elapsed time in `from..period` at which [`fits`] holds for `previous` weighted at
/// that time, if any. The guess from solving the inequality is corrected by walking the
/// (monotone) predicate itself, so the answer is exactly the predicate's.
fn first_admitting(
    limit: &Limit,
    previous: u64,
    current: u64,
    from: Micros,
    cost: u64,
) -> Option<Micros> {
    let period = limit.period();
    let room = limit.count() as f64 - (current + cost) as f64;
    if room < 0.0 {
        return None;
    }
    if previous == 0 {
        return Some(from);
    }
    let (previous_f, period_f, used_f, count_f) = (
        previous as f64,
        period as f64,
        (current + cost) as f64,
        limit.count() as f64,
    );
    // Exactly `fits(weighted(elapsed))`, with the conversions hoisted out of the walk.
    let holds =
        |elapsed: Micros| previous_f * (period - elapsed) as f64 / period_f + used_f <= count_f;
    let solved = (period_f - room * period_f / previous_f).ceil();
    let mut guess = (solved.max(from as f64) as Micros).min(period);
    while guess > from && holds(guess - 1) {
        guess -= 1;
    }
    while guess < period && !holds(guess) {
        guess += 1;
    }
    (guess < period).then_some(guess)
}

impl Transition for SlidingWindow {
    type State = State;

    fn fresh(limit: &Limit, now: Micros) -> State {
        State {
            start: window_start(now, limit.period()),
            previous: 0,
            current: 0,
        }
    }

    fn advance(state: &mut State, limit: &Limit, now: Micros) {
        let start = window_start(now, limit.period());
        if start > state.start {
            let previous = if start == state.start + limit.period() {
                state.current
            } else {
                0
            };
            *state = State {
                start,
                previous,
                current: 0,
            };
        }
    }

    fn admits(state: &State, limit: &Limit, now: Micros, cost: u64) -> bool {
        let elapsed = now.saturating_sub(state.start);
        cost <= limit.count()
            && fits(
                limit,
                weighted(limit, state.previous, elapsed),
                state.current,
                cost,
            )
    }

    fn consume(state: &mut State, limit: &Limit, _now: Micros, cost: u64) {
        state.current = state.current.saturating_add(cost).min(2 * limit.count());
    }

    fn refund(state: &mut State, limit: &Limit, _now: Micros, amount: u64, charged_at: Micros) {
        let window = window_start(charged_at, limit.period());
        if window == state.start {
            state.current = state.current.saturating_sub(amount);
        } else if window + limit.period() == state.start {
            state.previous = state.previous.saturating_sub(amount);
        }
    }

    fn remaining(state: &State, limit: &Limit, now: Micros) -> u64 {
        let weighted = weighted(limit, state.previous, now.saturating_sub(state.start));
        let estimate = (limit.count() as f64 - (weighted + state.current as f64)).floor();
        let mut guess = (estimate.max(0.0) as u64).min(limit.count().saturating_sub(state.current));
        while guess > 0 && !fits(limit, weighted, state.current, guess) {
            guess -= 1;
        }
        while guess < limit.count() && fits(limit, weighted, state.current, guess + 1) {
            guess += 1;
        }
        guess
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        let end = if state.current > 0 {
            state.start + 2 * limit.period()
        } else if state.previous > 0 {
            state.start + limit.period()
        } else {
            return 0;
        };
        end.saturating_sub(now)
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.count() {
            return None;
        }
        let period = limit.period();
        let elapsed = now.saturating_sub(state.start);
        let at = if let Some(found) =
            first_admitting(limit, state.previous, state.current, elapsed, cost)
        {
            state.start + found
        } else if let Some(found) = first_admitting(limit, state.current, 0, 0, cost) {
            state.start + period + found
        } else {
            state.start + 2 * period
        };
        Some(at.saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::Algorithm;
    use crate::testing::Run;

    #[test]
    fn weights_the_previous_window_by_its_overlap() {
        let mut run = Run::new(Algorithm::SlidingWindow, "10/s", 0);
        run.at(900_000).admits(10).then_denies(1);
        // 25% into the next window, 75% of the previous ten still count: 7.5, so 2 fit.
        run.at(1_250_000).admits(2).then_denies(1);
        // Halfway: 5 of the previous count, 2 current, so 3 more fit.
        run.at(1_500_000).admits(3).then_denies(1);
    }

    #[test]
    fn does_not_admit_the_double_burst_of_a_fixed_window() {
        let mut run = Run::new(Algorithm::SlidingWindow, "10/s", 0);
        run.at(990_000).admits(10);
        run.at(1_000_000).denies(1);
    }

    #[test]
    fn retry_after_is_the_first_instant_that_fits() {
        let mut run = Run::new(Algorithm::SlidingWindow, "10/s", 0);
        run.at(500_000).admits(10);
        let denied = run.at(1_000_000).check(1);
        // previous = 10: weighted(e) = 10 * (1 - e/1s) must fall to 9, at e = 100 ms.
        assert_eq!(denied.retry_after().unwrap().as_micros(), 100_000);
        run.at(1_099_999).denies(1);
        run.at(1_100_000).admits(1);
    }

    #[test]
    fn retry_after_can_reach_into_the_window_after_next() {
        let mut run = Run::new(Algorithm::SlidingWindow, "4/s", 0);
        run.at(0).admits(4);
        let denied = run.check(4);
        // Next window: previous = 4 weighted must reach 0, which only the window after does.
        assert_eq!(denied.retry_after().unwrap().as_micros(), 2_000_000);
    }
}
