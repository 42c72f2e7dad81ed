//! The layer in front of a real axum server on a loopback socket, called over HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{any, get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::{Limiter, ManualClock, MemoryStore, Policies};
use tollgate_tower::RateLimitLayer;

struct App {
    base: String,
    clock: ManualClock,
    calls: Arc<AtomicUsize>,
    /// `/slow` answers only once this is set.
    go: Arc<AtomicBool>,
    /// Requests that entered `/slow`.
    entered: Arc<AtomicUsize>,
    client: reqwest::Client,
}

impl App {
    async fn start(config: &str) -> App {
        let policies = Policies::from_yaml("test.yaml", config).expect("valid config");
        let clock = ManualClock::new(1_700_000_000_000_000);
        let store = MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build();
        let limiter = Limiter::with_policies(store, policies);
        let calls = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let entered = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let (slow_go, slow_entered) = (Arc::clone(&go), Arc::clone(&entered));
        let count = move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { "ok" }
        };
        let app = Router::new()
            .route("/login", post(count.clone()))
            .route("/api/{*rest}", any(count.clone()))
            .route(
                "/fail",
                get(|| async { (StatusCode::BAD_GATEWAY, "upstream failed") }),
            )
            .route(
                "/slow",
                get(move || {
                    let (go, entered) = (Arc::clone(&slow_go), Arc::clone(&slow_entered));
                    async move {
                        entered.fetch_add(1, Ordering::SeqCst);
                        while !go.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        "done"
                    }
                }),
            )
            .route(
                "/upload",
                post(|body: axum::body::Bytes| async move { body.len().to_string() }),
            )
            .fallback(any(count))
            .layer(RateLimitLayer::new(limiter.clone()))
            .layer(tollgate_tower::BodyDigestLayer::new(limiter));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .expect("the test server runs");
        });
        App {
            base,
            clock,
            calls,
            go,
            entered,
            client: reqwest::Client::new(),
        }
    }

    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.client.request(
            method.parse().expect("a method"),
            format!("{}{path}", self.base),
        );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the request is answered")
    }

    async fn status(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
        self.send(method, path, headers).await.status().as_u16()
    }

    async fn statuses(
        &self,
        n: usize,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..n {
            statuses.push(self.status(method, path, headers).await);
        }
        statuses
    }
}

#[tokio::test]
async fn a_route_limit_refuses_with_standard_fields_and_a_problem() {
    let app = App::start(
        r#"
headers: [ietf, legacy]
policies:
  - name: login
    match: { method: POST, path: /login }
    key: [ip]
    limits: [{ name: login-per-minute, algorithm: sliding_log, quota: 3/m }]
"#,
    )
    .await;
    let allowed = app.send("POST", "/login", &[]).await;
    assert_eq!(allowed.status(), 200);
    let rate_limit = allowed.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert_eq!(rate_limit, r#""login-per-minute";r=2;t=60"#);
    let policy = allowed.headers()["ratelimit-policy"].to_str().unwrap();
    let parsed: sfv::List = sfv::Parser::new(policy).parse().unwrap();
    assert_eq!(parsed.len(), 1);
    assert_eq!(allowed.headers()["x-ratelimit-remaining"], "2");
    assert_eq!(app.statuses(2, "POST", "/login", &[]).await, [200, 200]);
    let refused = app.send("POST", "/login", &[]).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "60");
    assert_eq!(refused.headers()["cache-control"], "no-store");
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    let problem: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated-policies"], serde_json::json!(["login"]));
    assert_eq!(
        app.calls.load(Ordering::SeqCst),
        3,
        "the refused request never reached the app"
    );
    assert_eq!(
        app.status("GET", "/elsewhere", &[]).await,
        200,
        "other routes are not limited"
    );
}

