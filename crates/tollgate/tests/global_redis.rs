//! Global limits on a real global redis-server, reached by each region over a link that adds
//! cross-region latency (20, 40 and 60 ms each way). What is asserted does not depend on the
//! machine's pace: no region set admits more than the quota, no unit is lost (what was
//! admitted plus what the global store has left, once the leases are returned, is the
//! quota), and a region cut off from the global store spends exactly what it holds before
//! its policy's failure mode answers.

#![allow(clippy::disallowed_methods)] // The run's own calendar check, not decisions.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::LeaseTuning;
use tollgate::policy::DecidedBy;
use tollgate::{
    Algorithm, AnyStore, Check, Limit, Limiter, MemoryStore, Policies, Quota, RedisConfig,
    RedisStore, Request, Scope, Store,
};
use tollgate_testkit::{FaultyLink, RedisServer};

/// The day a fixed window of one day counts in.
fn today() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    now.as_secs() / 86_400
}

fn global_limit(quota: &str) -> Limit {
    let quota: Quota = quota.parse().expect("a quota");
    Limit::builder("tenant", Algorithm::FixedWindow, quota)
        .scope(Scope::Global)
        .build()
        .expect("a global limit")
}

/// The global store's settings: one prefix, so that every region and the test's own look
/// share the keys.
fn global_config() -> RedisConfig {
    RedisConfig {
        prefix: "global:".to_owned(),
        ..common::fresh_config()
    }
}

