//! The answer to a check: every limit's decision, the binding one, and the outcome they give.

use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::Micros;
use crate::decision::Decision;

/// The whole check's answer in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Go ahead.
    Allow,
    /// Wait this long, then go ahead (a leaky bucket in queue mode).
    Delay(Duration),
    /// Do not go ahead; a request of the same cost is admitted after `retry_after`, or never
    /// if it is `None`.
    Deny {
        /// Time until the same request would be admitted; `None` if never.
        retry_after: Option<Duration>,
    },
}

/// The whole check's answer: every limit's decision and the binding one, which gives the
/// outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    decisions: SmallVec<[Decision; 2]>,
    binding: u32,
    at: Micros,
    replayed: bool,
    /// Each item's own time, where items were decided at different times (the masters of a
    /// Redis Cluster each read their own clock); `None` when every item was decided at `at`.
    /// One word (not a boxed slice's two) keeps a verdict within 128 bytes, which moves in
    /// registers where a larger one is a `memcpy` call at every layer it passes.
    #[allow(clippy::box_collection)] // One word, as said above.
    item_times: Option<Box<Vec<Micros>>>,
}

/// `binding` of a verdict without decisions.
const NO_BINDING: u32 = u32::MAX;

impl Verdict {
    /// Combines the decisions of every item of a check, in the check's order.
    ///
    /// Denied if any decision denies: the binding decision is the denial that lasts longest
    /// (never outlasts everything), and waiting that long satisfies every limit because no
    /// limit grows stricter while nothing is counted. Delayed if any admitted request must wait:
    /// the longest delay binds. Otherwise allowed, and the decision with the least room binds.
    ///
    /// `at` is the store's time of the decision, which a later refund needs.
    pub fn from_decisions(at: Micros, decisions: impl IntoIterator<Item = Decision>) -> Self {
        let decisions: SmallVec<[Decision; 2]> = decisions.into_iter().collect();
        let binding = Self::binding_of(&decisions).map_or(NO_BINDING, |index| index as u32);
        Self {
            decisions,
            binding,
            at,
            replayed: false,
            item_times: None,
        }
    }

    /// The same verdict with each item's own decision time, in the check's order, for a store
    /// whose items were decided by different clocks. A refund gives an item back at its own
    /// time: an algorithm such as the sliding log gives back only the entry stamped with it.
    pub fn with_item_times(mut self, times: impl IntoIterator<Item = Micros>) -> Self {
        let times: Box<Vec<Micros>> = Box::new(times.into_iter().collect());
        debug_assert_eq!(times.len(), self.decisions.len());
        self.item_times = (times.len() == self.decisions.len()
            && times.iter().any(|&time| time != self.at))
        .then_some(times);
        self
    }

    /// When item `index` was decided: its own time where items were decided by different
    /// clocks, else [`at`](Self::at).
    pub fn item_at(&self, index: usize) -> Micros {
        self.item_times
            .as_deref()
            .and_then(|times| times.get(index).copied())
            .unwrap_or(self.at)
    }

