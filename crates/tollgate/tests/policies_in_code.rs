//! Policies built in code rather than read from a file (all a build without the `yaml`
//! feature has), and keys the application works out itself (`KeyPart::Custom`).

use std::sync::Arc;

use tollgate::policy::{Action, KeyPart, LimitConfig, PolicyConfig, Request};
use tollgate::{Algorithm, Config, LimitSpec, Limiter, ManualClock, MemoryStore, Policies};

/// One policy keyed by `key`, two requests a minute.
fn policies(key: Vec<KeyPart>, burst: Option<u64>) -> Result<Policies, tollgate::ConfigErrors> {
    let mut spec = LimitSpec::new(Algorithm::Gcra, "2/m".parse().expect("a quota"));
    spec.burst = burst;
    let mut policy = PolicyConfig::new("api");
    policy.key = key;
    policy.limits = vec![LimitConfig {
        name: "per-minute".to_owned(),
        spec,
        origin: Default::default(),
    }];
    let config = Config {
        policies: vec![policy],
        policies_listed: true,
        ..Config::default()
    };
    Policies::compile(config, "in code")
}

fn request<'a>(peer: &str, custom_key: Option<&'a str>) -> Request<'a> {
    let mut request = Request::new("GET", "/");
    request.peer = Some(peer.parse().expect("an address"));
    request.custom_key = custom_key;
    request
}

#[test]
fn a_custom_key_replaces_the_address_and_a_missing_one_falls_back_to_it() {
    let policies = policies(vec![KeyPart::Custom], None).expect("valid policies");
    let keys = |request: &Request<'_>| -> Vec<String> {
        let plan = policies.plan(request);
        plan.enforced.into_iter().map(|item| item.key).collect()
    };
    assert_eq!(
        keys(&request("203.0.113.7", Some("tenant-a"))),
        ["custom:tenant-a"]
    );
    assert_eq!(
        keys(&request("198.51.100.1", Some("tenant-a"))),
        ["custom:tenant-a"],
        "another address, the same key"
    );
    assert_eq!(keys(&request("203.0.113.7", None)), ["ip:203.0.113.7"]);
    assert_eq!(
        keys(&request("203.0.113.7", Some(""))),
        ["ip:203.0.113.7"],
        "an empty key is no key"
    );
    assert_eq!(
        keys(&request("203.0.113.7", Some("a|ip:1"))),
        ["custom:a%7Cip:1"],
        "a value cannot pass for another part"
    );
}

#[tokio::test]
async fn requests_with_one_custom_key_share_a_limit_whatever_their_address() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build();
    let policies = policies(vec![KeyPart::Custom], None).expect("valid policies");
    let limiter = Limiter::with_policies(store, policies);
    let admitted = |evaluation: tollgate::Evaluation| evaluation.action == Action::Allow;
    for peer in ["203.0.113.7", "198.51.100.1"] {
        let evaluation = limiter
            .evaluate(&request(peer, Some("tenant-a")))
            .await
            .expect("decided");
        assert!(admitted(evaluation), "{peer}");
    }
    let third = limiter
        .evaluate(&request("192.0.2.9", Some("tenant-a")))
        .await
        .expect("decided");
    assert!(
        matches!(third.action, Action::Refuse(_)),
        "{:?}",
        third.action
    );
    let other = limiter
        .evaluate(&request("192.0.2.9", Some("tenant-b")))
        .await
        .expect("decided");
    assert!(admitted(other), "another key counts apart");
}

#[test]
fn a_limit_built_in_code_is_checked_as_one_from_a_file() {
    let error = policies(vec![KeyPart::Ip], Some(0)).expect_err("a burst of zero");
    assert!(
        error.to_string().contains("the burst must be at least 1"),
        "{error}"
    );
}
