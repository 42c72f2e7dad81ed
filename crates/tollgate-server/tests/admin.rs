//! The admin API and the dashboard, on the real binary: inspect, reset, lift, top keys,
//! config, the token, and the dashboard in headless Chromium.

mod support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Tollgate, headless, run};

async fn post(url: &str, body: &Value, token: Option<&str>) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().post(url).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A GET of `url` carrying `authorization` as its `Authorization` header.
async fn get_authorized(url: &str, authorization: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(url)
        .header("authorization", authorization)
        .send()
        .await
        .expect("an answer")
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
    // Keys show as the logs show them: hashed unless --log-keys plain says otherwise.
    let shown = top["denied_keys"][0]["key"].as_str().expect("a key");
    assert_eq!(shown.len(), 16, "{top}");
    assert!(!top.to_string().contains("203.0.113.7"), "{top}");
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
    let wrong = get_authorized(&format!("{admin}/admin/stats"), "Bearer s3cre7").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let allowed = get_authorized(&format!("{admin}/admin/stats"), "Bearer s3cret").await;
    assert_eq!(allowed.status(), StatusCode::OK);
    // The page holds no data: it is served without the token and sends the one after # itself.
    let page = reqwest::get(format!("{admin}/dashboard"))
        .await
        .expect("an answer");
    assert_eq!(page.status(), StatusCode::OK);
    // Probes reach the health routes without the token and by any host name (a kubelet asks
    // by the pod's address); they tell nothing but whether the process lives and is ready.
    let port = server.address("admin").port();
    for path in ["/healthz", "/readyz"] {
        let probed = get_with_host(&admin, path, &format!("10.1.2.3:{port}")).await;
        assert_eq!(probed.status(), StatusCode::OK, "{path}");
    }
    let ready: Value = reqwest::get(format!("{admin}/readyz"))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(ready["status"], "ready", "{ready}");
    // The rest of the admin API still asks for the token, whatever the host.
    let guarded = get_with_host(&admin, "/metrics", &format!("127.0.0.1:{port}")).await;
    assert_eq!(guarded.status(), StatusCode::UNAUTHORIZED);

    let (status, _, stderr) = run(&support::serve_args(&["--admin", "0.0.0.0:0"]));
    assert!(!status.success());
    assert!(
        stderr.contains("is not a loopback address: give --admin-token"),
        "{stderr}"
    );
}

/// The key that `load` pushed over its limit, as the admin calls name it.
fn loaded_key(ip: &str) -> Value {
    json!({"policy": "login", "attributes": {"ip": ip}})
}

async fn remaining(admin: &str, key: &Value, token: Option<&str>) -> Value {
    let (status, state) = post(&format!("{admin}/admin/inspect"), key, token).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    state["decisions"][0]["remaining"].clone()
}

fn assert_no_cors(response: &reqwest::Response) {
    let cors: Vec<_> = response
        .headers()
        .keys()
        .filter(|name| name.as_str().starts_with("access-control-"))
        .collect();
    assert!(cors.is_empty(), "CORS headers sent: {cors:?}");
}

#[tokio::test]
async fn a_cross_site_text_plain_post_cannot_reset_a_key_or_lift_a_penalty() {
    let server = Tollgate::serve(&[]);
    let admin = admin_url(&server);
    load(&server, "203.0.113.50").await;
    let key = loaded_key("203.0.113.50");
    let client = reqwest::Client::new();
    // What a form or a no-cors fetch on any web page can send without a preflight.
    for path in ["/admin/reset", "/admin/lift", "/admin/inspect"] {
        for content_type in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut request = client
                .post(format!("{admin}{path}"))
                .header("origin", "https://attacker.example")
                .body(key.to_string());
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            let response = request.send().await.expect("an answer");
            assert_no_cors(&response);
            let status = response.status();
            assert!(
                status == StatusCode::UNSUPPORTED_MEDIA_TYPE || status == StatusCode::FORBIDDEN,
                "{path} {content_type:?}: {status}"
            );
        }
        // Without an Origin (an older browser, a plain form post): the media type alone refuses.
        let response = client
            .post(format!("{admin}{path}"))
            .header("content-type", "text/plain;charset=UTF-8")
            .body(key.to_string())
            .send()
            .await
            .expect("an answer");
        assert_eq!(
            response.status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{path}"
        );
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
    }
    // JSON from another origin would need a preflight, and the preflight is refused.
    let preflight = client
        .request(reqwest::Method::OPTIONS, format!("{admin}/admin/reset"))
        .header("origin", "https://attacker.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .expect("an answer");
    assert_eq!(preflight.status(), StatusCode::FORBIDDEN);
    assert_no_cors(&preflight);
    let cross_origin_json = reset_from(&admin, "https://attacker.example", &key).await;
    assert_eq!(cross_origin_json.status(), StatusCode::FORBIDDEN);
    assert_no_cors(&cross_origin_json);

    assert_eq!(remaining(&admin, &key, None).await, 0, "nothing was reset");
    // The dashboard's own origin, with JSON, still works.
    let own = reset_from(&admin, &admin, &key).await;
    assert_eq!(own.status(), StatusCode::OK);
    assert_no_cors(&own);
    assert_eq!(remaining(&admin, &key, None).await, 5);
}

/// A JSON reset of `key`, sent as a page of `origin` would send it.
async fn reset_from(admin: &str, origin: &str, key: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{admin}/admin/reset"))
        .header("origin", origin)
        .json(key)
        .send()
        .await
        .expect("an answer")
}

