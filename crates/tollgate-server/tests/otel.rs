//! Traces over OTLP (the `otel` feature): the real `tollgate serve` and `tollgate proxy` export a
//! span per check to a collector this test runs (OTLP/gRPC on a free port), as a child of the
//! caller's `traceparent`, and the proxy hands its own span's context on to the upstream.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::any;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::json;
use support::{Tollgate, proxy_args, serve_args};
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_testkit::RedisServer;

/// The caller's trace and span, as a `traceparent` carries them.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// How long spans have to arrive: the exporter sends a batch every 50 ms here.
const PATIENCE: Duration = Duration::from_secs(20);

/// One span as the collector received it, ids in hex.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    kind: i32,
    attributes: HashMap<String, String>,
    service: Option<String>,
}

/// A minimal OTLP/gRPC collector: keeps every span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
}

fn text(value: Option<&AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(text)) => text.clone(),
        Some(AnyValue::IntValue(number)) => number.to_string(),
        Some(AnyValue::BoolValue(flag)) => flag.to_string(),
        Some(AnyValue::DoubleValue(number)) => number.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// Keeps the spans of one export, however it came.
    fn keep(&self, request: ExportTraceServiceRequest) {
        let mut spans = self.spans.lock().expect("not poisoned");
        for resource in request.resource_spans {
            let service = resource.resource.as_ref().and_then(|resource| {
                resource
                    .attributes
                    .iter()
                    .find(|attribute| attribute.key == "service.name")
                    .map(|attribute| text(attribute.value.as_ref().and_then(|v| v.value.as_ref())))
            });
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|a| (a.key, text(a.value.as_ref().and_then(|v| v.value.as_ref()))))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }

    /// Starts the collector; its OTLP/gRPC endpoint.
    async fn start(&self) -> String {
        let routes = tonic::service::Routes::new(TraceServiceServer::new(self.clone()));
        format!("http://{}", support::serve_grpc(routes).await)
    }

    /// Starts the collector over OTLP/HTTP (protobuf bodies to `/v1/traces`); its endpoint,
    /// the base the exporter adds `/v1/traces` to.
    async fn start_http(&self) -> String {
        let collector = self.clone();
        let routes = Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let collector = collector.clone();
                async move {
                    assert_eq!(headers["content-type"], "application/x-protobuf");
                    let request = <ExportTraceServiceRequest as prost::Message>::decode(body)
                        .expect("an OTLP export");
                    collector.keep(request);
                    let answer =
                        prost::Message::encode_to_vec(&ExportTraceServiceResponse::default());
                    ([("content-type", "application/x-protobuf")], answer)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let address = listener.local_addr().expect("an address");
        tokio::spawn(async move { axum::serve(listener, routes).await });
        format!("http://{address}")
    }

    /// Waits for a span named `name`.
    async fn span(&self, name: &str) -> Received {
        self.spans_named(name, 1).await.remove(0)
    }

    /// Waits for `count` spans named `name`.
    async fn spans_named(&self, name: &str, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found: Vec<Received> = self
                .spans()
                .into_iter()
                .filter(|s| s.name == name)
                .collect();
            if found.len() >= count {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "{count} spans {name:?} did not arrive; the collector has {:?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().expect("not poisoned").clone()
    }
}

/// The exporter sends often, so a test waits milliseconds, not the default five seconds.
const QUICK_BATCHES: [(&str, &str); 1] = [("OTEL_BSP_SCHEDULE_DELAY", "50")];

fn attribute<'a>(span: &'a Received, key: &str) -> &'a str {
    span.attributes
        .get(key)
        .unwrap_or_else(|| panic!("span {} has no {key}: {:?}", span.name, span.attributes))
}

