//! Redis Cluster topology changes under the store: a master killed and replaced by its replica,
//! and a slot moved to another master. Each test has a cluster of its own, as it breaks it.

#![allow(clippy::disallowed_methods)] // Deadlines and timings of the run itself, not decisions.

mod common;

use std::time::{Duration, Instant};

use common::{queued_together, slot_map_read, two_slots_of_one_master};
use tollgate_core::{Algorithm, Check, Limit, Store, StoreError, Verdict};
use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_testkit::{RedisCluster, RedisServer};

async fn store(cluster: &RedisCluster) -> RedisStore {
    let config = RedisConfig {
        timeout: Duration::from_millis(500),
        ..RedisConfig::default()
    };
    RedisStore::connect_cluster(&cluster.urls(), config)
        .await
        .expect("connects to the cluster")
}

fn node_id(node: &RedisServer) -> String {
    node.query(redis::cmd("CLUSTER").arg("MYID"))
        .expect("CLUSTER MYID")
}

fn hourly(algorithm: Algorithm) -> Limit {
    Limit::new("hourly", algorithm, "100/h".parse().expect("a quota")).expect("a limit")
}

/// Makes `times` checks, each of which must be admitted.
async fn admit(store: &RedisStore, check: &Check<'_>, times: usize) {
    for _ in 0..times {
        let verdict = store.check(check, None).await.expect("an answer");
        assert!(verdict.is_admitted(), "{verdict:?}");
    }
}

fn is_master(node: &RedisServer) -> bool {
    matches!(
        node.query::<redis::Value>(&mut redis::cmd("ROLE")),
        Ok(redis::Value::Array(parts))
            if matches!(parts.first(), Some(redis::Value::BulkString(role)) if role == b"master")
    )
}

/// Writes `key` on `master` and waits until a replica has acknowledged it, and with it every
/// earlier write of the master's replication stream.
fn replicated(master: &RedisServer, key: &str) {
    let mut connection = redis::Client::open(master.url())
        .and_then(|client| client.get_connection())
        .expect("a connection to the master");
    let acknowledged: (i64,) = redis::pipe()
        .cmd("SET")
        .arg(key)
        .arg(1)
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(30_000)
        .query(&mut connection)
        .expect("WAIT");
    assert!(acknowledged.0 >= 1, "no replica acknowledged the writes");
}

/// A check answered after a topology change, and what failed on the way.
struct Answered {
    verdict: Verdict,
    /// Typed errors met before the answer.
    errors: usize,
    /// Of those, the timeouts: a call that timed out may still have been counted (the script
    /// ran, its answer came too late), so each may have taken a unit no answer accounts for.
    timeouts: u64,
}

