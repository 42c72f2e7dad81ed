//! GCRA, the generic cell rate algorithm: one timestamp per key (the theoretical arrival time of
//! the next request) gives an exact steady rate with a burst.
//!
//! A request of cost `c` moves the arrival time `c` intervals ahead; it is admitted while the
//! arrival time stays within `burst` intervals of now. This is what governor and redis-cell use.

use super::{Transition, outstanding, owed_span};
use crate::clock::Micros;
use crate::limit::Limit;

/// GCRA.
#[derive(Debug, Clone, Copy)]
pub struct Gcra;

/// GCRA's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// Theoretical arrival time: the instant the bucket is empty again.
    pub tat: Micros,
}

fn tolerance(limit: &Limit) -> Micros {
    limit.capacity() * limit.interval()
}

impl Transition for Gcra {
    type State = State;

    fn fresh(_limit: &Limit, now: Micros) -> State {
        State { tat: now }
    }

    fn advance(state: &mut State, _limit: &Limit, now: Micros) {
        state.tat = state.tat.max(now);
    }

    fn admits(state: &State, limit: &Limit, now: Micros, cost: u64) -> bool {
        cost <= limit.capacity() && state.tat + cost * limit.interval() - now <= tolerance(limit)
    }

    fn consume(state: &mut State, limit: &Limit, now: Micros, cost: u64) {
        let ceiling = now + owed_span(limit);
        state.tat = state
            .tat
            .saturating_add(cost.saturating_mul(limit.interval()))
            .min(ceiling);
    }

    fn refund(state: &mut State, limit: &Limit, now: Micros, amount: u64, charged_at: Micros) {
        let poured = amount.min(limit.capacity() + limit.max_debt()) * limit.interval();
        let back = outstanding(poured, charged_at, now);
        state.tat = state.tat.saturating_sub(back).max(now);
    }

    fn remaining(state: &State, limit: &Limit, now: Micros) -> u64 {
        tolerance(limit).saturating_sub(state.tat - now) / limit.interval()
    }

    fn reset_after(state: &State, _limit: &Limit, now: Micros) -> Micros {
        state.tat - now
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.capacity() {
            return None;
        }
        Some((state.tat + cost * limit.interval()).saturating_sub(tolerance(limit) + now))
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::Algorithm;
    use crate::testing::Run;

    #[test]
    fn admits_the_burst_then_one_per_emission_interval() {
        let mut run = Run::with_burst(Algorithm::Gcra, "5/s", 3, 0);
        run.at(0).admits(3).then_denies(1);
        let denied = run.check(1);
        assert_eq!(denied.retry_after().unwrap().as_micros(), 200_000);
        assert_eq!(denied.reset_after().as_micros(), 600_000);
        run.at(199_999).denies(1);
        run.at(200_000).admits(1).then_denies(1);
        run.at(400_000).admits(1).then_denies(1);
        // A full second idle refills the whole burst, no more.
        run.at(1_400_000).admits(3).then_denies(1);
    }

    #[test]
    fn a_cost_above_the_burst_is_never_admitted() {
        let mut run = Run::with_burst(Algorithm::Gcra, "5/s", 3, 0);
        let decision = run.check(4);
        assert!(!decision.allowed());
        assert_eq!(decision.retry_after(), None);
        assert_eq!(decision.remaining(), 3, "nothing was taken");
    }
}
