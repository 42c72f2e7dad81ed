//! Evaluating requests against policies on the memory store, without HTTP.

use std::sync::Arc;

use tollgate::policy::Action;
use tollgate::{Limiter, ManualClock, MemoryStore, Policies, Request};

fn limiter(config: &str) -> Limiter {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder().clock(Arc::new(clock)).build();
    Limiter::with_policies(
        store,
        Policies::from_yaml("test.yaml", config).expect("valid config"),
    )
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
    assert_eq!(refusal.status, 429);
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