/// A region: its own in-process store, and the global store over `url`.
async fn region(url: &str, tuning: LeaseTuning) -> Limiter {
    let global = RedisStore::connect(url, global_config())
        .await
        .expect("the global store over its link");
    Limiter::builder(MemoryStore::new())
        .global(AnyStore::Redis(global), tuning)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_regions_over_slow_links_never_admit_more_than_the_quota_and_lose_no_unit() {
    let redis = RedisServer::start();
    let links: Vec<FaultyLink> = [20, 40, 60]
        .iter()
        .map(|&ms| {
            let link = FaultyLink::in_front_of(&redis);
            link.set_latency(Duration::from_millis(ms));
            link
        })
        .collect();
    let quota = 600;
    let limit = Arc::new(global_limit("600/d"));
    // A day's window: should the run cross midnight (UTC), it runs again in the new day.
    for attempt in 0..2 {
        let day = today();
        let key = format!("tenant:attempt-{attempt}");
        let mut regions = Vec::new();
        for link in &links {
            regions.push(region(&link.url(), LeaseTuning::default()).await);
        }
        let admitted = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        // 70%, 20% and 10% of 1 800 checks (three times the quota), from concurrent clients.
        for (region, (clients, checks)) in regions.iter().zip([(7, 180), (2, 180), (1, 180)]) {
            for _ in 0..clients {
                let (region, limit, key) = (region.clone(), Arc::clone(&limit), key.clone());
                let admitted = Arc::clone(&admitted);
                tasks.push(tokio::spawn(async move {
                    for _ in 0..checks {
                        let verdict = region.check_one(&key, &limit).await.expect("a decision");
                        if verdict.is_admitted() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        for region in &regions {
            region.global().unwrap().settled().await;
            region.return_leases().await;
        }
        if today() != day {
            continue;
        }
        let admitted = admitted.load(Ordering::Relaxed);
        assert!(admitted <= quota, "{admitted} admitted of {quota}");
        let store = RedisStore::connect(&redis.url(), global_config())
            .await
            .unwrap();
        let left = store
            .check(&Check::new(0).limit(key.as_str(), &limit), None)
            .await
            .unwrap()
            .decisions()[0]
            .remaining();
        assert_eq!(
            admitted + left,
            quota,
            "every unit is admitted or back in the global store ({admitted} + {left})"
        );
        for region in &regions {
            let stats = region.global().unwrap().stats();
            assert_eq!(stats.held, 0, "{stats:?}");
            assert_eq!(
                stats.stranded, 0,
                "nothing expires within the day: {stats:?}"
            );
            assert_eq!(stats.leased, stats.spent + stats.returned, "{stats:?}");
        }
        return;
    }
    panic!("two runs crossed midnight");
}

/// While the global store is stalled and a quiet key's first check waits for its lease, the
/// key's other checks find that lease on its way and are answered here at once (denied, retry
/// soon) rather than wait for the global store; once it answers, the regions admit the quota
/// and not one check more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_finding_a_lease_on_its_way_are_answered_here_without_waiting() {
    let redis = RedisServer::start();
    let link = FaultyLink::in_front_of(&redis);
    let patient = RedisConfig {
        // The stall lasts as long as the test needs: the global store's answer is awaited.
        timeout: Duration::from_secs(600),
        ..global_config()
    };
    let global = RedisStore::connect(&link.url(), patient)
        .await
        .expect("the global store over its link");
    let limiter = Limiter::builder(MemoryStore::new())
        .global(AnyStore::Redis(global), LeaseTuning::default())
        .build();
    let leases = Arc::clone(limiter.global().expect("a global tier"));
    let limit = Arc::new(global_limit("5/d"));
    let day = today();
    let key = format!("tenant:stalled-{day}");

    link.stall();
    let first = {
        let (limiter, limit, key) = (limiter.clone(), Arc::clone(&limit), key.clone());
        tokio::spawn(async move { limiter.check_one(&key, &limit).await })
    };
    // The first check has asked the global store, and its lease is on its way.
    while leases.stats().store_calls == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for _ in 0..20 {
        let verdict = limiter.check_one(&key, &limit).await.expect("a decision");
        assert!(!verdict.is_admitted(), "nothing is held yet: {verdict:?}");
        assert!(
            verdict.retry_after().is_some(),
            "retry when the lease lands"
        );
    }
    let stats = leases.stats();
    assert_eq!(
        stats.checks_waited, 1,
        "only the first check waits: {stats:?}"
    );
    assert_eq!(stats.checks_denied_here, 20, "{stats:?}");
    assert_eq!(stats.store_calls, 1, "one lease on its way: {stats:?}");

    link.resume();
    let mut admitted = u64::from(first.await.unwrap().expect("a decision").is_admitted());
    for _ in 0..40 {
        let verdict = limiter.check_one(&key, &limit).await.expect("a decision");
        admitted += u64::from(verdict.is_admitted());
        leases.settled().await;
    }
    if today() == day {
        assert_eq!(admitted, 5, "the quota, and not one check more");
    } else {
        assert!(admitted <= 10, "at most the quota of each day: {admitted}");
    }
}

const POLICIES: &str = "
policies:
  - name: tenant
    match: { path_prefix: / }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 100000/d, scope: global }]
    on_store_error: deny
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_off_spends_what_it_holds_then_follows_its_failure_mode() {
    let redis = RedisServer::start();
    let link = FaultyLink::in_front_of(&redis);
    let tuning = LeaseTuning {
        // Nothing goes back for being idle while the test runs.
        idle: Duration::from_secs(3600),
        ..LeaseTuning::default()
    };
    let limiter = region(&link.url(), tuning).await;
    limiter
        .settings()
        .set_policies(Policies::from_yaml("test", POLICIES).unwrap());
    let request = Request::new("GET", "/");
    // Busy enough for the node to lease ahead of its checks (a check that finds its lease on
    // the way while the node's demand grows is denied here rather than wait for it).
    let mut admitted = 0;
    for _ in 0..300 {
        let evaluation = limiter.evaluate(&request).await.expect("an evaluation");
        assert_eq!(evaluation.decided_by, DecidedBy::Store);
        admitted += u64::from(evaluation.is_admitted());
    }
    assert!(admitted > 0, "the region leased");
    let leases = limiter.global().unwrap();
    leases.settled().await;
    let held = leases.stats().held;
    assert!(held > 0, "a busy region holds units ahead");

    link.partition();
    for spent in 0..held {
        let evaluation = limiter.evaluate(&request).await.expect("an evaluation");
        assert!(
            evaluation.is_admitted() && evaluation.decided_by == DecidedBy::Store,
            "unit {spent} of {held} held: {evaluation:?}"
        );
    }
    // The lease fetched ahead is lost in the partition; once its fetch has failed, a check
    // with nothing held asks the global store itself.
    leases.settled().await;
    let evaluation = limiter.evaluate(&request).await.expect("an evaluation");
    assert_eq!(
        evaluation.decided_by,
        DecidedBy::FailClosed,
        "nothing held, the global store unreachable: {evaluation:?}"
    );
    assert!(!evaluation.is_admitted(), "on_store_error: deny");
}
