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
    let server = Tollgate::serve(&["--redis", &redis.url(), "--readiness", "store"]);
    let base = server.http_url();
    let ready = probed_readiness(&base).await;
    assert_eq!(ready.status(), StatusCode::OK);
    let ready: Value = ready.json().await.expect("JSON");
    assert_eq!(ready["store"], "redis");
    assert_eq!(ready["store_up"], true);

    redis.kill();
    support::eventually("the next store probe finds Redis gone", || async {
        reqwest::get(format!("{base}/readyz"))
            .await
            .is_ok_and(|response| response.status() == StatusCode::SERVICE_UNAVAILABLE)
    })
    .await;
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

    // The operator sees it without sending traffic: a gauge and one WARN naming the cause.
    server.wait_for_log("the store is lost");
    assert_eq!(store_up(&base).await, Some(0.0));
    let logged = server.stderr();
    let warning = logged
        .lines()
        .find(|line| line.contains("the store is lost"))
        .expect("the WARN line");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("until it answers again"), "{warning}");

    redis.restart(&[]);
    support::eventually("the server is ready again once Redis is back", || async {
        reqwest::get(format!("{base}/readyz"))
            .await
            .is_ok_and(|response| response.status() == StatusCode::OK)
    })
    .await;
    assert_eq!(check(&base, &body).await.1["allowed"], true);
    server.wait_for_log("the store answers again after an outage of");
    assert_eq!(store_up(&base).await, Some(1.0));
    assert_eq!(
        server.stderr().matches("the store is lost").count(),
        1,
        "one WARN per outage, not one per probe"
    );
}

/// `/readyz` once the store has been probed (before the first probe, a pod that waits for its
/// store is not ready, for want of knowing).
async fn probed_readiness(base: &str) -> reqwest::Response {
    support::eventually("the store's first probe", || async {
        let answer = reqwest::get(format!("{base}/readyz"))
            .await
            .expect("an answer");
        !answer
            .text()
            .await
            .expect("a body")
            .contains("not probed yet")
    })
    .await;
    reqwest::get(format!("{base}/readyz"))
        .await
        .expect("an answer")
}

/// `tollgate_store_up` as `/metrics` shows it.
async fn store_up(base: &str) -> Option<f64> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    text.lines()
        .find(|line| line.starts_with("tollgate_store_up "))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[test]
fn a_redis_url_that_does_not_parse_refuses_to_start_with_a_clear_error() {
    for url in ["redis://127.0.0.1:notaport", "redis://:secret-pass@"] {
        let (status, _, stderr) = support::run(&support::serve_args(&["--redis", url]));
        assert!(!status.success(), "{url}");
        assert!(stderr.contains("bad redis store"), "{url}: {stderr}");
        assert!(!stderr.contains("secret-pass"), "{stderr}");
    }
}

/// A policy file on the Redis at `port`: one policy for each failure mode, by client address.
fn failure_modes(port: u16, directory: &std::path::Path) -> std::path::PathBuf {
    let path = directory.join("policies.yaml");
    let limit = |name: &str, quota: &str| {
        format!("[{{ name: {name}, algorithm: fixed_window, quota: {quota} }}]")
    };
    let text = format!(
        "store: redis://127.0.0.1:{port}\n\
         policies:\n\
         \x20 - {{ name: open, key: [ip], limits: {}, on_store_error: allow }}\n\
         \x20 - {{ name: closed, key: [ip], limits: {}, on_store_error: deny }}\n\
         \x20 - {{ name: fallback, key: [ip], limits: {}, on_store_error: local }}\n",
        limit("open-rate", "100/m"),
        limit("closed-rate", "100/m"),
        limit("fallback-rate", "2/h"),
    );
    std::fs::write(&path, text).expect("the policy file is written");
    path
}

async fn check_policy(base: &str, policy: &str, ip: &str) -> (StatusCode, Value) {
    check(base, &json!({"policy": policy, "attributes": {"ip": ip}})).await
}

