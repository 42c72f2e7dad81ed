//! When Redis is gone or stalled: each policy's failure mode answers, the circuit breaker stops
//! calling a failing store and probes it, and the store is used again once it recovers. Real
//! redis-server processes, killed and stopped with signals.

#![allow(clippy::disallowed_methods)] // Deadlines and timings of the run itself, not decisions.

use std::time::Duration;

use tollgate::policy::{Action, DecidedBy};
use tollgate::{BreakerConfig, Limiter, Policies, RedisConfig, RedisStore, Request};
use tollgate_testkit::RedisServer;

const POLICIES: &str = "
policies:
  - name: open
    match: { path_prefix: /open }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 2/h }]
    on_store_error: allow
  - name: closed
    match: { path_prefix: /closed }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 2/h }]
    on_store_error: deny
  - name: local
    match: { path_prefix: /local }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 2/h }]
    on_store_error: local
  - name: shared
    match: { path_prefix: /shared }
    key: [global]
    limits: [{ algorithm: gcra, quota: 4/h, burst: 4 }]
    on_store_error: local
    local_nodes: 2
  - name: both
    match: { path_prefix: /open/strict }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 100/h }]
    on_store_error: deny
";

async fn limiter(redis: &RedisServer) -> Limiter<RedisStore> {
    let config = RedisConfig {
        timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(200),
        ..RedisConfig::default()
    };
    let store = RedisStore::connect(&redis.url(), config)
        .await
        .expect("connects to the test redis");
    let policies = Policies::from_yaml("test.yaml", POLICIES).expect("valid policies");
    Limiter::with_policies(store, policies)
}

async fn decide(limiter: &Limiter<RedisStore>, path: &str) -> (Action, DecidedBy) {
    let request = Request::new("GET", path);
    let evaluation = limiter
        .evaluate(&request)
        .await
        .expect("an answer, not an error");
    (evaluation.action, evaluation.decided_by)
}

#[tokio::test]
async fn each_failure_mode_answers_for_its_policy_when_redis_is_gone() {
    let mut redis = RedisServer::start();
    let limiter = limiter(&redis).await;
    assert_eq!(
        decide(&limiter, "/open").await,
        (Action::Allow, DecidedBy::Store)
    );
    redis.kill();

    for _ in 0..5 {
        assert_eq!(
            decide(&limiter, "/open").await,
            (Action::Allow, DecidedBy::FailOpen)
        );
    }
    let (action, decided_by) = decide(&limiter, "/closed").await;
    assert_eq!(decided_by, DecidedBy::FailClosed);
    let Action::Refuse(refusal) = action else {
        panic!("fails closed: {action:?}");
    };
    assert_eq!(refusal.status(), 503);
    assert_eq!(
        refusal.kind(),
        tollgate::problem::ProblemKind::TemporaryReducedCapacity
    );
    assert!(refusal.retry_after.is_some());

    // The local fallback enforces the same limits in process.
    let mut local = Vec::new();
    for _ in 0..3 {
        let (action, decided_by) = decide(&limiter, "/local").await;
        assert_eq!(decided_by, DecidedBy::Local);
        local.push(matches!(action, Action::Allow));
    }
    assert_eq!(local, [true, true, false]);
    // With two nodes expected, each keeps to half of the limit on its own.
    let mut shared = Vec::new();
    for _ in 0..3 {
        shared.push(matches!(decide(&limiter, "/shared").await.0, Action::Allow));
    }
    assert_eq!(shared, [true, true, false]);

    // A request under a failing-open and a failing-closed policy is refused: the strictest wins.
    assert_eq!(
        decide(&limiter, "/open/strict").await.1,
        DecidedBy::FailClosed
    );
}

#[tokio::test]
async fn the_breaker_rests_a_stalled_store_then_probes_and_returns_to_it() {
    let redis = RedisServer::start();
    let limiter = limiter(&redis).await;
    limiter.settings().set_breaker(BreakerConfig {
        failures: 3,
        cooldown: Duration::from_millis(300),
    });
    assert_eq!(decide(&limiter, "/open").await.1, DecidedBy::Store);
    let calls_before = limiter.store().stats().calls;

    redis.signal("STOP");
    // Three timeouts open the breaker; after that no request calls the store.
    for _ in 0..3 {
        assert_eq!(decide(&limiter, "/open").await.1, DecidedBy::FailOpen);
    }
    assert!(limiter.telemetry().store_resting());
    let calls_while_failing = limiter.store().stats().calls;
    assert_eq!(
        calls_while_failing - calls_before,
        3,
        "one call per timed-out request"
    );
    for _ in 0..100 {
        assert_eq!(decide(&limiter, "/open").await.1, DecidedBy::FailOpen);
    }
    assert_eq!(
        limiter.store().stats().calls,
        calls_while_failing,
        "a resting store is not called"
    );
    assert_eq!(limiter.telemetry().breaker_openings(), 1);

    redis.signal("CONT");
    // After the cool-down a probe goes through, succeeds, and the store decides again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if decide(&limiter, "/open").await.1 == DecidedBy::Store {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the store was never used again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!limiter.telemetry().store_resting());
    assert_eq!(decide(&limiter, "/closed").await.1, DecidedBy::Store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_run_through_a_redis_restart_never_fails_a_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let mut redis = RedisServer::start();
    let limiter = limiter(&redis).await;
    limiter.settings().set_breaker(BreakerConfig {
        failures: 3,
        cooldown: Duration::from_millis(100),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let by_store = Arc::new(AtomicU64::new(0));
    let by_fallback = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..4 {
        let (limiter, stop) = (limiter.clone(), Arc::clone(&stop));
        let (by_store, by_fallback) = (Arc::clone(&by_store), Arc::clone(&by_fallback));
        tasks.push(tokio::spawn(async move {
            // Load until the test's phases are done (it says stop), within an overall deadline:
            // how fast the fallback answers while Redis is down changes nothing. A count of
            // rounds used to end the load before Redis was back, when the fallback was fast.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            for round in 0u64.. {
                if stop.load(Ordering::Relaxed) || std::time::Instant::now() > deadline {
                    break;
                }
                let path = if (round + task) % 2 == 0 {
                    "/open"
                } else {
                    "/local"
                };
                let evaluation = limiter
                    .evaluate(&Request::new("GET", path))
                    .await
                    .expect("every request is answered, by the store or its failure mode");
                // The over-limit cache repeats the store's own denials.
                let counter =
                    if matches!(evaluation.decided_by, DecidedBy::Store | DecidedBy::Cache) {
                        &by_store
                    } else {
                        &by_fallback
                    };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }));
    }
    let wait_for = |counter: &Arc<AtomicU64>, above: u64| {
        let counter = Arc::clone(counter);
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while counter.load(Ordering::Relaxed) <= above {
                assert!(std::time::Instant::now() < deadline, "the load stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_for(&by_store, 100).await;
    redis.kill();
    wait_for(&by_fallback, 100).await;
    redis.restart(&[]);
    let stored = by_store.load(Ordering::Relaxed);
    wait_for(&by_store, stored + 100).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("no task panicked");
    }
    assert!(by_fallback.load(Ordering::Relaxed) > 100);
}
