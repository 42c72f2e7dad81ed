//! `tollgate serve` on the memory store, over real sockets: the check API, Envoy's rate limit
//! service over gRPC and `/json`, reloads, start-up errors and shutdown.

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Tollgate, eventually, run};
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::rls::proto::service::{RateLimitRequest, RateLimitResponse};

/// Posts `body` and returns the status, the headers and the JSON answer.
async fn post(url: &str, body: &Value) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("a body");
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    };
    (status, headers, value)
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("the file is written");
}

#[tokio::test]
async fn inline_limits_are_decided_with_every_decision_and_the_rate_limit_fields() {
    let server = Tollgate::serve(&[]);
    assert_eq!(server.printed["store"], "memory (in process)");
    let url = format!("{}/v1/check", server.http_url());
    let body = json!({"limits": [{"key": "user:42", "algorithm": "gcra", "quota": "2/m"}]});
    for remaining in [1, 0] {
        let (status, headers, answer) = post(&url, &body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["verdict"], "allow");
        assert_eq!(answer["decisions"][0]["remaining"], remaining);
        assert_eq!(answer["decisions"][0]["key"], "user:42");
        assert!(headers.contains_key("ratelimit-policy"), "{headers:?}");
        // The answer's length is known, so it is not sent chunked.
        assert!(headers.contains_key("content-length"), "{headers:?}");
        assert!(!headers.contains_key("transfer-encoding"), "{headers:?}");
    }
    let (status, headers, answer) = post(&url, &body).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a decision, even a refusal, is a successful answer"
    );
    assert_eq!(answer["allowed"], false);
    assert_eq!(answer["verdict"], "deny");
    assert_eq!(answer["status"], 429);
    let retry = answer["retry_after_ms"].as_u64().expect("a retry time");
    assert!((20_000..=30_000).contains(&retry), "{answer}");
    let seconds = retry.div_ceil(1_000);
    assert_eq!(headers["retry-after"], seconds.to_string().as_str());
    // A refusal must not be cached and replayed once the quota has come back; inline denials
    // used to lack this, unlike policy denials.
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(
        headers["ratelimit"],
        format!("\"inline:gcra:2/m:0\";r=0;t={seconds}").as_str()
    );

    // Every algorithm by its name, a leaky bucket in both modes, several limits at once.
    for algorithm in [
        "fixed_window",
        "sliding_log",
        "sliding_window",
        "token_bucket",
        "gcra",
    ] {
        let body = json!({"limits": [{"key": "k", "algorithm": algorithm, "quota": "1/h"}]});
        let (_, _, answer) = post(&url, &body).await;
        assert_eq!(answer["decisions"][0]["algorithm"], algorithm);
        assert_eq!(answer["allowed"], true, "{algorithm}: {answer}");
    }
    let body = json!({"limits": [
        {"key": "k", "algorithm": "leaky_bucket", "quota": "1/s", "mode": "meter"},
        {"key": "k", "algorithm": "leaky_bucket", "quota": "1/s", "mode": "queue", "burst": 5, "name": "queued"},
    ]});
    let (_, _, first) = post(&url, &body).await;
    assert_eq!(first["verdict"], "allow", "{first}");
    let (_, _, second) = post(&url, &body).await;
    assert_eq!(
        second["verdict"], "deny",
        "the meter refuses the second: {second}"
    );
    assert_eq!(second["binding"], 0);

    let body = json!({"limits": [
        {"key": "q", "algorithm": "leaky_bucket", "quota": "1/s", "mode": "queue", "burst": 5, "name": "queue-only"},
    ]});
    post(&url, &body).await;
    let (_, _, delayed) = post(&url, &body).await;
    assert_eq!(delayed["verdict"], "delay", "{delayed}");
    let delay = delayed["delay_ms"].as_u64().expect("a delay");
    assert!((500..=1_000).contains(&delay), "{delayed}");
}

