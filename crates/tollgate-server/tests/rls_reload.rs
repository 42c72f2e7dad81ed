//! The rate limit service's configuration directory reloads live when given as a relative
//! path (the watcher names changes by absolute paths, which never matched the relative path
//! given, so only SIGHUP reloaded), and a reload that would leave no domain (an emptied
//! directory) is refused, keeping the last configuration, unless `--rls-allow-empty` says so.

mod support;

use serde_json::{Value, json};
use support::{Tollgate, eventually};

/// The overall code `/json` answers for one hit on `(key, "v")` in `domain`.
async fn hit(base: &str, domain: &str, key: &str) -> String {
    hit_value(base, domain, key, "v").await
}

/// The overall code `/json` answers for one hit on `(key, value)` in `domain`.
async fn hit_value(base: &str, domain: &str, key: &str, value: &str) -> String {
    let body =
        json!({"domain": domain, "descriptors": [{"entries": [{"key": key, "value": value}]}]});
    let response = reqwest::Client::new()
        .post(format!("{base}/json"))
        .json(&body)
        .send()
        .await
        .expect("an answer");
    let answer: Value = response.json().await.expect("JSON");
    answer["overallCode"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn domain(name: &str, key: &str) -> String {
    format!(
        "domain: {name}\ndescriptors:\n  - key: {key}\n    rate_limit: {{ unit: hour, requests_per_unit: 1 }}\n"
    )
}

#[tokio::test]
async fn a_relative_directory_reloads_and_an_emptied_one_is_refused() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let rls = root.path().join("rls");
    std::fs::create_dir(&rls).expect("a directory");
    std::fs::write(rls.join("a.yaml"), domain("a", "k")).expect("written");
    let server = Tollgate::start_in(
        Some(root.path()),
        &support::serve_args(&["--rls-config", "rls"]),
        &[],
    );
    let base = server.http_url();
    assert_eq!(hit(&base, "a", "k").await, "OK");
    assert_eq!(hit(&base, "a", "k").await, "OVER_LIMIT");

    std::fs::write(rls.join("b.yaml"), domain("b", "k")).expect("written");
    // Each look counts a value of its own, so that one made before the reload leaves nothing.
    let looks = std::sync::atomic::AtomicU32::new(0);
    eventually("the new file is seen without a signal", || async {
        let value = looks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_string();
        hit_value(&base, "b", "k", &value).await == "OK"
            && hit_value(&base, "b", "k", &value).await == "OVER_LIMIT"
    })
    .await;

    for file in ["a.yaml", "b.yaml"] {
        std::fs::remove_file(rls.join(file)).expect("removed");
    }
    server.wait_for_log("holds no domain");
    assert_eq!(
        hit(&base, "a", "k").await,
        "OVER_LIMIT",
        "the last configuration stays in force"
    );
    let metrics = reqwest::get(format!("http://{}/metrics", server.address("admin")))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.lines().any(|line| line
            .starts_with("tollgate_config_reloads_total{result=\"failure\"}")
            && !line.ends_with(" 0")),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_emptied_directory_switches_the_limits_off_only_when_allowed() {
    let root = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(root.path().join("a.yaml"), domain("a", "k")).expect("written");
    let directory = root.path().to_str().expect("UTF-8");
    let server = Tollgate::serve(&["--rls-config", directory, "--rls-allow-empty"]);
    let base = server.http_url();
    assert_eq!(hit(&base, "a", "k").await, "OK");
    assert_eq!(hit(&base, "a", "k").await, "OVER_LIMIT");
    std::fs::remove_file(root.path().join("a.yaml")).expect("removed");
    eventually("the empty configuration is taken", || async {
        hit(&base, "a", "k").await == "OK"
    })
    .await;
}
