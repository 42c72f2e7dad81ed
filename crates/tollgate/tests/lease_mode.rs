//! Lease mode on a real Redis: several limiters, each with its own connection as separate nodes
//! would have, share one global quota through leases. They never admit more than the quota
//! together, make far fewer store calls than they admit, and give back what they did not spend.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::{Algorithm, Check, Limit, Limiter, RedisConfig, RedisStore};
use tollgate_testkit::RedisServer;

const QUOTA: u64 = 1_000;
const LEASE: u64 = 50;
const NODES: usize = 4;

async fn node(redis: &RedisServer) -> Limiter<RedisStore> {
    let store = RedisStore::connect(&redis.url(), RedisConfig::default())
        .await
        .expect("connects to the test redis");
    Limiter::new(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_never_admit_more_than_the_global_quota_and_strand_at_most_a_lease_per_node() {
    let redis = RedisServer::start();
    let limit = Arc::new(
        Limit::builder(
            "global",
            Algorithm::FixedWindow,
            format!("{QUOTA}/h").parse().expect("a quota"),
        )
        .lease(LEASE)
        .build()
        .expect("a limit"),
    );
    let mut nodes = Vec::new();
    for _ in 0..NODES {
        nodes.push(node(&redis).await);
    }
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for node in &nodes {
        for _ in 0..2 {
            let (node, limit, admitted) = (node.clone(), Arc::clone(&limit), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                for _ in 0..600 {
                    let verdict = node
                        .check(&Check::one("api", &limit))
                        .await
                        .expect("an answer");
                    if verdict.is_admitted() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("the task ends");
    }
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        admitted <= QUOTA,
        "admitted {admitted} over a quota of {QUOTA}"
    );
    assert!(
        admitted >= QUOTA - NODES as u64 * LEASE,
        "admitted {admitted}: more stranded than one lease per node"
    );
    let calls: u64 = nodes.iter().map(|node| node.store().stats().calls).sum();
    eprintln!(
        "{NODES} nodes, lease {LEASE}: {admitted} of {QUOTA} admitted with {calls} store calls"
    );
    assert!(
        calls < admitted / 5,
        "{calls} store calls for {admitted} admissions: leases should save most of them"
    );

    // Given back, the stranded units are there for others: exactly the quota in all.
    for node in &nodes {
        node.return_leases().await;
    }
    let unleased = Limit::new(
        "global",
        Algorithm::FixedWindow,
        format!("{QUOTA}/h").parse().expect("a quota"),
    )
    .expect("a limit");
    let other = node(&redis).await;
    let mut later = 0;
    while other
        .check(&Check::one("api", &unleased))
        .await
        .expect("an answer")
        .is_admitted()
    {
        later += 1;
    }
    assert_eq!(
        admitted + later,
        QUOTA,
        "{admitted} through leases, {later} after"
    );
}

#[test]
fn a_lease_must_fit_the_limit() {
    let quota = "10/s".parse().expect("a quota");
    let error = Limit::builder("l", Algorithm::Gcra, quota)
        .burst(5)
        .lease(6)
        .build()
        .expect_err("larger than the burst");
    assert!(
        error
            .to_string()
            .contains("at most the limit's capacity (5)"),
        "{error}"
    );
    let queue = Limit::builder("q", Algorithm::LeakyBucket, quota)
        .mode(tollgate::LeakyMode::Queue { delay_after: 1 })
        .lease(2)
        .build();
    assert!(queue.is_err(), "a queueing leaky bucket cannot lease");
}