/// `Prefer: return=minimal`: the decision, its waits and the binding limit's room; no decision
/// per limit, no header fields, no charge token (nothing to refund from).
#[tokio::test]
async fn a_brief_answer_carries_the_decision_and_nothing_to_read_past() {
    let server = Tollgate::serve(&[]);
    let url = format!("{}/v1/check", server.http_url());
    let body = json!({"limits": [{"key": "user:7", "algorithm": "fixed_window", "quota": "2/h"}]});
    let brief = || async {
        let response = reqwest::Client::new()
            .post(&url)
            .header("prefer", "return=minimal")
            .json(&body)
            .send()
            .await
            .expect("the server answers");
        let headers = response.headers().clone();
        let answer: Value = response.json().await.expect("JSON");
        (headers, answer)
    };
    let (headers, answer) = brief().await;
    assert_eq!(
        answer,
        json!({"allowed": true, "verdict": "allow", "status": 200, "retry_after_ms": 0,
               "delay_ms": 0, "remaining": 1, "reset_after_ms": answer["reset_after_ms"]}),
    );
    assert!(
        answer["reset_after_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{answer}"
    );
    assert_eq!(headers["preference-applied"], "return=minimal");
    assert!(!headers.contains_key("ratelimit"), "{headers:?}");
    brief().await;
    let (headers, refused) = brief().await;
    assert_eq!(refused["allowed"], false, "{refused}");
    assert_eq!(refused["status"], 429);
    assert_eq!(refused["remaining"], 0);
    let retry = refused["retry_after_ms"].as_u64().expect("a retry time");
    assert_eq!(
        headers["retry-after"],
        retry.div_ceil(1_000).to_string().as_str()
    );
    assert_eq!(headers["cache-control"], "no-store");
    // Without the preference, the same check is answered in full.
    let (_, _, full) = post(&url, &body).await;
    assert_eq!(full["decisions"][0]["key"], "user:7", "{full}");
}

#[tokio::test]
async fn an_inline_calendar_limit_says_retry_after_the_next_local_midnight() {
    let server = Tollgate::serve(&[]);
    let url = format!("{}/v1/check", server.http_url());
    let body = json!({"limits": [{
        "key": "account:7", "algorithm": "fixed_window", "quota": "1/day",
        "calendar": {"tz": "Australia/Lord_Howe"},
    }]});
    let (_, _, first) = post(&url, &body).await;
    assert_eq!(first["allowed"], true, "{first}");
    let (_, headers, refused) = post(&url, &body).await;
    assert_eq!(refused["allowed"], false, "{refused}");
    // The server's clock is its own: the expected wait is computed from the instant the
    // answer was decided at.
    let at = refused["at"].as_u64().expect("the decision's instant");
    let day = tollgate::CalendarSpec::new("Australia/Lord_Howe")
        .and_then(|spec| spec.build("1/day".parse().expect("a quota")))
        .expect("a calendar");
    let wait = day.boundaries(at)[2] - at;
    assert_eq!(refused["retry_after_ms"], wait.div_ceil(1_000), "{refused}");
    assert_eq!(
        headers["retry-after"],
        wait.div_ceil(1_000_000).to_string().as_str()
    );

    let refusals = [
        (
            json!({"tz": "Mars/Olympus"}),
            "limits[0].calendar.tz: unknown time zone \"Mars/Olympus\"",
        ),
        (
            json!({"anchor_day": 32}),
            "limits[0].calendar.anchor_day: expected a day of the month from 1 to 31, got 32",
        ),
    ];
    for (calendar, message) in refusals {
        let body = json!({"limits": [{
            "key": "k", "algorithm": "fixed_window", "quota": "1/month", "calendar": calendar,
        }]});
        let (status, _, problem) = post(&url, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(message)),
            "{problem}"
        );
    }
    let body = json!({"limits": [{
        "key": "k", "algorithm": "gcra", "quota": "1/month", "calendar": {"tz": "UTC"},
    }]});
    let (status, _, problem) = post(&url, &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("calendar applies only to fixed_window"),
        "{problem}"
    );
}

#[tokio::test]
async fn policies_are_decided_by_name_or_by_matching_attributes() {
    let server = Tollgate::serve(&[]);
    let url = format!("{}/v1/check", server.http_url());
    let login = json!({"policy": "login", "attributes": {"ip": "203.0.113.7", "method": "POST", "path": "/login"}});
    for remaining in (0..5).rev() {
        let (_, _, answer) = post(&url, &login).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(answer["decisions"][0]["remaining"], remaining);
    }
    let (_, headers, refused) = post(&url, &login).await;
    assert_eq!(refused["verdict"], "deny");
    assert_eq!(refused["violated_policies"], json!(["login"]));
    assert!(
        refused["detail"]
            .as_str()
            .expect("a detail")
            .contains("login-per-minute")
    );
    assert!(headers.contains_key("retry-after"));
    // Another address has its own count.
    let other = json!({"policy": "login", "attributes": {"ip": "203.0.113.8"}});
    assert_eq!(post(&url, &other).await.2["allowed"], true);

    // Without a policy name, the policies that match the attributes apply; the tier comes from
    // the plan (a plan header from a caller that is no trusted proxy is not believed).
    let claimed =
        json!({"attributes": {"user": "42", "path": "/api/things", "headers": {"X-Plan": "pro"}}});
    assert_eq!(
        post(&url, &claimed).await.2["decisions"][0]["limit"],
        "free-rate"
    );
    let api = json!({"attributes": {"user": "43", "path": "/api/things", "plan": "pro"}});
    let (_, headers, answer) = post(&url, &api).await;
    assert_eq!(answer["matched_policies"], json!(["api"]));
    assert_eq!(answer["decisions"][0]["limit"], "pro-rate");
    assert_eq!(headers["x-ratelimit-limit"], "200");

    // Costs come from the request.
    let costly = json!({"policy": "api", "attributes": {"user": "7"}, "cost": 15});
    let (_, _, answer) = post(&url, &costly).await;
    assert_eq!(answer["decisions"][0]["remaining"], 5, "{answer}");
}

