//! An operator's hand tools on the limiter: inspect without counting, reset a key, lift a
//! penalty; and the top lists of refused keys and hot routes.

use std::net::IpAddr;
use std::sync::Arc;

use tollgate::policy::Action;
use tollgate::{Limiter, ManualClock, MemoryStore, Policies, Request};

const POLICIES: &str = "
policies:
  - name: login
    match: { path: /login }
    key: [ip]
    limits: [{ name: login-per-minute, algorithm: fixed_window, quota: 2/m }]
    penalty: { after: 1, block: [1h] }
";

fn limiter() -> Limiter {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder().clock(Arc::new(clock)).build();
    Limiter::with_policies(
        store,
        Policies::from_yaml("test.yaml", POLICIES).expect("valid"),
    )
}

fn login(ip: &str) -> Request<'static> {
    let mut request = Request::new("POST", "/login");
    request.peer = Some(ip.parse::<IpAddr>().expect("an address"));
    request
}

async fn admitted(limiter: &Limiter, ip: &str) -> bool {
    limiter
        .evaluate(&login(ip))
        .await
        .expect("an answer")
        .is_admitted()
}

#[tokio::test]
async fn inspect_counts_nothing_and_reset_and_lift_give_a_fresh_start() {
    let limiter = limiter();
    let ip = "203.0.113.7";
    assert!(admitted(&limiter, ip).await);
    let seen = limiter
        .admin()
        .inspect("login", &login(ip))
        .await
        .expect("an answer");
    assert_eq!(seen.applied[0].decision.remaining(), 1);
    let again = limiter
        .admin()
        .inspect("login", &login(ip))
        .await
        .expect("an answer");
    assert_eq!(
        again.applied[0].decision.remaining(),
        1,
        "inspecting counts nothing"
    );

    assert!(admitted(&limiter, ip).await);
    assert!(
        !admitted(&limiter, ip).await,
        "over the limit: one violation, blocked"
    );
    let blocked = limiter.evaluate(&login(ip)).await.expect("an answer");
    let Action::Refuse(refusal) = &blocked.action else {
        panic!("still refused: {blocked:?}");
    };
    assert!(
        refusal.detail.contains("repeated violations"),
        "{}",
        refusal.detail
    );

    assert_eq!(
        limiter
            .admin()
            .reset_key("login", &login(ip))
            .await
            .expect("reset"),
        1
    );
    assert!(
        !admitted(&limiter, ip).await,
        "the penalty box still holds the key"
    );
    assert!(
        limiter
            .admin()
            .lift_penalty("login", &login(ip))
            .await
            .expect("lifted")
    );
    assert!(
        admitted(&limiter, ip).await,
        "reset and lifted: a fresh start"
    );

    let top = limiter.telemetry().top_denied_keys(5);
    assert_eq!(top[0].key.len(), 16, "hashed, as the logs show keys");
    limiter
        .telemetry()
        .set_key_logging(tollgate::KeyLogging::Plain);
    let top = limiter.telemetry().top_denied_keys(5);
    assert_eq!(top[0].key, format!("ip:{ip}"));
    assert!(top[0].count >= 2);
    assert_eq!(limiter.telemetry().top_routes(1)[0].key, "/login");
    assert!(limiter.admin().inspect("nope", &login(ip)).await.is_err());
}