    /// The same verdict, answered again without asking the store (by a caching store layer,
    /// such as the over-limit cache).
    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }

    /// Whether the store was not asked: the over-limit cache gave a denial the store gave
    /// moments ago for the same check. Such a denial is not a new violation.
    pub fn is_replayed(&self) -> bool {
        self.replayed
    }

    /// The same verdict `elapsed` later, with nothing else happening (the over-limit cache).
    pub fn aged(&self, elapsed: Duration) -> Self {
        let micros = Micros::try_from(elapsed.as_micros()).unwrap_or(Micros::MAX);
        Self {
            decisions: self.decisions.iter().map(|d| d.aged(micros)).collect(),
            binding: self.binding,
            at: self.at.saturating_add(micros),
            replayed: self.replayed,
            item_times: None,
        }
    }

    /// The verdict of a check with a single limit, decided at `at`.
    pub fn single(at: Micros, decision: Decision) -> Self {
        let mut decisions = SmallVec::new();
        decisions.push(decision);
        Self {
            decisions,
            binding: 0,
            at,
            replayed: false,
            item_times: None,
        }
    }

    /// When the store decided, in its own time (the Redis server's, for Redis stores; the
    /// latest of its masters' for a check across a cluster's masters, whose items each have
    /// their own [`item_at`](Self::item_at)): what `tollgate::Limiter::refund` needs to give
    /// back exactly this charge.
    pub fn at(&self) -> Micros {
        self.at
    }

    fn binding_of(decisions: &[Decision]) -> Option<usize> {
        let denial = decisions
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.allowed())
            .max_by_key(|(_, d)| d.retry_after_micros().map_or((1, 0), |r| (0, r)));
        if let Some((index, _)) = denial {
            return Some(index);
        }
        let delayed = decisions
            .iter()
            .enumerate()
            .filter(|(_, d)| d.delay_micros() > 0)
            .max_by_key(|(_, d)| d.delay_micros());
        if let Some((index, _)) = delayed {
            return Some(index);
        }
        decisions
            .iter()
            .enumerate()
            .min_by_key(|(_, d)| (d.remaining(), std::cmp::Reverse(d.reset_after_micros())))
            .map(|(index, _)| index)
    }

    /// The outcome, from the binding decision.
    pub fn outcome(&self) -> Outcome {
        match self.binding() {
            Some(decision) if !decision.allowed() => Outcome::Deny {
                retry_after: decision.retry_after(),
            },
            Some(decision) if decision.delay_micros() > 0 => Outcome::Delay(decision.delay()),
            _ => Outcome::Allow,
        }
    }

    /// Whether the request may go ahead now (allowed and not delayed).
    pub fn is_allowed(&self) -> bool {
        self.binding()
            .is_none_or(|d| d.allowed() && d.delay_micros() == 0)
    }

    /// Whether the request was denied.
    pub fn is_denied(&self) -> bool {
        self.binding().is_some_and(|d| !d.allowed())
    }

    /// Whether the request was admitted, possibly after a delay.
    pub fn is_admitted(&self) -> bool {
        !self.is_denied()
    }

    /// How long to wait before going ahead (zero unless delayed).
    pub fn delay(&self) -> Duration {
        match self.outcome() {
            Outcome::Delay(delay) => delay,
            _ => Duration::ZERO,
        }
    }

    /// For a denial, when the same request would be admitted (`None`: never, or not denied).
    pub fn retry_after(&self) -> Option<Duration> {
        match self.outcome() {
            Outcome::Deny { retry_after } => retry_after,
            _ => None,
        }
    }

    /// Every limit's decision, in the order of the check's items.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The position of the binding (most restrictive) decision; `None` for an empty check.
    pub fn binding_index(&self) -> Option<usize> {
        (self.binding != NO_BINDING).then_some(self.binding as usize)
    }

    /// The binding (most restrictive) decision; `None` for an empty check.
    pub fn binding(&self) -> Option<&Decision> {
        self.decisions.get(self.binding as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool, remaining: u64, retry_ms: Option<u64>, delay_ms: u64) -> Decision {
        Decision::new(
            allowed,
            10,
            remaining,
            1_000_000,
            retry_ms.map(|ms| ms * 1_000),
            delay_ms * 1_000,
        )
    }

    #[test]
    fn the_longest_denial_binds_and_never_beats_everything() {
        let verdict = Verdict::from_decisions(
            0,
            [
                decision(true, 5, Some(0), 0),
                decision(false, 0, Some(300), 0),
                decision(false, 0, Some(900), 0),
            ],
        );
        assert_eq!(verdict.binding_index(), Some(2));
        assert_eq!(verdict.retry_after(), Some(Duration::from_millis(900)));
        let never = Verdict::from_decisions(
            0,
            [
                decision(false, 0, None, 0),
                decision(false, 0, Some(900), 0),
            ],
        );
        assert_eq!(never.binding_index(), Some(0));
        assert_eq!(never.outcome(), Outcome::Deny { retry_after: None });
    }

    #[test]
    fn the_longest_delay_binds_an_admitted_check() {
        let verdict = Verdict::from_decisions(
            0,
            [
                decision(true, 4, Some(0), 100),
                decision(true, 2, Some(0), 250),
            ],
        );
        assert_eq!(
            verdict.outcome(),
            Outcome::Delay(Duration::from_millis(250))
        );
        assert!(verdict.is_admitted() && !verdict.is_allowed());
    }

    #[test]
    fn the_least_room_binds_an_allowed_check() {
        let verdict = Verdict::from_decisions(
            0,
            [decision(true, 4, Some(0), 0), decision(true, 2, Some(0), 0)],
        );
        assert_eq!(verdict.binding_index(), Some(1));
        assert!(Verdict::from_decisions(0, []).binding().is_none());
    }
}
