//! `tollgate proxy` in front of a real upstream: admitted requests are forwarded with their
//! bodies streamed both ways, refused ones never reach it, and it shuts down gracefully.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::routing::{any, get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::Tollgate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

/// `echo` is a GCRA limit with a burst of three, refilled one in twenty minutes: a test that
/// counts to its fourth request has no window boundary to cross, whenever it runs.
const POLICIES: &str = "
headers: [ietf, legacy]
policies:
  - name: echo
    match: { path_prefix: /echo }
    key: [ip]
    limits: [{ name: echo-per-hour, algorithm: gcra, quota: 3/h }]
  - name: fail
    match: { path: /fail }
    key: [ip]
    limits: [{ name: fail-per-hour, algorithm: fixed_window, quota: 2/h }]
    refund_on: [5xx]
";

/// What the upstream saw and the hooks a test holds it with.
#[derive(Clone, Default)]
struct Upstream {
    requests: Arc<AtomicU64>,
    /// Signalled when a held request has arrived (or a streamed body's first chunk has).
    arrived: Arc<Notify>,
    /// Signalled by the test to let a held request go on.
    release: Arc<Notify>,
    /// The chunks of a streamed request body, as they come.
    chunks: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// The proxy's connections `echo` was asked over, by their port.
    connections: Arc<std::sync::Mutex<std::collections::HashSet<u16>>>,
}

async fn echo(
    State(upstream): State<Upstream>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> axum::Json<Value> {
    upstream.requests.fetch_add(1, Ordering::SeqCst);
    upstream
        .connections
        .lock()
        .expect("not poisoned")
        .insert(peer.port());
    let headers: serde_json::Map<String, Value> = request
        .headers()
        .iter()
        .map(|(name, value)| (name.to_string(), json!(value.to_str().unwrap_or("?"))))
        .collect();
    axum::Json(json!({"uri": request.uri().to_string(), "headers": headers}))
}

async fn fail(State(upstream): State<Upstream>) -> StatusCode {
    upstream.requests.fetch_add(1, Ordering::SeqCst);
    StatusCode::INTERNAL_SERVER_ERROR
}

async fn held(State(upstream): State<Upstream>) -> &'static str {
    upstream.arrived.notify_one();
    upstream.release.notified().await;
    "finally\n"
}

/// Sends `first`, waits for the test, then sends `second`.
async fn trickle(State(upstream): State<Upstream>) -> Body {
    let stream = futures_util::stream::once(async { Ok::<_, std::io::Error>("first\n") }).chain(
        futures_util::stream::once(async move {
            upstream.release.notified().await;
            Ok("second\n")
        }),
    );
    Body::from_stream(stream)
}

/// Reports each chunk of the request body as it arrives, then the total.
async fn upload(State(upstream): State<Upstream>, body: Body) -> String {
    let mut stream = body.into_data_stream();
    let mut total = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("the body streams");
        total += chunk.len();
        if let Some(chunks) = &upstream.chunks {
            let _ = chunks.send(chunk.to_vec());
        }
    }
    format!("{total}")
}

async fn start_upstream(upstream: Upstream) -> SocketAddr {
    let app = Router::new()
        .route("/base/echo", any(echo))
        .route("/base/fail", get(fail))
        .route("/base/held", get(held))
        .route("/base/trickle", get(trickle))
        .route("/base/upload", post(upload))
        .with_state(upstream);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    address
}

fn policy_file() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), POLICIES).expect("written");
    file
}

