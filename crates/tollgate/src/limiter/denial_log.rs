//! Which refusals are logged: the first refusal of a (key, limit) in each period, carrying how
//! many of its refusals went unlogged since its last line, and never more lines than a global
//! budget allows, however many keys a flood brings. A denial flood must not fill the disk.
//!
//! Time is the decision's own (the store's clock), so the sampler reads no clock of its own.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use tollgate_core::clock::Micros;

/// How long after a logged refusal the same (key, limit) is counted instead of logged.
pub(crate) const PERIOD: Micros = 10_000_000;
/// Lines per second the whole process may write, at the steady rate.
pub(crate) const LINES_PER_SECOND: Micros = 10;
/// Lines the process may write back to back before the steady rate applies.
pub(crate) const BURST_LINES: Micros = 100;
/// The most (key, limit) pairs remembered at once; past it, new pairs are logged within the
/// global budget without being remembered.
const MAX_TRACKED: usize = 10_000;

const LINE_INTERVAL: Micros = 1_000_000 / LINES_PER_SECOND;

/// Decides which refusals get a log line.
#[derive(Debug)]
pub(crate) struct DenialLog {
    hasher: RandomState,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    tracked: HashMap<u64, Tracked>,
    /// When the global budget is next fully spent at the steady rate (GCRA's theoretical
    /// arrival time).
    budget_tat: Micros,
    /// When the tracked pairs were last swept of expired ones.
    last_sweep: Micros,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    logged_at: Micros,
    unlogged: u64,
}

impl DenialLog {
    pub(crate) fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            state: Mutex::new(State::default()),
        }
    }

    /// Whether a refusal of `key` by `limit` at `now` gets a line; if so, how many of the
    /// pair's refusals went unlogged before it.
    pub(crate) fn admit(&self, key: &str, limit: &str, now: Micros) -> Option<u64> {
        let id = self.hasher.hash_one((key, limit));
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let tracked = state.tracked.get(&id).copied();
        if let Some(tracked) = tracked
            && now < tracked.logged_at.saturating_add(PERIOD)
        {
            state.count_unlogged(id);
            return None;
        }
        if !state.spend_budget(now) {
            if tracked.is_some() {
                state.count_unlogged(id);
            }
            return None;
        }
        let unlogged = tracked.map_or(0, |t| t.unlogged);
        state.remember(id, now);
        Some(unlogged)
    }
}

impl State {
    fn count_unlogged(&mut self, id: u64) {
        if let Some(tracked) = self.tracked.get_mut(&id) {
            tracked.unlogged = tracked.unlogged.saturating_add(1);
        }
    }

    fn spend_budget(&mut self, now: Micros) -> bool {
        let tat = self.budget_tat.max(now);
        if tat.saturating_add(LINE_INTERVAL) - now > BURST_LINES * LINE_INTERVAL {
            return false;
        }
        self.budget_tat = tat + LINE_INTERVAL;
        true
    }

    fn remember(&mut self, id: u64, now: Micros) {
        if self.tracked.len() >= MAX_TRACKED && !self.tracked.contains_key(&id) {
            // Sweeping costs a pass over every pair, so at most once a period.
            if now < self.last_sweep.saturating_add(PERIOD) {
                return;
            }
            self.last_sweep = now;
            self.tracked
                .retain(|_, tracked| now < tracked.logged_at.saturating_add(PERIOD));
            if self.tracked.len() >= MAX_TRACKED {
                return;
            }
        }
        self.tracked.insert(
            id,
            Tracked {
                logged_at: now,
                unlogged: 0,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Micros = 1_000_000;

    #[test]
    fn one_key_is_logged_once_a_period_with_what_went_unlogged() {
        let log = DenialLog::new();
        assert_eq!(log.admit("ip:1", "l", 0), Some(0));
        for n in 1..=500 {
            assert_eq!(log.admit("ip:1", "l", n * 1_000), None);
        }
        assert_eq!(log.admit("ip:1", "other", 600_000), Some(0));
        assert_eq!(log.admit("ip:1", "l", PERIOD), Some(500));
        assert_eq!(log.admit("ip:1", "l", PERIOD + 1), None);
    }

    #[test]
    fn a_flood_of_keys_stays_within_the_global_budget() {
        let log = DenialLog::new();
        // 116 734 refusals over 5 s, each from a key of its own, as a flood would send them.
        let refusals: Micros = 116_734;
        let span = 5 * SECOND;
        let lines = (0..refusals)
            .filter(|n| {
                log.admit(&format!("ip:{n}"), "l", n * span / refusals)
                    .is_some()
            })
            .count() as Micros;
        assert!(lines <= BURST_LINES + 5 * LINES_PER_SECOND, "{lines} lines");
        assert!(
            lines >= BURST_LINES,
            "{lines} lines: the budget is there to be used"
        );
    }

    #[test]
    fn remembered_pairs_are_bounded_and_swept() {
        let log = DenialLog::new();
        for n in 0..(MAX_TRACKED as Micros + 5_000) {
            // Spaced so that the budget never runs out.
            log.admit(&format!("ip:{n}"), "l", n * SECOND);
        }
        let tracked = log.state.lock().unwrap().tracked.len();
        assert!(tracked <= MAX_TRACKED, "{tracked}");
    }
}
