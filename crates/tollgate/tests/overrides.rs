//! Overrides at run time: one identity limited otherwise than its policy says, let through or
//! refused, until the override expires or is removed; writes that name a stale version are
//! refused; two limiters on one Redis apply the same table.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tollgate::overrides::{
    Change, FileOverrideBackend, Override, OverrideError, OverrideTarget, SetLimit,
};
use tollgate::policy::{Action, Reason};
use tollgate::{Limiter, ManualClock, MemoryStore, Policies, RedisConfig, RedisStore, Request};
use tollgate_testkit::RedisServer;

const POLICIES: &str = "
policies:
  - name: api
    match: { path_prefix: /api/ }
    key: [tenant]
    limits:
      - { name: per-minute, algorithm: fixed_window, quota: 2/m }
      - { name: per-hour, algorithm: fixed_window, quota: 100/h }
";

const START: u64 = 1_700_000_040_000_000;

fn policies() -> Policies {
    Policies::from_yaml("test.yaml", POLICIES).expect("valid")
}

fn limiter(clock: &ManualClock) -> Limiter {
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build();
    Limiter::with_policies(store, policies())
}

fn call(tenant: &str) -> Request<'_> {
    let mut request = Request::new("GET", "/api/orders");
    request.peer = Some("203.0.113.7".parse::<IpAddr>().expect("an address"));
    request.tenant = Some(tenant);
    request
}

/// How many of `n` calls by `tenant` are admitted.
async fn admitted<S: tollgate::Store>(limiter: &Limiter<S>, tenant: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        if limiter
            .evaluate(&call(tenant))
            .await
            .expect("an answer")
            .is_admitted()
        {
            admitted += 1;
        }
    }
    admitted
}

fn item(key: &str, limit: Option<&str>, change: Change) -> Override {
    Override {
        policy: "api".into(),
        key: key.into(),
        limit: limit.map(str::to_owned),
        change,
        expires_at: None,
        reason: Some("a test".into()),
    }
}

#[tokio::test]
async fn an_override_changes_one_identitys_limits_and_no_others() {
    let clock = ManualClock::new(START);
    let limiter = limiter(&clock);
    let overrides = limiter.overrides();
    overrides
        .put(item("tenant:acme", None, Change::Multiply(5.0)), 0, "ops")
        .await
        .expect("written");
    assert_eq!(admitted(&limiter, "acme", 12).await, 10, "five times 2/m");
    assert_eq!(admitted(&limiter, "other", 12).await, 2, "the policy's 2/m");
    let evaluation = limiter.evaluate(&call("acme")).await.expect("an answer");
    assert_eq!(
        evaluation.applied[0].limit.quota().count(),
        10,
        "headers show the quota in force"
    );

    // One limit by name wins over the override of every limit.
    let set = SetLimit {
        quota: Some("3/m".parse().expect("a quota")),
        ..SetLimit::default()
    };
    overrides
        .put(
            item("tenant:acme", Some("per-minute"), Change::Set(set)),
            0,
            "ops",
        )
        .await
        .expect("written");
    clock.advance(Duration::from_secs(60));
    assert_eq!(admitted(&limiter, "acme", 5).await, 3);
    let evaluation = limiter.evaluate(&call("acme")).await.expect("an answer");
    assert_eq!(
        evaluation.applied[1].limit.quota().count(),
        500,
        "per-hour still multiplied"
    );
}

#[tokio::test]
async fn allow_lets_through_deny_refuses_and_an_expired_override_stops_applying() {
    let clock = ManualClock::new(START);
    let limiter = limiter(&clock);
    let overrides = limiter.overrides();
    let mut allow = item("tenant:acme", None, Change::Allow);
    allow.expires_at = Some("2023-11-14T22:15:00Z".into()); // START + 60 s
    overrides.put(allow, 0, "ops").await.expect("written");
    overrides
        .put(item("tenant:bad", None, Change::Deny), 0, "ops")
        .await
        .expect("written");
    assert_eq!(admitted(&limiter, "acme", 20).await, 20, "let through");
    let refused = limiter.evaluate(&call("bad")).await.expect("an answer");
    let Action::Refuse(refusal) = refused.action else {
        panic!("a denied identity is refused: {refused:?}")
    };
    assert_eq!(
        refusal.reason,
        Reason::DenyListed {
            as_over_limit: false
        }
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        admitted(&limiter, "acme", 5).await,
        2,
        "expired: the policy's 2/m again"
    );
}

