//! `/metrics` after a known sequence of checks, parsed with a Prometheus exposition parser.

mod support;

use prometheus_parse::{Scrape, Value};
use serde_json::json;
use support::{Tollgate, eventually};

async fn scrape_metrics(base: &str) -> Scrape {
    let response = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("an answer");
    assert!(
        response.headers()["content-type"]
            .to_str()
            .expect("ASCII")
            .starts_with("application/openmetrics-text"),
    );
    let text = response.text().await.expect("text");
    Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).expect("a valid exposition")
}

/// The value of the sample named `name` whose labels include `labels`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|sample| {
            sample.metric == name
                && labels
                    .iter()
                    .all(|(key, value)| sample.labels.get(key) == Some(*value))
        })
        .map(|sample| match &sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

async fn post(url: &str, body: serde_json::Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("an answer");
    assert!(response.status().is_success(), "{}", response.status());
}

#[tokio::test]
async fn decisions_latencies_and_reloads_are_counted() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let policies = directory.path().join("policies.yaml");
    std::fs::write(&policies, tollgate_server::policies::BUILT_IN).expect("written");
    let server = Tollgate::serve(&["--config", policies.to_str().expect("UTF-8")]);
    let base = server.http_url();
    let check = format!("{base}/v1/check");
    for _ in 0..6 {
        post(
            &check,
            json!({"policy": "login", "attributes": {"ip": "203.0.113.7"}}),
        )
        .await;
    }
    for _ in 0..3 {
        post(
            &check,
            json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "2/m"}]}),
        )
        .await;
    }
    let scrape = scrape_metrics(&base).await;
    let login = |outcome| {
        value(
            &scrape,
            "tollgate_decisions_total",
            &[
                ("policy", "login"),
                ("limit", "login-per-minute"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(login("allowed"), Some(5.0));
    assert_eq!(login("denied"), Some(1.0));
    let direct = |outcome| {
        value(
            &scrape,
            "tollgate_decisions_total",
            &[("policy", ""), ("limit", ""), ("outcome", outcome)],
        )
    };
    assert_eq!(direct("allowed"), Some(2.0));
    assert_eq!(direct("denied"), Some(1.0));
    assert_eq!(
        value(&scrape, "tollgate_check_duration_seconds_count", &[]),
        Some(9.0)
    );
    assert_eq!(
        value(&scrape, "tollgate_retry_after_seconds_count", &[]),
        Some(2.0)
    );
    assert_eq!(value(&scrape, "tollgate_breaker_open", &[]), Some(0.0));
    assert!(value(&scrape, "tollgate_memory_keys", &[]).expect("a gauge") >= 2.0);
    // No key ever becomes a label.
    assert!(scrape.samples.iter().all(|sample| {
        sample
            .labels
            .values()
            .all(|v| !v.contains("203.0.113.7") && v != "k")
    }),);

    std::fs::write(&policies, "policies: [oops\n").expect("written");
    eventually("the refused reload is counted", || async {
        value(
            &scrape_metrics(&base).await,
            "tollgate_config_reloads_total",
            &[("result", "failure")],
        )
        .is_some_and(|count| count >= 1.0)
    })
    .await;
}

/// Every series an alert or a dashboard reads exists before its first event, so that the first
/// event is an increase from zero and `absent()` means a broken scrape, not a quiet instance.
#[tokio::test]
async fn a_fresh_server_exports_its_series_before_any_event() {
    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    eventually("the store's first probe", || async {
        value(&scrape_metrics(&base).await, "tollgate_store_up", &[]) == Some(1.0)
    })
    .await;
    let scrape = scrape_metrics(&base).await;
    for kind in ["timeout", "unavailable", "circuit_open", "failed"] {
        assert_eq!(
            value(&scrape, "tollgate_store_errors_total", &[("kind", kind)]),
            Some(0.0),
            "{kind}"
        );
    }
    for result in ["success", "failure"] {
        assert_eq!(
            value(
                &scrape,
                "tollgate_config_reloads_total",
                &[("result", result)]
            ),
            Some(0.0),
            "{result}"
        );
    }
    assert_eq!(
        value(&scrape, "tollgate_config_last_reload_successful", &[]),
        Some(1.0)
    );
    // Each limit of the built-in policies, allowed and denied, before a request.
    for outcome in ["allowed", "denied"] {
        assert_eq!(
            value(
                &scrape,
                "tollgate_decisions_total",
                &[
                    ("policy", "login"),
                    ("limit", "login-per-minute"),
                    ("outcome", outcome)
                ],
            ),
            Some(0.0),
            "{outcome}"
        );
    }
    assert_eq!(
        value(
            &scrape,
            "tollgate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    let resident = value(&scrape, "process_resident_memory_bytes", &[]).expect("resident memory");
    assert!(resident > 1e6 && resident < 1e9, "{resident}");
    assert!(value(&scrape, "process_open_fds", &[]).expect("open files") >= 3.0);
    assert!(value(&scrape, "process_max_fds", &[]).expect("the file limit") >= 3.0);
    let started = value(&scrape, "process_start_time_seconds", &[]).expect("a start time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    assert!((now - started).abs() < 600.0, "{started} against {now}");
    assert!(value(&scrape, "process_cpu_seconds_total", &[]).is_some());
}

#[tokio::test]
async fn rate_limit_service_statistics_carry_upstream_names_with_a_prefix() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        directory.path().join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: remote_address\n    detailed_metric: true\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n",
    )
    .expect("written");
    let server = Tollgate::serve(&["--rls-config", directory.path().to_str().expect("UTF-8")]);
    let base = server.http_url();
    let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]});
    for _ in 0..3 {
        reqwest::Client::new()
            .post(format!("{base}/json"))
            .json(&body)
            .send()
            .await
            .expect("an answer");
    }
    let scrape = scrape_metrics(&base).await;
    // The address's dots become underscores, as upstream's statsd names have them.
    let labels = [("domain", "edge"), ("key1", "remote_address_10_0_0_1")];
    let stat = |name: &str| {
        let sample = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == format!("tollgate_ratelimit_service_rate_limit_{name}")
                    && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no {name} sample"));
        match sample.value {
            Value::Untyped(value) => value,
            ref other => panic!("{name} is {other:?}, not untyped (no _total suffix)"),
        }
    };
    assert_eq!(
        [
            stat("total_hits"),
            stat("within_limit"),
            stat("near_limit"),
            stat("over_limit")
        ],
        [3.0, 2.0, 1.0, 1.0]
    );
}