/// Checks until one is answered, counting the typed errors met on the way.
async fn until_answered(store: &RedisStore, check: &Check<'_>) -> Answered {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut errors, mut timeouts) = (0, 0);
    loop {
        match store.check(check, None).await {
            Ok(verdict) => {
                return Answered {
                    verdict,
                    errors,
                    timeouts,
                };
            }
            Err(
                error @ (StoreError::Timeout(_)
                | StoreError::Unavailable(_)
                | StoreError::Failed(_)),
            ) => {
                errors += 1;
                timeouts += u64::from(matches!(error, StoreError::Timeout(_)));
                assert!(
                    Instant::now() < deadline,
                    "the cluster never answered again: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
}

/// Asserts that `answered` left `expected` (or fewer by as many tries as timed out, which the
/// store may have counted), saying `why`.
fn assert_remaining(answered: &Answered, expected: u64, why: &str) {
    let remaining = answered.verdict.decisions()[0].remaining();
    assert!(
        (expected.saturating_sub(answered.timeouts)..=expected).contains(&remaining),
        "{why}: {remaining} remaining, expected {expected} (less at most {} for tries that timed out)",
        answered.timeouts
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_by_its_replica_and_checks_resume() {
    let mut cluster = RedisCluster::start();
    let store = store(&cluster).await;
    let limit = hourly(Algorithm::FixedWindow);
    let check = Check::one("tenant:acme", &limit);
    admit(&store, &check, 10).await;
    cluster.wait_until_formed();
    let slot = cluster.slot_of(&store.key_of("tenant:acme", &limit));
    let port = cluster.master_of(slot).port();
    // Replication is asynchronous: only a write the replica has acknowledged survives the
    // failover, so wait for it to acknowledge everything up to a write made after the checks.
    replicated(cluster.master_of(slot), "{tenant:acme}:replicated");
    let master = cluster
        .nodes_mut()
        .iter_mut()
        .find(|node| node.port() == port)
        .expect("the master is one of the nodes");
    master.kill();

    let answered = until_answered(&store, &check).await;
    assert!(answered.verdict.is_admitted());
    assert!(
        answered.errors > 0,
        "checks failed, with typed errors, while the slot had no master"
    );
    // Every node learns of the promotion by gossip, some later than others.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.master_of(slot).port() == port {
        assert!(
            Instant::now() < deadline,
            "no node reports the replica as master"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_remaining(
        &answered,
        89,
        "the replica had the count: 10 before the failover, 1 after",
    );
}

/// Moves `slot`, keys and all, from its master to another, as a resharding does.
fn move_slot(cluster: &RedisCluster, slot: u16) {
    let source = cluster.master_of(slot);
    let target = cluster
        .nodes()
        .iter()
        .find(|node| node.port() != source.port() && is_master(node))
        .expect("another master");
    let (source_id, target_id) = (node_id(source), node_id(target));
    let set_slot = |node: &RedisServer, state: &str, id: &str| {
        node.query::<()>(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(id),
        )
        .expect("CLUSTER SETSLOT");
    };
    set_slot(target, "IMPORTING", &source_id);
    set_slot(source, "MIGRATING", &target_id);
    let keys: Vec<String> = source
        .query(
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100),
        )
        .expect("CLUSTER GETKEYSINSLOT");
    assert!(!keys.is_empty(), "the slot holds keys to move");
    source
        .query::<()>(
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(target.port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys),
        )
        .expect("MIGRATE");
    for node in cluster.nodes() {
        let _ = node.query::<()>(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&target_id),
        );
    }
    assert_eq!(
        cluster.master_of(slot).port(),
        target.port(),
        "the slot moved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_follow_a_slot_moved_to_another_master() {
    let cluster = RedisCluster::start();
    let store = store(&cluster).await;
    let limit = hourly(Algorithm::SlidingLog);
    let check = Check::one("user:7", &limit);
    admit(&store, &check, 5).await;
    move_slot(&cluster, cluster.slot_of(&store.key_of("user:7", &limit)));

    let answered = until_answered(&store, &check).await;
    assert!(answered.verdict.is_admitted());
    assert_remaining(
        &answered,
        94,
        "the state moved with the slot: 5 before, 1 after",
    );
}

// One thread, on purpose: see `queued_together`.
#[tokio::test(flavor = "current_thread")]
async fn a_call_across_slots_that_meets_a_moved_slot_goes_again_slot_by_slot() {
    let cluster = RedisCluster::start();
    let store = store(&cluster).await;
    slot_map_read(&cluster, &store).await;
    let limit = hourly(Algorithm::FixedWindow);
    let (first, second) = two_slots_of_one_master(&cluster, &store, &limit);
    let checks = [Check::one(&first, &limit), Check::one(&second, &limit)];
    let now = 1_700_000_000_000_000;
    for _ in 0..5 {
        for verdict in queued_together(&store, &checks, now).await {
            assert!(verdict.expect("an answer").is_admitted());
        }
    }
    let before = store.stats();
    assert_eq!(before.regrouped, 0);
    // The store's map still puts both slots on one master; Redis refuses the call before it
    // writes anything, and each slot is decided on its own.
    move_slot(&cluster, cluster.slot_of(&store.key_of(&first, &limit)));
    let verdicts = queued_together(&store, &checks, now).await;
    for (identity, verdict) in [&first, &second].into_iter().zip(verdicts) {
        let verdict = verdict.expect("an answer");
        assert!(verdict.is_admitted(), "{identity}: {verdict:?}");
        assert_eq!(
            verdict.decisions()[0].remaining(),
            94,
            "{identity}: five before, one now, none twice"
        );
    }
    assert_eq!(store.stats().regrouped, 1, "{:?}", store.stats());

    // The refusal has the store read the map anew (at most once a second): once it has, the
    // two slots go to their own masters and no call is refused again.
    let probe = Limit::new(
        "probe",
        Algorithm::FixedWindow,
        "1000000/h".parse().expect("a quota"),
    )
    .expect("a limit");
    let probes = [Check::one(&first, &probe), Check::one(&second, &probe)];
    let mut refused_since = 0;
    for _ in 0..500 {
        let before = store.stats().regrouped;
        for verdict in queued_together(&store, &probes, now).await {
            assert!(verdict.expect("an answer").is_admitted());
        }
        if store.stats().regrouped == before {
            return;
        }
        refused_since += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the store never read the moved slot's master: {refused_since} calls refused since");
}