#[tokio::test]
async fn refunds_give_back_what_a_check_took() {
    let server = Tollgate::serve(&[]);
    let check = format!("{}/v1/check", server.http_url());
    let refund = format!("{}/v1/refund", server.http_url());
    let body = json!({"limits": [{"key": "job:1", "algorithm": "fixed_window", "quota": "1/h"}]});
    let (_, _, first) = post(&check, &body).await;
    assert_eq!(first["allowed"], true);
    assert!(first["charge"].is_string(), "{first}");
    assert_eq!(post(&check, &body).await.2["allowed"], false);

    let mut give_back = body.clone();
    give_back["charge"] = first["charge"].clone();
    let (status, _, _) = post(&refund, &give_back).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        post(&check, &body).await.2["allowed"],
        true,
        "the refund freed the slot"
    );

    let policy = json!({"policy": "login", "attributes": {"ip": "198.51.100.1"}});
    let mut taken = Vec::new();
    for _ in 0..5 {
        taken.push(post(&check, &policy).await.2["charge"].clone());
    }
    assert_eq!(post(&check, &policy).await.2["allowed"], false);
    let mut give_back = policy.clone();
    give_back["charge"] = taken[4].clone();
    assert_eq!(post(&refund, &give_back).await.0, StatusCode::NO_CONTENT);
    assert_eq!(post(&check, &policy).await.2["allowed"], true);
}

/// Usage charging: a check takes an estimate, and its settlement charges what the work really
/// cost, refunding the difference or charging past the limit; once per charge.
#[tokio::test]
async fn a_settlement_charges_the_real_cost_once() {
    let server = Tollgate::serve(&[]);
    let check = format!("{}/v1/check", server.http_url());
    let settle = format!("{}/v1/settle", server.http_url());
    let estimate = json!({"limits": [{"key": "tokens:1", "algorithm": "fixed_window", "quota": "1000/h"}], "cost": 300});
    let (_, _, first) = post(&check, &estimate).await;
    assert_eq!(first["decisions"][0]["remaining"], 700, "{first}");

    // The answer used 120 tokens: 180 come back.
    let mut settled = estimate.clone();
    settled["charge"] = first["charge"].clone();
    settled["actual"] = json!(120);
    assert_eq!(post(&settle, &settled).await.0, StatusCode::NO_CONTENT);
    let peek = json!({"limits": [{"key": "tokens:1", "algorithm": "fixed_window", "quota": "1000/h"}], "cost": 0});
    assert_eq!(
        post(&check, &peek).await.2["decisions"][0]["remaining"],
        880
    );

    // Once: a second settlement of the same charge is refused and changes nothing.
    let (status, _, problem) = post(&settle, &settled).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(
        post(&check, &peek).await.2["decisions"][0]["remaining"],
        880
    );

    // An answer that ran long is charged in full, past the limit: the next checks wait.
    let (_, _, second) = post(&check, &estimate).await;
    let mut long = estimate.clone();
    long["charge"] = second["charge"].clone();
    long["actual"] = json!(1_500);
    assert_eq!(post(&settle, &long).await.0, StatusCode::NO_CONTENT);
    let (_, _, after) = post(&check, &estimate).await;
    assert_eq!(after["allowed"], false, "{after}");

    // A settlement needs its real cost; a refund takes none.
    let mut without = estimate.clone();
    without["charge"] = json!("x");
    let (status, _, problem) = post(&settle, &without).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        problem["detail"],
        "actual: required: what the work really cost"
    );
    let mut refund_with = settled.clone();
    refund_with["charge"] = json!("x");
    let (status, _, problem) =
        post(&format!("{}/v1/refund", server.http_url()), &refund_with).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("actual: a refund gives everything back"),
        "{problem}"
    );

    // A policy check settles the same way.
    let policy = json!({"policy": "login", "attributes": {"ip": "198.51.100.9"}, "cost": 3});
    let (_, _, taken) = post(&check, &policy).await;
    let mut settled = policy.clone();
    settled["charge"] = taken["charge"].clone();
    settled["actual"] = json!(1);
    assert_eq!(post(&settle, &settled).await.0, StatusCode::NO_CONTENT);
    let (_, _, next) = post(
        &check,
        &json!({"policy": "login", "attributes": {"ip": "198.51.100.9"}}),
    )
    .await;
    assert_eq!(next["decisions"][0]["remaining"], 3, "5 - 1 - 1: {next}");
}

