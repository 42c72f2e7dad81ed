//! `POST /v1/usage`: what a client has used of each limit, read without charging anything,
//! taking a slot, earning a penalty or moving a metric.

mod support;

use serde_json::{Value, json};
use support::Tollgate;

/// A plan-shaped policy: 3 calls an hour per tenant, 2 at once, blocked 10 minutes after two
/// refusals.
const POLICIES: &str = "
policies:
  - name: plan
    key: [tenant]
    limits:
      - { name: hourly, algorithm: fixed_window, quota: 3/h }
    concurrency: { max: 2, lease: 5m }
    penalty: { after: 2, block: [10m] }
";

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .expect("an answer");
    let status = answer.status().as_u16();
    let text = answer.text().await.expect("a body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).expect("JSON")
    };
    (status, body)
}

fn by_name<'a>(usage: &'a Value, name: &str) -> &'a Value {
    usage["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .find(|limit| limit["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {usage}"))
}

#[tokio::test]
async fn inline_limits_read_their_usage_without_charging() {
    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    let limits =
        json!({"limits": [{"key": "customer:7", "algorithm": "fixed_window", "quota": "10/h"}]});
    for _ in 0..3 {
        assert_eq!(post(&base, "/v1/check", &limits).await.1["allowed"], true);
    }
    for _ in 0..5 {
        let (status, usage) = post(&base, "/v1/usage", &limits).await;
        assert_eq!(status, 200, "{usage}");
        let limit = &usage["limits"][0];
        assert_eq!(limit["used"], 3, "{usage}");
        assert_eq!(limit["remaining"], 7);
        assert_eq!(limit["limit"], 10);
        assert_eq!(limit["key"], "customer:7");
        let at_ms = usage["at"].as_u64().expect("at") / 1000;
        let start = limit["window_start_ms"].as_u64().expect("a window");
        let reset = limit["reset_ms"].as_u64().expect("a reset");
        assert!(start <= at_ms && at_ms <= reset, "{usage}");
        assert_eq!(reset - start, 3_600_000, "an hour's window: {usage}");
    }
    // The readings took nothing: the next check is the fourth.
    let (_, answer) = post(&base, "/v1/check", &limits).await;
    assert_eq!(answer["decisions"][0]["remaining"], 6, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policys_usage_takes_no_slot_earns_no_penalty_and_moves_no_metric() {
    let directory = tempfile::tempdir().expect("a directory");
    let policies = directory.path().join("policies.yaml");
    std::fs::write(&policies, POLICIES).expect("written");
    let server = Tollgate::serve(&["--config", policies.to_str().expect("UTF-8")]);
    let base = server.http_url();
    let tenant = json!({"policy": "plan", "attributes": {"tenant": "acme"}});

    // One call under way (its slot held), then the readings, many at once.
    assert_eq!(post(&base, "/v1/check", &tenant).await.1["allowed"], true);
    let readings: Vec<(u16, Value)> =
        futures_util::future::join_all((0..20).map(|_| post(&base, "/v1/usage", &tenant))).await;
    for (status, usage) in &readings {
        assert_eq!(*status, 200, "{usage}");
        assert_eq!(by_name(usage, "hourly")["used"], 1, "{usage}");
        assert_eq!(by_name(usage, "hourly")["policy"], "plan");
        let slots = usage["limits"]
            .as_array()
            .expect("limits")
            .iter()
            .find(|limit| limit["name"] != "hourly")
            .expect("the concurrency slots");
        assert_eq!(slots["used"], 1, "one slot held: {usage}");
        assert_eq!(slots["limit"], 2);
        assert!(usage.get("refused").is_none(), "{usage}");
    }
    // Twenty readings took no slot: the second call gets the last one.
    assert_eq!(post(&base, "/v1/check", &tenant).await.1["allowed"], true);

    // Another tenant, each call's slot released when it ends: over the hourly limit twice,
    // blocked. Readings during the block show it, and do not lengthen it.
    let tenant = json!({"policy": "plan", "attributes": {"tenant": "globex"}});
    for _ in 0..5 {
        let (_, answer) = post(&base, "/v1/check", &tenant).await;
        if answer["allowed"] == true {
            let mut release = tenant.clone();
            release["charge"] = answer["charge"].clone();
            let (status, problem) = post(&base, "/v1/release", &release).await;
            assert!((200..300).contains(&status), "{status}: {problem}");
        }
    }
    let (_, blocked) = post(&base, "/v1/usage", &tenant).await;
    let refused = &blocked["refused"];
    assert_eq!(refused["reason"], "blocked", "{blocked}");
    let first_wait = refused["retry_after_ms"].as_u64().expect("a wait");
    assert!(first_wait > 9 * 60_000, "{blocked}");
    for _ in 0..10 {
        post(&base, "/v1/usage", &tenant).await;
    }
    let (_, later) = post(&base, "/v1/usage", &tenant).await;
    assert!(
        later["refused"]["retry_after_ms"].as_u64().expect("a wait") <= first_wait,
        "readings earned no further penalty: {later}"
    );

    // The decision counters count checks, not readings.
    let before = decisions(&base).await;
    for _ in 0..10 {
        post(&base, "/v1/usage", &tenant).await;
    }
    assert_eq!(decisions(&base).await, before);
}

/// Every decision counted under the policy `plan`.
async fn decisions(base: &str) -> f64 {
    reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
        .lines()
        .filter(|line| line.starts_with("tollgate_decisions_total{policy=\"plan\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_usage_reading_names_no_charge() {
    let server = Tollgate::serve(&[]);
    let (status, problem) = post(
        &server.http_url(),
        "/v1/usage",
        &json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "5/s"}], "charge": "c2.x"}),
    )
    .await;
    assert_eq!(status, 422, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("names no charge")),
        "{problem}"
    );
}
