//! The Redis store on a real 3-master/3-replica Redis Cluster: one slot per identity, cross-slot
//! checks made all-or-nothing by reserve-then-refund, never more admitted than a limit allows.

mod common;

use std::sync::Arc;

use common::{
    Item, cluster, cluster_store, fresh_config, never_over_admits, queued_together, replay_both,
    slot_map_read, workload,
};
use proptest::test_runner::{TestCaseError, TestRunner};
use redis::cluster_routing::Slot;
use tollgate_core::{Algorithm, Check, Limit, Store, Verdict};
use tollgate_redis::{RedisConfig, RedisStore};

fn slot(store: &RedisStore, key: &str, limit: &str) -> Slot {
    let limit =
        Limit::new(limit, Algorithm::Gcra, "1/s".parse().expect("a quota")).expect("a limit");
    Slot::for_key(store.key_of(key, &limit).as_bytes())
}

/// Checks within one slot must match the memory store exactly; cross-slot checks must match in
/// outcome and in every denial, and leave the same state behind (which later steps compare).
fn agrees(items: &[Item], expected: &Verdict, actual: &Verdict) -> bool {
    let single_slot = items.iter().all(|&(key, _, _)| key == items[0].0);
    if single_slot || expected.is_admitted() {
        return expected == actual;
    }
    actual.is_denied()
        && expected
            .decisions()
            .iter()
            .zip(actual.decisions())
            .all(|(e, a)| e.allowed() == a.allowed() && (e.allowed() || e == a))
}

#[test]
fn the_cluster_and_memory_decide_alike_on_random_workloads() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut runner = TestRunner::new(common::differential_config("redis_cluster", 100));
    runner
        .run(&workload(), |(limits, steps)| {
            runtime
                .block_on(async {
                    let redis = cluster_store().await;
                    replay_both(&redis, &limits, &steps, agrees).await
                })
                .map_err(TestCaseError::fail)
        })
        .expect("memory and the cluster agree");
}

/// Calendar windows (days, weeks, months from a billing day, across a change of daylight
/// saving) decide alike on the cluster and in memory.
#[test]
fn the_cluster_and_memory_agree_on_calendar_windows() {
    common::agree_on_calendar_windows("redis_cluster_calendar", cluster_store, agrees);
}

#[tokio::test]
async fn every_limit_of_one_identity_lives_in_one_slot() {
    let store = cluster_store().await;
    assert_eq!(
        slot(&store, "user:42", "per-second"),
        slot(&store, "user:42", "per-hour")
    );
    assert_ne!(
        slot(&store, "user:42", "x"),
        slot(&store, "ip:203.0.113.7", "x")
    );
}

