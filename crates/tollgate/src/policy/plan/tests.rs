use super::*;
use crate::policy::request::NoHeaders;

const CONFIG: &str = r#"
trusted_proxies: [10.0.0.0/8]
idempotency: { header: Idempotency-Key, window: 10m }
allow: [192.0.2.1, "user:ops"]
deny: ["198.51.100.0/24", "api_key:leaked"]
policies:
  - name: login
    match: { method: POST, path: /login }
    key: [route, ip]
    limits: [{ name: per-minute, algorithm: sliding_log, quota: 5/m }]
    penalty: { after: 3, block: [1m] }
  - name: api
    match: { path_prefix: /api/ }
    key: user
    tier_from: header:x-plan
    default_tier: free
    tiers:
      anonymous: [{ name: anon-rate, algorithm: gcra, quota: 1/s }]
      free: [{ name: free-rate, algorithm: token_bucket, quota: 10/s, burst: 20 }]
      pro: [{ name: pro-rate, algorithm: gcra, quota: 100/s }]
    cost: { header: x-cost, default: 2, max: 50 }
    concurrency: { max: 3, lease: 30s }
  - name: uploads
    match: { path: "/users/{id}/files" }
    key: [param:id]
    cost: body
    limits: [{ name: bytes, algorithm: gcra, quota: 1000000/m }]
"#;

fn policies() -> Policies {
    Policies::from_yaml("test.yaml", CONFIG).expect("valid config")
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn request<'a>(
    method: &'a str,
    path: &'a str,
    peer: &str,
    headers: &'a Vec<(String, String)>,
) -> Request<'a> {
    let mut request = Request::new(method, path);
    request.peer = Some(peer.parse().unwrap());
    request.headers = headers;
    request
}

fn keys(plan: &Plan) -> Vec<(String, String, u64)> {
    plan.enforced
        .iter()
        .map(|item| (item.limit.name().to_owned(), item.key.clone(), item.cost))
        .collect()
}

#[test]
fn a_client_cannot_spoof_its_address() {
    let policies = policies();
    let forged = headers(&[("x-forwarded-for", "1.2.3.4")]);
    let plan = policies.plan(&request("POST", "/login", "203.0.113.7", &forged));
    assert_eq!(plan.enforced[0].key, "route:/login|ip:203.0.113.7");
    // Through a trusted proxy, the address the proxy appended counts, not the forged one.
    let proxied = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.7")]);
    let plan = policies.plan(&request("POST", "/login", "10.0.0.5", &proxied));
    assert_eq!(plan.enforced[0].key, "route:/login|ip:203.0.113.7");
}

#[test]
fn a_client_sent_forwarded_header_does_not_beat_the_proxys_x_forwarded_for() {
    let policies = policies();
    // The trusted proxy appends to X-Forwarded-For; the client adds a Forwarded of its own.
    let spoofed = headers(&[
        ("forwarded", "for=1.2.3.4"),
        ("x-forwarded-for", "203.0.113.7"),
    ]);
    let plan = policies.plan(&request("POST", "/login", "10.0.0.5", &spoofed));
    assert_eq!(plan.enforced[0].key, "route:/login|ip:203.0.113.7");
}

#[test]
fn a_proxy_that_writes_forwarded_is_read_by_forwarded_only() {
    let config = CONFIG.replacen(
        "trusted_proxies: [10.0.0.0/8]",
        "trusted_proxies: [10.0.0.0/8]\nforwarded_header: Forwarded",
        1,
    );
    let policies = Policies::from_yaml("test.yaml", &config).expect("valid config");
    let spoofed = headers(&[
        ("forwarded", "for=1.2.3.4, for=203.0.113.7"),
        ("x-forwarded-for", "9.9.9.9"),
    ]);
    let plan = policies.plan(&request("POST", "/login", "10.0.0.5", &spoofed));
    assert_eq!(plan.enforced[0].key, "route:/login|ip:203.0.113.7");
    let error = Policies::from_yaml("test.yaml", "forwarded_header: x-real-ip\n").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("test.yaml:1:19: forwarded_header: unknown header \"x-real-ip\""),
        "{error}"
    );
}

