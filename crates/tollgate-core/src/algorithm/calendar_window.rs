//! Calendar window: a fixed window whose windows are a time zone's days, weeks, months or
//! years (see [`crate::calendar`]), for quotas such as 10 000 requests a month from the 15th.
//!
//! It counts as the fixed window does and keeps the same state; only where windows start
//! differs. It sees the calendar through the period starts around `now`
//! ([`Boundaries`]), as the Redis store's script does, which cannot read time zones and is
//! handed them with the limit: both pick the window that holds their own time among them.
//! Debt is carried across the windows passed among those starts; a state older than all of
//! them has had at least two windows to pay off, more than a calendar limit can owe (its
//! `max_debt` is at most one quota), so it starts afresh.

use super::Transition;
use super::fixed_window::{FixedWindow, State, owed_windows, wait_until};
use crate::calendar::Boundaries;
use crate::clock::Micros;
use crate::limit::Limit;

/// Calendar window.
#[derive(Debug, Clone, Copy)]
pub struct CalendarWindow;

/// The index among `boundaries` of the window that holds `at`: the last start at or before it,
/// within the first four (a time beyond them, from a clock more than a period off, is taken
/// to be in the nearest).
pub fn window_index(boundaries: &Boundaries, at: Micros) -> usize {
    boundaries[1..4]
        .iter()
        .take_while(|start| **start <= at)
        .count()
}

fn boundaries(limit: &Limit, now: Micros) -> Boundaries {
    limit
        .calendar()
        .map_or([0; 5], |calendar| calendar.boundaries(now))
}

/// When the window `windows` after the one starting at `start` starts, if `start` is one of
/// `boundaries` (the last of them at most); the last of them otherwise.
fn start_after(boundaries: &Boundaries, start: Micros, windows: u64) -> Micros {
    let index = boundaries.iter().position(|known| *known == start);
    let later = index.map_or(4, |index| {
        (index as u64).saturating_add(windows).min(4) as usize
    });
    boundaries[later]
}

impl Transition for CalendarWindow {
    type State = State;

    fn fresh(limit: &Limit, now: Micros) -> State {
        let boundaries = boundaries(limit, now);
        State {
            start: boundaries[window_index(&boundaries, now)],
            count: 0,
        }
    }

    fn advance(state: &mut State, limit: &Limit, now: Micros) {
        let boundaries = boundaries(limit, now);
        let index = window_index(&boundaries, now);
        let start = boundaries[index];
        if start > state.start {
            let passed = boundaries[..index]
                .iter()
                .position(|known| *known == state.start)
                .map(|from| (index - from) as u64);
            let count = match passed {
                Some(windows) if limit.carries_debt() => state
                    .count
                    .saturating_sub(windows.saturating_mul(limit.count())),
                _ => 0,
            };
            *state = State { start, count };
        }
    }

    fn admits(state: &State, limit: &Limit, now: Micros, cost: u64) -> bool {
        FixedWindow::admits(state, limit, now, cost)
    }

    fn consume(state: &mut State, limit: &Limit, now: Micros, cost: u64) {
        FixedWindow::consume(state, limit, now, cost);
    }

    fn refund(state: &mut State, limit: &Limit, now: Micros, amount: u64, charged_at: Micros) {
        let boundaries = boundaries(limit, now);
        if charged_at >= boundaries[0]
            && boundaries[window_index(&boundaries, charged_at)] == state.start
        {
            state.count = state.count.saturating_sub(amount);
        }
    }

    fn remaining(state: &State, limit: &Limit, now: Micros) -> u64 {
        FixedWindow::remaining(state, limit, now)
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        let windows = owed_windows(limit, state.count);
        start_after(&boundaries(limit, now), state.start, windows).saturating_sub(now)
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        wait_until(state, limit, now, cost, |windows| {
            start_after(&boundaries(limit, now), state.start, windows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::calendar::CalendarSpec;
    use crate::testing::Run;

    fn at(text: &str) -> Micros {
        let timestamp: jiff::Timestamp = text.parse().expect("a timestamp");
        timestamp.as_microsecond() as Micros
    }

    fn limit(quota: &str, spec: CalendarSpec) -> Limit {
        Limit::builder(
            "plan",
            Algorithm::FixedWindow,
            quota.parse().expect("a quota"),
        )
        .calendar(Some(spec))
        .build()
        .expect("a valid limit")
    }

    #[test]
    fn retry_after_points_at_local_midnight_on_a_25_hour_day() {
        let berlin = CalendarSpec::new("Europe/Berlin").unwrap();
        let mut run = Run::from_limit(limit("3/day", berlin), at("2026-10-25T10:00:00Z"));
        run.admits(3);
        let denied = run.check(1);
        assert!(!denied.allowed());
        // The day that ends the summer time ends at 23:00 UTC, 25 hours after it began.
        let wait = at("2026-10-25T23:00:00Z") - at("2026-10-25T10:00:00Z");
        assert_eq!(
            denied.retry_after().map(|d| d.as_micros() as Micros),
            Some(wait)
        );
        assert_eq!(denied.reset_after().as_micros() as Micros, wait);
        run.at(at("2026-10-25T22:59:59Z")).then_denies(1);
        run.at(at("2026-10-25T23:00:00Z")).admits(3);
    }

    #[test]
    fn debt_is_paid_a_quota_per_month_and_capped_at_one_quota() {
        let spec = CalendarSpec::new("UTC").unwrap().anchor_day(31).unwrap();
        let limit = limit("10/month", spec);
        assert_eq!(limit.max_debt(), 10);
        let now = at("2028-01-31T12:00:00Z");
        let mut state = CalendarWindow::fresh(&limit, now);
        CalendarWindow::consume(&mut state, &limit, now, 35);
        assert_eq!(state.count, 20, "one quota of debt at most");
        assert_eq!(
            CalendarWindow::reset_after(&state, &limit, now),
            at("2028-03-31T00:00:00Z") - now
        );
        // February's window starts on its last day, the 29th in a leap year.
        CalendarWindow::advance(&mut state, &limit, at("2028-02-29T00:00:00Z"));
        assert_eq!((state.start, state.count), (at("2028-02-29T00:00:00Z"), 10));
        assert!(!CalendarWindow::admits(
            &state,
            &limit,
            at("2028-03-30T23:59:59Z"),
            1
        ));
        CalendarWindow::advance(&mut state, &limit, at("2028-03-31T00:00:00Z"));
        assert_eq!(state.count, 0);
        CalendarWindow::consume(&mut state, &limit, at("2028-03-31T00:00:00Z"), 20);
        // A state older than the windows around now has paid everything off.
        CalendarWindow::advance(&mut state, &limit, at("2028-06-01T00:00:00Z"));
        assert_eq!((state.start, state.count), (at("2028-05-31T00:00:00Z"), 0));
    }

    #[test]
    fn a_calendar_applies_only_to_the_fixed_window() {
        let spec = CalendarSpec::new("UTC").unwrap();
        let error = Limit::builder("plan", Algorithm::Gcra, "10/month".parse().unwrap())
            .calendar(Some(spec))
            .build()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "limit \"plan\": calendar applies only to fixed_window (a quota per calendar period), not gcra"
        );
    }
}
