//! Overrides on the real binary: set on one node through the admin API, applied by another node
//! on the same Redis; roles (admin token, read token), conflicts, the change log, metrics, bulk
//! import and export; and the in-process store's overrides kept in a file across restarts.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::Tollgate;
use tollgate_testkit::RedisServer;

const POLICIES: &str = "
policies:
  - name: api
    match: { path_prefix: / }
    key: [tenant]
    limits:
      - { name: per-minute, algorithm: fixed_window, quota: 1000/m }
";

const WRITE: &str = "write-token-0123456789";
const READ: &str = "read-token-0123456789";

/// How long a test waits for a change to reach another node before it fails: far above the
/// refresh interval, so that only a change that never arrives fails it.
const PATIENCE: Duration = Duration::from_secs(10);

fn admin(server: &Tollgate) -> String {
    format!("http://{}/admin/overrides", server.address("admin"))
}

async fn send(request: reqwest::RequestBuilder, token: Option<&str>) -> (StatusCode, Value) {
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = request.send().await.expect("an answer");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Whether a check for `tenant` is admitted.
async fn admitted(server: &Tollgate, tenant: &str) -> bool {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/check", server.http_url()))
        .json(&json!({"policy": "api", "attributes": {"tenant": tenant}}))
        .send()
        .await
        .expect("an answer");
    let body: Value = response.json().await.expect("JSON");
    body["allowed"].as_bool().expect("an answer says allowed")
}

/// Waits until `server` admits `tenant` as `expected`; how long that took.
async fn until_admitted(server: &Tollgate, tenant: &str, expected: bool) -> Duration {
    let started = Instant::now();
    while admitted(server, tenant).await != expected {
        assert!(
            started.elapsed() < PATIENCE,
            "the change did not reach the other node within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

/// A POST of JSON lines.
fn lines(client: &reqwest::Client, url: &str, text: impl Into<String>) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", "application/jsonl")
        .body(text.into())
}

async fn metric(server: &Tollgate, name: &str) -> String {
    let text = reqwest::Client::new()
        .get(format!("http://{}/metrics", server.address("admin")))
        .bearer_auth(READ)
        .send()
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    text.lines()
        .find(|line| line.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
        .to_owned()
}

#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn an_override_set_on_one_node_applies_on_another() {
    let redis = RedisServer::start();
    let directory = tempfile::tempdir().expect("a directory");
    let config = directory.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("written");
    let node = || {
        Tollgate::serve(&[
            "--config",
            config.to_str().expect("UTF-8"),
            "--redis",
            &redis.url(),
            "--admin-token",
            WRITE,
            "--admin-read-token",
            READ,
        ])
    };
    let (a, b) = (node(), node());
    assert_eq!(a.printed["overrides"], "in the Redis store");
    let client = reqwest::Client::new();
    let deny = json!({"policy": "api", "key": "tenant:acme", "change": "deny", "actor": "alice", "reason": "unpaid"});

    // Roles: no token, the read token and a wrong one cannot write.
    for token in [None, Some(READ), Some("wrong")] {
        let (status, _) = send(client.put(admin(&a)).json(&deny), token).await;
        assert!(
            [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&status),
            "{token:?}: {status}"
        );
    }
    assert!(admitted(&b, "acme").await);
    let (status, written) = send(client.put(admin(&a)).json(&deny), Some(WRITE)).await;
    assert_eq!(status, StatusCode::CREATED, "{written}");
    assert_eq!(written["updated_by"], "alice (admin token)");
    let version = written["version"].as_u64().expect("a version");
    let took = until_admitted(&b, "acme", false).await;
    println!("the deny reached the other node in {took:?} (refresh every 250ms)");
    assert!(admitted(&b, "other").await, "other tenants are not touched");

    // A second creation is refused: a write names the version it replaces.
    let (status, conflict) = send(client.put(admin(&b)).json(&deny), Some(WRITE)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert!(
        conflict["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("version {version}"))
    );

    // The read token lists (keys as the logs show them, unless named); it cannot export.
    let (status, listed) = send(client.get(admin(&b)), Some(READ)).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["backend"], "redis");
    let shown = listed["overrides"][0]["key"].as_str().expect("a key");
    assert_eq!(shown.len(), 16, "a pseudonym: {listed}");
    let (_, named) = send(
        client.get(format!("{}?policy=api&key=tenant:acme", admin(&b))),
        Some(READ),
    )
    .await;
    assert_eq!(named["overrides"][0]["key"], "tenant:acme");
    let (status, _) = send(client.get(format!("{}/export", admin(&b))), Some(READ)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Counted and logged, with the key as the logs show keys.
    assert_eq!(
        metric(&a, "tollgate_override_changes_total{operation=\"put\"}").await,
        "tollgate_override_changes_total{operation=\"put\"} 1"
    );
    assert_eq!(
        metric(&b, "tollgate_overrides ").await,
        "tollgate_overrides 1"
    );
    let logged = a.stderr();
    let line = logged
        .lines()
        .find(|line| line.contains("override changed"))
        .unwrap_or_else(|| panic!("a change log line: {logged}"));
    println!("{line}");
    assert!(line.contains("alice (admin token)"), "who: {line}");
    assert!(line.contains("operation=\"put\""), "what: {line}");
    assert!(line.contains("before=null"), "before: {line}");
    assert!(line.contains("unpaid"), "the after state: {line}");
    assert!(!logged.contains("acme"), "no raw key in the logs: {logged}");

    // Removed on B by the version it has: A lets the tenant through again.
    let remove =
        json!({"policy": "api", "key": "tenant:acme", "replaces": version, "actor": "bob"});
    let (status, removed) = send(client.delete(admin(&b)).json(&remove), Some(WRITE)).await;
    assert_eq!(status, StatusCode::OK, "{removed}");
    assert_eq!(removed["removed"]["change"], "deny");
    until_admitted(&a, "acme", true).await;
    let (status, _) = send(client.delete(admin(&b)).json(&remove), Some(WRITE)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bulk_import_names_the_bad_line_and_export_reads_back() {
    let directory = tempfile::tempdir().expect("a directory");
    let config = directory.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("written");
    let server = Tollgate::serve(&["--config", config.to_str().expect("UTF-8")]);
    let client = reqwest::Client::new();
    let import = format!("{}/import?actor=migration", admin(&server));
    let bad = "{\"policy\":\"api\",\"key\":\"tenant:a\",\"change\":{\"multiply\":3}}\n{\"policy\":\"api\",\"key\":\"tenant:b\",\"change\":{\"set\":{\"quota\":\"ten per minute\"}}}\n";
    let (status, refused) = send(lines(&client, &import, bad), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().starts_with("line 2:"),
        "{refused}"
    );
    let good = bad.replace("ten per minute", "10/m");
    let (status, imported) = send(lines(&client, &import, good), None).await;
    assert_eq!(status, StatusCode::OK, "{imported}");
    assert_eq!(imported["imported"], 2);
    let mut admitted_b = 0;
    for _ in 0..12 {
        admitted_b += usize::from(admitted(&server, "b").await);
    }
    assert_eq!(admitted_b, 10, "10/m for tenant b");
    let exported = client
        .get(format!("{}/export", admin(&server)))
        .send()
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    let lines: Vec<Value> = exported
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["key"], "tenant:a");
    assert_eq!(lines[0]["updated_by"], "migration (no token)");
}

#[tokio::test]
async fn the_in_process_store_keeps_its_overrides_in_a_file() {
    let directory = tempfile::tempdir().expect("a directory");
    let config = directory.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("written");
    let file = directory.path().join("overrides.json");
    let args = [
        "--config",
        config.to_str().expect("UTF-8"),
        "--overrides-file",
        file.to_str().expect("UTF-8"),
    ];
    let mut first = Tollgate::serve(&args);
    assert_eq!(first.printed["overrides"], format!("in {}", file.display()));
    let deny = json!({"policy": "api", "key": "tenant:acme", "change": "deny"});
    let (status, _) = send(reqwest::Client::new().put(admin(&first)).json(&deny), None).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(!admitted(&first, "acme").await);
    first.terminate();
    let again = Tollgate::serve(&args);
    assert!(
        !admitted(&again, "acme").await,
        "still denied after a restart"
    );
}
