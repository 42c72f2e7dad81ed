//! The local over-limit cache: a denied check is denied again without a store call until it
//! could be admitted, and not after (on the memory store and a manual clock, store calls
//! counted by an observer); refunds and reloads that change the answer are honoured at once
//! (on a real Redis, store calls counted with `RedisStore::stats`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::observer::Observer;
use tollgate::observer::StoreObserver;
use tollgate::policy::DecidedBy;
use tollgate::{
    Algorithm, Check, Limit, Limiter, ManualClock, MemoryStore, Policies, RedisConfig, RedisStore,
    Request, StoreError,
};
use tollgate_testkit::RedisServer;

async fn limiter(redis: &RedisServer) -> Limiter<RedisStore> {
    let store = RedisStore::connect(&redis.url(), RedisConfig::default())
        .await
        .expect("connects to the test redis");
    Limiter::new(store)
}

/// Counts the calls that reach the store.
#[derive(Default)]
struct StoreCalls(AtomicU64);

impl StoreObserver for StoreCalls {
    fn store_called(&self, _took: Duration, _error: Option<&StoreError>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl Observer for StoreCalls {}

#[tokio::test]
async fn a_denied_check_is_denied_locally_until_it_could_pass_and_not_after() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let calls = Arc::new(StoreCalls::default());
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build();
    let limiter = Limiter::builder(store)
        .observer(Arc::clone(&calls) as Arc<dyn Observer>)
        .build();
    limiter.settings().set_deny_cache(true);
    let calls = || calls.0.load(Ordering::Relaxed);
    let limit =
        Limit::new("burst", Algorithm::Gcra, "5/s".parse().expect("a quota")).expect("a limit");
    let check = Check::one("flooder", &limit);
    let mut admitted = 0;
    let denial = loop {
        let verdict = limiter.check(&check).await.expect("an answer");
        if verdict.is_denied() {
            break verdict;
        }
        admitted += 1;
    };
    assert_eq!(admitted, 5);
    let before = calls();
    for _ in 0..1_000 {
        clock.advance(Duration::from_micros(50));
        let verdict = limiter.check(&check).await.expect("an answer");
        assert!(verdict.is_denied());
        assert!(verdict.is_replayed());
        assert!(
            verdict.retry_after() < denial.retry_after(),
            "the wait shrinks with time"
        );
    }
    assert_eq!(
        calls(),
        before,
        "a flood past the limit makes no store calls"
    );
    assert_eq!(limiter.telemetry().deny_cache_hits(), 1_000);

    // Another key, or the same key at another cost, is not the same check.
    limiter
        .check(&Check::one("someone-else", &limit))
        .await
        .expect("an answer");
    assert_eq!(calls(), before + 1);

    // Once the store would admit it again, the cache lets the store decide.
    let waited = Duration::from_micros(50_000);
    let wait = denial.retry_after().expect("a retry time") - waited;
    clock.advance(wait);
    let verdict = limiter.check(&check).await.expect("an answer");
    assert!(verdict.is_admitted(), "{verdict:?}");
    assert_eq!(calls(), before + 2);

    // The expired entry is gone; the next denial is remembered as the first was.
    while limiter
        .check(&check)
        .await
        .expect("an answer")
        .is_admitted()
    {}
    let stored = calls();
    let verdict = limiter.check(&check).await.expect("an answer");
    assert!(verdict.is_denied() && verdict.is_replayed(), "{verdict:?}");
    assert_eq!(calls(), stored, "the new denial is answered from the cache");

    // Turned off, every check asks the store (decided in process at once, which is no store
    // call the observers hear of): a denial is the store's own, never a replay.
    limiter.settings().set_deny_cache(false);
    while limiter
        .check(&check)
        .await
        .expect("an answer")
        .is_admitted()
    {}
    let hits = limiter.telemetry().deny_cache_hits();
    for _ in 0..3 {
        let verdict = limiter.check(&check).await.expect("an answer");
        assert!(verdict.is_denied() && !verdict.is_replayed(), "{verdict:?}");
    }
    assert_eq!(limiter.telemetry().deny_cache_hits(), hits);
}

#[tokio::test]
async fn a_refund_clears_the_cached_denial_of_its_key() {
    let redis = RedisServer::start();
    let limiter = limiter(&redis).await;
    let limit = Limit::new(
        "hourly",
        Algorithm::FixedWindow,
        "1/h".parse().expect("a quota"),
    )
    .expect("a limit");
    let check = Check::one("job", &limit);
    let first = limiter.check(&check).await.expect("an answer");
    assert!(first.is_admitted());
    assert!(limiter.check(&check).await.expect("an answer").is_denied());
    assert!(limiter.check(&check).await.expect("an answer").is_denied());
    assert_eq!(limiter.telemetry().deny_cache_hits(), 1);
    limiter.refund(&check, &first).await.expect("refunded");
    assert!(
        limiter
            .check(&check)
            .await
            .expect("an answer")
            .is_admitted(),
        "the refund is seen at once"
    );
}

#[tokio::test]
async fn a_reload_that_raises_the_limit_is_honoured_at_once() {
    let redis = RedisServer::start();
    let limiter = limiter(&redis).await;
    let policies = |quota: &str| {
        Policies::from_yaml(
            "test.yaml",
            &format!(
                "policies:\n  - name: api\n    key: [global]\n    limits: [{{ name: api, algorithm: fixed_window, quota: {quota} }}]\n"
            ),
        )
        .expect("valid policies")
    };
    limiter.settings().set_policies(policies("1/h"));
    let request = Request::new("GET", "/");
    assert!(
        limiter
            .evaluate(&request)
            .await
            .expect("an answer")
            .is_admitted()
    );
    let denied = limiter.evaluate(&request).await.expect("an answer");
    assert!(!denied.is_admitted());
    assert_eq!(denied.decided_by, DecidedBy::Store);
    let cached = limiter.evaluate(&request).await.expect("an answer");
    assert!(!cached.is_admitted());
    assert_eq!(cached.decided_by, DecidedBy::Cache);

    limiter.settings().set_policies(policies("10/h"));
    let raised = limiter.evaluate(&request).await.expect("an answer");
    assert!(raised.is_admitted(), "the higher limit applies at once");
    assert_eq!(raised.decided_by, DecidedBy::Store);
}
