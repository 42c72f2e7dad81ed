//! `tollgate serve` on Redis: several servers share one exact limit, and a store that is gone
//! shows in readiness and in the answers.

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::Tollgate;
use tollgate_testkit::RedisServer;

async fn check(base: &str, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/check"))
        .json(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status();
    (status, response.json().await.expect("JSON"))
}

#[tokio::test]
async fn servers_on_one_redis_share_one_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = Tollgate::serve(&["--redis", &url]);
    let b = Tollgate::serve(&["--redis", &url]);
    assert_eq!(a.printed["store"], format!("redis at {url}"));
    let body =
        json!({"limits": [{"key": "tenant:acme", "algorithm": "sliding_window", "quota": "5/h"}]});
    let mut allowed = Vec::new();
    for round in 0..8 {
        let server = if round % 2 == 0 { &a } else { &b };
        allowed.push(check(&server.http_url(), &body).await.1["allowed"] == true);
    }
    assert_eq!(allowed, [true, true, true, true, true, false, false, false]);

    // Policies too: the built-in login policy counts one address across both servers.
    let login = json!({"policy": "login", "attributes": {"ip": "203.0.113.9"}});
    let mut remaining = Vec::new();
    for round in 0..5 {
        let server = if round % 2 == 0 { &a } else { &b };
        remaining
            .push(check(&server.http_url(), &login).await.1["decisions"][0]["remaining"].clone());
    }
    assert_eq!(
        remaining,
        [json!(4), json!(3), json!(2), json!(1), json!(0)]
    );
}

#[tokio::test]
async fn a_redis_that_is_gone_makes_the_server_unready_and_checks_unavailable() {
    let mut redis = RedisServer::start();
    let server = Tollgate::serve(&["--redis", &redis.url()]);
    let base = server.http_url();
    let ready = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("an answer");
    assert_eq!(ready.status(), StatusCode::OK);
    let ready: Value = ready.json().await.expect("JSON");
    assert_eq!(ready["store"], "redis");

    redis.kill();
    let unready = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("an answer");
    assert_eq!(unready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        unready.headers()["content-type"],
        "application/problem+json"
    );
    let body = json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "5/s"}]});
    let (status, problem) = check(&base, &body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        problem["detail"]
            .as_str()
            .expect("a detail")
            .starts_with("the rate limiter cannot decide"),
        "{problem}"
    );
    let healthz = reqwest::get(format!("{base}/healthz"))
        .await
        .expect("an answer");
    assert_eq!(
        healthz.status(),
        StatusCode::OK,
        "the process itself is fine"
    );

    redis.restart(&[]);
    support::eventually("the server is ready again once Redis is back", || async {
        reqwest::get(format!("{base}/readyz"))
            .await
            .is_ok_and(|response| response.status() == StatusCode::OK)
    })
    .await;
    assert_eq!(check(&base, &body).await.1["allowed"], true);
}

#[test]
fn an_unreachable_redis_at_start_up_is_a_clear_error() {
    let redis = RedisServer::start();
    let url = redis.url();
    drop(redis);
    let (status, _, stderr) = support::run(&support::serve_args(&["--redis", &url]));
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot connect to redis at {url}")),
        "{stderr}"
    );
}
