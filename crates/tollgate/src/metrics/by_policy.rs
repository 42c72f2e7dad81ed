//! The summary's counts of requests by policy and outcome. Every labelled decision counts one,
//! from every worker at once: a policy's counts are atomics found under a read lock, so that
//! workers counting the same policies neither queue on one mutex nor compare names in an
//! ordered map while holding it.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashMap;

use super::{MetricOutcome, OUTCOMES};

/// One set of counts, by [`MetricOutcome`] discriminant.
pub(super) type Counts = [AtomicU64; OUTCOMES];

/// The counts of every policy seen so far.
#[derive(Default)]
pub(super) struct ByPolicy {
    known: RwLock<HashMap<Box<str>, Counts>>,
}

impl ByPolicy {
    /// Counts one request of `policy` with `outcome`.
    pub(super) fn count(&self, policy: &str, outcome: MetricOutcome) {
        if let Some(counts) = self
            .known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(policy)
        {
            counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Policy names repeat: a name is allocated only the first time it is seen.
        self.known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(policy.into())
            .or_default()[outcome as usize]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// `policy -> outcome -> count`, the outcomes never seen left out.
    pub(super) fn snapshot(&self) -> BTreeMap<String, BTreeMap<&'static str, u64>> {
        self.known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(policy, counts)| (policy.to_string(), seen(counts)))
            .collect()
    }
}

/// The outcomes of `counts` that were seen, by name.
pub(super) fn seen(counts: &Counts) -> BTreeMap<&'static str, u64> {
    MetricOutcome::ALL
        .iter()
        .map(|&outcome| {
            let count = counts[outcome as usize].load(Ordering::Relaxed);
            (outcome.as_str(), count)
        })
        .filter(|&(_, count)| count > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads counting the same policies at once, some seen first by each, lose no count.
    #[test]
    fn counts_from_every_thread_add_up() {
        let by_policy = ByPolicy::default();
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let by_policy = &by_policy;
                scope.spawn(move || {
                    for n in 0..1_000 {
                        by_policy.count("api", MetricOutcome::Allowed);
                        if n % 10 == 0 {
                            by_policy.count(&format!("own-{thread}"), MetricOutcome::Denied);
                        }
                    }
                });
            }
        });
        let snapshot = by_policy.snapshot();
        assert_eq!(snapshot["api"], BTreeMap::from([("allowed", 4_000)]));
        for thread in 0..4 {
            assert_eq!(
                snapshot[&format!("own-{thread}")],
                BTreeMap::from([("denied", 100)])
            );
        }
        assert_eq!(snapshot.len(), 5);
    }
}