/// Refunds used to take any time and any check: three refunds of one denied GCRA 2/h check
/// bought two extra admissions, and so did repeating one refund.
#[tokio::test]
async fn only_an_admitted_charge_is_refunded_and_only_once() {
    let server = Tollgate::serve(&[]);
    let check = format!("{}/v1/check", server.http_url());
    let refund = format!("{}/v1/refund", server.http_url());
    let body = json!({"limits": [{"key": "job:2", "algorithm": "gcra", "quota": "2/h"}]});
    let mut charges = Vec::new();
    for _ in 0..2 {
        let (_, _, answer) = post(&check, &body).await;
        assert_eq!(answer["allowed"], true);
        charges.push(answer["charge"].clone());
    }
    let (_, _, denied) = post(&check, &body).await;
    assert_eq!(denied["allowed"], false);
    assert!(
        denied.get("charge").is_none(),
        "a denial took nothing: {denied}"
    );

    // A denial cannot be refunded: it has no charge, and `at` is no longer a way in.
    let mut by_time = body.clone();
    by_time["at"] = denied["at"].clone();
    let (status, _, problem) = post(&refund, &by_time).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("at: a refund or settlement names the charge")
    );
    let (status, _, problem) = post(&refund, &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("charge: required")
    );

    // A charge fits only the check it was issued for, and not a forged one.
    let mut elsewhere = json!({"limits": [{"key": "job:3", "algorithm": "gcra", "quota": "2/h"}]});
    elsewhere["charge"] = charges[0].clone();
    let (status, _, problem) = post(&refund, &elsewhere).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("charge: does not match")
    );
    let mut forged = body.clone();
    forged["charge"] = json!(format!("c2.{}", "0".repeat(50)));
    assert_eq!(
        post(&refund, &forged).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // One refund of a charge, however often it is sent.
    let mut give_back = body.clone();
    give_back["charge"] = charges[1].clone();
    assert_eq!(post(&refund, &give_back).await.0, StatusCode::NO_CONTENT);
    for _ in 0..3 {
        let (status, _, problem) = post(&refund, &give_back).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("already refunded")
        );
    }
    let mut admitted = 0;
    for _ in 0..3 {
        admitted += usize::from(post(&check, &body).await.2["allowed"] == true);
    }
    assert_eq!(admitted, 1, "one refund gives back one unit, once");
}

#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn every_error_is_a_problem_detail_with_a_4xx_status() {
    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    let client = reqwest::Client::new();
    let cases: Vec<(&str, String, StatusCode, &str)> = vec![
        (
            "/v1/check",
            "{bad".into(),
            StatusCode::BAD_REQUEST,
            "invalid JSON: key must be a string at line 1 column 2",
        ),
        (
            "/v1/check",
            r#"{"polcy": "api"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown field `polcy`",
        ),
        (
            "/v1/check",
            r#"{"policy": "nope"}"#.into(),
            StatusCode::NOT_FOUND,
            "no policy is named \"nope\"",
        ),
        (
            "/v1/check",
            r#"{"limits": []}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "limits: give 1 to 64 limits",
        ),
        (
            "/v1/check",
            r#"{"limits": [{"key": "a", "algorithm": "gcra", "quota": "0/s"}]}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "quota",
        ),
        (
            "/v1/check",
            r#"{"limits": [{"key": "a", "algorithm": "fixed_window", "quota": "0/h"}]}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "a quota of 0 admits nothing, ever",
        ),
        (
            "/v1/check",
            r#"{"limits": [{"key": "a", "algorithm": "bucket", "quota": "1/s"}]}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bucket",
        ),
        (
            "/v1/check",
            r#"{"limits": [{"key": "a", "algorithm": "gcra", "quota": "1/s", "mode": "queue"}]}"#
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "limits[0]",
        ),
        (
            "/v1/check",
            r#"{"policy": "api", "limits": [{"key": "a", "algorithm": "gcra", "quota": "1/s"}]}"#
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not both",
        ),
        (
            "/v1/check",
            r#"{"policy": "api", "attributes": {"ip": "nine"}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "attributes.ip: \"nine\" is not an IP address",
        ),
        (
            "/v1/check",
            format!(r#"{{"policy": "{}"}}"#, "x".repeat(70_000)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "larger than 65536 bytes",
        ),
        (
            "/v1/check",
            r#"{"policy": "api", "attributes": {"user": null}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "attributes.user: null is not a value here; leave the field out",
        ),
        (
            "/v1/check",
            r#"{"limits": [{"key": "a", "algorithm": "gcra", "quota": "1/s"}], "attributes": {}}"#
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "attributes: inline limits carry their own keys",
        ),
        (
            // No policy matches these attributes, so no store sees the cost: refused up front.
            "/v1/check",
            r#"{"attributes": {"path": "/nothing-matches-this"}, "cost": 1099511627777}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "cost: 1099511627777 is above the maximum of 1099511627776",
        ),
        (
            "/json",
            r#"{"domain": 5}"#.into(),
            StatusCode::BAD_REQUEST,
            "domain: expected a string",
        ),
        (
            "/json",
            r#"{"domain": "d", "hitsAddend": 1, "hits_addend": 1, "descriptors": [{"entries": [{"key": "k"}]}]}"#.into(),
            StatusCode::BAD_REQUEST,
            "give hitsAddend or hits_addend, not both",
        ),
        (
            "/json",
            r#"{"domain": "d", "hitsAddend": "+5", "descriptors": [{"entries": [{"key": "k"}]}]}"#.into(),
            StatusCode::BAD_REQUEST,
            "hitsAddend: expected a whole number",
        ),
        (
            // Refused whatever the domain, configured or not.
            "/json",
            r#"{"domain": "unconfigured", "descriptors": [{"entries": [{"key": "k"}], "limit": {"requestsPerUnit": 5, "unit": "UNKNOWN"}}]}"#.into(),
            StatusCode::BAD_REQUEST,
            "descriptors[0].limit.unit: a limit override needs a known unit",
        ),
        (
            "/nowhere",
            "{}".into(),
            StatusCode::NOT_FOUND,
            "no such endpoint",
        ),
    ];
    for (path, body, status, detail) in cases {
        let response = client
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), status, "{path} {body:.80}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        let problem: Value = response.json().await.expect("JSON");
        assert_eq!(problem["status"], status.as_u16());
        let said = problem["detail"].as_str().expect("a detail");
        assert!(said.contains(detail), "{path} {body:.80}: {said}");
    }
}