#[tokio::test]
async fn a_check_across_slots_is_all_or_nothing() {
    let store = cluster_store().await;
    let per_user = Limit::new("per-user", Algorithm::TokenBucket, "5/m".parse().unwrap()).unwrap();
    let per_ip = Limit::new("per-ip", Algorithm::SlidingLog, "1/m".parse().unwrap()).unwrap();
    assert_ne!(
        slot(&store, "user:42", "per-user"),
        slot(&store, "ip:203.0.113.7", "per-ip")
    );
    let check = Check::new(1)
        .limit("user:42", &per_user)
        .limit("ip:203.0.113.7", &per_ip);
    assert!(store.check(&check, None).await.unwrap().is_allowed());
    let denied = store.check(&check, None).await.unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.binding_index(), Some(1));
    assert!(denied.decisions()[0].allowed());
    assert_eq!(
        denied.decisions()[0].remaining(),
        4,
        "the user's reservation was given back"
    );
    let user_only = store
        .check(&Check::new(0).limit("user:42", &per_user), None)
        .await
        .unwrap();
    assert_eq!(
        user_only.decisions()[0].remaining(),
        4,
        "only the first check counted for the user"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cross_slot_checks_never_over_admit() {
    let store = cluster_store().await;
    let per_user =
        Arc::new(Limit::new("per-user", Algorithm::FixedWindow, "10/h".parse().unwrap()).unwrap());
    let per_ip = Arc::new(Limit::new("per-ip", Algorithm::Gcra, "40/h".parse().unwrap()).unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for user in 0..8 {
        for _ in 0..4 {
            let (store, per_user, per_ip) =
                (store.clone(), Arc::clone(&per_user), Arc::clone(&per_ip));
            tasks.spawn(async move {
                let key = format!("user:{user}");
                let mut admitted = 0;
                for _ in 0..10 {
                    let check = Check::new(1)
                        .limit(key.as_str(), &per_user)
                        .limit("ip:shared", &per_ip);
                    if store.check(&check, None).await.unwrap().is_admitted() {
                        admitted += 1;
                    }
                }
                (user, admitted)
            });
        }
    }
    let mut per_user_total = [0u32; 8];
    while let Some(result) = tasks.join_next().await {
        let (user, admitted) = result.unwrap();
        per_user_total[user] += admitted;
    }
    let total: u32 = per_user_total.iter().sum();
    assert!(total <= 40, "the shared IP admitted {total} of 40");
    assert!(
        per_user_total.iter().all(|&n| n <= 10),
        "{per_user_total:?}"
    );
    assert!(
        total >= 30,
        "reserve-then-refund under-admitted far too much: {total}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_their_own_connections_never_over_admit_on_the_cluster() {
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.is_exact()) {
        let limit = Arc::new(Limit::new("shared", algorithm, "120/h".parse().unwrap()).unwrap());
        let prefix = fresh_config().prefix;
        let mut stores = Vec::new();
        for _ in 0..3 {
            let config = RedisConfig {
                prefix: prefix.clone(),
                ..fresh_config()
            };
            stores.push(
                RedisStore::connect_cluster(&cluster().urls(), config)
                    .await
                    .unwrap(),
            );
        }
        never_over_admits(&stores, limit, 120, 12, 12).await;
    }
}

/// A cluster is spoken to in RESP3 where its nodes have `HELLO`, and in RESP2 where they do
/// not, deciding alike.
#[tokio::test]
async fn a_cluster_gets_resp3_where_it_speaks_it_else_resp2() {
    for (extra, protocol) in [
        (&[][..], "resp=3"),
        (&["--rename-command", "HELLO", ""][..], "resp=2"),
    ] {
        let cluster = tollgate_testkit::RedisCluster::start_with(extra);
        let store = RedisStore::connect_cluster(&cluster.urls(), common::fresh_config())
            .await
            .expect("the store reaches the cluster");
        assert_eq!(
            common::three_checks_of_two_per_hour(&store).await,
            [true, true, false]
        );
        let clients: String = cluster
            .nodes()
            .iter()
            .filter_map(|node| node.query::<String>(redis::cmd("CLIENT").arg("LIST")).ok())
            .collect();
        let store_connection = common::store_connection(&clients);
        assert!(store_connection.contains(protocol), "{store_connection}");
    }
}

// One thread, on purpose: see `queued_together`.
#[tokio::test(flavor = "current_thread")]
async fn checks_of_several_slots_of_one_master_share_a_call_and_stay_exact() {
    let store = cluster_store().await;
    slot_map_read(cluster(), &store).await;
    let window = Limit::new("w", Algorithm::FixedWindow, "100/h".parse().unwrap()).unwrap();
    let now = 1_700_000_000_000_000;
    // 64 identities (about as many slots), three checks each, all queued at once.
    let identities: Vec<String> = (0..64).map(|n| format!("user:{n}")).collect();
    let checks: Vec<Check<'_>> = identities
        .iter()
        .flat_map(|identity| std::iter::repeat_n(Check::one(identity, &window), 3))
        .collect();
    let before = store.stats();
    let verdicts = queued_together(&store, &checks, now).await;
    for (identity, verdicts) in identities.iter().zip(verdicts.chunks(3)) {
        let mut remaining: Vec<u64> = verdicts
            .iter()
            .map(|verdict| {
                let verdict = verdict.as_ref().expect("an answer");
                assert!(verdict.is_admitted(), "{identity}: {verdict:?}");
                verdict.decisions()[0].remaining()
            })
            .collect();
        remaining.sort_unstable();
        assert_eq!(remaining, [97, 98, 99], "{identity}");
    }
    let after = store.stats();
    let calls = after.calls - before.calls;
    let rounds = checks.len().div_ceil(RedisConfig::default().max_batch) as u64;
    // Slot by slot it took about one call a check; by master, at most one per master a round.
    assert!(
        calls <= rounds * 3,
        "{calls} calls for {} checks in {rounds} rounds: {after:?}",
        checks.len()
    );
    assert_eq!(after.regrouped, before.regrouped, "no slot moved");
}