fn proxy_to(upstream: SocketAddr, policies: &tempfile::NamedTempFile, extra: &[&str]) -> Tollgate {
    let upstream = format!("http://{upstream}/base");
    let mut args = vec![
        "--config",
        policies.path().to_str().expect("UTF-8"),
        "--upstream",
        &upstream,
    ];
    args.extend_from_slice(extra);
    Tollgate::proxy(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_requests_are_forwarded_with_the_rate_limit_fields_and_the_rest_refused() {
    let upstream = Upstream::default();
    let address = start_upstream(upstream.clone()).await;
    let policies = policy_file();
    let proxy = proxy_to(address, &policies, &[]);
    assert_eq!(proxy.printed["upstream"], format!("http://{address}/base"));
    let base = proxy.http_url();
    let client = reqwest::Client::new();
    for remaining in ["2", "1", "0"] {
        let response = client
            .get(format!("{base}/echo?x=1"))
            .header("connection", "x-secret")
            .header("x-secret", "for this hop only")
            .header("x-forwarded-for", "198.51.100.1")
            .header("x-kept", "yes")
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-ratelimit-limit"], "3");
        assert_eq!(response.headers()["x-ratelimit-remaining"], remaining);
        assert!(response.headers().contains_key("ratelimit"));
        // The upstream's framing is kept: a body of known length is not re-sent chunked.
        assert!(
            response.headers().contains_key("content-length"),
            "{:?}",
            response.headers()
        );
        let seen: Value = response.json().await.expect("JSON");
        assert_eq!(seen["uri"], "/base/echo?x=1");
        let headers = &seen["headers"];
        assert_eq!(headers["x-kept"], "yes");
        assert!(
            headers.get("x-secret").is_none(),
            "hop-by-hop fields stay: {headers}"
        );
        assert_eq!(headers["x-forwarded-for"], "198.51.100.1, 127.0.0.1");
        assert_eq!(
            headers["x-forwarded-host"],
            base.trim_start_matches("http://")
        );
        assert_eq!(headers["host"], address.to_string());
    }
    let refused = client
        .get(format!("{base}/echo"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(
        upstream.requests.load(Ordering::SeqCst),
        3,
        "the refused request never arrived"
    );

    // Failures the policy refunds on do not use up the limit.
    for _ in 0..4 {
        let response = client
            .get(format!("{base}/fail"))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 7);

    // The proxy's admin listener serves its metrics.
    let metrics = reqwest::get(format!("http://{}/metrics", proxy.address("admin")))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(
            r#"tollgate_decisions_total{policy="echo",limit="echo-per-hour",outcome="denied"} 1"#
        ),
        "{metrics}"
    );
}

/// Two clients on a kept-alive connection each, three rounds of one request each, through a
/// proxy with `workers` (the `--http-workers` value): the statuses, and how many connections
/// the upstream saw.
async fn two_clients_through(workers: &str) -> (Vec<u16>, usize) {
    let upstream = Upstream::default();
    let address = start_upstream(upstream.clone()).await;
    let policies = policy_file();
    let proxy = proxy_to(address, &policies, &["--http-workers", workers]);
    let base = proxy.http_url();
    // The second client's connection is accepted while the first is open, so with two
    // workers it goes to the other one.
    let clients = [reqwest::Client::new(), reqwest::Client::new()];
    let mut statuses = Vec::new();
    for round in 0..3 {
        for client in &clients {
            let response = client
                .get(format!("{base}/echo?round={round}"))
                .send()
                .await
                .expect("an answer");
            statuses.push(response.status().as_u16());
            response.bytes().await.expect("the body");
        }
    }
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 3);
    let connections = upstream.connections.lock().expect("not poisoned").len();
    (statuses, connections)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_two_worker_threads_share_one_limit_and_keep_their_own_upstream_connections()
{
    let (statuses, connections) = two_clients_through("2").await;
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    // Each worker made its own connection to the upstream and used it again: the first
    // client's second request found its worker's connection idle, where one pool shared by
    // both workers would have carried all three requests on one connection.
    assert_eq!(connections, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_shared_runtime_every_client_connection_takes_the_one_idle_upstream_connection() {
    // `--http-workers 0`: one pool for the process, so the three requests, one at a time,
    // all go on the first upstream connection.
    let (statuses, connections) = two_clients_through("0").await;
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert_eq!(connections, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_both_ways() {
    let (chunks, mut received) = mpsc::unbounded_channel();
    let upstream = Upstream {
        chunks: Some(chunks),
        ..Upstream::default()
    };
    let address = start_upstream(upstream.clone()).await;
    let policies = policy_file();
    let proxy = proxy_to(address, &policies, &[]);

    // The response's first part arrives while the upstream is still holding the rest.
    let mut response = reqwest::get(format!("{}/trickle", proxy.http_url()))
        .await
        .expect("an answer");
    let first = response
        .chunk()
        .await
        .expect("a chunk")
        .expect("not the end");
    assert_eq!(&first[..], b"first\n");
    upstream.release.notify_one();
    let second = response
        .chunk()
        .await
        .expect("a chunk")
        .expect("not the end");
    assert_eq!(&second[..], b"second\n");

    // The request's first chunk reaches the upstream before the client has sent the rest.
    let mut socket = tokio::net::TcpStream::connect(proxy.address("listen"))
        .await
        .expect("connects");
    socket
        .write_all(b"POST /upload HTTP/1.1\r\nhost: proxy\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await
        .expect("writes");
    assert_eq!(received.recv().await.expect("a chunk"), b"hello");
    let big = vec![b'x'; 1 << 20];
    socket
        .write_all(format!("{:x}\r\n", big.len()).as_bytes())
        .await
        .expect("writes");
    socket.write_all(&big).await.expect("writes");
    socket.write_all(b"\r\n0\r\n\r\n").await.expect("writes");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).ends_with(&format!("{}", 5 + big.len())) {
        let read = socket.read(&mut buffer).await.expect("reads");
        assert!(
            read > 0,
            "the proxy closed early: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buffer[..read]);
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200 OK"));

    // A large body both ways through the ordinary client.
    let body = vec![7u8; 8 << 20];
    let response = reqwest::Client::new()
        .post(format!("{}/upload", proxy.http_url()))
        .body(body)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.text().await.expect("text"), (8 << 20).to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_or_silent_upstream_is_a_gateway_problem() {
    let policies = policy_file();
    // A port held by a socket that never listens: a connection to it is refused, and no other
    // process can take the port while the test runs (a port merely freed could be).
    let held = tokio::net::TcpSocket::new_v4().expect("a socket");
    held.bind("127.0.0.1:0".parse().expect("an address"))
        .expect("a free port");
    let closed = held.local_addr().expect("an address");
    let proxy = proxy_to(closed, &policies, &[]);
    let response = reqwest::get(format!("{}/echo", proxy.http_url()))
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = response.json().await.expect("JSON");
    assert!(
        problem["detail"]
            .as_str()
            .expect("a detail")
            .contains("could not be reached"),
        "{problem}"
    );

    let upstream = Upstream::default();
    let address = start_upstream(upstream.clone()).await;
    let proxy = proxy_to(address, &policies, &["--upstream-timeout", "300ms"]);
    let response = reqwest::get(format!("{}/held", proxy.http_url()))
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    upstream.release.notify_one();
    // The proxy's own metrics, on its admin listener: what the client got, what the upstream
    // did (a timeout, here), and how long it took.
    let metrics = reqwest::get(format!("http://{}/metrics", proxy.address("admin")))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    let sample = |series: &str| -> Option<f64> {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    };
    assert_eq!(
        sample(r#"tollgate_proxy_requests_total{class="5xx"}"#),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(r#"tollgate_proxy_requests_total{class="2xx"}"#),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        sample(r#"tollgate_proxy_upstream_requests_total{class="timeout"}"#),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample("tollgate_proxy_upstream_duration_seconds_count"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&format!(
            r#"tollgate_build_info{{version="{}"}}"#,
            env!("CARGO_PKG_VERSION")
        )),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_requests_under_way_finish() {
    let upstream = Upstream::default();
    let address = start_upstream(upstream.clone()).await;
    let policies = policy_file();
    let mut proxy = proxy_to(address, &policies, &[]);
    let url = format!("{}/held", proxy.http_url());
    let in_flight = tokio::spawn(async move { reqwest::get(url).await?.text().await });
    upstream.arrived.notified().await;
    proxy.signal("TERM");
    proxy.wait_for_log("shutting down");
    upstream.release.notify_one();
    let answer = in_flight
        .await
        .expect("the task ends")
        .expect("the request finishes");
    assert_eq!(answer, "finally\n");
    let status = tokio::task::spawn_blocking(move || proxy.wait())
        .await
        .expect("waited");
    assert!(status.success(), "{status:?}");
}

/// Sends `GET target` as written (no client library to tidy the path up), and returns the
/// status and the body.
async fn raw_get(proxy: SocketAddr, target: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(proxy)
        .await
        .expect("connects");
    let request = format!("GET {target} HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("an answer");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

/// Policies matched the raw path and the proxy forwarded it unchanged: `/v1/chat/%63ompletions`
/// skipped the policy while the upstream routed it to the limited handler. Paths are matched
/// and forwarded as an upstream routes them; paths servers read differently are refused.
#[tokio::test]
async fn encoded_and_dotted_paths_are_limited_and_forwarded_as_the_upstream_routes_them() {
    let upstream = Upstream::default();
    let address = start_upstream(upstream.clone()).await;
    let policies = policy_file();
    let proxy = proxy_to(address, &policies, &[]);
    let listen = proxy.address("listen");
    for target in ["/%65cho", "/./echo", "//echo"] {
        let (status, body) = raw_get(listen, target).await;
        assert_eq!(status, 200, "{target}: {body}");
        let seen: Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| {
            // A chunked body: the JSON is on its own line.
            serde_json::from_str(body.lines().nth(1).unwrap_or_default()).expect("JSON")
        });
        assert_eq!(seen["uri"], "/base/echo", "{target}");
    }
    let (status, _) = raw_get(listen, "/x/../echo").await;
    assert_eq!(
        status, 429,
        "the fourth spelling of /echo is the fourth request"
    );
    let before = upstream.requests.load(Ordering::SeqCst);
    let (status, body) = raw_get(listen, "/ec%2Fho").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("servers read in different ways"), "{body}");
    assert_eq!(
        upstream.requests.load(Ordering::SeqCst),
        before,
        "never forwarded"
    );
}