#[tokio::test]
async fn a_check_span_is_a_child_of_the_callers_trace_with_its_decision() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    // On a Redis: the store call is timed on the span.
    let redis = RedisServer::start();
    let server = Tollgate::start_with_env(
        &serve_args(&["--otlp-endpoint", &endpoint, "--redis", &redis.url()]),
        &QUICK_BATCHES,
    );
    let url = format!("{}/v1/check", server.http_url());
    let client = reqwest::Client::new();
    let check =
        json!({"limits": [{"key": "user:42", "algorithm": "fixed_window", "quota": "1/h"}]});
    for _ in 0..2 {
        let answer = client
            .post(&url)
            .header("traceparent", TRACEPARENT)
            .header("authorization", "Bearer secret-token-1")
            .json(&check)
            .send()
            .await
            .expect("the check is answered");
        assert!(answer.status().is_success(), "{answer:?}");
    }

    let spans = collector.spans_named("POST /v1/check", 2).await;
    for span in &spans {
        assert_eq!(span.trace_id, TRACE_ID, "{span:?}");
        assert_eq!(span.parent_span_id, CALLER_SPAN, "{span:?}");
        assert_eq!(span.kind, SpanKind::Server as i32, "{span:?}");
        assert_eq!(span.service.as_deref(), Some("tollgate"), "{span:?}");
        // Named and described as the semantic conventions have an HTTP server span.
        assert_eq!(attribute(span, "http.request.method"), "POST");
        assert_eq!(attribute(span, "http.route"), "/v1/check");
        assert_eq!(attribute(span, "url.path"), "/v1/check");
        assert_eq!(attribute(span, "http.response.status_code"), "200");
        assert!(!span.attributes.contains_key("error.type"), "{span:?}");
        let store_micros: u64 = attribute(span, "tollgate.store.duration_us")
            .parse()
            .expect("a number of microseconds");
        assert!(store_micros < 10_000_000, "{span:?}");
        assert!(
            span.attributes
                .values()
                .all(|value| !value.contains("secret-token-1")),
            "a credential in a span: {span:?}"
        );
    }
    let mut decisions: Vec<(&str, Option<&str>)> = spans
        .iter()
        .map(|span| {
            (
                attribute(span, "tollgate.decision"),
                span.attributes.get("tollgate.reason").map(String::as_str),
            )
        })
        .collect();
    decisions.sort();
    assert_eq!(
        decisions,
        [("allowed", None), ("refused", Some("over_limit"))]
    );
}

#[tokio::test]
async fn a_policy_check_names_its_policy_and_a_malformed_traceparent_starts_a_trace() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let server =
        Tollgate::start_with_env(&serve_args(&["--otlp-endpoint", &endpoint]), &QUICK_BATCHES);
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/check", server.http_url()))
        .header("traceparent", "00-not-a-trace-context")
        .json(&json!({"policy": "login", "attributes": {"ip": "203.0.113.7"}}))
        .send()
        .await
        .expect("the check is answered");
    assert!(answer.status().is_success(), "{answer:?}");

    let span = collector.span("POST /v1/check").await;
    assert_eq!(attribute(&span, "tollgate.policy"), "login");
    assert_eq!(attribute(&span, "tollgate.decision"), "allowed");
    assert_eq!(attribute(&span, "tollgate.decided_by"), "store");
    assert_eq!(span.parent_span_id, "", "a root span: {span:?}");
    assert_eq!(span.trace_id.len(), 32, "{span:?}");
    assert_ne!(span.trace_id, "0".repeat(32), "{span:?}");
}

