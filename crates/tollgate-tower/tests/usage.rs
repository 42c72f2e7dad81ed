//! Charging what responses report: the layer in front of an OpenAI-style API that reports token
//! usage at the end of event streams and JSON bodies, on a loopback socket. Each request is
//! charged its estimate up front and settled at the usage its response reports; a response cut
//! short keeps its estimate.

use std::sync::Arc;
use std::time::Duration;

use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tollgate::{Limiter, ManualClock, MemoryStore, Policies};
use tollgate_testkit::llm::{Caller, LlmStub, remaining};
use tollgate_tower::RateLimitLayer;
use tower::{Layer, ServiceExt};

/// Output tokens estimated from the request's `x-max-tokens`, input tokens from its body size;
/// each settled at the usage the response reports.
const POLICIES: &str = r#"
policies:
  - name: output-tokens
    match: { path: /v1/chat/completions }
    key: header:x-api-key
    cost: { header: x-max-tokens, default: 100, max: 1000 }
    usage: { body: usage.completion_tokens }
    limits: [{ name: output, algorithm: fixed_window, quota: 1000/h }]
  - name: input-tokens
    match: { path: /v1/chat/completions }
    key: header:x-api-key
    cost: body
    usage: { body: usage.prompt_tokens, max: 4000 }
    limits: [{ name: input, algorithm: fixed_window, quota: 5000/h }]
"#;

struct Gateway {
    stub: LlmStub,
    caller: Caller,
}

impl Gateway {
    async fn start(policies: &str) -> Gateway {
        let policies = Policies::from_yaml("usage.yaml", policies).expect("valid policies");
        // The clock stands still: windows never roll over, so what is left is what was charged.
        let clock = ManualClock::new(1_700_000_000_000_000);
        let store = MemoryStore::builder().clock(Arc::new(clock)).build();
        let limiter = Limiter::with_policies(store, policies);
        let stub =
            LlmStub::start_wrapped(|router| router.layer(RateLimitLayer::new(limiter))).await;
        let caller = Caller::new(
            &format!("http://{}", stub.address()),
            "key-1",
            ("output", "input"),
        );
        Gateway { stub, caller }
    }

    /// Sends a request and reads its whole body: its status and text.
    async fn complete(
        &self,
        mode: &str,
        max_tokens: u64,
        body_bytes: usize,
        usage: (u64, u64),
    ) -> (u16, String) {
        let response = self
            .caller
            .request(mode, max_tokens, body_bytes, usage)
            .send()
            .await
            .expect("an answer");
        let status = response.status().as_u16();
        (status, response.text().await.expect("the whole body"))
    }

    async fn left(&self) -> (u64, u64) {
        self.caller.left().await
    }

    /// Waits until what is left is `expected` (settling runs after the response has ended).
    async fn left_becomes(&self, expected: (u64, u64)) {
        self.caller
            .left_until(&format!("{expected:?}"), |left| left == expected)
            .await;
    }
}

#[tokio::test]
async fn a_streamed_completion_is_charged_the_tokens_it_reports() {
    let gateway = Gateway::start(POLICIES).await;
    assert_eq!(gateway.left().await, (1000, 5000));
    let (status, body) = gateway.complete("stream", 300, 400, (90, 42)).await;
    assert_eq!(status, 200);
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "streamed through whole: {body}"
    );
    // Estimated 300 and 400, settled at 42 and 90.
    gateway.left_becomes((1000 - 42, 5000 - 90)).await;
    // More than estimated is charged too: the work is done.
    let (status, _) = gateway.complete("stream", 10, 20, (30, 25)).await;
    assert_eq!(status, 200);
    gateway.left_becomes((1000 - 42 - 25, 5000 - 90 - 30)).await;
}