#[tokio::test]
async fn stacked_policies_are_decided_together_and_tiers_follow_the_plan() {
    // The plan header comes from a front proxy the policies trust (the test's client, here).
    let app = App::start(
        r#"
trusted_proxies: [127.0.0.1]
policies:
  - name: global
    key: const:all
    limits: [{ name: everyone, algorithm: fixed_window, quota: 100/m }]
  - name: api
    match: { path_prefix: /api/ }
    key: [user]
    identity: true
    tier_from: header:x-plan
    tiers:
      free: [{ name: free-rate, algorithm: fixed_window, quota: 2/m }]
      pro: [{ name: pro-rate, algorithm: fixed_window, quota: 5/m }]
"#
        .replace("    identity: true\n", "")
        .as_str(),
    )
    .await;
    let free = [("x-plan", "free")];
    assert_eq!(
        app.statuses(3, "GET", "/api/a", &free).await,
        [200, 200, 429]
    );
    let pro = [("x-plan", "pro")];
    assert_eq!(
        app.statuses(5, "GET", "/api/a", &pro).await,
        [200, 200, 200, 200, 200]
    );
    let response = app.send("GET", "/api/a", &pro).await;
    assert_eq!(response.status(), 429);
    let names = response.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(
        names.contains("\"everyone\"") && names.contains("\"pro-rate\""),
        "{names}"
    );
    // The global limit counted the 7 admitted requests only, not the 2 refused ones.
    let global = app.send("GET", "/other", &[]).await;
    assert!(
        global.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .contains("r=92"),
        "{:?}",
        global.headers()
    );
}

