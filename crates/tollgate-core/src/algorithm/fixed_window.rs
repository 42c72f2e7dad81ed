//! Fixed window: a counter per window aligned to the Unix epoch.
//!
//! Cheapest of all (one counter), exact within each window, but a client can spend a whole
//! quota at the end of one window and another at the start of the next: up to twice the quota
//! in any span of one period. This is envoyproxy/ratelimit's algorithm.
//!
//! A forced charge beyond the quota (debt, up to the limit's `max_debt`) is carried into the
//! windows that follow, a quota's worth paid off per window.

use super::{Transition, window_start};
use crate::clock::Micros;
use crate::limit::Limit;

/// Fixed window.
#[derive(Debug, Clone, Copy)]
pub struct FixedWindow;

/// A fixed window's state: the window's start and what it has counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// Start of the window the count belongs to, in microseconds since the epoch.
    pub start: Micros,
    /// Units counted in that window.
    pub count: u64,
}

/// The windows it takes to pay off `units` at a quota's worth a window (one at most, where the
/// limit forgets debt with its window).
pub(super) fn owed_windows(limit: &Limit, units: u64) -> u64 {
    let windows = units.div_ceil(limit.count());
    if limit.carries_debt() {
        windows
    } else {
        windows.min(1)
    }
}

/// The wait before `cost` fits, given when the window `windows` after the state's starts:
/// none if the cost is above the quota, else until the first window whose carried count
/// leaves room for it. Shared with the calendar window, whose windows start elsewhere.
pub(super) fn wait_until(
    state: &State,
    limit: &Limit,
    now: Micros,
    cost: u64,
    start_after: impl FnOnce(u64) -> Micros,
) -> Option<Micros> {
    if cost > limit.count() {
        None
    } else if state.count + cost <= limit.count() {
        Some(0)
    } else {
        let windows = owed_windows(limit, state.count + cost - limit.count());
        Some(start_after(windows).saturating_sub(now))
    }
}

impl Transition for FixedWindow {
    type State = State;

    fn fresh(limit: &Limit, now: Micros) -> State {
        State {
            start: window_start(now, limit.period()),
            count: 0,
        }
    }

    fn advance(state: &mut State, limit: &Limit, now: Micros) {
        let start = window_start(now, limit.period());
        if start > state.start {
            // Each window that passed pays off a quota's worth: only debt outlives its window
            // (unless the limit forgets it with the window).
            let windows = (start - state.start) / limit.period();
            let paid = windows.saturating_mul(limit.count());
            let count = if limit.carries_debt() {
                state.count.saturating_sub(paid)
            } else {
                0
            };
            *state = State { start, count };
        }
    }

    fn admits(state: &State, limit: &Limit, _now: Micros, cost: u64) -> bool {
        cost <= limit.count() && state.count + cost <= limit.count()
    }

    fn consume(state: &mut State, limit: &Limit, _now: Micros, cost: u64) {
        state.count = state
            .count
            .saturating_add(cost)
            .min(limit.count() + limit.max_debt());
    }

    fn refund(state: &mut State, limit: &Limit, _now: Micros, amount: u64, charged_at: Micros) {
        if window_start(charged_at, limit.period()) == state.start {
            state.count = state.count.saturating_sub(amount);
        }
    }

    fn remaining(state: &State, limit: &Limit, _now: Micros) -> u64 {
        limit.count().saturating_sub(state.count)
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        let windows = owed_windows(limit, state.count);
        (state.start + windows * limit.period()).saturating_sub(now)
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        wait_until(state, limit, now, cost, |windows| {
            state.start + windows * limit.period()
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::Algorithm;
    use crate::testing::Run;

    #[test]
    fn admits_twice_the_quota_across_a_window_boundary() {
        let mut run = Run::new(Algorithm::FixedWindow, "10/s", 0);
        run.at(990_000).admits(10).then_denies(1);
        // Ten milliseconds later a new window starts with a full quota: 20 in 20 ms.
        run.at(1_000_000).admits(10).then_denies(1);
    }

    #[test]
    fn retry_after_points_at_the_next_window() {
        let mut run = Run::new(Algorithm::FixedWindow, "3/m", 0);
        run.at(10_000_000).admits(3);
        let denied = run.check(1);
        assert!(!denied.allowed());
        assert_eq!(denied.retry_after().unwrap().as_secs(), 50);
        assert_eq!(denied.reset_after().as_secs(), 50);
        run.at(60_000_000).admits(3);
    }

    #[test]
    fn debt_is_carried_into_the_windows_that_follow() {
        let limit = crate::testing::limit(Algorithm::FixedWindow, "10/s");
        let mut state = super::State { start: 0, count: 0 };
        use super::{FixedWindow, Transition};
        FixedWindow::consume(&mut state, &limit, 0, 35);
        assert_eq!(FixedWindow::reset_after(&state, &limit, 0), 4_000_000);
        assert_eq!(FixedWindow::wait_for(&state, &limit, 0, 1), Some(3_000_000));
        FixedWindow::advance(&mut state, &limit, 2_500_000);
        assert_eq!(state.count, 15, "two windows paid twenty");
        assert!(!FixedWindow::admits(&state, &limit, 2_500_000, 1));
        FixedWindow::advance(&mut state, &limit, 3_000_000);
        assert_eq!(state.count, 5);
        assert!(FixedWindow::admits(&state, &limit, 3_000_000, 5));
        assert!(!FixedWindow::admits(&state, &limit, 3_000_000, 6));
    }
}