#[test]
fn forged_x_forwarded_for_hops_in_front_cannot_choose_the_key() {
    let policies = policies();
    let forged: Vec<String> = (0..40).map(|n| format!("198.18.0.{n}")).collect();
    let header = format!("{}, 203.0.113.7", forged.join(", "));
    let proxied = headers(&[("x-forwarded-for", &header)]);
    let plan = policies.plan(&request("POST", "/login", "10.0.0.5", &proxied));
    assert_eq!(plan.enforced[0].key, "route:/login|ip:203.0.113.7");
}

#[test]
fn ipv6_clients_in_one_slash_64_share_a_key() {
    let policies = policies();
    let none = headers(&[]);
    let a = policies.plan(&request("POST", "/login", "2001:db8:1:2::a", &none));
    let b = policies.plan(&request("POST", "/login", "2001:db8:1:2:ffff::b", &none));
    assert_eq!(a.enforced[0].key, b.enforced[0].key);
    assert_eq!(a.enforced[0].key, "route:/login|ip:2001:db8:1:2::/64");
}

#[test]
fn tiers_come_from_the_plan_header_of_a_trusted_proxy_with_defaults() {
    let policies = policies();
    let names = |pairs: &[(&str, &str)]| {
        let headers = headers(pairs);
        let mut request = request("GET", "/api/things", "10.0.0.2", &headers);
        request.user = Some("42");
        let plan = policies.plan(&request);
        plan.enforced
            .iter()
            .filter(|item| item.role == Role::Limit)
            .map(|item| item.limit.name().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&[("x-plan", "pro")]), ["api/pro/pro-rate"]);
    assert_eq!(
        names(&[("x-plan", "platinum")]),
        ["api/free/free-rate"],
        "unknown plans get the default tier"
    );
    assert_eq!(
        names(&[]),
        ["api/anonymous/anon-rate"],
        "no plan: the anonymous tier"
    );
    // Straight from a client, the header is not believed: it cannot choose its own tier.
    let pro = headers(&[("x-plan", "pro")]);
    let mut request = request("GET", "/api/things", "203.0.113.7", &pro);
    request.user = Some("42");
    let names: Vec<String> = policies
        .plan(&request)
        .enforced
        .iter()
        .filter(|item| item.role == Role::Limit)
        .map(|item| item.limit.name().to_owned())
        .collect();
    assert_eq!(names, ["api/anonymous/anon-rate"]);
}

/// Identity headers were believed from any peer: a client rotated `x-user` for a fresh bucket
/// or spent another user's quota. They are read only from a trusted proxy; anyone else is
/// counted by address.
#[test]
fn identity_headers_are_believed_only_from_trusted_proxies() {
    let policies = Policies::from_yaml(
        "test.yaml",
        r#"
trusted_proxies: [10.0.0.0/8]
identity_headers: { user: x-user }
policies:
  - name: api
    key: [user]
    limits: [{ algorithm: gcra, quota: 10/s }]
"#,
    )
    .expect("valid config");
    let claimed = headers(&[("x-user", "victim")]);
    let key = |peer: &str| {
        policies.plan(&request("GET", "/", peer, &claimed)).enforced[0]
            .key
            .clone()
    };
    assert_eq!(key("10.1.2.3"), "user:victim");
    assert_eq!(key("203.0.113.7"), "ip:203.0.113.7");
}

#[test]
fn costs_come_from_headers_capped_or_from_the_body_size() {
    let policies = policies();
    let cost = |pairs: &[(&str, &str)]| {
        let headers = headers(pairs);
        let plan = policies.plan(&request("GET", "/api/x", "203.0.113.7", &headers));
        plan.enforced[0].cost
    };
    assert_eq!(cost(&[("x-cost", "7")]), 7);
    assert_eq!(cost(&[("x-cost", "7000")]), 50);
    assert_eq!(cost(&[("x-cost", "lots")]), 2);
    assert_eq!(cost(&[]), 2);
    let mut upload = Request::new("PUT", "/users/42/files");
    upload.content_length = Some(12_345);
    let plan = policies.plan(&upload);
    assert_eq!(
        keys(&plan),
        [("uploads/bytes".to_owned(), "param:id:42".to_owned(), 12_345)]
    );
    assert_eq!(plan.enforced[0].unit, QuotaUnit::ContentBytes);
}

