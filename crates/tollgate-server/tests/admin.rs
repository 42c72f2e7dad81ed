//! The admin API and the dashboard, on the real binary: inspect, reset, lift, top keys,
//! config, the token, and the dashboard in headless Chromium.

mod support;

use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Tollgate, run};

async fn post(url: &str, body: &Value, token: Option<&str>) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().post(url).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn admin_url(server: &Tollgate) -> String {
    format!("http://{}", server.address("admin"))
}

/// Seven logins from one address: five admitted, then refusals.
async fn load(server: &Tollgate, ip: &str) {
    let check = format!("{}/v1/check", server.http_url());
    for _ in 0..7 {
        post(
            &check,
            &json!({"policy": "login", "attributes": {"ip": ip}}),
            None,
        )
        .await;
    }
}

#[tokio::test]
async fn inspect_reset_lift_top_and_config() {
    let server = Tollgate::serve(&[]);
    let admin = admin_url(&server);
    load(&server, "203.0.113.7").await;
    let key = json!({"policy": "login", "attributes": {"ip": "203.0.113.7"}});

    let (status, state) = post(&format!("{admin}/admin/inspect"), &key, None).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["decisions"][0]["remaining"], 0);
    let (_, again) = post(&format!("{admin}/admin/inspect"), &key, None).await;
    assert_eq!(
        again["decisions"][0]["remaining"], 0,
        "inspecting counts nothing"
    );

    let top: Value = reqwest::get(format!("{admin}/admin/top?n=5"))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(top["denied_keys"][0]["key"], "ip:203.0.113.7");
    assert_eq!(top["routes"][0]["key"], "/");

    let (status, reset) = post(&format!("{admin}/admin/reset"), &key, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reset["reset"], 1);
    let (_, lifted) = post(&format!("{admin}/admin/lift"), &key, None).await;
    assert_eq!(lifted["lifted"], true);
    let (_, fresh) = post(&format!("{admin}/admin/inspect"), &key, None).await;
    assert_eq!(
        fresh["decisions"][0]["remaining"], 5,
        "a fresh start: {fresh}"
    );

    let (status, problem) = post(
        &format!("{admin}/admin/reset"),
        &json!({"policy": "nope"}),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");

    let config: Value = reqwest::get(format!("{admin}/admin/config"))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(config["policies"], json!(["login", "api", "uploads"]));
    assert_eq!(config["file_is_loaded"], true);
    assert!(
        config["file"]
            .as_str()
            .expect("text")
            .contains("name: login")
    );
}

#[tokio::test]
async fn a_token_guards_the_admin_api_and_an_open_listener_needs_one() {
    let server = Tollgate::serve(&["--admin-token", "s3cret"]);
    let admin = admin_url(&server);
    assert!(server.printed["admin"].contains("token required"));
    let refused = reqwest::get(format!("{admin}/admin/stats"))
        .await
        .expect("an answer");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().contains_key("www-authenticate"));
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    let wrong = reqwest::Client::new()
        .get(format!("{admin}/admin/stats"))
        .bearer_auth("s3cre7")
        .send()
        .await
        .expect("an answer");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let allowed = reqwest::Client::new()
        .get(format!("{admin}/admin/stats"))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("an answer");
    assert_eq!(allowed.status(), StatusCode::OK);
    let page = reqwest::get(format!("{admin}/dashboard?token=s3cret"))
        .await
        .expect("an answer");
    assert_eq!(page.status(), StatusCode::OK);

    let (status, _, stderr) = run(&support::serve_args(&["--admin", "0.0.0.0:0"]));
    assert!(!status.success());
    assert!(
        stderr.contains("is not a loopback address: give --admin-token"),
        "{stderr}"
    );
}

/// Chromium from Debian's package; the test command installs it.
fn chromium() -> &'static str {
    for candidate in ["chromium", "chromium-browser"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return candidate;
        }
    }
    panic!(
        "chromium is not installed: run scripts/test (it installs it) or `apt-get install -y chromium`"
    );
}

fn headless(url: &str, extra: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().expect("a profile directory");
    let output = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=4000",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_known_load_and_updates_in_a_real_browser() {
    let server = Tollgate::serve(&[]);
    load(&server, "198.51.100.23").await;
    let url = format!("{}/dashboard", admin_url(&server));

    let page = url.clone();
    let (dom, log) = tokio::task::spawn_blocking(move || headless(&page, &["--dump-dom"]))
        .await
        .expect("joined");
    for problem in ["Uncaught", "CONSOLE", "Failed to load resource"] {
        assert!(!log.contains(problem), "the page logged {problem}:\n{log}");
    }
    let document = dom.replace(['\n', '\r'], " ");
    let row_start = document
        .find("<td>login</td>")
        .expect("the login policy is listed");
    let row =
        &document[row_start..row_start + document[row_start..].find("</tr>").expect("a row end")];
    assert!(
        row.starts_with("<td>login</td><td>5</td><td>2</td>"),
        "five allowed, two denied: {row}"
    );
    assert!(
        document.contains("ip:198.51.100.23 — 2"),
        "the refused key is listed"
    );
    let updates: u32 = document
        .split("<b id=\"updates\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|n| n.parse().ok())
        .expect("an update count");
    assert!(updates >= 2, "the page updates itself: {updates}");
    assert!(document.contains("<span id=\"status\">live</span>"));

    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let shot = screenshot.clone();
    tokio::task::spawn_blocking(move || {
        headless(&url, &[&format!("--screenshot={}", shot.display())])
    })
    .await
    .expect("joined");
    let bytes = std::fs::read(&screenshot).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG"), "the screenshot is a PNG");
    eprintln!("dashboard screenshot: {}", screenshot.display());
}
