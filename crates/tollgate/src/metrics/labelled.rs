//! The decisions counters of labelled checks (a policy's limits, Envoy's rules), found by
//! their labels as borrowed text: the family itself is looked up by owned labels, which cost
//! two allocations and a keyed hash on every decision.

use std::sync::RwLock;

use hashbrown::{Equivalent, HashMap};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::DecisionLabels;

/// One counter's labels, owned.
#[derive(Hash, PartialEq, Eq)]
struct Owned {
    policy: Box<str>,
    limit: Box<str>,
    outcome: &'static str,
}

/// One counter's labels, borrowed: hashed field for field as [`Owned`] is.
#[derive(Hash)]
struct Borrowed<'a> {
    policy: &'a str,
    limit: &'a str,
    outcome: &'static str,
}

impl Equivalent<Owned> for Borrowed<'_> {
    fn equivalent(&self, key: &Owned) -> bool {
        *key.policy == *self.policy && *key.limit == *self.limit && key.outcome == self.outcome
    }
}

/// The labelled counters seen so far, each the family's own.
#[derive(Default)]
pub(super) struct Labelled {
    known: RwLock<HashMap<Owned, Counter>>,
}

impl Labelled {
    /// Counts one decision under these labels in `family`.
    pub(super) fn inc(
        &self,
        family: &Family<DecisionLabels, Counter>,
        policy: &str,
        limit: &str,
        outcome: &'static str,
    ) {
        let key = Borrowed {
            policy,
            limit,
            outcome,
        };
        if let Some(counter) = self
            .known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            counter.inc();
            return;
        }
        let counter = family
            .get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                limit: limit.to_owned(),
                outcome,
            })
            .clone();
        counter.inc();
        self.known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                Owned {
                    policy: policy.into(),
                    limit: limit.into(),
                    outcome,
                },
                counter,
            );
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    /// Counted through the cache or not, a decision lands on the family's one counter for its
    /// labels, and labels that differ only in where one ends and the next begins stay apart.
    #[test]
    fn each_set_of_labels_counts_on_its_own_counter_in_the_family() {
        let family = Family::<DecisionLabels, Counter>::default();
        let labelled = Labelled::default();
        for _ in 0..3 {
            labelled.inc(&family, "login", "per-ip", "allowed");
        }
        labelled.inc(&family, "login", "per-ip", "denied");
        labelled.inc(&family, "loginper", "-ip", "allowed");
        labelled.inc(&family, "login", "per-ipx", "allowed");
        let count = |policy: &str, limit: &str, outcome: &'static str| {
            family
                .get_or_create(&DecisionLabels {
                    policy: policy.to_owned(),
                    limit: limit.to_owned(),
                    outcome,
                })
                .get()
        };
        assert_eq!(count("login", "per-ip", "allowed"), 3);
        assert_eq!(count("login", "per-ip", "denied"), 1);
        assert_eq!(count("loginper", "-ip", "allowed"), 1);
        assert_eq!(count("login", "per-ipx", "allowed"), 1);
        let mut registry = Registry::default();
        registry.register("decisions", "decisions", family);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encoded");
        assert!(
            text.contains(r#"decisions_total{policy="login",limit="per-ip",outcome="allowed"} 3"#),
            "{text}"
        );
    }
}