#[tokio::test]
async fn json_type_errors_name_the_field_path() {
    let server = Tollgate::serve(&[]);
    let url = format!("{}/v1/check", server.http_url());
    let cases = [
        (
            json!({"limits": [{"key": "a", "algorithm": "gcra", "quota": "1/s", "cost": -1}]}),
            "limits[0].cost: invalid value: integer `-1`, expected u64",
        ),
        (
            json!({"policy": "api", "attributes": {"content_length": "ten"}}),
            "attributes.content_length: invalid type: string \"ten\", expected u64",
        ),
        (
            json!({"policy": "api", "attributes": {"headers": {"x-a": 5}}}),
            "attributes.headers.x-a: invalid type: integer `5`, expected a string",
        ),
        (
            json!({"limits": [{"key": "a", "algorithm": "gcra", "quota": "1/s"}, {"key": "b", "algorithm": "gcra"}]}),
            "limits[1]: missing field `quota`",
        ),
        (
            json!({"cost": "one"}),
            "cost: invalid type: string \"one\", expected u64",
        ),
    ];
    for (body, detail) in cases {
        let (status, headers, problem) = post(&url, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(problem["detail"], detail, "{body}");
    }
}

#[tokio::test]
async fn errors_made_by_the_http_stack_are_problem_details_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Tollgate::serve(&["--max-header-bytes", "4096", "--max-header-fields", "20"]);
    let base = server.http_url();
    let client = reqwest::Client::new();
    let problem = |response: reqwest::Response, status: StatusCode| async move {
        assert_eq!(response.status(), status);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{status}"
        );
        let problem: Value = response.json().await.expect("JSON");
        assert_eq!(problem["status"], status.as_u16());
        problem["detail"].as_str().expect("a detail").to_owned()
    };

    // More header fields than the stack's own default (100) allows, and more than configured.
    let mut request = client.get(format!("{base}/healthz"));
    for n in 0..120 {
        request = request.header(format!("x-field-{n}"), "1");
    }
    let detail = problem(
        request.send().await.expect("an answer"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    )
    .await;
    assert!(detail.contains("the maximum is 20"), "{detail}");

    // Header fields larger than configured.
    let response = client
        .get(format!("{base}/healthz"))
        .header("x-large", "a".repeat(5_000))
        .send()
        .await
        .expect("an answer");
    let detail = problem(response, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE).await;
    assert!(detail.contains("the maximum is 4096"), "{detail}");

    // A request target over 8 KiB.
    let response = client
        .get(format!("{base}/healthz?{}", "q".repeat(9_000)))
        .send()
        .await
        .expect("an answer");
    problem(response, StatusCode::URI_TOO_LONG).await;

    // The router's 405 keeps its Allow field.
    let response = client
        .get(format!("{base}/v1/check"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.headers()["allow"], "POST");
    let detail = problem(response, StatusCode::METHOD_NOT_ALLOWED).await;
    assert!(detail.contains("GET"), "{detail}");

    // An extractor's rejection on the admin API.
    let response = client
        .get(format!(
            "http://{}/admin/top?n=many",
            server.address("admin")
        ))
        .send()
        .await
        .expect("an answer");
    problem(response, StatusCode::BAD_REQUEST).await;

    // `/json`'s 429 is a RateLimitResponse, not a problem: covered by the rate limit service
    // tests. A request line the stack cannot parse gets its bare 400, as documented.
    let mut stream = tokio::net::TcpStream::connect(server.address("http"))
        .await
        .expect("connects");
    stream
        .write_all(b"NOT A REQUEST\r\n\r\n")
        .await
        .expect("writes");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("reads");
    assert!(answer.starts_with(b"HTTP/1.1 400"), "{answer:?}");
}

#[tokio::test]
async fn health_readiness_and_the_openapi_document() {
    let server = Tollgate::serve(&[]);
    let base = server.http_url();
    let healthz = reqwest::get(format!("{base}/healthz"))
        .await
        .expect("an answer");
    assert_eq!(healthz.status(), StatusCode::OK);
    let ready: Value = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["store"], "memory");
    let openapi: Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert!(
        openapi["openapi"]
            .as_str()
            .expect("a version")
            .starts_with("3.1")
    );
    for path in [
        "/v1/check",
        "/v1/refund",
        "/v1/settle",
        "/json",
        "/healthz",
        "/healthcheck",
        "/readyz",
    ] {
        assert!(openapi["paths"].get(path).is_some(), "{path} is documented");
    }
}