#[tokio::test]
async fn writes_name_the_version_they_replace() {
    let clock = ManualClock::new(START);
    let limiter = limiter(&clock);
    let overrides = limiter.overrides();
    let first = overrides
        .put(item("tenant:acme", None, Change::Multiply(2.0)), 0, "alice")
        .await
        .expect("written");
    assert_eq!(first.updated_by, "alice");
    assert_eq!(first.updated_at, "2023-11-14T22:14:00Z");
    let stale = overrides
        .put(item("tenant:acme", None, Change::Multiply(3.0)), 0, "bob")
        .await;
    assert_eq!(
        stale,
        Err(OverrideError::Conflict {
            current: first.version
        })
    );
    let second = overrides
        .put(
            item("tenant:acme", None, Change::Multiply(3.0)),
            first.version,
            "bob",
        )
        .await
        .expect("written");
    assert!(second.version > first.version);
    let target = second.item.target();
    assert_eq!(
        overrides.remove(&target, first.version, "alice").await,
        Err(OverrideError::Conflict {
            current: second.version
        })
    );
    let removed = overrides
        .remove(&target, second.version, "bob")
        .await
        .expect("removed");
    assert_eq!(removed.map(|r| r.item.change), Some(Change::Multiply(3.0)));
    assert_eq!(
        overrides.remove(&target, second.version, "bob").await,
        Err(OverrideError::NotFound)
    );
    assert!(overrides.list().is_empty());
    assert_eq!(admitted(&limiter, "acme", 5).await, 2);

    // What does not fit the policies in force is refused, naming what.
    let cases = [
        (
            Override {
                policy: "nope".into(),
                ..item("k", None, Change::Deny)
            },
            "policy:",
        ),
        (item("k", Some("per-day"), Change::Multiply(2.0)), "limit:"),
        (
            item(
                "k",
                None,
                Change::Set(SetLimit {
                    burst: Some(5),
                    ..SetLimit::default()
                }),
            ),
            "limit \"per-minute\": burst applies only",
        ),
    ];
    for (bad, expected) in cases {
        let Err(OverrideError::Invalid(why)) = overrides.put(bad, 0, "ops").await else {
            panic!("refused: {expected}");
        };
        assert!(why.starts_with(expected), "{why}");
    }
}

#[tokio::test]
async fn an_import_is_checked_whole_and_an_export_reads_back() {
    let clock = ManualClock::new(START);
    let limiter = limiter(&clock);
    let overrides = limiter.overrides();
    let bad = "{\"policy\":\"api\",\"key\":\"tenant:a\",\"change\":\"allow\"}\n{\"policy\":\"api\",\"key\":\"tenant:b\",\"limit\":\"per-week\",\"change\":{\"multiply\":2}}\n";
    let Err(OverrideError::Invalid(why)) = overrides.import(bad, "migration").await else {
        panic!("a line that fits no limit is refused");
    };
    assert!(why.starts_with("line 2: limit:"), "{why}");
    assert!(overrides.list().is_empty(), "nothing written");
    let good = bad.replace("per-week", "per-minute");
    assert_eq!(overrides.import(&good, "migration").await, Ok(2));
    let exported = overrides.export();
    assert_eq!(exported.lines().count(), 2);
    // Imported again, each replaces itself.
    assert_eq!(overrides.import(&exported, "migration").await, Ok(2));
    assert_eq!(overrides.list().len(), 2);
    assert_eq!(admitted(&limiter, "b", 6).await, 4);
}

