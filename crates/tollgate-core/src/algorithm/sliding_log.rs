//! Sliding log: remembers when each admitted request happened.
//!
//! Exact: in every span of one period, never more than the quota. Memory and time grow with
//! the number of distinct instants in the log (at most the quota count), so it suits small
//! quotas such as logins per minute.
//!
//! A forced charge beyond what the log holds (twice the quota) is owed (up to the limit's
//! `max_debt`) and paid off a quota's worth per period from when it was first owed; while
//! anything is owed it counts against the quota like the log's entries.

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
    /// Units owed beyond what the log holds.
    pub owed: u64,
    /// When the periods that pay off what is owed started (0 when nothing is owed).
    pub owed_at: Micros,
}

/// What is still owed at `at`: a quota's worth is paid off at the end of each period since
/// `owed_at`.
fn owed_left(state: &State, limit: &Limit, at: Micros) -> u64 {
    if state.owed == 0 {
        return 0;
    }
    let periods = at.saturating_sub(state.owed_at) / limit.period();
    state
        .owed
        .saturating_sub(periods.saturating_mul(limit.count()))
}

/// When what is owed leaves room for `cost` (with nothing else counted).
fn owed_room_at(state: &State, limit: &Limit, cost: u64) -> Micros {
    let excess = state.owed.saturating_sub(limit.count() - cost);
    state.owed_at + excess.div_ceil(limit.count()) * limit.period()
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
        if state.owed > 0 {
            let periods = now.saturating_sub(state.owed_at) / limit.period();
            let owed = owed_left(state, limit, now);
            (state.owed, state.owed_at) = if owed == 0 {
                (0, 0)
            } else {
                (owed, state.owed_at + periods * limit.period())
            };
        }
    }

    fn admits(state: &State, limit: &Limit, _now: Micros, cost: u64) -> bool {
        cost <= limit.count() && state.total + state.owed + cost <= limit.count()
    }

    fn consume(state: &mut State, limit: &Limit, now: Micros, cost: u64) {
        let count = limit.count();
        let held = (count + count.min(limit.max_debt())).saturating_sub(state.total);
        let logged = cost.min(held);
        if logged > 0 {
            state.total += logged;
            match state.entries.back_mut() {
                Some((at, units)) if *at >= now => *units += logged,
                _ => state.entries.push_back((now, logged)),
            }
        }
        let room = (count + limit.max_debt()).saturating_sub(state.total + state.owed);
        let owed = (cost - logged).min(room);
        if owed > 0 {
            if state.owed == 0 {
                state.owed_at = now;
            }
            state.owed += owed;
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
        limit.count().saturating_sub(state.total + state.owed)
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        let logged = state
            .entries
            .back()
            .map_or(0, |&(at, _)| at + limit.period());
        let paid = if state.owed == 0 {
            0
        } else {
            state.owed_at + state.owed.div_ceil(limit.count()) * limit.period()
        };
        logged.max(paid).saturating_sub(now)
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.count() {
            return None;
        }
        let mut total = state.total;
        if total + owed_left(state, limit, now) + cost <= limit.count() {
            return Some(0);
        }
        // Room comes as entries age out and as periods pay off what is owed: the first of
        // those instants at which the cost fits (what counts only falls with time).
        let fits =
            |total: u64, at: Micros| total + owed_left(state, limit, at) + cost <= limit.count();
        let mut owed_steps = if state.owed == 0 {
            Vec::new()
        } else {
            let mut steps = vec![
                (state.owed_at + limit.period()).max(now),
                owed_room_at(state, limit, cost).max(now),
            ];
            steps.sort_unstable();
            steps
        };
        owed_steps.reverse();
        for &(at, units) in &state.entries {
            let expiry = at + limit.period();
            while let Some(&step) = owed_steps.last()
                && step < expiry
            {
                if fits(total, step) {
                    return Some(step - now);
                }
                owed_steps.pop();
            }
            total -= units;
            if fits(total, expiry) {
                return Some(expiry.saturating_sub(now));
            }
        }
        while let Some(step) = owed_steps.pop() {
            if fits(total, step) {
                return Some(step - now);
            }
        }
        Some(owed_room_at(state, limit, cost).saturating_sub(now))
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

    #[test]
    fn usage_beyond_the_log_is_owed_and_paid_a_quota_a_period() {
        let limit = crate::testing::limit(Algorithm::SlidingLog, "5/s");
        let mut state = State::default();
        // 42 used at once: 10 in the log (twice the quota), 32 owed.
        SlidingLog::consume(&mut state, &limit, 0, 42);
        assert_eq!((state.total, state.owed, state.owed_at), (10, 32, 0));
        assert_eq!(SlidingLog::reset_after(&state, &limit, 0), 7_000_000);
        // The log empties after a second; 32 owed need 6 periods to fall to 2, leaving room
        // for 3 more.
        assert_eq!(SlidingLog::wait_for(&state, &limit, 0, 3), Some(6_000_000));
        SlidingLog::advance(&mut state, &limit, 5_999_999);
        assert_eq!((state.total, state.owed, state.owed_at), (0, 7, 5_000_000));
        assert!(!SlidingLog::admits(&state, &limit, 5_999_999, 1));
        SlidingLog::advance(&mut state, &limit, 6_000_000);
        assert_eq!(state.owed, 2);
        assert!(SlidingLog::admits(&state, &limit, 6_000_000, 3));
        assert!(!SlidingLog::admits(&state, &limit, 6_000_000, 4));
        SlidingLog::advance(&mut state, &limit, 7_000_000);
        assert_eq!((state.owed, state.owed_at), (0, 0), "paid off");
    }
}