async fn get_with_host(admin: &str, path: &str, host: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{admin}{path}"))
        .header("host", host)
        .send()
        .await
        .expect("an answer")
}

#[tokio::test]
async fn a_rebound_host_name_cannot_read_the_admin_api() {
    let server = Tollgate::serve(&[]);
    let admin = admin_url(&server);
    let port = server.address("admin").port();
    // A page whose DNS name now points at 127.0.0.1 sends its own name.
    for host in [
        format!("attacker.example:{port}"),
        "attacker.example".to_owned(),
        format!("localhost.attacker.example:{port}"),
        format!("localhost:{}", port.wrapping_add(1)),
    ] {
        for path in [
            "/admin/config",
            "/admin/top",
            "/admin/stats",
            "/metrics",
            "/dashboard",
        ] {
            let response = get_with_host(&admin, path, &host).await;
            assert_eq!(
                response.status(),
                StatusCode::MISDIRECTED_REQUEST,
                "{host} {path}"
            );
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let problem: Value = response.json().await.expect("JSON");
            assert!(
                !problem.to_string().contains("name: login"),
                "no configuration in the refusal"
            );
        }
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let response = get_with_host(&admin, "/admin/config", &host).await;
        assert_eq!(response.status(), StatusCode::OK, "{host}");
    }

    // A name the operator gives is accepted, alone or with the listener's port.
    let named = Tollgate::serve(&["--admin-host", "admin.internal"]);
    let admin = admin_url(&named);
    let port = named.address("admin").port();
    for host in [
        "admin.internal".to_owned(),
        format!("Admin.Internal:{port}"),
    ] {
        let response = get_with_host(&admin, "/admin/config", &host).await;
        assert_eq!(response.status(), StatusCode::OK, "{host}");
    }
    let other_port = format!("admin.internal:{}", port.wrapping_add(1));
    let response = get_with_host(&admin, "/admin/config", &other_port).await;
    assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST);
}

#[tokio::test]
async fn the_admin_token_is_taken_from_a_bearer_header_in_any_case_never_the_query() {
    let server = Tollgate::serve(&["--admin-token", "s3cret"]);
    let admin = admin_url(&server);
    let client = reqwest::Client::new();
    let in_query = client
        .get(format!("{admin}/admin/stats?token=s3cret"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(in_query.status(), StatusCode::BAD_REQUEST);
    let detail: Value = in_query.json().await.expect("JSON");
    assert!(
        detail["detail"]
            .as_str()
            .expect("a detail")
            .contains("Authorization header"),
        "{detail}"
    );
    let in_query_too = get_authorized(
        &format!("{admin}/admin/stats?n=1&token=s3cret"),
        "Bearer s3cret",
    )
    .await;
    assert_eq!(in_query_too.status(), StatusCode::BAD_REQUEST);
    for authorization in ["bearer s3cret", "BEARER s3cret", "Bearer s3cret"] {
        let response = get_authorized(&format!("{admin}/admin/stats"), authorization).await;
        assert_eq!(response.status(), StatusCode::OK, "{authorization}");
    }
    for authorization in ["Basic s3cret", "bearer", "bearer s3cret2", "s3cret"] {
        let response = get_authorized(&format!("{admin}/admin/stats"), authorization).await;
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{authorization}"
        );
    }
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
    // The refused key is listed as the logs show it: hashed, never in clear by default.
    assert!(!document.contains("198.51.100.23"), "no key in clear");
    let listed = document
        .split(" — 2")
        .next()
        .and_then(|before| before.rsplit('>').next())
        .unwrap_or_default();
    assert!(
        listed.len() == 16 && listed.bytes().all(|b| b.is_ascii_hexdigit()),
        "the refused key is listed, hashed: {listed:?}"
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_sends_the_token_from_its_fragment_in_a_real_browser() {
    let server = Tollgate::serve(&["--admin-token", "s3cret"]);
    let url = format!("{}/dashboard#token=s3cret", admin_url(&server));
    let (dom, log) = tokio::task::spawn_blocking(move || headless(&url, &["--dump-dom"]))
        .await
        .expect("joined");
    for problem in ["Uncaught", "CONSOLE", "Failed to load resource"] {
        assert!(!log.contains(problem), "the page logged {problem}:\n{log}");
    }
    assert!(
        dom.contains("<span id=\"status\">live</span>"),
        "the page reads the stats with the token: {dom}"
    );
}

/// The admin API used to show refused keys (addresses, API keys) in clear while the logs hashed
/// them: they show as the key logging says, in clear only when `--log-keys plain` asks.
#[tokio::test]
async fn refused_keys_show_in_clear_only_when_asked() {
    let plain = Tollgate::serve(&["--log-keys", "plain"]);
    load(&plain, "198.51.100.9").await;
    let top: Value = reqwest::get(format!("{}/admin/top?n=5", admin_url(&plain)))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(top["denied_keys"][0]["key"], "ip:198.51.100.9");
    let stats: Value = reqwest::get(format!("{}/admin/stats", admin_url(&plain)))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(stats["denied_keys"][0]["key"], "ip:198.51.100.9");

    let hashed = Tollgate::serve(&[]);
    load(&hashed, "198.51.100.9").await;
    let stats = reqwest::get(format!("{}/admin/stats", admin_url(&hashed)))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    assert!(!stats.contains("198.51.100.9"), "{stats}");
}
