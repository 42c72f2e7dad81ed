//! tollgate-client against the real binary: the check API client, and the retry and pacing
//! layers through `tollgate proxy` in front of a real upstream.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::Tollgate;
use tollgate_client::{
    ClientError, InlineLimit, Pacer, PacingLayer, RetryLayer, RetryLog, RetryPolicy,
    TollgateClient, send_with_retry,
};
use tower::{Service, ServiceBuilder, ServiceExt};

/// The property names of `schema` in the server's own OpenAPI document.
fn schema_properties(document: &serde_json::Value, schema: &str) -> Vec<String> {
    let mut names: Vec<String> = document["components"]["schemas"][schema]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("the document describes {schema}"))
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

/// The field names a value serializes with.
fn field_names(value: &impl serde::Serialize) -> Vec<String> {
    let mut names: Vec<String> = serde_json::to_value(value)
        .expect("serializable")
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

/// The client's request types used to lag the server's (no `mode`, `delay_after`, `cost`,
/// `content_length`): every field the server's document describes, the client can send, and
/// the server takes all of them together.
#[tokio::test]
async fn the_clients_wire_types_are_the_servers() {
    let server = Tollgate::serve(&[]);
    let document: serde_json::Value = reqwest::get(format!("{}/openapi.json", server.http_url()))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let limit = InlineLimit {
        burst: Some(4),
        mode: Some("queue".into()),
        delay_after: Some(2),
        scope: Some("region".into()),
        name: Some("smooth".into()),
        cost: Some(2),
        max_debt: Some(100),
        ..InlineLimit::new("job:1", "leaky_bucket", "4/s")
    };
    let attributes = tollgate_client::Attributes {
        ip: Some("203.0.113.7".into()),
        user: Some("42".into()),
        tenant: Some("acme".into()),
        plan: Some("pro".into()),
        api_key: Some("k".into()),
        route: Some("/upload".into()),
        method: Some("POST".into()),
        host: Some("example.com".into()),
        path: Some("/upload".into()),
        content_length: Some(1_000),
        body_sha256: Some("0".repeat(64)),
        headers: [("x-plan".to_owned(), "pro".to_owned())].into(),
    };
    // A calendar is a fixed window's alone: the other fields go with a leaky bucket.
    let monthly = InlineLimit {
        calendar: Some(tollgate_client::Calendar {
            tz: Some("Europe/Berlin".into()),
            anchor_day: Some(15),
            ..tollgate_client::Calendar::default()
        }),
        ..InlineLimit::new("job:1", "fixed_window", "1000/month")
    };
    let mut sent = field_names(&limit);
    sent.extend(field_names(&monthly));
    sent.sort();
    sent.dedup();
    assert_eq!(sent, schema_properties(&document, "InlineLimit"));
    let mut calendar = field_names(monthly.calendar.as_ref().expect("set"));
    calendar.extend(field_names(&tollgate_client::Calendar {
        first_day: Some("sunday".into()),
        anchor_date: Some("04-01".into()),
        ..tollgate_client::Calendar::default()
    }));
    calendar.sort();
    let mut described: Vec<String> = document["components"]["schemas"]["InlineLimit"]["properties"]
        ["calendar"]["properties"]
        .as_object()
        .expect("the calendar's fields")
        .keys()
        .cloned()
        .collect();
    described.sort();
    assert_eq!(calendar, described);
    assert_eq!(
        field_names(&attributes),
        schema_properties(&document, "Attributes")
    );

    let client = TollgateClient::new(&server.http_url(), Duration::from_secs(5)).expect("a client");
    let answer = client
        .check_limits(std::slice::from_ref(&limit), None)
        .await
        .expect("the server takes every field");
    assert_eq!(answer.decisions[0].limit, "smooth");
    let answer = client
        .check_limits(std::slice::from_ref(&monthly), None)
        .await
        .expect("the server takes a calendar");
    assert!(answer.allowed, "{answer:?}");
    let answer = client
        .check_matching(&attributes, None)
        .await
        .expect("the server takes every attribute");
    assert!(answer.allowed, "{answer:?}");
}

#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn the_check_api_client_checks_refunds_and_reports_errors() {
    let server = Tollgate::serve(&[]);
    let client = TollgateClient::new(&server.http_url(), Duration::from_secs(5)).expect("a client");
    let limits = [InlineLimit::new("user:42", "gcra", "2/m")];
    let first = client.check_limits(&limits, None).await.expect("an answer");
    assert!(first.allowed);
    assert_eq!(first.decisions[0].remaining, 1);
    assert!(
        client
            .check_limits(&limits, None)
            .await
            .expect("an answer")
            .allowed
    );
    let refused = client.check_limits(&limits, None).await.expect("an answer");
    assert_eq!(refused.verdict, "deny");
    let wait = refused.retry_after().expect("a wait");
    assert!(
        wait > Duration::from_secs(20) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );

    client
        .refund_limits(&limits, None, &first)
        .await
        .expect("refunded");
    assert!(matches!(
        client.refund_limits(&limits, None, &first).await,
        Err(ClientError::Status { status: 409, .. })
    ));
    assert!(matches!(
        client.refund_limits(&limits, None, &refused).await,
        Err(ClientError::NothingToRefund)
    ));
    assert!(
        client
            .check_limits(&limits, None)
            .await
            .expect("an answer")
            .allowed
    );
    // Settled at its real cost: an estimate of 30 tokens that used 12 gives 18 back.
    let tokens = [InlineLimit::new("tokens:42", "fixed_window", "100/h")];
    let estimate = client
        .check_limits(&tokens, Some(30))
        .await
        .expect("an answer");
    assert_eq!(estimate.decisions[0].remaining, 70);
    client
        .settle_limits(&tokens, Some(30), &estimate, 12)
        .await
        .expect("settled");
    let peek = client
        .check_limits(&tokens, Some(0))
        .await
        .expect("an answer");
    assert_eq!(peek.decisions[0].remaining, 88);
    // A usage reading names what is used, and charges nothing.
    for _ in 0..2 {
        let usage = client.usage_limits(&tokens).await.expect("a reading");
        assert_eq!(usage.limits[0].used, 12);
        assert_eq!(usage.limits[0].remaining, 88);
        assert_eq!(usage.limits[0].limit, 100);
        assert!(usage.limits[0].window_start_ms.is_some());
    }

    let attributes = tollgate_client::Attributes {
        ip: Some("203.0.113.7".into()),
        ..Default::default()
    };
    let login = client
        .check_policy("login", &attributes, None)
        .await
        .expect("an answer");
    assert_eq!(login.decisions[0].policy.as_deref(), Some("login"));
    let usage = client
        .usage_policy("login", &attributes)
        .await
        .expect("a reading");
    assert_eq!(usage.limits[0].policy.as_deref(), Some("login"));
    assert_eq!(usage.limits[0].used, 1, "{usage:?}");
    assert_eq!(usage.refused, None);
    match client.check_policy("nope", &attributes, None).await {
        Err(ClientError::Status {
            status: 404,
            detail,
        }) => assert!(detail.contains("no policy is named")),
        other => panic!("expected a 404: {other:?}"),
    }
    let nowhere =
        TollgateClient::new("http://127.0.0.1:1", Duration::from_secs(2)).expect("a client");
    assert!(matches!(
        nowhere.check_limits(&limits, None).await,
        Err(ClientError::Transport(_))
    ));
    assert!(matches!(
        TollgateClient::new("ftp://x", Duration::from_secs(1)),
        Err(ClientError::Url { .. })
    ));
}