#[tokio::test]
async fn a_server_started_while_redis_is_down_serves_by_failure_mode_and_connects_when_it_is_up() {
    let port = tollgate_testkit::free_port();
    let directory = tempfile::tempdir().expect("a directory");
    let config = failure_modes(port, directory.path());
    let server = Tollgate::serve(&[
        "--config",
        config.to_str().expect("UTF-8"),
        "--readiness",
        "store",
    ]);
    let base = server.http_url();
    assert!(
        server.printed["store"].contains("not connected yet"),
        "{:?}",
        server.printed
    );

    let not_connected = format!("not connected to Redis at redis://127.0.0.1:{port} yet");
    support::eventually(
        "/readyz says why once the first probe has failed",
        || async {
            let unready = reqwest::get(format!("{base}/readyz"))
                .await
                .expect("an answer");
            assert_eq!(unready.status(), StatusCode::SERVICE_UNAVAILABLE);
            let problem: Value = unready.json().await.expect("JSON");
            problem["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains(&not_connected))
        },
    )
    .await;
    // The operator is told what decides meanwhile, policy by policy.
    server.wait_for_log("the store is lost");
    server.wait_for_log(
        "until it answers again policies closed fail closed (503); \
         policies fallback decide by local limits; policies open fail open",
    );

    // Meanwhile every policy answers by its failure mode.
    let (status, open) = check_policy(&base, "open", "192.0.2.1").await;
    assert_eq!(status, StatusCode::OK, "{open}");
    assert_eq!(open["allowed"], true);
    assert_eq!(open["decided_by"], "fail_open");
    let (_, closed) = check_policy(&base, "closed", "192.0.2.1").await;
    assert_eq!(closed["allowed"], false, "{closed}");
    assert_eq!(closed["decided_by"], "fail_closed");
    assert_eq!(closed["status"], 503);
    let mut fallback = Vec::new();
    for _ in 0..3 {
        let (_, answer) = check_policy(&base, "fallback", "192.0.2.1").await;
        assert_eq!(answer["decided_by"], "local", "{answer}");
        fallback.push(answer["allowed"] == true);
    }
    assert_eq!(
        fallback,
        [true, true, false],
        "the local limiter enforces 2/h"
    );

    // Redis comes up on the port the server has been trying.
    let redis = RedisServer::start_on(port, &[]);
    support::eventually("/readyz answers 200 once Redis is up", || async {
        reqwest::get(format!("{base}/readyz"))
            .await
            .is_ok_and(|response| response.status() == StatusCode::OK)
    })
    .await;
    support::eventually("a check is decided by Redis and counted there", || async {
        let (status, answer) = check_policy(&base, "closed", "192.0.2.2").await;
        let keys: Vec<String> = redis
            .query(redis::cmd("KEYS").arg("tg:*closed-rate*"))
            .unwrap_or_default();
        status == StatusCode::OK && answer["decided_by"] == "store" && !keys.is_empty()
    })
    .await;
    let (_, answer) = check_policy(&base, "open", "192.0.2.2").await;
    assert_eq!(answer["decided_by"], "store", "{answer}");
    assert_eq!(answer["decisions"][0]["remaining"], 99);
    server.wait_for_log(&format!(
        "cannot connect to Redis at redis://127.0.0.1:{port}"
    ));
}

const PASSWORD: &str = "Sup3r-s3cret-pw";
const WRONG_PASSWORD: &str = "Wr0ng-s3cret-pw";

fn assert_no_password(what: &str, text: &str) {
    for secret in [PASSWORD, WRONG_PASSWORD] {
        assert!(!text.contains(secret), "{what} shows a password:\n{text}");
    }
}

/// Everything a server shows: its start-up lines, what the HTTP API and the admin API answer
/// after a check, and its logs.
async fn everything_shown(server: &Tollgate) -> String {
    let base = server.http_url();
    let admin = format!("http://{}", server.address("admin"));
    let mut shown = format!("{:?}\n", server.printed);
    let (_, answer) = check(
        &base,
        &json!({"policy": "login", "attributes": {"ip": "192.0.2.9"}}),
    )
    .await;
    shown.push_str(&answer.to_string());
    for url in [
        format!("{base}/readyz"),
        format!("{base}/metrics"),
        format!("{admin}/admin/config"),
        format!("{admin}/admin/stats"),
        format!("{admin}/admin/top"),
        format!("{admin}/metrics"),
    ] {
        let response = reqwest::get(&url).await.expect("an answer");
        shown.push_str(&format!("\n{url}: {}\n", response.status()));
        shown.push_str(&response.text().await.expect("a body"));
    }
    shown.push_str(&server.stderr());
    shown
}

#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn a_redis_password_is_shown_nowhere() {
    let redis = RedisServer::start();
    redis
        .query::<()>(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("tollgate")
                .arg("on")
                .arg(format!(">{PASSWORD}"))
                .arg("~*")
                .arg("+@all"),
        )
        .expect("the user is made");
    // From here on the server requires a password, as with --requirepass.
    redis
        .query::<()>(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("requirepass")
                .arg(PASSWORD),
        )
        .expect("requirepass is set");
    let port = redis.port();
    let shown_url = format!("redis://tollgate:***@127.0.0.1:{port}");

    // The right password, in the policy file.
    let directory = tempfile::tempdir().expect("a directory");
    let config = directory.path().join("policies.yaml");
    let built_in = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies.yaml"
    ))
    .expect("the example policies");
    let with_redis = built_in.replacen(
        "store: memory",
        &format!("store: redis://tollgate:{PASSWORD}@127.0.0.1:{port}"),
        1,
    );
    assert_ne!(with_redis, built_in);
    std::fs::write(&config, with_redis).expect("the policy file is written");
    let server = Tollgate::serve(&[
        "--config",
        config.to_str().expect("UTF-8"),
        "--readiness",
        "store",
    ]);
    assert_eq!(server.printed["store"], format!("redis at {shown_url}"));
    let ready = probed_readiness(&server.http_url()).await;
    assert_eq!(ready.status(), StatusCode::OK, "the password works");
    let shown = everything_shown(&server).await;
    assert!(shown.contains(&format!("store: {shown_url}")), "{shown}");
    assert_no_password("a server with the right password", &shown);

    // A wrong password, and a port nothing listens on, given on the command line.
    let nowhere = tollgate_testkit::free_port();
    for (url, shown_url) in [
        (
            format!("redis://tollgate:{WRONG_PASSWORD}@127.0.0.1:{port}"),
            shown_url.clone(),
        ),
        (
            format!("redis://tollgate:{PASSWORD}@127.0.0.1:{nowhere}"),
            format!("redis://tollgate:***@127.0.0.1:{nowhere}"),
        ),
    ] {
        let server = Tollgate::serve(&["--redis", &url, "--readiness", "store"]);
        server.wait_for_log(&format!("cannot connect to Redis at {shown_url}"));
        let unready = probed_readiness(&server.http_url()).await;
        assert_eq!(unready.status(), StatusCode::SERVICE_UNAVAILABLE);
        let problem: Value = unready.json().await.expect("JSON");
        assert!(
            problem["detail"]
                .as_str()
                .expect("a detail")
                .contains(&format!("not connected to Redis at {shown_url} yet")),
            "{problem}"
        );
        assert_no_password(&shown_url, &everything_shown(&server).await);
    }

    // --help shows the flags' environment variables, but not their values.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--help"])
        .env(
            "TOLLGATE_REDIS",
            format!("redis://tollgate:{PASSWORD}@127.0.0.1:{port}"),
        )
        .env(
            "TOLLGATE_REDIS_CLUSTER",
            format!("redis://tollgate:{PASSWORD}@127.0.0.1:{port}"),
        )
        .output()
        .expect("tollgate runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("TOLLGATE_REDIS"), "{help}");
    assert_no_password("serve --help", &help);
}

