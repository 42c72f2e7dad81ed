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
use tollgate::{Algorithm, Check, Limit, RedisConfig, RedisStore, Store, Verdict};

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

/// Each master of a cluster reads its own clock: a check across masters used to be refunded at
/// the latest master's time for every item, and the sliding log gives back only the entry
/// stamped with exactly its own time, so 22 to 28 of 30 such refunds left an entry behind. Each
/// item is now refunded at its own master's time, as the verdict reports it.
#[tokio::test]
async fn refunds_across_masters_give_back_every_item_at_its_own_masters_time() {
    let cluster = cluster();
    let limiter = tollgate::Limiter::new(cluster_store().await);
    let log = Limit::new("log", Algorithm::SlidingLog, "100/h".parse().unwrap()).unwrap();
    let master = |identity: &str| {
        let key = limiter.store().key_of(identity, &log);
        cluster.master_of(common::slot_of(cluster, &key)).port()
    };
    let first = format!("user:across:{}", std::process::id());
    let second = (0..)
        .map(|n| format!("ip:across:{}:{n}", std::process::id()))
        .find(|other| master(other) != master(&first))
        .expect("a key on another master");
    let check = Check::new(1).limit(&first, &log).limit(&second, &log);
    for round in 0..30 {
        let verdict = limiter.check(&check).await.expect("a verdict");
        assert!(verdict.is_admitted(), "round {round}");
        limiter.refund(&check, &verdict).await.expect("refunded");
        let look = limiter
            .check(&Check::new(0).limit(&first, &log).limit(&second, &log))
            .await
            .expect("a look");
        let left: Vec<u64> = look.decisions().iter().map(|d| d.remaining()).collect();
        assert_eq!(
            left,
            [100, 100],
            "round {round}: every entry was given back"
        );
    }
}

/// The differential workloads pass one explicit time to every call; here each master keeps its
/// own clock (no explicit time), as in production. Random checks across the three keys of the
/// workloads (three slots, on different masters), each refunded at once by its verdict, leave
/// every exact-stamp limit (sliding logs, fixed windows of an hour) as it was before the check.
#[test]
fn checks_refunded_at_once_on_the_masters_own_clocks_leave_nothing_behind() {
    use proptest::prelude::*;
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let limits = [
        Limit::new("own-log", Algorithm::SlidingLog, "50/h".parse().unwrap()).unwrap(),
        Limit::new(
            "own-window",
            Algorithm::FixedWindow,
            "50/h".parse().unwrap(),
        )
        .unwrap(),
    ];
    let check = prop::collection::vec((0usize..3, 0usize..2, 1u64..4), 1..5);
    let mut runner = TestRunner::new(common::differential_config("redis_cluster_own_clocks", 40));
    runner
        .run(&prop::collection::vec(check, 1..8), |checks| {
            runtime.block_on(async {
                let limiter = tollgate::Limiter::new(cluster_store().await);
                let prefix = format!("own:{}:{}", std::process::id(), fastrand::u64(..));
                let keys: Vec<String> = common::KEYS
                    .iter()
                    .map(|k| format!("{prefix}:{k}"))
                    .collect();
                let mut look = Check::new(0);
                for key in &keys {
                    for limit in &limits {
                        look.push(key.as_str(), limit, 0);
                    }
                }
                let left = |verdict: Verdict| -> Vec<u64> {
                    verdict.decisions().iter().map(|d| d.remaining()).collect()
                };
                for items in checks {
                    let before = left(limiter.check(&look).await.expect("a look"));
                    let mut check = Check::new(0);
                    for &(key, limit, cost) in &items {
                        check.push(keys[key].as_str(), &limits[limit], cost);
                    }
                    let verdict = limiter.check(&check).await.expect("a verdict");
                    limiter.refund(&check, &verdict).await.expect("refunded");
                    let after = left(limiter.check(&look).await.expect("a look"));
                    prop_assert_eq!(&before, &after, "{:?}", items);
                }
                Ok(())
            })
        })
        .expect("refunds on the masters' own clocks give everything back");
}

/// The override table and its version share one slot, so that a write compares and raises them
/// in one script on the cluster too.
#[tokio::test]
async fn overrides_are_written_and_read_on_the_cluster() {
    use tollgate::overrides::{OverrideBackend, OverrideWritten};
    let store = cluster_store().await;
    let overrides = store.override_backend();
    let version = overrides.version().await.expect("read");
    let written = overrides
        .write("a", 0, Some("{\"x\":1}"))
        .await
        .expect("written");
    assert_eq!(
        written,
        OverrideWritten::Done {
            version: version + 1
        }
    );
    assert_eq!(
        overrides.write("a", 0, Some("{}")).await.expect("answered"),
        OverrideWritten::Conflict {
            current: version + 1
        }
    );
    let table = overrides.load().await.expect("read");
    assert_eq!(table.version, version + 1);
    assert!(
        table
            .records
            .iter()
            .any(|r| r.id == "a" && r.body == "{\"x\":1}")
    );
}
