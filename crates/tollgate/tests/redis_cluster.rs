//! What the limiter does on a real 3-master/3-replica Redis Cluster: refunds across masters,
//! each at its own master's time, and overrides written and read; the store's own tests are in
//! `crates/tollgate-redis/tests/redis_cluster.rs`.

mod common;

use common::{cluster, cluster_store};
use proptest::test_runner::TestRunner;
use tollgate::{Algorithm, Check, Limit, Verdict};

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
        cluster.master_of(cluster.slot_of(&key)).port()
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
