//! The memory store decides multi-limit checks all-or-nothing, exactly as the algorithms would.

use proptest::prelude::*;
use tollgate_core::algorithm::{self, State};
use tollgate_core::{Algorithm, Check, Limit, MemoryStore, Micros};

fn limits() -> Vec<Limit> {
    let spec = [
        (Algorithm::TokenBucket, "5/s"),
        (Algorithm::FixedWindow, "8/2s"),
        (Algorithm::SlidingLog, "6/3s"),
        (Algorithm::SlidingWindow, "7/2s"),
        (Algorithm::LeakyBucket, "4/s"),
        (Algorithm::Gcra, "3/s"),
    ];
    spec.iter()
        .enumerate()
        .map(|(n, (algorithm, quota))| {
            Limit::new(
                format!("l{n}"),
                *algorithm,
                quota.parse().expect("valid quota"),
            )
            .expect("valid limit")
        })
        .collect()
}

/// A check as indices: (key, limit, cost) triples.
type Plan = Vec<(usize, usize, u64)>;

fn plans() -> impl Strategy<Value = Vec<(Micros, Plan)>> {
    let item = (
        0usize..3,
        0usize..6,
        prop_oneof![4 => Just(1u64), 1 => 0u64..5],
    );
    let plan = prop::collection::vec(item, 1..5);
    prop::collection::vec((prop_oneof![Just(0u64), 0u64..400_000], plan), 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn multi_limit_checks_are_all_or_nothing(trace in plans()) {
        let limits = limits();
        let keys = ["user:1", "ip:203.0.113.7", "tenant:acme"];
        let store = MemoryStore::new();
        let mut now: Micros = 1_700_000_000_000_000;
        for (gap, plan) in trace {
            now += gap;
            let mut check = Check::new(1);
            for &(key, limit, cost) in &plan {
                check.push(keys[key], &limits[limit], cost);
            }
            let before: Vec<Option<State>> = plan.iter().map(|&(k, l, _)| store.state(keys[k], &limits[l])).collect();
            // What the algorithms say: a pair listed twice is decided once for its summed cost.
            let merged_cost = |k: usize, l: usize| -> u64 {
                plan.iter().filter(|&&(k2, l2, _)| (k2, l2) == (k, l)).map(|&(_, _, c)| c).sum()
            };
            let expected: Vec<(tollgate_core::Decision, State)> = plan
                .iter()
                .enumerate()
                .map(|(i, &(k, l, _))| algorithm::step(before[i].as_ref(), &limits[l], now, merged_cost(k, l)))
                .collect();
            let verdict = store.decide(&check, now).unwrap();
            let admitted = expected.iter().all(|(d, _)| d.allowed());
            prop_assert_eq!(verdict.is_admitted(), admitted);
            for (i, &(k, l, _)) in plan.iter().enumerate() {
                let (limit, cost) = (&limits[l], merged_cost(k, l));
                let after = store.state(keys[k], limit);
                let current = |state: &Option<State>| State::current(state.clone(), limit, now);
                if admitted {
                    prop_assert_eq!(verdict.decisions()[i], expected[i].0);
                    if cost > 0 || before[i].is_some() {
                        prop_assert_eq!(current(&after), current(&Some(expected[i].1.clone())));
                    }
                } else {
                    prop_assert_eq!(current(&after), current(&before[i]), "a denied check changed {} {}", keys[k], limit);
                    prop_assert_eq!(verdict.decisions()[i], algorithm::peek(before[i].as_ref(), limit, now, cost));
                }
            }
        }
    }
}
