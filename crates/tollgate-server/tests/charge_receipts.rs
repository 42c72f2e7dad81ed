//! A refund gives back what its charge took, read from the charge token's receipt, never from
//! the policy in force at refund time: after a reload from cost 1 to cost 50, two refunds used to
//! give back 100 units. And a reload that changes what a check takes makes its charges
//! unredeemable rather than redeemed against other limits.

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Tollgate, eventually};

async fn post(url: &str, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("an answer");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn policy(cost: u64, quota: &str) -> String {
    format!(
        "policies:\n  - name: jobs\n    key: [user]\n    cost: {cost}\n    limits: [{{ name: per-hour, algorithm: gcra, quota: {quota} }}]\n"
    )
}

async fn remaining(check: &str) -> u64 {
    let look = json!({"policy": "jobs", "attributes": {"user": "u1"}, "cost": 0});
    let (_, answer) = post(check, &look).await;
    answer["decisions"][0]["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("a decision: {answer}"))
}

#[tokio::test]
async fn a_refund_gives_back_what_was_charged_not_the_reloaded_cost() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = directory.path().join("policies.yaml");
    std::fs::write(&file, policy(1, "100/h")).expect("written");
    let server = Tollgate::serve(&["--config", file.to_str().expect("UTF-8"), "--no-watch"]);
    let base = server.http_url();
    let (check, refund) = (format!("{base}/v1/check"), format!("{base}/v1/refund"));
    let body = json!({"policy": "jobs", "attributes": {"user": "u1"}});
    let mut charges = Vec::new();
    for _ in 0..60 {
        let (_, answer) = post(&check, &body).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        charges.push(answer["charge"].clone());
    }
    assert_eq!(remaining(&check).await, 40);

    std::fs::write(&file, policy(50, "100/h")).expect("written");
    server.signal("HUP");
    // A new user each time, so that a check made before the reload leaves the next intact.
    let probes = std::sync::atomic::AtomicU64::new(0);
    eventually("the reload to cost 50", || async {
        let user = format!(
            "probe-{}",
            probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let (_, answer) = post(
            &check,
            &json!({"policy": "jobs", "attributes": {"user": user}}),
        )
        .await;
        answer["decisions"][0]["remaining"] == 50
    })
    .await;

    for charge in &charges[..2] {
        let mut give_back = body.clone();
        give_back["charge"] = charge.clone();
        assert_eq!(post(&refund, &give_back).await.0, StatusCode::NO_CONTENT);
    }
    let left = remaining(&check).await;
    // Each refund gives back its unit less what has drained since it was taken (a GCRA
    // refund): two refunds of one unit leave 41 or 42, not 100.
    assert!(
        (41..=42).contains(&left),
        "two refunds of one unit each give back at most two, not 100: {left}"
    );

    // A reload that changes the limit the check took from: its charge no longer matches.
    std::fs::write(&file, policy(50, "200/h")).expect("written");
    server.signal("HUP");
    eventually("the reload to 200/h", || async {
        let user = format!(
            "probe-{}",
            probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let (_, answer) = post(
            &check,
            &json!({"policy": "jobs", "attributes": {"user": user}}),
        )
        .await;
        answer["decisions"][0]["remaining"] == 150
    })
    .await;
    let mut give_back = body.clone();
    give_back["charge"] = charges[2].clone();
    let (status, problem) = post(&refund, &give_back).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("does not match")),
        "{problem}"
    );
}