#[tokio::test]
async fn allow_and_deny_lists_come_before_any_limit() {
    let app = App::start(
        r#"
allow: ["user:ops"]
deny: [127.0.0.1]
policies:
  - name: all
    limits: [{ name: n, algorithm: fixed_window, quota: 100/m }]
"#,
    )
    .await;
    let denied = app.send("GET", "/", &[]).await;
    assert_eq!(denied.status(), 403);
    let problem: serde_json::Value = denied.json().await.unwrap();
    assert_eq!(problem["status"], 403);
    assert_eq!(app.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn penalties_escalate_and_decay() {
    let app = App::start(
        r#"
policies:
  - name: login
    match: { path: /login }
    limits: [{ name: per-minute, algorithm: fixed_window, quota: 1/m }]
    penalty: { after: 2, block: [5m, 30m], within: 1m, decay: 2h }
"#,
    )
    .await;
    let minute = Duration::from_secs(60);
    assert_eq!(
        app.statuses(3, "POST", "/login", &[]).await,
        [200, 429, 429]
    );
    // Two violations: blocked for 5 minutes, whatever the per-minute limit says.
    let blocked = app.send("POST", "/login", &[]).await;
    assert_eq!(blocked.status(), 429);
    assert_eq!(blocked.headers()["retry-after"], "300");
    // Every field names the same wait: the limit's own would have said 60 s.
    assert_eq!(
        blocked.headers()["ratelimit"],
        "\"per-minute\";r=0;t=300",
        "RateLimit's t is the block's, as Retry-After"
    );
    let problem: serde_json::Value = blocked.json().await.unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
    );
    app.clock.advance(minute * 4);
    assert_eq!(
        app.status("POST", "/login", &[]).await,
        429,
        "still in the box"
    );
    app.clock.advance(minute + Duration::from_secs(1));
    assert_eq!(
        app.status("POST", "/login", &[]).await,
        200,
        "the first block is over"
    );
    // Two more violations within the decay period: the second, longer block.
    assert_eq!(app.statuses(2, "POST", "/login", &[]).await, [429, 429]);
    assert_eq!(
        app.send("POST", "/login", &[]).await.headers()["retry-after"],
        "1800"
    );
    // After a quiet period as long as the decay, the next block is the first one again.
    app.clock.advance(Duration::from_secs(3 * 3_600));
    assert_eq!(
        app.statuses(3, "POST", "/login", &[]).await,
        [200, 429, 429]
    );
    assert_eq!(
        app.send("POST", "/login", &[]).await.headers()["retry-after"],
        "300"
    );
}

#[tokio::test]
async fn shadow_policies_report_but_never_block() {
    let app = App::start(
        r#"
policies:
  - name: trial
    shadow: true
    limits: [{ name: trial, algorithm: fixed_window, quota: 1/m }]
"#,
    )
    .await;
    assert_eq!(app.statuses(3, "GET", "/", &[]).await, [200, 200, 200]);
    assert_eq!(app.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_queue_holds_requests_for_their_turn() {
    let app = App::start(
        r#"
policies:
  - name: smooth
    limits: [{ name: smooth, algorithm: leaky_bucket, quota: 10/s, burst: 3, mode: queue }]
"#,
    )
    .await;
    // At one store instant, three requests fit: at once, after 100 ms, after 200 ms.
    let mut waits = Vec::new();
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        assert_eq!(app.status("GET", "/", &[]).await, 200);
        waits.push(started.elapsed().as_millis() / 100);
    }
    assert_eq!(waits, [0, 1, 2], "waits in tenths of a second");
    assert_eq!(
        app.status("GET", "/", &[]).await,
        429,
        "past the burst it refuses"
    );
}

#[tokio::test]
async fn past_max_delayed_waiting_requests_are_refused() {
    let app = App::start(
        r#"
max_delayed: 1
policies:
  - name: slow
    limits: [{ name: slow, algorithm: leaky_bucket, quota: 1/m, burst: 5, mode: queue }]
"#,
    )
    .await;
    assert_eq!(
        app.status("GET", "/", &[]).await,
        200,
        "the first goes at once"
    );
    // Two more would wait a minute and two; only one may wait, so one of them is refused at
    // once while the other is still waiting.
    let (second, third) = (app.send("GET", "/", &[]), app.send("GET", "/", &[]));
    let either = async {
        tokio::select! {
            response = second => response,
            response = third => response,
        }
    };
    let refused = tokio::time::timeout(Duration::from_secs(30), either)
        .await
        .expect("one of the two is refused at once, not held");
    assert_eq!(refused.status().as_u16(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let problem: serde_json::Value = refused.json().await.expect("a problem body");
    assert_eq!(
        problem["detail"],
        "too many requests are already waiting for their turn"
    );
    assert_eq!(
        app.calls.load(Ordering::SeqCst),
        1,
        "the waiting one has not gone through"
    );
}

#[tokio::test]
async fn a_failed_upstream_gives_the_cost_back() {
    let app = App::start(
        r#"
policies:
  - name: flaky
    match: { path: /fail }
    refund_on: [5xx]
    limits: [{ name: n, algorithm: fixed_window, quota: 2/m }]
"#,
    )
    .await;
    // Each refund lands before its response: five failures in a row on a limit of two.
    for _ in 0..5 {
        assert_eq!(app.status("GET", "/fail", &[]).await, 502);
    }
}

#[tokio::test]
async fn near_the_limit_requests_are_marked() {
    let app = App::start(
        r#"
policies:
  - name: soft
    soft_limit: { at: 0.5 }
    limits: [{ name: n, algorithm: fixed_window, quota: 4/m }]
"#,
    )
    .await;
    let first = app.send("GET", "/", &[]).await;
    assert!(first.headers().get("tollgate-near-limit").is_none());
    let second = app.send("GET", "/", &[]).await;
    assert_eq!(second.headers()["tollgate-near-limit"], "1");
}

#[tokio::test]
async fn costs_come_from_a_header_or_the_body_size() {
    let app = App::start(
        r#"
policies:
  - name: units
    match: { path_prefix: /api/ }
    cost: header:x-cost
    limits: [{ name: units, algorithm: fixed_window, quota: 10/m }]
  - name: bytes
    match: { path: /upload }
    cost: body
    limits: [{ name: bytes, algorithm: fixed_window, quota: 1000/m }]
"#,
    )
    .await;
    assert_eq!(app.status("GET", "/api/x", &[("x-cost", "7")]).await, 200);
    assert_eq!(app.status("GET", "/api/x", &[("x-cost", "4")]).await, 429);
    assert_eq!(app.status("GET", "/api/x", &[("x-cost", "3")]).await, 200);
    let upload = |size: usize| {
        app.client
            .post(format!("{}/upload", app.base))
            .body(vec![b'x'; size])
            .send()
    };
    let response = upload(600).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .contains("qu=\"content-bytes\"")
    );
    assert_eq!(
        upload(600).await.unwrap().status(),
        429,
        "600 + 600 bytes exceed 1000 per minute"
    );
}

#[tokio::test]
async fn a_body_without_a_length_is_refused_where_bytes_are_counted() {
    let app = App::start(
        r#"
policies:
  - name: bytes
    match: { path: /upload }
    cost: body
    limits: [{ name: bytes, algorithm: fixed_window, quota: 1000/m }]
"#,
    )
    .await;
    // A chunked body cannot be counted before it is read: it would otherwise cost nothing.
    let address = app.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connected");
    let chunked = format!(
        "POST /upload HTTP/1.1\r\nHost: {address}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    stream.write_all(chunked.as_bytes()).await.expect("sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 411 "), "{answer}");
    assert!(
        answer.contains("Content-Length"),
        "the problem says what to send: {answer}"
    );
    // A body with a length, or none, is counted as before.
    let sized = app
        .client
        .post(format!("{}/upload", app.base))
        .body("hello")
        .send()
        .await
        .expect("an answer");
    assert_eq!(sized.status(), 200);
    assert_eq!(app.status("POST", "/upload", &[]).await, 200);
}

#[tokio::test]
async fn idempotent_retries_are_charged_once() {
    let app = App::start(
        r#"
idempotency: { header: Idempotency-Key, window: 10m }
policies:
  - name: payments
    limits: [{ name: n, algorithm: fixed_window, quota: 2/m }]
"#,
    )
    .await;
    let key = [("idempotency-key", "order-17")];
    assert_eq!(
        app.statuses(4, "POST", "/pay", &key).await,
        [200, 200, 200, 200]
    );
    assert_eq!(
        app.calls.load(Ordering::SeqCst),
        1,
        "replays get the first answer, never the app"
    );
    assert_eq!(
        app.statuses(2, "POST", "/pay", &[("idempotency-key", "order-18")])
            .await,
        [200, 200]
    );
    assert_eq!(
        app.status("POST", "/pay", &[]).await,
        429,
        "order-17 and order-18 took the 2 requests"
    );
}

#[tokio::test]
async fn concurrency_slots_are_released_on_completion_and_on_disconnect() {
    let app = App::start(
        r#"
policies:
  - name: slow
    match: { path: /slow }
    concurrency: { max: 1, lease: 1m }
"#,
    )
    .await;
    let slow = |app: &App| {
        let (client, url) = (app.client.clone(), format!("{}/slow", app.base));
        tokio::spawn(async move { client.get(url).send().await.map(|r| r.status().as_u16()) })
    };
    // A probe is admitted when it gets into the handler (and times out there), refused with 429.
    let probe_admitted = |app: &App| {
        let (client, url, entered) = (
            app.client.clone(),
            format!("{}/slow", app.base),
            Arc::clone(&app.entered),
        );
        async move {
            let before = entered.load(Ordering::SeqCst);
            let sent = client
                .get(url)
                .timeout(Duration::from_millis(300))
                .send()
                .await;
            match sent {
                Ok(response) => {
                    assert_eq!(response.status(), 429);
                    false
                }
                Err(_) => entered.load(Ordering::SeqCst) > before,
            }
        }
    };
    let first = slow(&app);
    wait_until(|| async { app.entered.load(Ordering::SeqCst) == 1 }).await;
    assert!(!probe_admitted(&app).await, "the only slot is taken");
    app.go.store(true, Ordering::SeqCst);
    assert_eq!(first.await.unwrap().unwrap(), 200);
    // Released when the response completed: the next request is admitted and answered.
    wait_until(|| async { app.status("GET", "/slow", &[]).await == 200 }).await;
    // Now hold the slot again and let the client go away mid-request.
    app.go.store(false, Ordering::SeqCst);
    let entered = app.entered.load(Ordering::SeqCst);
    let held = slow(&app);
    wait_until(|| async { app.entered.load(Ordering::SeqCst) == entered + 1 }).await;
    assert!(!probe_admitted(&app).await, "the slot is held");
    held.abort();
    // The held request never finishes on its own (go is false): only the disconnect frees it.
    wait_until(|| probe_admitted(&app)).await;
    app.go.store(true, Ordering::SeqCst);
}

#[tokio::test]
async fn a_forged_forwarded_header_from_an_untrusted_client_is_ignored() {
    let app = App::start(
        r#"
policies:
  - name: per-ip
    key: ip
    limits: [{ name: n, algorithm: fixed_window, quota: 2/m }]
"#,
    )
    .await;
    for fake in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        let status = app.status("GET", "/", &[("x-forwarded-for", fake)]).await;
        if fake == "3.3.3.3" {
            assert_eq!(
                status, 429,
                "a fresh X-Forwarded-For must not be a fresh quota"
            );
        }
    }
}

#[tokio::test]
async fn clients_of_one_ipv6_slash_64_share_a_limit_through_a_trusted_proxy() {
    let app = App::start(
        r#"
trusted_proxies: [127.0.0.1]
policies:
  - name: per-ip
    key: ip
    limits: [{ name: n, algorithm: fixed_window, quota: 2/m }]
"#,
    )
    .await;
    let a = [("x-forwarded-for", "2001:db8:1:2::a")];
    let b = [("x-forwarded-for", "2001:db8:1:2:ffff::b")];
    let c = [("x-forwarded-for", "2001:db8:1:3::c")];
    assert_eq!(app.status("GET", "/", &a).await, 200);
    assert_eq!(app.status("GET", "/", &b).await, 200);
    assert_eq!(app.status("GET", "/", &a).await, 429);
    assert_eq!(
        app.status("GET", "/", &c).await,
        200,
        "another /64 is another client"
    );
}

#[tokio::test]
async fn grpc_requests_get_resource_exhausted() {
    let app = App::start(
        r#"
policies:
  - name: rpc
    limits: [{ name: n, algorithm: fixed_window, quota: 1/m }]
"#,
    )
    .await;
    let grpc = [("content-type", "application/grpc")];
    assert_eq!(app.status("POST", "/pkg.Service/Method", &grpc).await, 200);
    let refused = app.send("POST", "/pkg.Service/Method", &grpc).await;
    assert_eq!(
        refused.status(),
        200,
        "gRPC refusals are trailers-only responses"
    );
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert_eq!(refused.headers()["content-type"], "application/grpc");
    assert!(refused.headers().contains_key("grpc-retry-pushback-ms"));
}

#[tokio::test]
async fn a_deny_listed_grpc_client_is_refused_as_denied_or_as_exhausted_as_configured() {
    let grpc = [("content-type", "application/grpc")];
    for (deny_status, grpc_status) in [("403", "7"), ("429", "8")] {
        let app = App::start(&format!(
            r#"
deny: [127.0.0.1]
deny_status: {deny_status}
policies:
  - name: rpc
    limits: [{{ name: n, algorithm: fixed_window, quota: 100/m }}]
"#
        ))
        .await;
        let refused = app.send("POST", "/pkg.Service/Method", &grpc).await;
        assert_eq!(
            refused.headers()["grpc-status"],
            grpc_status,
            "deny_status {deny_status}"
        );
        assert_eq!(app.calls.load(Ordering::SeqCst), 0);
    }
}

/// Polls `condition` (a few times a tick) until it holds; fails after about five seconds.
async fn wait_until<F, Fut>(condition: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the condition never held");
}

/// Served by plain `axum::serve` (no `ConnectInfo`), as a README snippet once showed, every
/// client used to share the key `ip:unknown`, so one client locked every other out. A policy
/// keyed by client address with no address is now a loud error: 500, naming the fix.
#[tokio::test]
async fn without_a_client_address_an_address_keyed_policy_is_an_error_not_a_shared_bucket() {
    let policies = Policies::from_yaml(
        "test.yaml",
        "policies:\n  - name: login\n    key: [ip]\n    limits: [{ algorithm: gcra, quota: 1/m }]\n",
    )
    .expect("valid config");
    let app = Router::new()
        .route("/login", post(|| async { "ok" }))
        .layer(RateLimitLayer::new(Limiter::with_policies(
            MemoryStore::new(),
            policies,
        )));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!(
        "http://{}/login",
        listener.local_addr().expect("its address")
    );
    tokio::spawn(async move {
        axum::serve(listener, app)
            .await
            .expect("the test server runs");
    });
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let response = client.post(&url).send().await.expect("an answer");
        assert_eq!(response.status(), 500);
        let problem: serde_json::Value = response.json().await.expect("problem+json");
        assert_eq!(problem["status"], 500);
        let detail = problem["detail"].as_str().expect("a detail");
        assert!(
            detail.contains("policy \"login\" counts by the client's address")
                && detail.contains("ConnectInfo"),
            "{detail}"
        );
    }
}