/// The Envoy rate limit service used to call the store directly: no circuit breaker, no
/// failure mode, no metrics. It now decides through the limiter like every other frontend.
#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn the_envoy_service_answers_by_its_failure_mode_while_the_breaker_rests_the_store() {
    use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
    use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
    use tollgate_envoy::rls::proto::service::RateLimitRequest;
    use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
    use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;

    let mut redis = RedisServer::start();
    let directory = tempfile::tempdir().expect("a temporary directory");
    let rls = directory.path().join("rls");
    std::fs::create_dir(&rls).expect("a directory");
    std::fs::write(
        rls.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
    )
    .expect("written");
    let policies = directory.path().join("policies.yaml");
    std::fs::write(
        &policies,
        "redis: { breaker: { failures: 1, cooldown: 1h } }\npolicies: []\n",
    )
    .expect("written");
    let server = Tollgate::serve(&[
        "--redis",
        &redis.url(),
        "--config",
        policies.to_str().expect("UTF-8"),
        "--rls-config",
        rls.to_str().expect("UTF-8"),
        "--rls-on-store-error",
        "allow",
    ]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
        .await
        .expect("gRPC connects");
    let request = RateLimitRequest {
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
    };
    let mut codes = Vec::new();
    for _ in 0..3 {
        let answer = client.should_rate_limit(request.clone()).await;
        codes.push(answer.expect("an answer").into_inner().overall_code);
    }
    assert_eq!(
        codes,
        [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]
    );

    // The store goes away: the first failure opens the breaker, and from then on the service
    // answers by its failure mode without calling the store. (Another client: the refused
    // one's denial is still in the over-limit cache, which answers without the store too.)
    redis.kill();
    let mut other = request.clone();
    other.descriptors[0].entries[0].value = "10.0.0.2".to_owned();
    for _ in 0..5 {
        let answer = client
            .should_rate_limit(other.clone())
            .await
            .expect("an answer by the failure mode, not an error");
        assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
    }
    // Serving by its failure mode, the server is ready (the default readiness): a shared store
    // that goes down does not take every pod out of rotation.
    let ready = reqwest::get(format!("{}/readyz", server.http_url()))
        .await
        .expect("an answer");
    assert_eq!(ready.status(), StatusCode::OK);
    let metrics = reqwest::get(format!("{}/metrics", server.http_url()))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    let sample = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find(|line| line.starts_with(prefix))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(
        sample(
            r#"tollgate_decisions_total{policy="edge",limit="remote_address",outcome="allowed"}"#
        ),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            r#"tollgate_decisions_total{policy="edge",limit="remote_address",outcome="failed_open"}"#
        ),
        5.0,
        "{metrics}"
    );
    assert!(
        sample(r#"tollgate_store_errors_total{kind="circuit_open"}"#) >= 4.0,
        "{metrics}"
    );
    assert_eq!(sample("tollgate_breaker_open "), 1.0, "{metrics}");
    // The operator is told once, with the cause and what decides meanwhile.
    server.wait_for_log("the circuit breaker opens: the store failed 1 times in a row");
    let logged = server.stderr();
    assert_eq!(
        logged.matches("the circuit breaker opens").count(),
        1,
        "{logged}"
    );
    server.wait_for_log("the store is lost");
    server.wait_for_log("the Envoy rate limit service answers OK to every descriptor");
}