const RLS_CONFIG: &str = "
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        }],
        limit: None,
        hits_addend: None,
    }
}

#[tokio::test]
async fn envoy_rate_limit_service_over_grpc_and_json_shares_the_counters() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    write(&directory.path().join("edge.yaml"), RLS_CONFIG);
    let dir = directory.path().to_str().expect("UTF-8");
    let server = Tollgate::serve(&["--rls-config", dir]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
        .await
        .expect("gRPC connects");
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![descriptor("remote_address", "10.0.0.1")],
        hits_addend: 0,
    };
    let mut codes = Vec::new();
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let response = client
            .should_rate_limit(request.clone())
            .await
            .expect("an answer");
        // gRPC answers go without the Date field HTTP answers carry (checked below).
        assert!(response.metadata().get("date").is_none(), "{response:?}");
        let response = response.into_inner();
        codes.push(Code::try_from(response.overall_code).expect("a known code"));
        remaining.push(response.statuses[0].limit_remaining);
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(remaining, [1, 0, 0]);

    let json_url = format!("{}/json", server.http_url());
    let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]});
    let (status, headers, answer) = post(&json_url, &body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer["overallCode"], "OVER_LIMIT");
    assert!(headers.contains_key("date"), "{headers:?}");
    let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.2"}]}]});
    let (status, _, answer) = post(&json_url, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["statuses"][0]["limitRemaining"], 1);

    let invalid = RateLimitRequest {
        domain: String::new(),
        descriptors: vec![descriptor("remote_address", "10.0.0.1")],
        hits_addend: 0,
    };
    let error = client
        .should_rate_limit(invalid)
        .await
        .expect_err("refused");
    assert_eq!(error.code(), tonic::Code::InvalidArgument);

    // A method the service does not have is still answered by it, as unimplemented.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<String>();
    let unknown = hyper::Request::post(format!(
        "http://{}/envoy.service.ratelimit.v3.RateLimitService/Nope",
        server.address("grpc")
    ))
    .header("content-type", "application/grpc")
    .body(String::new())
    .expect("a request");
    let answer = client.request(unknown).await.expect("an answer");
    assert_eq!(answer.headers()["grpc-status"], "12");
    assert!(!answer.headers().contains_key("date"), "{answer:?}");
}

#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn an_oversized_hits_addend_or_request_is_invalid_argument_naming_the_cap() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    write(&directory.path().join("edge.yaml"), RLS_CONFIG);
    let long_domain = "x".repeat(2_000);
    write(
        &directory.path().join("long.yaml"),
        &RLS_CONFIG.replace("domain: edge", &format!("domain: {long_domain}")),
    );
    let dir = directory.path().to_str().expect("UTF-8");
    let server = Tollgate::serve(&["--rls-config", dir]);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
        .await
        .expect("gRPC connects");
    let oversized = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            hits_addend: Some(u64::MAX),
            ..descriptor("remote_address", "10.0.0.1")
        }],
        hits_addend: 0,
    };
    let error = client
        .should_rate_limit(oversized)
        .await
        .expect_err("refused");
    assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error:?}");
    assert!(
        error.message().contains("descriptors[0].hits_addend"),
        "{error:?}"
    );

    // A counter key over the store's size cap (a long domain, or long values: Envoy builds
    // descriptors from paths and headers) is counted, as upstream counts it, each under its
    // own key: two values that differ only past the first part are two counters.
    let long = |value: &str| RateLimitRequest {
        domain: long_domain.clone(),
        descriptors: vec![descriptor("remote_address", value)],
        hits_addend: 0,
    };
    let remaining = |response: tonic::Response<RateLimitResponse>| {
        let response = response.into_inner();
        (response.overall_code, response.statuses[0].limit_remaining)
    };
    let path = "/a".repeat(1_500);
    for expected in [1, 0] {
        let answer = client
            .should_rate_limit(long(&format!("{path}-one")))
            .await
            .expect("answered");
        assert_eq!(remaining(answer), (Code::Ok as i32, expected));
    }
    let answer = client
        .should_rate_limit(long(&format!("{path}-two")))
        .await
        .expect("answered");
    assert_eq!(remaining(answer), (Code::Ok as i32, 1), "its own counter");

    // Past a cap, the error names the cap and the flag that sets it.
    let many = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![descriptor("remote_address", "10.0.0.1"); 129],
        hits_addend: 0,
    };
    let error = client.should_rate_limit(many).await.expect_err("refused");
    assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error:?}");
    assert_eq!(
        error.message(),
        "129 descriptors, above the cap of 128 (--rls-max-descriptors)"
    );
    let wide = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![descriptor("remote_address", &"v".repeat(4_097))],
        hits_addend: 0,
    };
    let error = client.should_rate_limit(wide).await.expect_err("refused");
    assert_eq!(
        error.message(),
        "descriptors[0].entries[0]: longer than the cap of 4096 bytes (--rls-max-entry-bytes)"
    );

    // The same over HTTP: a 400 problem detail, not a 503.
    let json_url = format!("{}/json", server.http_url());
    let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}], "hitsAddend": "18446744073709551615"}]});
    let (status, headers, problem) = post(&json_url, &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(
        problem["detail"]
            .as_str()
            .expect("a detail")
            .contains("descriptors[0].hits_addend"),
        "{problem}"
    );
}

