//! Concurrency slots through the check API and the admin API of `tollgate serve` (the built-in
//! `uploads` policy: at most two uploads in flight per user). A look (`/admin/inspect`, a check
//! of cost 0) used to take a slot for the whole lease: two inspects locked a user out for five
//! minutes. And the check API had no way to give a slot back; `/v1/release` is that way.

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::Tollgate;

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

fn upload(user: u32) -> Value {
    json!({"policy": "uploads", "attributes": {
        "method": "POST", "path": format!("/users/{user}/files"), "content_length": 1_000}})
}

#[tokio::test]
async fn looks_take_no_slot() {
    let server = Tollgate::serve(&[]);
    let check = format!("{}/v1/check", server.http_url());
    let inspect = format!("http://{}/admin/inspect", server.address("admin"));
    for _ in 0..8 {
        let (status, answer) = post(&inspect, &upload(7)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let mut look = upload(8);
    look["cost"] = json!(0);
    for _ in 0..8 {
        let (status, answer) = post(&check, &look).await;
        assert_eq!((status, &answer["allowed"]), (StatusCode::OK, &json!(true)));
        assert!(
            answer.get("charge").is_none(),
            "a look takes nothing: {answer}"
        );
    }
    for user in [7, 8] {
        for n in 0..2 {
            let (_, answer) = post(&check, &upload(user)).await;
            assert_eq!(answer["allowed"], true, "user {user}, upload {n}: {answer}");
        }
        let (_, answer) = post(&check, &upload(user)).await;
        assert_eq!(
            answer["allowed"], false,
            "two in flight, the most: {answer}"
        );
    }
}

#[tokio::test]
async fn a_release_frees_a_slot_once() {
    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    let (check, release) = (format!("{base}/v1/check"), format!("{base}/v1/release"));
    let mut charges = Vec::new();
    for _ in 0..2 {
        let (_, answer) = post(&check, &upload(9)).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        charges.push(answer["charge"].clone());
    }
    assert_eq!(post(&check, &upload(9)).await.1["allowed"], false);

    let mut done = upload(9);
    done["charge"] = charges[0].clone();
    assert_eq!(post(&release, &done).await.0, StatusCode::NO_CONTENT);
    let (status, problem) = post(&release, &done).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("already released")),
        "{problem}"
    );
    let (_, answer) = post(&check, &upload(9)).await;
    assert_eq!(answer["allowed"], true, "the slot was given back: {answer}");
    assert_eq!(
        post(&check, &upload(9)).await.1["allowed"],
        false,
        "one slot only"
    );

    // A release names its own check: another user's body does not match the charge.
    let mut elsewhere = upload(10);
    elsewhere["charge"] = charges[1].clone();
    assert_eq!(
        post(&release, &elsewhere).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}

/// A brief answer (`Prefer: return=minimal`) carries no charge, except for a check that holds
/// concurrency slots: its charge is the only way to give them back before they expire.
#[tokio::test]
async fn a_brief_answer_still_releases_its_slot() {
    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    let (check, release) = (format!("{base}/v1/check"), format!("{base}/v1/release"));
    let brief = |body: Value| {
        let check = check.clone();
        async move {
            let response = reqwest::Client::new()
                .post(&check)
                .header("prefer", "return=minimal")
                .json(&body)
                .send()
                .await
                .expect("an answer");
            response.json::<Value>().await.expect("JSON")
        }
    };
    let first = brief(upload(11)).await;
    assert_eq!(first["allowed"], true, "{first}");
    assert!(first.get("decisions").is_none(), "{first}");
    let charge = first["charge"].clone();
    assert!(
        charge.is_string(),
        "a slot held, a charge to release it: {first}"
    );
    assert_eq!(brief(upload(11)).await["allowed"], true);
    assert_eq!(brief(upload(11)).await["allowed"], false, "two in flight");
    let mut done = upload(11);
    done["charge"] = charge;
    assert_eq!(post(&release, &done).await.0, StatusCode::NO_CONTENT);
    assert_eq!(
        brief(upload(11)).await["allowed"],
        true,
        "the slot came back"
    );
}