/// A managed-Redis setup: TLS-only with a private CA, client certificates required, an ACL user,
/// the password from the environment. The server shares one limit with a second server whose
/// password comes from a file, and shows the password nowhere.
#[tokio::test]
async fn servers_reach_a_tls_redis_with_a_client_certificate_and_an_acl_user() {
    let certificates = tollgate_testkit::Certificates::generate();
    let redis = RedisServer::start_tls(&certificates, &["--tls-auth-clients", "yes"]);
    redis
        .query::<()>(redis::cmd("ACL").arg("SETUSER").arg("limiter").arg(vec![
            "on".to_owned(),
            format!(">{PASSWORD}"),
            "~tg:*".to_owned(),
            "+@all".to_owned(),
        ]))
        .expect("the user is made");
    redis
        .query::<()>(redis::cmd("ACL").arg("SETUSER").arg("default").arg("off"))
        .expect("the default user is off");
    let url = format!("rediss://127.0.0.1:{}", redis.port());
    let path = |path: &std::path::Path| path.to_str().expect("UTF-8").to_owned();
    let (ca, cert, key) = (
        path(&certificates.ca),
        path(&certificates.client_cert),
        path(&certificates.client_key),
    );
    let tls_flags = [
        "--redis",
        url.as_str(),
        "--redis-ca",
        &ca,
        "--redis-client-cert",
        &cert,
        "--redis-client-key",
        &key,
        "--redis-username",
        "limiter",
    ];
    let from_environment = Tollgate::start_with_env(
        &support::serve_args(&tls_flags),
        &[("TOLLGATE_REDIS_PASSWORD", PASSWORD)],
    );
    let password_file = certificates.dir().join("redis-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("the password file");
    let password_file = path(&password_file);
    let mut with_file = tls_flags.to_vec();
    with_file.extend(["--redis-password-file", &password_file]);
    let from_file = Tollgate::serve(&with_file);
    let body = json!({"limits": [{"key": "tenant:acme", "algorithm": "gcra", "quota": "3/h"}]});
    let mut allowed = Vec::new();
    for server in [&from_environment, &from_file, &from_environment, &from_file] {
        allowed.push(check(&server.http_url(), &body).await.1["allowed"].clone());
    }
    assert_eq!(
        allowed,
        [true, true, true, false],
        "one limit of 3 shared over TLS"
    );
    for server in [&from_environment, &from_file] {
        assert_eq!(server.printed["store"], format!("redis at {url}"));
        assert_no_password("a server on TLS Redis", &everything_shown(server).await);
    }
}

/// `--redis-sentinel` with `--redis-sentinel-master`: the server finds the master by name.
#[tokio::test]
async fn a_server_finds_its_redis_through_sentinel() {
    let group = tollgate_testkit::RedisSentinels::start();
    let sentinels = group.sentinel_urls().join(",");
    let server = Tollgate::serve(&[
        "--redis-sentinel",
        &sentinels,
        "--redis-sentinel-master",
        tollgate_testkit::MASTER_NAME,
    ]);
    assert!(
        server.printed["store"].starts_with(&format!(
            "redis master \"{}\" via sentinels",
            tollgate_testkit::MASTER_NAME
        )),
        "{}",
        server.printed["store"]
    );
    let body = json!({"limits": [{"key": "tenant:acme", "algorithm": "gcra", "quota": "1/h"}]});
    let first = check(&server.http_url(), &body).await.1;
    let second = check(&server.http_url(), &body).await.1;
    assert_eq!(
        (first["allowed"].clone(), second["allowed"].clone()),
        (json!(true), json!(false))
    );
    let keys: Vec<String> = group
        .master
        .query(redis::cmd("KEYS").arg("tg:*"))
        .expect("KEYS");
    assert_eq!(
        keys.len(),
        1,
        "the state is on the master the sentinels name: {keys:?}"
    );
}

/// A Redis user that may not run a command the checks need is reported at start-up and on
/// `/readyz`, naming the command, rather than as a generic failure.
#[tokio::test]
async fn a_redis_user_missing_a_permission_is_reported_naming_the_command() {
    let redis = RedisServer::start();
    redis
        .query::<()>(redis::cmd("ACL").arg("SETUSER").arg("limiter").arg(vec![
            "on".to_owned(),
            format!(">{PASSWORD}"),
            "~*".to_owned(),
            "+@all".to_owned(),
            "-time".to_owned(),
        ]))
        .expect("the user is made");
    let url = format!("redis://limiter:{PASSWORD}@127.0.0.1:{}", redis.port());
    let server = Tollgate::serve(&["--redis", &url, "--readiness", "store"]);
    server.wait_for_log("connected, but a check fails");
    let logged = server.stderr();
    let named = |text: &str| text.contains("lacks a permission") && text.contains("TIME: ");
    assert!(named(&logged), "{logged}");
    let ready = probed_readiness(&server.http_url()).await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let detail = ready.text().await.expect("a body");
    assert!(named(&detail), "{detail}");
    assert_no_password("a server whose Redis user lacks a permission", &logged);
}