const POLICY_ONE: &str = "
policies:
  - name: first
    key: [ip]
    limits: [{ algorithm: gcra, quota: 10/s }]
";

const POLICY_TWO: &str = "
policies:
  - name: second
    key: [ip]
    limits: [{ algorithm: gcra, quota: 10/s }]
";

async fn policy_exists(base: &str, name: &str) -> bool {
    let body = json!({"policy": name, "attributes": {"ip": "192.0.2.1"}});
    let (status, _, _) = post(&format!("{base}/v1/check"), &body).await;
    status == StatusCode::OK
}

#[tokio::test]
async fn changed_files_are_reloaded_and_bad_ones_refused_keeping_the_last_good() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let policies = directory.path().join("policies.yaml");
    write(&policies, POLICY_ONE);
    let rls = directory.path().join("rls");
    std::fs::create_dir(&rls).expect("a directory");
    write(&rls.join("edge.yaml"), RLS_CONFIG);
    let server = Tollgate::serve(&[
        "--config",
        policies.to_str().expect("UTF-8"),
        "--rls-config",
        rls.to_str().expect("UTF-8"),
    ]);
    let base = server.http_url();
    assert!(policy_exists(&base, "first").await);

    write(&policies, POLICY_TWO);
    eventually("the second policy file takes effect", || {
        policy_exists(&base, "second")
    })
    .await;
    assert!(!policy_exists(&base, "first").await);
    // The log says what the reload changed, not only that it happened.
    server.wait_for_log("policies reloaded: added second; removed first");
    write(
        &policies,
        &format!("{POLICY_TWO}  - name: third\n    key: [ip]\n    limits: [{{ algorithm: gcra, quota: 1/s }}]\n")
            .replace("10/s", "20/s"),
    );
    server.wait_for_log("policies reloaded: added third; changed second");

    write(
        &policies,
        "policies:\n  - name: broken\n    limits: [{ algorithm: gcra, quota: often }]\n",
    );
    server.wait_for_log("policies refused, the previous ones stay in force");
    server.wait_for_log("policies.yaml:3:");
    assert!(
        policy_exists(&base, "second").await,
        "the last good policies stay"
    );
    eventually("the refused reload is shown by the gauge", || async {
        reqwest::get(format!("{base}/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
            .lines()
            .any(|line| line == "tollgate_config_last_reload_successful 0")
    })
    .await;

    write(
        &rls.join("api.yaml"),
        "domain: api\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
    );
    server.wait_for_log("rate limit service configuration reloaded: 2 domains; added api");
    write(
        &rls.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
    );
    server.wait_for_log("rate limit service configuration refused");
    let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "1.1.1.1"}]}]});
    let (_, _, answer) = post(&format!("{base}/json"), &body).await;
    assert_eq!(
        answer["statuses"][0]["currentLimit"]["requestsPerUnit"], 2,
        "the last good RLS configuration stays: {answer}"
    );
}

/// Truncating the policy file to 0 bytes used to reload as "0 policies", switching every limit
/// off, and `config check` called it ok.
#[tokio::test]
async fn an_empty_policy_file_does_not_switch_the_limits_off() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let policies = directory.path().join("policies.yaml");
    write(&policies, POLICY_ONE);
    let server = Tollgate::serve(&["--config", policies.to_str().expect("UTF-8")]);
    let base = server.http_url();
    assert!(policy_exists(&base, "first").await);

    write(&policies, "");
    server.wait_for_log("holds no policies and does not say so");
    assert!(
        policy_exists(&base, "first").await,
        "the policies in force stay"
    );
    let (status, _, stderr) = run(&["config", "check", policies.to_str().expect("UTF-8")]);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("write `policies: []` to mean it"),
        "{stderr}"
    );

    write(&policies, "# no limits on purpose\npolicies: []\n");
    eventually("an explicit empty list is taken", || async {
        !policy_exists(&base, "first").await
    })
    .await;
}

#[tokio::test]
async fn sighup_reloads_when_files_are_not_watched() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let policies = directory.path().join("policies.yaml");
    write(&policies, POLICY_ONE);
    let mut server =
        Tollgate::serve(&["--config", policies.to_str().expect("UTF-8"), "--no-watch"]);
    let base = server.http_url();
    write(&policies, POLICY_TWO);
    assert!(
        policy_exists(&base, "first").await,
        "nothing reloads before the signal"
    );
    server.signal("HUP");
    eventually("SIGHUP loads the second policy file", || {
        policy_exists(&base, "second")
    })
    .await;
    // The log line is read from the server's stderr by a thread of its own: waited for, not
    // taken from what that thread happens to have read by now.
    server.wait_for_log("SIGHUP: reloading");

    let status = server.terminate();
    assert!(status.success(), "SIGTERM is a clean exit: {status:?}");
    assert!(server.stderr().contains("shutting down"));
}