const POLICIES: &str = "
policies:
  - name: everything
    key: [global]
    limits: [{ name: everything, algorithm: gcra, quota: 20/s, burst: 10 }]
  - name: slow
    match: { path_prefix: /slow }
    key: [global]
    limits: [{ name: slow, algorithm: fixed_window, quota: 1/h }]
";

async fn upstream() -> SocketAddr {
    let app = axum::Router::new().fallback(|| async { "ok" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

fn proxy(upstream: SocketAddr) -> (Tollgate, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(file.path(), POLICIES).expect("written");
    let target = format!("http://{upstream}");
    let proxy = Tollgate::proxy(&[
        "--config",
        file.path().to_str().expect("UTF-8"),
        "--upstream",
        &target,
    ]);
    (proxy, file)
}

fn hyper_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

fn get(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("a request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_wait_as_advised_and_every_request_gets_through() {
    let (proxy, _file) = proxy(upstream().await);
    let url = format!("{}/work", proxy.http_url());
    let layer = RetryLayer::new(RetryPolicy {
        max_attempts: 10,
        ..RetryPolicy::default()
    });
    let log = layer.log();
    let mut client = ServiceBuilder::new().layer(layer).service(hyper_client());
    for _ in 0..30 {
        let response = client
            .ready()
            .await
            .expect("ready")
            .call(get(&url))
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
    }
    // Ten go at once, then each 429 advises a second (Retry-After rounds 50 ms up), after
    // which the bucket holds ten again: two refusals at most are what the limit forces.
    let retries = log.retries();
    assert!(
        (1..=2).contains(&retries),
        "{retries} retries for 30 requests at a burst of 10"
    );
    assert_eq!(
        log.waited(),
        Duration::from_secs(retries),
        "each wait is the advised one"
    );
    assert_eq!(log.gave_up(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_keeps_a_client_under_the_limit() {
    let (proxy, _file) = proxy(upstream().await);
    let url = format!("{}/paced", proxy.http_url());
    let mut client = ServiceBuilder::new()
        .layer(PacingLayer::new(Arc::new(Pacer::default())))
        .service(hyper_client());
    let mut refused = 0;
    for _ in 0..25 {
        let response = client
            .ready()
            .await
            .expect("ready")
            .call(get(&url))
            .await
            .expect("an answer");
        if response.status() == 429 {
            refused += 1;
        }
    }
    assert_eq!(
        refused, 0,
        "paced by what the responses report, it never meets the limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_sends_retry_gets_and_leave_posts_alone() {
    let (proxy, _file) = proxy(upstream().await);
    let http = reqwest::Client::new();
    let policy = RetryPolicy::default();
    // One an hour on /slow: the second request, a POST, is refused and handed back as it is.
    let slow = format!("{}/slow", proxy.http_url());
    assert_eq!(
        http.get(&slow).send().await.expect("an answer").status(),
        200
    );
    let log = RetryLog::default();
    let post = send_with_retry(&policy, &log, || http.post(&slow).body("once"))
        .await
        .expect("an answer");
    assert_eq!(post.status(), 429);
    assert_eq!(
        (log.retries(), log.gave_up()),
        (0, 1),
        "a POST is not retried"
    );

    // GETs are retried as advised until they pass.
    let url = format!("{}/r", proxy.http_url());
    let log = RetryLog::default();
    for _ in 0..15 {
        let get = send_with_retry(&policy, &log, || http.get(&url))
            .await
            .expect("an answer");
        assert_eq!(get.status(), 200);
    }
    assert!(
        log.retries() >= 1,
        "fifteen at a burst of ten meet the limit"
    );
    assert_eq!(log.waited(), Duration::from_secs(log.retries()));
}