#[tokio::test]
async fn a_json_body_settles_and_a_report_over_the_cap_counts_as_the_cap() {
    let gateway = Gateway::start(POLICIES).await;
    let (status, body) = gateway.complete("json", 200, 100, (4500, 7)).await;
    assert_eq!(status, 200);
    assert!(body.contains(r#""completion_tokens":7"#), "{body}");
    gateway.left_becomes((1000 - 7, 5000 - 4000)).await;
}

#[tokio::test]
async fn a_cut_stream_and_a_client_gone_midway_keep_their_estimates() {
    let gateway = Gateway::start(POLICIES).await;
    let cut = gateway
        .caller
        .request("cut", 300, 400, (90, 42))
        .send()
        .await
        .expect("the head of the answer");
    assert_eq!(cut.status(), 200);
    assert!(cut.text().await.is_err(), "the stream is cut");
    let mut gone = gateway
        .caller
        .request("hold", 200, 100, (90, 42))
        .send()
        .await
        .expect("the head of the answer");
    gone.chunk()
        .await
        .expect("readable")
        .expect("a first piece");
    drop(gone);
    // A whole stream after them settles, so its settlement shows their estimates stand.
    gateway.complete("stream", 100, 50, (10, 5)).await;
    gateway
        .left_becomes((1000 - 300 - 200 - 5, 5000 - 400 - 100 - 10))
        .await;
}

#[tokio::test]
async fn concurrent_streams_are_admitted_by_their_estimates_and_never_over() {
    let gateway = Gateway::start(POLICIES).await;
    // Ten at once, each estimated at 300 of 1000 output tokens: three fit, whatever the order.
    let requests = (0..10).map(|_| gateway.caller.request("hold", 300, 10, (5, 100)).send());
    let responses = futures_util::future::join_all(requests).await;
    let statuses: Vec<u16> = responses
        .iter()
        .map(|r| r.as_ref().expect("an answer").status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        7,
        "{statuses:?}"
    );
    assert_eq!(gateway.left().await, (100, 5000 - 30));
    // They finish having used 100 each: 700 comes back, enough for two more estimates.
    let held: Vec<_> = responses
        .into_iter()
        .map(|r| r.expect("an answer"))
        .filter(|r| r.status() == 200)
        .collect();
    gateway.stub.release(3);
    for response in held {
        response.text().await.expect("the whole stream");
    }
    gateway.left_becomes((700, 5000 - 15)).await;
    let more = (0..4).map(|_| gateway.complete("stream", 300, 0, (0, 300)));
    let statuses: Vec<u16> = futures_util::future::join_all(more)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
    gateway.left_becomes((100, 5000 - 15)).await;
}

#[tokio::test]
async fn a_usage_header_settles() {
    let gateway = Gateway::start(&POLICIES.replacen(
        "usage: { body: usage.completion_tokens }",
        "usage: { header: x-usage-tokens }",
        1,
    ))
    .await;
    let (status, _) = gateway.complete("header", 300, 0, (0, 17)).await;
    assert_eq!(status, 200);
    gateway.left_becomes((1000 - 17, 5000)).await;
}

/// A service whose responses end with trailers: `x-usage-tokens`, and the `grpc-status` the
/// request's `x-status` asks for, after a message unless the request says `x-silent`.
async fn with_trailers(
    request: http::Request<String>,
) -> Result<http::Response<StreamBody<Frames>>, std::convert::Infallible> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-usage-tokens", http::HeaderValue::from_static("17"));
    if let Some(status) = request.headers().get("x-status") {
        trailers.insert("grpc-status", status.clone());
    }
    let mut frames = Vec::new();
    if !request.headers().contains_key("x-silent") {
        frames.push(Ok(Frame::data(bytes::Bytes::from_static(b"answer"))));
    }
    frames.push(Ok(Frame::trailers(trailers)));
    Ok(http::Response::new(StreamBody::new(
        futures_util::stream::iter(frames),
    )))
}

type Frames = futures_util::stream::Iter<
    std::vec::IntoIter<Result<Frame<bytes::Bytes>, std::convert::Infallible>>,
>;

#[tokio::test]
async fn a_trailer_settles_and_only_a_server_failure_before_delivery_refunds() {
    let policies = Policies::from_yaml(
        "trailers.yaml",
        r#"
policies:
  - name: tokens
    key: header:x-api-key
    cost: { header: x-max-tokens, default: 100, max: 1000 }
    usage: { trailer: x-usage-tokens }
    refund_on: [500-599]
    limits: [{ name: tokens, algorithm: fixed_window, quota: 1000/h }]
"#,
    )
    .expect("valid policies");
    let store = MemoryStore::builder()
        .clock(Arc::new(ManualClock::new(1_700_000_000_000_000)))
        .build();
    let service = RateLimitLayer::new(Limiter::with_policies(store, policies))
        .layer(tower::service_fn(with_trailers));
    // The tokens left after a call costing `max_tokens` ending with `status`, after a message
    // unless `silent`.
    let call = |max_tokens: &str, status: Option<&'static str>, silent: bool| {
        let mut request = http::Request::builder()
            .uri("/")
            .header("x-api-key", "key-1")
            .header("x-max-tokens", max_tokens);
        if let Some(status) = status {
            request = request.header("x-status", status);
        }
        if silent {
            request = request.header("x-silent", "1");
        }
        let service = service.clone();
        async move {
            let response = service
                .oneshot(request.body(String::new()).expect("a request"))
                .await
                .expect("an answer");
            let field = response.headers()["ratelimit"]
                .to_str()
                .expect("text")
                .to_owned();
            response.into_body().collect().await.expect("the body");
            remaining(&field, "tokens")
        }
    };
    // What is left once the settlements under way have landed, expected to become `expected`.
    let settles_to = |expected: u64| async move {
        let mut left = 0;
        for _ in 0..200 {
            left = call("0", None, false).await;
            if left == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("left {left}, expected {expected}");
    };
    assert_eq!(call("300", None, false).await, 700);
    settles_to(1000 - 17).await;
    // A server failure before any message: the estimate is given back, nothing settled.
    assert_eq!(call("300", Some("13"), true).await, 1000 - 17 - 300);
    settles_to(1000 - 17).await;
    // A stream that delivered its message and then failed served its client: it is charged
    // (and settled at its usage), whatever ends it.
    assert_eq!(call("300", Some("13"), false).await, 1000 - 17 - 300);
    settles_to(1000 - 2 * 17).await;
    // Statuses the client causes never refund: its own deadline, a cancel.
    for client_caused in ["4", "1"] {
        let before = call("0", None, false).await;
        assert_eq!(call("300", Some(client_caused), true).await, before - 300);
        settles_to(before - 17).await;
    }
}

#[tokio::test]
async fn a_body_read_for_usage_is_asked_for_uncompressed_and_a_compressed_one_keeps_its_estimate() {
    let gateway = Gateway::start(POLICIES).await;
    let response = gateway
        .caller
        .request("json", 100, 10, (3, 2))
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.headers()["x-stub-accept-encoding"], "none");
    response.text().await.expect("the body");
    gateway.left_becomes((1000 - 2, 5000 - 3)).await;
    // An upstream that compresses anyway: the figures cannot be read, so the estimates stand.
    let (status, _) = gateway.complete("encoded", 100, 10, (3, 2)).await;
    assert_eq!(status, 200);
    gateway.complete("stream", 100, 10, (1, 1)).await;
    gateway
        .left_becomes((1000 - 2 - 100 - 1, 5000 - 3 - 10 - 1))
        .await;
}
