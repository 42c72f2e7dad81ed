//! Idempotency keys through `tollgate proxy` and the check API. A repeated `Idempotency-Key`
//! used to turn the limits off: every request carrying the same key passed uncharged, so 20
//! password guesses reached the upstream. A key now replays only the very same request (method,
//! path, identity, body digest), a replay gets the first answer and never reaches the upstream,
//! each client keeps a bounded number of keys, and the built-in configuration keeps keys off the
//! login.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::routing::post;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::Tollgate;

const POLICIES: &str = "
trusted_proxies: [10.0.0.0/8]
idempotency: { header: Idempotency-Key, window: 10m, max_keys: 4 }
policies:
  - name: login
    match: { method: POST, path: /login }
    key: [ip]
    limits: [{ name: login-per-minute, algorithm: sliding_log, quota: 5/m }]
    idempotency: false
  - name: jobs
    match: { method: POST, path: /jobs }
    key: [ip]
    limits: [{ name: jobs-per-hour, algorithm: fixed_window, quota: 2/h }]
  - name: many
    match: { method: POST, path: /many }
    key: [ip]
    limits: [{ name: plenty, algorithm: fixed_window, quota: 1000/h }]
";

/// An upstream that counts the requests it serves and answers with their number and body.
async fn upstream(served: Arc<AtomicU64>) -> SocketAddr {
    let handler = move |body: String| {
        let served = Arc::clone(&served);
        async move {
            let n = served.fetch_add(1, Ordering::SeqCst) + 1;
            format!("answer {n} to {body}")
        }
    };
    let app = Router::new()
        .route("/login", post(handler.clone()))
        .route("/jobs", post(handler.clone()))
        .route("/many", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

async fn send(client: &reqwest::Client, url: &str, key: &str, body: &str) -> reqwest::Response {
    client
        .post(url)
        .header("idempotency-key", key)
        .body(body.to_owned())
        .send()
        .await
        .expect("an answer")
}

#[tokio::test]
async fn a_key_replays_only_its_own_request_and_never_reaches_the_upstream_again() {
    let served = Arc::new(AtomicU64::new(0));
    let address = upstream(Arc::clone(&served)).await;
    let file = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(file.path(), POLICIES).expect("written");
    let upstream_url = format!("http://{address}");
    let proxy = Tollgate::proxy(&[
        "--config",
        file.path().to_str().expect("UTF-8"),
        "--upstream",
        &upstream_url,
    ]);
    let base = format!("http://{}", proxy.address("listen"));
    let client = reqwest::Client::new();

    // Password guesses under one key: each counts, the sixth is refused.
    let mut statuses = Vec::new();
    for guess in 0..7 {
        let response = send(
            &client,
            &format!("{base}/login"),
            "same",
            &format!("pw{guess}"),
        )
        .await;
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(served.load(Ordering::SeqCst), 5);

    // A job, then its replay: the first answer again, uncharged, not served twice.
    let jobs = format!("{base}/jobs");
    let first = send(&client, &jobs, "job-1", "build").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.text().await.expect("a body"), "answer 6 to build");
    for _ in 0..3 {
        let again = send(&client, &jobs, "job-1", "build").await;
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.text().await.expect("a body"), "answer 6 to build");
    }
    assert_eq!(
        served.load(Ordering::SeqCst),
        6,
        "replays never reach the upstream"
    );
    // The same key with another body is another request: charged, and served.
    let other = send(&client, &jobs, "job-1", "deploy").await;
    assert_eq!(other.text().await.expect("a body"), "answer 7 to deploy");
    // Two jobs an hour: the third, under any key, is refused.
    assert_eq!(
        send(&client, &jobs, "job-2", "test").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&client, &jobs, "job-1", "build").await.status(),
        StatusCode::OK,
        "a replay is answered however spent the limit is"
    );

    // A client keeps at most four keys a window: the fifth new key is refused.
    let many = format!("{base}/many");
    for n in 0..4 {
        let response = send(&client, &many, &format!("k{n}"), "x").await;
        assert_eq!(response.status(), StatusCode::OK, "key {n}");
    }
    let fifth = send(&client, &many, "k4", "x").await;
    assert_eq!(fifth.status(), StatusCode::TOO_MANY_REQUESTS);
    let problem: Value = fifth.json().await.expect("problem+json");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("idempotency-keys")),
        "{problem}"
    );
    assert_eq!(
        client
            .post(&many)
            .body("x")
            .send()
            .await
            .expect("an answer")
            .status(),
        StatusCode::OK,
        "without a key the client is limited as usual"
    );
}

#[tokio::test]
async fn the_check_api_honours_a_key_only_with_the_body_digest() {
    let server = Tollgate::serve(&[]);
    let check = format!("{}/v1/check", server.http_url());
    let client = reqwest::Client::new();
    let ask = |attributes: Value| {
        let client = client.clone();
        let check = check.clone();
        async move {
            let body = json!({"policy": "api", "attributes": attributes});
            let answer: Value = client
                .post(&check)
                .json(&body)
                .send()
                .await
                .expect("an answer")
                .json()
                .await
                .expect("JSON");
            answer
        }
    };
    let headers = json!({"idempotency-key": "k-1"});
    // Without the digest the key is ignored: every check is charged.
    let plain = json!({"user": "u1", "path": "/api/x", "method": "POST", "headers": headers});
    let first = ask(plain.clone()).await;
    let second = ask(plain).await;
    assert_eq!(second["replay"], false);
    assert_eq!(
        first["decisions"][0]["remaining"]
            .as_u64()
            .expect("remaining")
            - 1,
        second["decisions"][0]["remaining"]
            .as_u64()
            .expect("remaining")
    );
    // With it, a repeat is a replay: allowed, uncharged, said so.
    let digest = "ab".repeat(32);
    let digested = json!({"user": "u2", "path": "/api/x", "method": "POST",
        "headers": headers, "body_sha256": digest});
    let first = ask(digested.clone()).await;
    assert_eq!(first["replay"], false);
    let replayed = ask(digested).await;
    assert_eq!(
        (&replayed["allowed"], &replayed["replay"]),
        (&json!(true), &json!(true))
    );
    assert!(replayed.get("charge").is_none(), "a replay took nothing");
    let bad = ask(json!({"user": "u3", "body_sha256": "nope"})).await;
    assert!(
        bad["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("attributes.body_sha256")),
        "{bad}"
    );
}