#[tokio::test]
async fn a_rate_limit_service_call_is_a_child_of_the_grpc_callers_trace() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let directory = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        directory.path().join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: blocked\n    rate_limit: { unit: minute, requests_per_unit: 0 }\n",
    )
    .expect("the configuration is written");
    let dir = directory.path().to_str().expect("UTF-8");
    let redis = RedisServer::start();
    let server = Tollgate::start_with_env(
        &serve_args(&[
            "--rls-config",
            dir,
            "--otlp-endpoint",
            &endpoint,
            "--redis",
            &redis.url(),
        ]),
        &QUICK_BATCHES,
    );
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
        .await
        .expect("gRPC connects");
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".to_owned(),
                value: "10.0.0.1".to_owned(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 0,
    });
    request.metadata_mut().insert(
        "traceparent",
        TRACEPARENT.parse().expect("a metadata value"),
    );
    client.should_rate_limit(request).await.expect("an answer");

    let span = collector
        .span("envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
        .await;
    assert_eq!(span.trace_id, TRACE_ID, "{span:?}");
    assert_eq!(span.parent_span_id, CALLER_SPAN, "{span:?}");
    assert_eq!(attribute(&span, "tollgate.domain"), "edge");
    assert_eq!(attribute(&span, "tollgate.decision"), "allowed");
    attribute(&span, "tollgate.store.duration_us");
    assert_eq!(attribute(&span, "rpc.system"), "grpc");
    assert_eq!(
        attribute(&span, "rpc.service"),
        "envoy.service.ratelimit.v3.RateLimitService"
    );
    assert_eq!(attribute(&span, "rpc.method"), "ShouldRateLimit");
    assert_eq!(attribute(&span, "rpc.grpc.status_code"), "0");

    // The same service over HTTP (`POST /json`), refused by a limit of zero.
    let answer = reqwest::Client::new()
        .post(format!("{}/json", server.http_url()))
        .header("traceparent", TRACEPARENT)
        .json(&json!({"domain": "edge", "descriptors": [{"entries": [{"key": "blocked", "value": "x"}]}]}))
        .send()
        .await
        .expect("the service answers");
    assert_eq!(answer.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    let span = collector.span("POST /json").await;
    assert_eq!(span.trace_id, TRACE_ID, "{span:?}");
    assert_eq!(span.parent_span_id, CALLER_SPAN, "{span:?}");
    assert_eq!(attribute(&span, "tollgate.domain"), "edge");
    assert_eq!(attribute(&span, "tollgate.decision"), "refused");
    assert_eq!(attribute(&span, "tollgate.reason"), "over_limit");
}

#[tokio::test]
async fn the_proxy_passes_its_spans_context_to_the_upstream() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let recorded = Arc::clone(&seen);
    let upstream = Router::new().fallback(any(move |headers: HeaderMap| {
        recorded.lock().expect("not poisoned").push(headers);
        async { "hello" }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let upstream_address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, upstream).await });
    let directory = tempfile::tempdir().expect("a temporary directory");
    let policies = directory.path().join("policies.yaml");
    std::fs::write(
        &policies,
        "policies:\n  - name: everything\n    key: [ip]\n    limits: [{ name: per-minute, algorithm: gcra, quota: 100/m }]\n",
    )
    .expect("the policies are written");
    let proxy = Tollgate::start_with_env(
        &proxy_args(&[
            "--config",
            policies.to_str().expect("UTF-8"),
            "--upstream",
            &format!("http://{upstream_address}"),
            "--otlp-endpoint",
            &endpoint,
        ]),
        &QUICK_BATCHES,
    );
    let answer = reqwest::Client::new()
        .get(format!("{}/hello", proxy.http_url()))
        .header("traceparent", TRACEPARENT)
        .header("tracestate", "caller=1")
        .send()
        .await
        .expect("the proxy answers");
    assert!(answer.status().is_success(), "{answer:?}");

    let span = collector.span("GET").await;
    assert_eq!(span.trace_id, TRACE_ID, "{span:?}");
    assert_eq!(span.parent_span_id, CALLER_SPAN, "{span:?}");
    assert_eq!(attribute(&span, "tollgate.policy"), "everything");
    assert_eq!(attribute(&span, "tollgate.decision"), "allowed");
    assert_eq!(attribute(&span, "http.request.method"), "GET");
    // The proxy's paths are its clients' data: no path, no route.
    assert!(!span.attributes.contains_key("url.path"), "{span:?}");
    assert!(!span.attributes.contains_key("http.route"), "{span:?}");
    assert!(
        span.attributes
            .values()
            .all(|value| !value.contains("hello")),
        "{span:?}"
    );
    assert_eq!(attribute(&span, "http.response.status_code"), "200");
    let forwarded = seen.lock().expect("not poisoned")[0].clone();
    let traceparent = forwarded["traceparent"].to_str().expect("a text field");
    assert_eq!(
        traceparent,
        format!("00-{TRACE_ID}-{}-01", span.span_id),
        "the upstream's parent is the proxy's span"
    );
    assert_eq!(forwarded["tracestate"], "caller=1");
}