#[test]
fn a_missing_user_falls_back_to_the_client_address() {
    let policies = policies();
    let none = headers(&[]);
    let anonymous = policies.plan(&request("GET", "/api/x", "203.0.113.7", &none));
    assert_eq!(anonymous.enforced[0].key, "ip:203.0.113.7");
    let mut known = request("GET", "/api/x", "203.0.113.7", &none);
    known.user = Some("42");
    assert_eq!(policies.plan(&known).enforced[0].key, "user:42");
}

#[test]
fn lists_bypass_or_refuse_before_any_limit() {
    let policies = policies();
    let none = headers(&[]);
    assert_eq!(
        policies
            .plan(&request("POST", "/login", "192.0.2.1", &none))
            .gate,
        Gate::Bypass
    );
    assert_eq!(
        policies
            .plan(&request("POST", "/login", "198.51.100.77", &none))
            .gate,
        Gate::Refuse(403)
    );
    let mut ops = request("POST", "/login", "203.0.113.7", &none);
    ops.user = Some("ops");
    assert_eq!(policies.plan(&ops).gate, Gate::Bypass);
    let mut leaked = request("GET", "/api/x", "203.0.113.7", &none);
    leaked.api_key = Some("leaked");
    assert_eq!(policies.plan(&leaked).gate, Gate::Refuse(403));
}

#[test]
fn guards_add_their_items_to_the_check() {
    let policies = policies();
    let retry = headers(&[("idempotency-key", "abc-123")]);
    // Without the body's digest, a key is not honoured: the request is charged as any other.
    let undigested = policies.plan(&request("POST", "/login", "203.0.113.7", &retry));
    let roles: Vec<Role> = undigested.enforced.iter().map(|item| item.role).collect();
    assert_eq!(roles, [Role::Limit, Role::PenaltyBox]);
    let mut digested = request("POST", "/login", "203.0.113.7", &retry);
    digested.body_digest = Some([7; 32]);
    let plan = policies.plan(&digested);
    let roles: Vec<Role> = plan.enforced.iter().map(|item| item.role).collect();
    assert_eq!(
        roles,
        [
            Role::Limit,
            Role::PenaltyBox,
            Role::Idempotency,
            Role::IdempotencyKeys
        ]
    );
    assert_eq!(
        plan.enforced[1].cost, 0,
        "the penalty box is looked at, never counted"
    );
    let record = &plan.enforced[2].key;
    assert!(
        record.starts_with("route:/login|ip:203.0.113.7|idempotency:") && record.len() < 80,
        "{record}"
    );
    assert_eq!(plan.enforced[3].key, "route:/login|ip:203.0.113.7");
    // The record is the request's fingerprint: another body, method or path is another record.
    let record_of = |method: &str, path: &str, body: u8| {
        let mut other = request(method, path, "203.0.113.7", &retry);
        other.body_digest = Some([body; 32]);
        policies
            .plan(&other)
            .enforced
            .into_iter()
            .find(|item| item.role == Role::Idempotency)
            .map(|item| item.key)
    };
    assert_eq!(record_of("POST", "/login", 7).as_ref(), Some(record));
    assert_ne!(record_of("POST", "/login", 8).as_ref(), Some(record));
    assert_ne!(record_of("POST", "/login/", 7).as_ref(), Some(record));
    let none = headers(&[]);
    let api = policies.plan(&request("GET", "/api/x", "203.0.113.7", &none));
    assert_eq!(
        api.enforced.last().map(|item| item.role),
        Some(Role::Concurrency)
    );
}

#[test]
fn unmatched_requests_plan_nothing() {
    let plan = policies().plan(&Request::new("GET", "/health"));
    assert!(plan.enforced.is_empty() && plan.shadow.is_empty());
    assert!(plan.matched.is_empty());
    let _ = NoHeaders;
}