#[tokio::test]
async fn refunds_give_back_what_the_override_took() {
    let clock = ManualClock::new(START);
    let limiter = limiter(&clock);
    limiter
        .overrides()
        .put(item("tenant:acme", None, Change::Multiply(2.0)), 0, "ops")
        .await
        .expect("written");
    let request = call("acme");
    for _ in 0..4 {
        let evaluation = limiter.evaluate(&request).await.expect("an answer");
        assert!(evaluation.is_admitted());
        let set = limiter
            .charges_for(tollgate::policy::Selection::Matching, &request, None)
            .expect("planned");
        limiter
            .refund_charges(&set, &evaluation.receipt())
            .await
            .expect("refunded");
    }
    assert_eq!(
        admitted(&limiter, "acme", 6).await,
        4,
        "every refund came back"
    );
}

#[tokio::test]
async fn a_file_keeps_the_overrides_of_one_node_across_restarts() {
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("overrides.json");
    let clock = ManualClock::new(START);
    {
        let limiter = limiter(&clock);
        limiter
            .overrides()
            .attach(Arc::new(FileOverrideBackend::open(&path).expect("opens")));
        limiter
            .overrides()
            .put(item("tenant:acme", None, Change::Deny), 0, "ops")
            .await
            .expect("written");
    }
    let limiter = limiter(&clock);
    limiter
        .overrides()
        .attach(Arc::new(FileOverrideBackend::open(&path).expect("opens")));
    assert!(limiter.overrides().refresh().await.expect("read"));
    assert_eq!(
        admitted(&limiter, "acme", 1).await,
        0,
        "still denied after the restart"
    );
}

#[tokio::test]
async fn two_limiters_on_one_redis_apply_one_table() {
    let redis = RedisServer::start();
    let node = || async {
        let store = RedisStore::connect(&redis.url(), RedisConfig::default())
            .await
            .expect("connects to the test redis");
        let backend = Arc::new(store.override_backend());
        let limiter = Limiter::with_policies(store, policies());
        limiter.overrides().attach(backend);
        limiter
    };
    let (a, b) = (node().await, node().await);
    let written = a
        .overrides()
        .put(item("tenant:acme", None, Change::Multiply(3.0)), 0, "alice")
        .await
        .expect("written");
    assert_eq!(
        admitted(&b, "acme", 8).await,
        2,
        "not read yet: the policy's 2/m"
    );
    assert!(b.overrides().refresh().await.expect("read"));
    assert_eq!(
        admitted(&b, "acme", 8).await,
        6,
        "read: three times 2/m (2 spent before)"
    );
    assert!(!b.overrides().refresh().await.expect("read"), "nothing new");
    // B writes over A's version; A's stale write is refused.
    let target: OverrideTarget = written.item.target();
    b.overrides()
        .put(
            item("tenant:acme", None, Change::Deny),
            written.version,
            "bob",
        )
        .await
        .expect("written");
    assert!(matches!(
        a.overrides()
            .remove(&target, written.version, "alice")
            .await,
        Err(OverrideError::Conflict { .. })
    ));
    assert!(a.overrides().refresh().await.expect("read"));
    assert_eq!(admitted(&a, "acme", 1).await, 0, "denied on A too");
    // A restarted node reads the table from Redis.
    let c = node().await;
    assert!(c.overrides().refresh().await.expect("read"));
    assert_eq!(c.overrides().list().len(), 1);
    assert_eq!(admitted(&c, "acme", 1).await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_follower_reads_a_change_within_one_interval() {
    let clock = ManualClock::new(START);
    let writer = limiter(&clock);
    let backend = Arc::new(tollgate::overrides::MemoryOverrideBackend::new());
    writer.overrides().attach(backend.clone());
    let reader = limiter(&clock);
    reader.overrides().attach(backend);
    let following = reader.clone();
    tokio::spawn(async move {
        following
            .overrides()
            .follow(Duration::from_millis(250))
            .await;
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    writer
        .overrides()
        .put(item("tenant:acme", None, Change::Deny), 0, "ops")
        .await
        .expect("written");
    assert!(reader.overrides().list().is_empty(), "not read yet");
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(reader.overrides().list().len(), 1, "read at the next tick");
}
