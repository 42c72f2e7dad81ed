//! Evaluating requests against policies on the memory store, without HTTP.

use std::sync::Arc;
use std::time::Duration;

use tollgate::policy::Action;
use tollgate::{Evaluation, Limiter, ManualClock, MemoryStore, Policies, Request};

fn limiter(config: &str) -> Limiter {
    limiter_on(config, ManualClock::new(1_700_000_000_000_000))
}

fn limiter_on(config: &str, clock: ManualClock) -> Limiter {
    let store = MemoryStore::builder().clock(Arc::new(clock)).build();
    Limiter::with_policies(
        store,
        Policies::from_yaml("test.yaml", config).expect("valid config"),
    )
}

/// The Retry-After of a refusal; panics on anything else.
fn refused_for(evaluation: &Evaluation) -> Duration {
    match &evaluation.action {
        Action::Refuse(refusal) => refusal.retry_after.expect("a time to come back"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn request(peer: &str) -> Request<'_> {
    let mut request = Request::new("GET", "/");
    request.peer = Some(peer.parse().expect("an address"));
    request
}

#[tokio::test]
async fn shadow_denials_are_reported_without_blocking() {
    let limiter = limiter(
        r#"
policies:
  - name: enforced
    limits: [{ name: e, algorithm: fixed_window, quota: 10/m }]
  - name: trial
    shadow: true
    limits: [{ name: t, algorithm: fixed_window, quota: 1/m }]
"#,
    );
    let first = limiter.evaluate(&request("203.0.113.7")).await.unwrap();
    assert!(first.shadow_denied.is_empty());
    let second = limiter.evaluate(&request("203.0.113.7")).await.unwrap();
    assert_eq!(second.action, Action::Allow);
    assert_eq!(
        second
            .shadow_denied
            .iter()
            .map(|p| &**p)
            .collect::<Vec<_>>(),
        ["trial"]
    );
    assert_eq!(
        second.applied.len(),
        1,
        "only enforced limits go into headers"
    );
    assert_eq!(second.applied[0].decision.remaining(), 8);
}

#[tokio::test]
async fn a_refusal_names_its_policies_and_a_cancelled_request_gives_back() {
    let limiter = limiter(
        r#"
policies:
  - name: a
    limits: [{ name: a, algorithm: fixed_window, quota: 1/m }]
  - name: b
    limits: [{ name: b, algorithm: fixed_window, quota: 5/m }]
"#,
    );
    let admitted = limiter.evaluate(&request("203.0.113.7")).await.unwrap();
    assert!(admitted.is_admitted());
    let refused = limiter.evaluate(&request("203.0.113.7")).await.unwrap();
    let Action::Refuse(refusal) = &refused.action else {
        panic!("{:?}", refused.action)
    };
    assert_eq!(refusal.status(), 429);
    assert_eq!(
        refused.violated.iter().map(|p| &**p).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(refusal.detail.contains("a (1/m)"), "{}", refusal.detail);
    limiter.cancel(&admitted).await.unwrap();
    assert!(
        limiter
            .evaluate(&request("203.0.113.7"))
            .await
            .unwrap()
            .is_admitted()
    );
}

/// Requests refused by a running block used to count as violations: three knocks during a 2 s
/// block jumped straight to the 60 s level.
#[tokio::test]
async fn knocking_on_a_running_block_does_not_escalate_it() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let limiter = limiter_on(
        r#"
policies:
  - name: api
    limits: [{ name: rate, algorithm: gcra, quota: 1/s }]
    penalty: { after: 1, block: [2s, 5s, 20s, 60s] }
"#,
        clock.clone(),
    );
    let client = || request("203.0.113.7");
    assert!(limiter.evaluate(&client()).await.unwrap().is_admitted());
    // The violation earns the first block, and its refusal says to come back when it ends.
    let violation = limiter.evaluate(&client()).await.unwrap();
    assert_eq!(refused_for(&violation), Duration::from_secs(2));
    for _ in 0..3 {
        clock.advance(Duration::from_millis(500));
        let knock = limiter.evaluate(&client()).await.unwrap();
        assert!(refused_for(&knock) <= Duration::from_millis(1_500));
    }
    clock.advance(Duration::from_millis(500));
    assert!(
        limiter.evaluate(&client()).await.unwrap().is_admitted(),
        "the block is over when it said"
    );
    // The next violation climbs one level, not past the ones skipped.
    let next = limiter.evaluate(&client()).await.unwrap();
    assert_eq!(refused_for(&next), Duration::from_secs(5));
}

/// A block shorter than the limit's own wait used to send a client back too early, into a
/// limit that still refused it.
#[tokio::test]
async fn a_block_never_tells_a_client_to_return_before_its_limit_admits() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let limiter = limiter_on(
        r#"
policies:
  - name: login
    limits: [{ name: per-10s, algorithm: sliding_log, quota: 1/10s }]
    penalty: { after: 1, block: [2s, 1m] }
"#,
        clock.clone(),
    );
    let client = || request("203.0.113.7");
    assert!(limiter.evaluate(&client()).await.unwrap().is_admitted());
    let violation = limiter.evaluate(&client()).await.unwrap();
    assert_eq!(refused_for(&violation), Duration::from_secs(10));
    clock.advance(Duration::from_secs(1));
    let boxed = limiter.evaluate(&client()).await.unwrap();
    let wait = refused_for(&boxed);
    assert_eq!(
        wait,
        Duration::from_secs(9),
        "the limit's wait, not the block's 1 s"
    );
    clock.advance(wait);
    assert!(
        limiter.evaluate(&client()).await.unwrap().is_admitted(),
        "a client that obeys is admitted, not punished"
    );
}

#[tokio::test]
async fn a_policy_that_asks_reports_an_opaque_partition_key_per_client() {
    let limiter = limiter(
        r#"
policies:
  - name: per-client
    partition_key: true
    limits: [{ name: per-client, algorithm: fixed_window, quota: 10/m }]
  - name: site
    key: global
    limits: [{ name: site, algorithm: fixed_window, quota: 1000/m }]
"#,
    );
    let field = |evaluation: &Evaluation| {
        evaluation
            .header_fields(&[tollgate::policy::HeaderFamily::Ietf])
            .get("ratelimit")
            .expect("a RateLimit field")
            .to_owned()
    };
    let one = field(&limiter.evaluate(&request("203.0.113.7")).await.unwrap());
    let again = field(&limiter.evaluate(&request("203.0.113.7")).await.unwrap());
    let other = field(&limiter.evaluate(&request("203.0.113.8")).await.unwrap());
    let pk = |field: &str| {
        let list: sfv::List = sfv::Parser::new(field).parse().expect("a list");
        list.iter()
            .map(|entry| match entry {
                sfv::ListEntry::Item(item) => item.params.get("pk").cloned(),
                sfv::ListEntry::InnerList(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let (one, again, other) = (pk(&one), pk(&again), pk(&other));
    assert!(
        matches!(&one[..], [Some(sfv::BareItem::ByteSequence(bytes)), None] if bytes.len() == 12),
        "only the policy that asks reports a key: {one:?}"
    );
    assert_eq!(one, again, "the same client, the same partition");
    assert_ne!(one, other, "another client, another partition");
}
