//! The layer's short form (`RateLimitLayer::per_minute(..).burst(..).key(..).on_refusal(..)`)
//! in front of a real axum server on a loopback socket, called over HTTP; and the refusal hook
//! on the policy form. Time is a manual clock: nothing here waits for a rate to refill.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{Response, StatusCode};
use tollgate::policy::Reason;
use tollgate::{Limiter, ManualClock, MemoryStore, Policies};
use tollgate_tower::{BuildError, RateLimitLayer, Refused};

/// A store on a manual clock, and the clock.
fn manual_store() -> (MemoryStore, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build();
    (store, clock)
}

/// Serves `/` behind `layer` on a loopback port; the base URL. With `connect_info` false the
/// server gives the layer no client address.
async fn serve(layer: RateLimitLayer, connect_info: bool) -> String {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(async move {
        let served = if connect_info {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        } else {
            axum::serve(listener, app).await
        };
        served.expect("the test server runs");
    });
    base
}

async fn get_with(base: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{base}/"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("an answer")
}

async fn statuses(base: &str, n: usize, headers: &[(&str, &str)]) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        statuses.push(get_with(base, headers).await.status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn a_rate_and_a_burst_per_client_with_the_standard_fields() {
    let (store, clock) = manual_store();
    let layer = RateLimitLayer::per_minute(2)
        .burst(3)
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(layer, true).await;
    let first = get_with(&base, &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["ratelimit"], r#""rate";r=2;t=30"#);
    assert_eq!(statuses(&base, 2, &[]).await, [200, 200], "the burst of 3");
    let refused = get_with(&base, &[]).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "30", "one every 30 s");
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    let problem: serde_json::Value = refused.json().await.expect("problem+json");
    assert_eq!(
        problem["violated-policies"],
        serde_json::json!(["rate-limit"])
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        statuses(&base, 2, &[]).await,
        [200, 429],
        "one more after 30 s"
    );
}

#[tokio::test]
async fn the_key_function_counts_by_its_key_and_falls_back_to_the_address() {
    let (store, _clock) = manual_store();
    let layer = RateLimitLayer::per_minute(2)
        .key(|request| {
            let user = request.headers.get("x-user")?.to_str().ok()?;
            Some(user.to_owned())
        })
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(layer, true).await;
    let alice = [("x-user", "alice")];
    assert_eq!(statuses(&base, 3, &alice).await, [200, 200, 429]);
    assert_eq!(
        statuses(&base, 1, &[("x-user", "bob")]).await,
        [200],
        "another key counts apart"
    );
    assert_eq!(
        statuses(&base, 3, &[]).await,
        [200, 200, 429],
        "no key: counted by the client's address, not let through"
    );
    assert_eq!(statuses(&base, 1, &alice).await, [429]);
}

#[tokio::test]
async fn the_client_address_comes_through_trusted_proxies_only() {
    let (store, _clock) = manual_store();
    let proxied = RateLimitLayer::per_minute(2)
        .trusted_proxies([IpAddr::from([127, 0, 0, 1])])
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(proxied, true).await;
    let seven = [("x-forwarded-for", "203.0.113.7")];
    assert_eq!(statuses(&base, 3, &seven).await, [200, 200, 429]);
    let eight = [("x-forwarded-for", "203.0.113.8")];
    assert_eq!(statuses(&base, 1, &eight).await, [200]);

    // Without a trusted proxy the header is the client's own word, and not believed.
    let (store, _clock) = manual_store();
    let direct = RateLimitLayer::per_minute(2)
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(direct, true).await;
    assert_eq!(statuses(&base, 1, &seven).await, [200]);
    assert_eq!(statuses(&base, 1, &eight).await, [200]);
    assert_eq!(
        statuses(&base, 1, &[("x-forwarded-for", "203.0.113.9")]).await,
        [429],
        "a forged address does not buy a fresh limit"
    );
}

/// Text for browsers, JSON for clients that ask for it: the hook reads the request.
fn own_answer(refused: &Refused<'_>) -> Response<String> {
    let json = refused
        .request()
        .headers
        .get("accept")
        .is_some_and(|accept| accept == "application/json");
    let (content_type, body) = if json {
        (
            "application/json",
            serde_json::json!({"error": refused.reason().as_str(), "path": refused.request().uri.path()})
                .to_string(),
        )
    } else {
        ("text/plain", format!("slow down ({})", refused.detail()))
    };
    Response::builder()
        .status(refused.status())
        .header("content-type", content_type)
        .header("retry-after", "120")
        .body(body)
        .expect("a response")
}

#[tokio::test]
async fn a_refusal_hook_answers_with_the_rate_limit_fields_added() {
    let (store, _clock) = manual_store();
    let layer = RateLimitLayer::per_minute(1)
        .on_refusal(own_answer)
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(layer, true).await;
    assert_eq!(statuses(&base, 1, &[]).await, [200]);
    let refused = get_with(&base, &[]).await;
    assert_eq!(refused.status(), 429);
    let headers = refused.headers().clone();
    assert_eq!(headers["content-type"], "text/plain");
    let retry_after: Vec<_> = headers.get_all("retry-after").iter().collect();
    assert_eq!(retry_after, ["120"], "the hook's own field stays, alone");
    assert_eq!(headers["ratelimit"], r#""rate";r=0;t=60"#, "added");
    assert_eq!(headers["cache-control"], "no-store", "added");
    let body = refused.text().await.expect("a body");
    assert!(body.starts_with("slow down ("), "{body}");

    let refused = get_with(&base, &[("accept", "application/json")]).await;
    assert_eq!(refused.headers()["content-type"], "application/json");
    let body: serde_json::Value = refused.json().await.expect("JSON");
    assert_eq!(
        body,
        serde_json::json!({"error": "over_limit", "path": "/"})
    );
}

#[tokio::test]
async fn the_refusal_hook_serves_the_policy_form_too() {
    let policies = Policies::from_yaml(
        "test.yaml",
        r#"
deny: [127.0.0.1]
policies:
  - name: api
    limits: [{ name: per-minute, algorithm: gcra, quota: 10/m }]
"#,
    )
    .expect("valid config");
    let (store, _clock) = manual_store();
    let layer =
        RateLimitLayer::new(Limiter::with_policies(store, policies)).on_refusal(|refused| {
            assert!(matches!(refused.reason(), Reason::DenyListed { .. }));
            Response::builder()
                .status(refused.status())
                .body("not here")
                .expect("a response")
        });
    let base = serve(layer, true).await;
    let refused = get_with(&base, &[]).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(refused.text().await.expect("a body"), "not here");
}

/// Served without a client address, a layer keyed by address cannot decide: the hook still
/// answers, with the status that says so.
#[tokio::test]
async fn the_refusal_hook_answers_what_the_layer_cannot_decide() {
    let (store, _clock) = manual_store();
    let layer = RateLimitLayer::per_minute(5)
        .on_refusal(own_answer)
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(layer, false).await;
    let refused = get_with(&base, &[("accept", "application/json")]).await;
    assert_eq!(refused.status(), 500);
    let body: serde_json::Value = refused.json().await.expect("JSON");
    assert_eq!(body["error"], "misconfigured");
}

#[tokio::test]
async fn a_calendar_quota_renews_at_the_calendars_boundary() {
    // 23:13:20 in Berlin on November 14th: the month from the 15th renews 2 800 s later.
    let (store, clock) = manual_store();
    let monthly = tollgate::CalendarSpec::new("Europe/Berlin")
        .and_then(|spec| spec.anchor_day(15))
        .expect("a calendar");
    let layer = RateLimitLayer::rate("2/month".parse().expect("a quota"))
        .calendar(monthly)
        .store(store)
        .build()
        .expect("a layer");
    let base = serve(layer, true).await;
    assert_eq!(statuses(&base, 2, &[]).await, [200, 200]);
    let refused = get_with(&base, &[]).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "2800");
    clock.advance(Duration::from_secs(2_800));
    assert_eq!(statuses(&base, 3, &[]).await, [200, 200, 429]);
    let burst = RateLimitLayer::per_hour(24)
        .calendar(tollgate::CalendarSpec::new("UTC").expect("a calendar"))
        .build()
        .expect_err("a quota per hour is no calendar period");
    assert!(burst.to_string().contains("calendar"), "{burst}");
}

#[test]
fn settings_out_of_range_are_errors_that_say_which() {
    let error = RateLimitLayer::per_second(0)
        .build()
        .expect_err("a rate of zero");
    assert!(matches!(error, BuildError::Limit(_)), "{error}");
    assert!(
        error.to_string().contains("quota count of at least 1"),
        "{error}"
    );
    let error = RateLimitLayer::per_second(10)
        .burst(0)
        .build()
        .expect_err("a burst of zero");
    assert!(
        error.to_string().contains("the burst must be at least 1"),
        "{error}"
    );
    let error = RateLimitLayer::per_second(u64::MAX)
        .build()
        .expect_err("a count too large");
    assert!(matches!(error, BuildError::Rate(_)), "{error}");
    assert!(
        error
            .to_string()
            .starts_with("rate limit layer: the rate: "),
        "{error}"
    );
}
