//! Sliding log: remembers when each admitted request happened.
//!
//! Exact: in every span of one period, never more than the quota. Memory and time grow with
//! the number of distinct instants in the log (at most the quota count), so it suits small
//! quotas such as logins per minute.

use std::collections::VecDeque;

use super::Transition;
use crate::clock::Micros;
use crate::limit::Limit;

/// Sliding log.
#[derive(Debug, Clone, Copy)]
pub struct SlidingLog;

/// A sliding log's state: the admitted requests of the last period, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct State {
    /// (time, units) pairs, oldest first, one per distinct instant.
    pub entries: VecDeque<(Micros, u64)>,
    /// The sum of the entries' units.
    pub total: u64,
}

impl Transition for SlidingLog {
    type State = State;

    fn fresh(_limit: &Limit, _now: Micros) -> State {
        State::default()
    }

    fn advance(state: &mut State, limit: &Limit, now: Micros) {
        while let Some(&(at, units)) = state.entries.front() {
            if at + limit.period() > now {
                break;
            }
            state.entries.pop_front();
            state.total -= units;
        }
    }

    fn admits(state: &State, limit: &Limit, _now: Micros, cost: u64) -> bool {
        cost <= limit.count() && state.total + cost <= limit.count()
    }

    fn consume(state: &mut State, limit: &Limit, now: Micros, cost: u64) {
        let cost = cost.min((2 * limit.count()).saturating_sub(state.total));
        if cost == 0 {
            return;
        }
        state.total += cost;
        match state.entries.back_mut() {
            Some((at, units)) if *at >= now => *units += cost,
            _ => state.entries.push_back((now, cost)),
        }
    }

    fn refund(state: &mut State, _limit: &Limit, _now: Micros, amount: u64, charged_at: Micros) {
        // The charge is the entry stamped with its instant; if that has aged out, nothing of it
        // is counted any more.
        let Some(index) = state.entries.iter().rposition(|&(at, _)| at == charged_at) else {
            return;
        };
        let units = &mut state.entries[index].1;
        let taken = amount.min(*units);
        *units -= taken;
        state.total -= taken;
        if *units == 0 {
            state.entries.remove(index);
        }
    }

    fn remaining(state: &State, limit: &Limit, _now: Micros) -> u64 {
        limit.count().saturating_sub(state.total)
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        state
            .entries
            .back()
            .map_or(0, |&(at, _)| (at + limit.period()).saturating_sub(now))
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.count() {
            return None;
        }
        let mut total = state.total;
        if total + cost <= limit.count() {
            return Some(0);
        }
        for &(at, units) in &state.entries {
            total -= units;
            if total + cost <= limit.count() {
                return Some((at + limit.period()).saturating_sub(now));
            }
        }
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::testing::Run;

    #[test]
    fn never_admits_more_than_the_quota_across_a_boundary() {
        let mut run = Run::new(Algorithm::SlidingLog, "10/s", 0);
        run.at(990_000).admits(10).then_denies(1);
        // Where a fixed window would start afresh, the log still sees the last ten.
        run.at(1_000_000).denies(1);
        run.at(1_989_999).denies(1);
        run.at(1_990_000).admits(10).then_denies(1);
    }

    #[test]
    fn frees_exactly_as_old_requests_age_out() {
        let mut run = Run::new(Algorithm::SlidingLog, "3/m", 0);
        run.at(0).admits(1);
        run.at(10_000_000).admits(1);
        run.at(20_000_000).admits(1).then_denies(1);
        let denied = run.check(2);
        assert_eq!(
            denied.retry_after().unwrap().as_secs(),
            50,
            "two must age out for a cost of 2"
        );
        run.at(60_000_000).admits(1).then_denies(1);
        run.at(70_000_000).admits(1).then_denies(1);
    }

    #[test]
    fn refund_takes_back_the_entry_of_the_refunded_charge() {
        let limit = crate::testing::limit(Algorithm::SlidingLog, "5/s");
        let mut state = State::default();
        SlidingLog::consume(&mut state, &limit, 10, 2);
        SlidingLog::consume(&mut state, &limit, 20, 3);
        // The charge at 10 is refunded after another at 20: the entry at 20 must stay, or the
        // log would forget a newer request and free room too early.
        SlidingLog::refund(&mut state, &limit, 30, 5, 10);
        assert_eq!(state.entries, VecDeque::from([(20, 3)]));
        assert_eq!(state.total, 3);
        SlidingLog::refund(&mut state, &limit, 30, 1, 999);
        assert_eq!(
            state.total, 3,
            "nothing is counted from an instant with no entry"
        );
    }
}