/// The threads of `pid` named `name` (Linux keeps the first 15 bytes of a thread's name).
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads are listed")
        .filter(|task| {
            let comm = task.as_ref().expect("a thread").path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|comm| comm.trim() == name)
        })
        .count()
}

#[test]
fn the_threads_the_server_runs_on_are_set_by_flag_or_environment_and_said_at_start_up() {
    let three = Tollgate::serve(&["--threads", "3"]);
    assert_eq!(
        three.printed["threads"],
        "3 (--threads), serving the connections too"
    );
    assert_eq!(threads_named(three.pid(), "tokio-rt-worker"), 3);
    drop(three);

    let one = Tollgate::start_with_env(
        &support::serve_args(&["--http-workers", "2"]),
        &[("TOLLGATE_THREADS", "1")],
    );
    assert_eq!(
        one.printed["threads"],
        "1 (--threads), and 2 of their own serving the connections (--http-workers)"
    );
    assert_eq!(threads_named(one.pid(), "tokio-rt-worker"), 1);
    assert_eq!(threads_named(one.pid(), "tollgate-w0"), 1);
    assert_eq!(threads_named(one.pid(), "tollgate-w1"), 1);
    drop(one);

    let (status, _, stderr) = run(&["serve", "--threads", "0"]);
    assert!(!status.success());
    assert!(
        stderr.contains("invalid value '0' for '--threads <N>': must be from 1 to 1024"),
        "{stderr}"
    );
}

#[test]
fn bad_configuration_stops_start_up_naming_the_file_and_the_problem() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let policies = directory.path().join("bad.yaml");
    write(
        &policies,
        "policies:\n  - name: a\n    limits: [{ algorithm: gcra, quota: 5/fortnight }]\n",
    );
    let (status, _, stderr) = run(&["serve", "--config", policies.to_str().expect("UTF-8")]);
    assert!(!status.success());
    assert!(stderr.contains("bad.yaml:3:"), "{stderr}");

    let rls = directory.path().join("rls");
    std::fs::create_dir(&rls).expect("a directory");
    write(
        &rls.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limt: {}\n",
    );
    let (status, _, stderr) = run(&["serve", "--rls-config", rls.to_str().expect("UTF-8")]);
    assert!(!status.success());
    assert!(
        stderr.contains("edge.yaml") && stderr.contains("rate_limt"),
        "{stderr}"
    );

    let (status, stdout, _) = run(&["config", "check", "--rls", rls.to_str().expect("UTF-8")]);
    assert!(!status.success(), "{stdout}");
    write(&rls.join("edge.yaml"), RLS_CONFIG);
    let good = directory.path().join("good.yaml");
    write(&good, POLICY_ONE);
    let (status, stdout, stderr) = run(&[
        "config",
        "check",
        good.to_str().expect("UTF-8"),
        "--rls",
        rls.to_str().expect("UTF-8"),
    ]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("good.yaml: ok (1 policies)"), "{stdout}");
    assert!(stdout.contains("ok (1 domains)"), "{stdout}");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_request_head_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Tollgate::serve(&["--header-timeout", "200ms"]);
    let address = server.address("http");

    // A client that never finishes its request head is disconnected.
    let mut slow = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    slow.write_all(b"POST /v1/check HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("writes");
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        slow.read_to_end(&mut buffer),
    )
    .await
    .expect("the server closes the connection");
    assert!(read.is_ok(), "{read:?}");
}

/// Refuses `ip` on the built-in login policy and returns the key its refusal was logged under.
async fn logged_key_of(server: &Tollgate, ip: &str) -> String {
    let check = format!("{}/v1/check", server.http_url());
    let body = json!({"policy": "login", "attributes": {"ip": ip}});
    while post(&check, &body).await.2["allowed"] == true {}
    server.wait_for_log("refused");
    let stderr = server.stderr();
    let line = stderr
        .lines()
        .find(|line| line.contains("refused"))
        .expect("a refusal line");
    let start = line.find("key=").expect("a key field") + 4;
    line[start..start + 16].to_owned()
}

#[tokio::test]
async fn nodes_given_one_secret_agree_on_hashed_keys_and_others_do_not() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let secret = directory.path().join("log-keys-secret");
    write(&secret, "a secret shared by the fleet\n");
    let shared = ["--log-keys-secret-file", secret.to_str().expect("UTF-8")];
    let one = logged_key_of(&Tollgate::serve(&shared), "203.0.113.7").await;
    let two = logged_key_of(&Tollgate::serve(&shared), "203.0.113.7").await;
    let alone = logged_key_of(&Tollgate::serve(&[]), "203.0.113.7").await;
    assert_eq!(one, two);
    assert_ne!(one, alone);
    assert!(!one.contains("203.0.113.7"));

    write(&secret, "short");
    let (status, _, stderr) = run(&[
        "serve",
        "--log-keys-secret-file",
        secret.to_str().expect("UTF-8"),
    ]);
    assert!(!status.success());
    assert!(
        stderr.contains("the log keys secret: the secret is 5 bytes long"),
        "{stderr}"
    );
}
