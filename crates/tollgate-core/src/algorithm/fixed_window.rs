//! Fixed window: a counter per window aligned to the Unix epoch.
//!
//! Cheapest of all (one counter), exact within each window, but a client can spend a whole
//! quota at the end of one window and another at the start of the next: up to twice the quota
//! in any span of one period. This is envoyproxy/ratelimit's algorithm.

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
            *state = State { start, count: 0 };
        }
    }

    fn admits(state: &State, limit: &Limit, _now: Micros, cost: u64) -> bool {
        cost <= limit.count() && state.count + cost <= limit.count()
    }

    fn consume(state: &mut State, limit: &Limit, _now: Micros, cost: u64) {
        state.count = state.count.saturating_add(cost).min(2 * limit.count());
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
        if state.count == 0 {
            0
        } else {
            (state.start + limit.period()).saturating_sub(now)
        }
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.count() {
            None
        } else if state.count + cost <= limit.count() {
            Some(0)
        } else {
            Some((state.start + limit.period()).saturating_sub(now))
        }
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
}
