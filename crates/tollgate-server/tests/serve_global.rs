//! `tollgate serve` with a global store: servers of different regions (each its own store)
//! share one global limit through leases, show them in `/admin/stats` and `/metrics`, give
//! them back at shutdown, and a global limit without a global store stops the server at start.

mod support;

use serde_json::{Value, json};
use support::Tollgate;
use tollgate_testkit::RedisServer;

const POLICIES: &str = "
policies:
  - name: tenant
    match: { path_prefix: / }
    key: [tenant]
    limits: [{ algorithm: fixed_window, quota: 20/d, scope: global }]
";

async fn admitted(base: &str, tenant: &str) -> bool {
    let body = json!({"policy": "tenant", "attributes": {"tenant": tenant}});
    let answer: Value = reqwest::Client::new()
        .post(format!("{base}/v1/check"))
        .json(&body)
        .send()
        .await
        .expect("the server answers")
        .json()
        .await
        .expect("JSON");
    answer["allowed"] == true
}

async fn admin_json(server: &Tollgate, path: &str) -> reqwest::Response {
    reqwest::get(format!("http://{}{path}", server.address("admin")))
        .await
        .expect("the admin API answers")
}

/// The day a fixed window of one day counts in.
#[allow(clippy::disallowed_methods)] // The run's own calendar check, not decisions.
fn today() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    now.as_secs() / 86_400
}

#[tokio::test]
async fn servers_of_two_regions_share_a_global_limit_and_give_back_their_leases() {
    let global = RedisServer::start();
    let directory = tempfile::tempdir().expect("a directory");
    let config = directory.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("the policy file");
    let config = config.to_str().expect("a UTF-8 path");
    let url = global.url();
    let args = ["--config", config, "--global-redis", &url];
    // A day's window: should a run cross midnight (UTC), it runs again on a fresh tenant.
    for tenant in ["acme", "acme-again"] {
        let day = today();
        let mut east = Tollgate::serve(&args);
        let mut west = Tollgate::serve(&args);
        assert_eq!(
            east.printed["store"],
            format!("memory (in process); global limits leased from redis at {url}")
        );
        let mut total = 0;
        for round in 0..30 {
            let server = if round % 3 == 0 { &west } else { &east };
            total += u64::from(admitted(&server.http_url(), tenant).await);
        }
        let stats: Value = admin_json(&east, "/admin/stats")
            .await
            .json()
            .await
            .expect("JSON");
        let leases = &stats["global"];
        assert!(
            leases["leased"].as_u64() >= leases["spent"].as_u64()
                && leases["spent"].as_u64() > Some(0),
            "{leases}"
        );
        let metrics = admin_json(&east, "/metrics")
            .await
            .text()
            .await
            .expect("text");
        assert!(
            metrics.contains("tollgate_global_lease_units_total{event=\"spent\"}"),
            "{metrics}"
        );
        assert!(metrics.contains("tollgate_global_store_calls_total"));

        // At shutdown, each region gives back what it holds: a third finds all of the rest.
        assert!(east.terminate().success());
        assert!(west.terminate().success());
        let north = Tollgate::serve(&args);
        let mut rest = 0;
        while admitted(&north.http_url(), tenant).await {
            rest += 1;
            assert!(rest <= 20, "more than the quota");
        }
        if today() != day {
            continue;
        }
        assert!(total <= 20, "{total} admitted of 20");
        assert_eq!(
            total + rest,
            20,
            "no unit stayed stranded: {total} + {rest}"
        );
        return;
    }
    panic!("two runs crossed midnight");
}

#[tokio::test]
async fn a_charge_is_refunded_once_across_regions() {
    let global = RedisServer::start();
    let directory = tempfile::tempdir().expect("a directory");
    let secret = directory.path().join("refund-secret");
    std::fs::write(&secret, "a secret shared by every region").expect("the secret");
    let url = global.url();
    let args = [
        "--global-redis",
        &url,
        "--refund-secret-file",
        secret.to_str().expect("a UTF-8 path"),
    ];
    let east = Tollgate::serve(&args);
    let west = Tollgate::serve(&args);
    let body = json!({"limits": [{"key": "job", "algorithm": "fixed_window", "quota": "1/d", "scope": "global"}]});
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{}/v1/check", east.http_url()))
        .json(&body)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["allowed"], true, "{answer}");
    let mut refund = body.clone();
    refund["charge"] = answer["charge"].clone();
    let mut statuses = Vec::new();
    for server in [&east, &west, &west] {
        let response = client
            .post(format!("{}/v1/refund", server.http_url()))
            .json(&refund)
            .send()
            .await
            .expect("an answer");
        statuses.push(response.status().as_u16());
    }
    assert_eq!(
        statuses,
        [204, 409, 409],
        "claimed once in the global store, not once per region"
    );
}

#[test]
fn a_global_limit_without_a_global_store_stops_the_server_at_start() {
    let directory = tempfile::tempdir().expect("a directory");
    let config = directory.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("the policy file");
    let (status, _, stderr) = support::run(&support::serve_args(&[
        "--config",
        config.to_str().expect("a UTF-8 path"),
    ]));
    assert!(!status.success());
    assert!(
        stderr.contains("policy \"tenant\", limit \"tenant\": scope global needs a global store"),
        "{stderr}"
    );
}
