//! A flood of unique keys past the in-process store's bound (`--memory-max-keys`): it used to
//! evict the states closest to fresh, so a refund claim went first (a refunded charge was
//! refunded again, 204 instead of 409) and a client's spent limit forgot itself. Now the flood
//! pushes out its own older keys: claims are pinned and states in use are kept.

mod support;

use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::Tollgate;

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (StatusCode, Value) {
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status();
    let text = response.text().await.expect("a body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_key_flood_forgets_neither_a_refund_claim_nor_a_spent_limit_in_use() {
    let server = Tollgate::serve(&["--memory-max-keys", "1000"]);
    let base = server.http_url();
    let (check, refund) = (format!("{base}/v1/check"), format!("{base}/v1/refund"));
    let client = reqwest::Client::new();

    let refunded = json!({"limits": [{"key": "user:payer", "algorithm": "gcra", "quota": "5/h"}]});
    let (status, answer) = post(&client, &check, &refunded).await;
    assert_eq!((status, &answer["allowed"]), (StatusCode::OK, &json!(true)));
    let mut refund_body = refunded.clone();
    refund_body["charge"] = answer["charge"].clone();
    let (status, _) = post(&client, &refund, &refund_body).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "the first refund");

    let spent =
        json!({"limits": [{"key": "user:guesser", "algorithm": "sliding_log", "quota": "2/h"}]});
    for _ in 0..2 {
        assert_eq!(post(&client, &check, &spent).await.1["allowed"], true);
    }

    for round in 0..60 {
        let flood = (0..50).map(|n| {
            let body = json!({"limits": [{"key": format!("flood:{round}:{n}"), "algorithm": "gcra", "quota": "1/d"}]});
            let (client, check) = (client.clone(), check.clone());
            async move { post(&client, &check, &body).await.0 }
        });
        assert!(join_all(flood).await.iter().all(|s| *s == StatusCode::OK));
        let (_, answer) = post(&client, &check, &spent).await;
        assert_eq!(
            answer["allowed"], false,
            "round {round}: the spent limit of a client still trying holds"
        );
    }

    let admin = reqwest::get(format!("http://{}/metrics", server.address("admin")))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let evictions = admin
        .lines()
        .find(|line| line.starts_with("tollgate_memory_evictions_total "))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("the evictions are counted:\n{admin}"));
    assert!(evictions >= 1_000.0, "{evictions}");
    assert!(
        admin.contains("tollgate_memory_max_keys 1000"),
        "the bound is reported:\n{admin}"
    );

    let (status, answer) = post(&client, &refund, &refund_body).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a charge is refunded once, flood or not: {answer}"
    );
}