#[test]
fn an_endpoint_the_exporter_cannot_reach_without_tls_is_refused_at_start_up() {
    let (status, _, stderr) = support::run(&serve_args(&[
        "--otlp-endpoint",
        "https://collector.example:4317",
    ]));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("--otlp-endpoint"), "{stderr}");
}

// Multi-threaded, so the collector answers while this thread waits for the server to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_batched_are_sent_when_the_server_stops() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    // Batches every ten minutes: only the flush at shutdown can send the span in time.
    let mut server = Tollgate::start_with_env(
        &serve_args(&["--otlp-endpoint", &endpoint]),
        &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
    );
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/check", server.http_url()))
        .json(&json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "5/m"}]}))
        .send()
        .await
        .expect("the check is answered");
    assert!(answer.status().is_success(), "{answer:?}");
    assert!(server.terminate().success(), "{}", server.stderr());
    let names: Vec<String> = collector.spans().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["POST /v1/check"], "{}", server.stderr());
}

/// OTLP over HTTP, protobuf bodies to `/v1/traces` under the endpoint, for collectors that
/// listen only on 4318.
#[tokio::test]
async fn spans_go_over_otlp_http_when_asked() {
    let collector = Collector::default();
    let endpoint = collector.start_http().await;
    let server = Tollgate::start_with_env(
        &serve_args(&[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ]),
        &QUICK_BATCHES,
    );
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/check", server.http_url()))
        .header("traceparent", TRACEPARENT)
        .json(&json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "5/m"}]}))
        .send()
        .await
        .expect("the check is answered");
    assert!(answer.status().is_success(), "{answer:?}");
    let span = collector.span("POST /v1/check").await;
    assert_eq!(span.trace_id, TRACE_ID, "{span:?}");
    assert_eq!(span.parent_span_id, CALLER_SPAN, "{span:?}");
    assert_eq!(span.service.as_deref(), Some("tollgate"), "{span:?}");
}

/// A log line written during a traced check (here the refusal's) carries the check span's
/// trace and span ids, so that a trace leads to its logs and back.
#[tokio::test]
async fn json_log_lines_within_a_check_carry_its_trace_and_span_ids() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let server = Tollgate::start_with_env(
        &serve_args(&["--otlp-endpoint", &endpoint, "--log-format", "json"]),
        &QUICK_BATCHES,
    );
    // The built-in `login` policy admits 5 a minute.
    let check = json!({"policy": "login", "attributes": {"ip": "203.0.113.7"}});
    for _ in 0..6 {
        reqwest::Client::new()
            .post(format!("{}/v1/check", server.http_url()))
            .header("traceparent", TRACEPARENT)
            .json(&check)
            .send()
            .await
            .expect("the check is answered");
    }
    let refused = collector
        .spans_named("POST /v1/check", 6)
        .await
        .into_iter()
        .find(|span| attribute(span, "tollgate.decision") == "refused")
        .expect("the refused check's span");
    server.wait_for_log(r#""message":"refused""#);
    let line: serde_json::Value = server
        .stderr()
        .lines()
        .find(|line| line.contains(r#""message":"refused""#))
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .expect("the refusal's line");
    let ids = line["spans"]
        .as_array()
        .and_then(|spans| spans.iter().find(|span| span["name"] == "trace"))
        .unwrap_or_else(|| panic!("no trace ids in {line}"));
    assert_eq!(ids["trace_id"], TRACE_ID, "{line}");
    assert_eq!(ids["span_id"], refused.span_id.as_str(), "{line}");
    // The ids are for the logs: the exported span does not carry them as attributes.
    assert!(!refused.attributes.contains_key("trace_id"), "{refused:?}");
}
