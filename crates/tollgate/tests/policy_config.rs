//! Policy configuration: the documented example loads and means what it says; bad files are
//! refused with every problem located and explained.

use std::time::Duration;

use tollgate::policy::{
    CostConfig, FailureMode, HeaderFamily, KeyPart, PenaltyConfig, StoreConfig, TierSource,
};
use tollgate::{Algorithm, Config, Policies};

const EXAMPLE: &str = r#"
store: memory                      # or a redis:// URL, or a list of cluster node URLs
trusted_proxies: [10.0.0.0/8]
headers: [ietf, legacy]
policies:
  - name: login
    match: { method: POST, path: /login }
    key: [ip]
    limits:
      - { name: login-per-minute, algorithm: sliding_log, quota: 5/m }
    penalty: { after: 3, block: [1m, 10m, 1h] }
  - name: api
    match: { path_prefix: /api/ }
    key: [user]
    tier_from: header:x-plan
    tiers:
      free:
        - { name: free-rate, algorithm: token_bucket, quota: 10/s, burst: 20 }
        - { name: free-hourly, algorithm: fixed_window, quota: 1000/h }
      pro:
        - { name: pro-rate, algorithm: gcra, quota: 100/s, burst: 200 }
    on_store_error: local
"#;

#[test]
fn the_documented_example_loads_and_means_what_it_says() {
    let config = Config::from_yaml("example.yaml", EXAMPLE).expect("the example loads");
    assert_eq!(config.store, StoreConfig::Memory);
    assert_eq!(config.trusted_proxies, ["10.0.0.0/8".parse().unwrap()]);
    assert_eq!(config.headers, [HeaderFamily::Ietf, HeaderFamily::Legacy]);
    let login = &config.policies[0];
    assert_eq!(login.matcher.methods, ["POST"]);
    assert_eq!(login.matcher.path.as_deref(), Some("/login"));
    assert_eq!(login.key, [KeyPart::Ip]);
    assert_eq!(login.limits[0].spec.algorithm, Algorithm::SlidingLog);
    assert_eq!(login.limits[0].spec.quota, "5/m".parse().unwrap());
    assert_eq!(
        login.penalty,
        Some(PenaltyConfig {
            after: 3,
            block: vec![
                Duration::from_secs(60),
                Duration::from_secs(600),
                Duration::from_secs(3_600)
            ],
            within: None,
            decay: None,
        })
    );
    let api = &config.policies[1];
    assert_eq!(api.matcher.path_prefix.as_deref(), Some("/api/"));
    assert_eq!(api.key, [KeyPart::User]);
    assert_eq!(api.tier_from, TierSource::Header("x-plan".into()));
    assert_eq!(
        api.tiers
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>(),
        ["free", "pro"]
    );
    assert_eq!(api.tiers[0].1[0].spec.burst, Some(20));
    assert_eq!(api.tiers[1].1[0].spec.algorithm, Algorithm::Gcra);
    assert_eq!(api.on_store_error, FailureMode::Local);
    assert_eq!(api.cost, CostConfig::Fixed(1));
    let policies = Policies::compile(config, "example.yaml").expect("the example compiles");
    assert_eq!(policies.names().collect::<Vec<_>>(), ["login", "api"]);
}

/// Each bad configuration, with the exact error it must produce.
const BAD: &[(&str, &str)] = &[
    (
        "policies:\n  - name: x\n    usage: { header: x-tokens, body: usage.total_tokens }\n    limits: [{ algorithm: gcra, quota: 5/m }]\n",
        "bad.yaml:3:12: policy \"x\": usage: expected exactly one of header, trailer or body, found 2",
    ),
    (
        "policies:\n  - name: x\n    usage: { body: usage..total }\n    limits: [{ algorithm: gcra, quota: 5/m }]\n",
        "bad.yaml:3:20: policy \"x\": usage.body: expected member names joined by dots",
    ),
    (
        "policies:\n  - name: x\n    usage: { trailer: \"x tokens\" }\n    limits: [{ algorithm: gcra, quota: 5/m }]\n",
        "bad.yaml:3:23: policy \"x\": usage.trailer: \"x tokens\" is not a header field name",
    ),
    (
        "policies:\n  - name: x\n    usage: { header: x-tokens, max: 0 }\n    limits: [{ algorithm: gcra, quota: 5/m }]\n",
        "bad.yaml:3:37: policy \"x\": usage.max",
    ),
    (
        "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: leaky_bucket, quota: 5/m, mode: meter, delay_after: 2 }\n",
        "bad.yaml:4:63: policy \"x\", limit \"a\": mode: delay_after applies only to mode queue, not meter",
    ),
    (
        "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: tokenbucket, quota: 5/m }\n",
        "bad.yaml:4:31: policy \"x\", limit \"a\": algorithm: unknown algorithm \"tokenbucket\" (expected one of: fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra)",
    ),
    (
        "policies:\n  - name: x\n    limts:\n      - { name: a, algorithm: gcra, quota: 5/m }\n",
        "bad.yaml:3:5: policy \"x\": unknown field \"limts\" (expected one of: name, match, key, limits, tiers, tier_from, default_tier, cost, usage, partition_key, shadow, soft_limit, penalty, concurrency, idempotency, refund_on, on_store_error, local_nodes, allow, deny); did you mean \"limits\"?",
    ),
    (
        "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: gcra, quota: 5/0s }\n",
        "bad.yaml:4:44: policy \"x\", limit \"a\": quota: quota 5/0s: the period must be longer than zero",
    ),
    (
        "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: gcra, quota: 0/m }\n",
        "bad.yaml:4:9: policy \"x\", limit \"a\": gcra needs a quota count of at least 1 (a quota of 0 admits nothing, ever; to refuse a client, put it on the deny list)",
    ),
    (
        "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: fixed_window, quota: 0/m }\n",
        "bad.yaml:4:9: policy \"x\", limit \"a\": fixed_window needs a quota count of at least 1",
    ),
    (
        "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: fixed_window, quota: 5/m, burst: 10 }\n",
        "bad.yaml:4:9: policy \"x\", limit \"a\": burst applies only to token_bucket, leaky_bucket and gcra, not fixed_window",
    ),
    (
        "trusted_proxies: [10.0.0.0/33]\n",
        "bad.yaml:1:19: trusted_proxies: \"10.0.0.0/33\" is not an IP address or network (such as 10.0.0.0/8 or 2001:db8::/32)",
    ),
    (
        "store: mysql://db\n",
        "bad.yaml:1:8: store: expected \"memory\", a redis:// URL, a list of Redis Cluster node URLs, or {sentinels: [URL, ...], master: NAME}",
    ),
    (
        "policies:\n  - name: x\n    key: [ip, session]\n    limits: [{ name: a, algorithm: gcra, quota: 1/s }]\n",
        "bad.yaml:3:15: policy \"x\": key: unknown key part \"session\" (expected one of: ip, user, api_key, tenant, route, method, host, header:<name>, param:<name>, const:<value>, global)",
    ),
    (
        "policies:\n  - name: x\n  - name: x\n    limits: [{ name: a, algorithm: gcra, quota: 1/s }]\n",
        "bad.yaml:2:5: policy \"x\": no limits: give it limits, tiers or a concurrency limit",
    ),
    (
        "policies:\n  - name: x\n    match: { path: \"/users/x{id}\" }\n    limits: [{ name: a, algorithm: gcra, quota: 1/s }]\n",
        "bad.yaml:3:20: policy \"x\": match.path: \"x{id}\": a parameter must be a whole segment such as {id}",
    ),
    (
        "policies:\n  - name: x\n    penalty: { after: 3, block: [soon] }\n    limits: [{ name: a, algorithm: gcra, quota: 1/s }]\n",
        "bad.yaml:3:34: policy \"x\": penalty.block: duration \"soon\": expected a number and a unit, such as 100ms, 30s, 5m or 1h",
    ),
    (
        "policies:\n  - name: x\n    tiers: { free: [{ name: a, algorithm: gcra, quota: 1/s }] }\n    default_tier: gold\n",
        "bad.yaml:2:5: policy \"x\": default_tier \"gold\" is not one of its tiers",
    ),
    (
        "redis: { breaker: { failures: 0 } }\n",
        "bad.yaml:1:31: redis.breaker.failures: expected a whole number from 1 to 10000",
    ),
    (
        "redis: { breaker: { cooldown: 1s, open_for: 2s } }\n",
        "bad.yaml:1:35: redis.breaker: unknown field \"open_for\" (expected one of: failures, cooldown)",
    ),
    (
        "policies:\n  - name: hot\n    limits: [{ name: hot, algorithm: gcra, quota: 100/s, lease: 500 }]\n",
        "bad.yaml:3:14: policy \"hot\", limit \"hot\": a lease takes units in advance, so it must be at most the limit's capacity (100)",
    ),
    ("policies: [\n", "bad.yaml:2:1: invalid YAML: "),
];

#[test]
fn a_limit_may_be_leased() {
    let policies = Policies::from_yaml(
        "good.yaml",
        "policies:\n  - name: hot\n    limits: [{ name: hot, algorithm: fixed_window, quota: 100000/s, lease: 500 }]\n",
    )
    .expect("valid");
    let mut request = tollgate::Request::new("GET", "/");
    request.peer = Some("203.0.113.7".parse().expect("an address"));
    let plan = policies.plan(&request);
    assert_eq!(plan.enforced[0].limit.lease(), Some(500));
}

#[test]
fn breaker_and_deny_cache_settings_are_read() {
    let policies = Policies::from_yaml(
        "good.yaml",
        "redis: { breaker: { failures: 3, cooldown: 250ms }, deny_cache: false }\n",
    )
    .expect("valid");
    let redis = &policies.config().redis;
    assert_eq!(redis.breaker.failures, 3);
    assert_eq!(
        redis.breaker.cooldown,
        std::time::Duration::from_millis(250)
    );
    assert!(!redis.deny_cache);
    let defaults = Policies::from_yaml("good.yaml", "policies: []\n").expect("valid");
    assert!(defaults.config().redis.deny_cache);
    assert_eq!(defaults.config().redis.breaker.failures, 5);
}

#[test]
fn a_global_store_waits_a_second_unless_told_otherwise() {
    let global = |text: &str| {
        let policies = Policies::from_yaml("good.yaml", text).expect("valid");
        let global = policies.config().global.clone().expect("a global store");
        global.redis.config.timeout
    };
    let store = "store: { region: redis://r:6379, global: redis://g:6379 }\n";
    assert_eq!(global(store), Duration::from_secs(1));
    assert_eq!(
        global(&format!("{store}redis: {{ timeout: 50ms }}\n")),
        Duration::from_secs(1),
        "not the regional store's timeout"
    );
    assert_eq!(
        global(&format!("{store}global_redis: {{ prefix: 'g:' }}\n")),
        Duration::from_secs(1)
    );
    assert_eq!(
        global(&format!("{store}global_redis: {{ timeout: 300ms }}\n")),
        Duration::from_millis(300)
    );
}

#[test]
fn sentinel_tls_and_credentials_are_read_from_the_store_and_redis_sections() {
    let directory = tempfile::tempdir().expect("a directory");
    let password_file = directory.path().join("redis-password");
    std::fs::write(&password_file, "s3cret-in-a-file\n").expect("the password file");
    let text = format!(
        "store: {{ sentinels: [redis://10.0.0.1:26379, redis://10.0.0.2:26379], master: mymaster }}\n\
         redis:\n  tls: {{ ca_file: /etc/tollgate/ca.pem, client_cert: c.pem, client_key: k.pem }}\n  \
         username: tollgate\n  password_file: {}\n",
        password_file.display()
    );
    let policies = Policies::from_yaml("good.yaml", &text).expect("valid");
    let config = policies.config();
    let StoreConfig::RedisSentinel { sentinels, master } = &config.store else {
        panic!("a sentinel store: {:?}", config.store);
    };
    assert_eq!(master, "mymaster");
    assert_eq!(sentinels.len(), 2);
    let redis = &config.redis.config;
    assert_eq!(
        redis.tls.ca_file.as_deref(),
        Some(std::path::Path::new("/etc/tollgate/ca.pem"))
    );
    assert!(redis.tls.client_cert.is_some() && redis.tls.client_key.is_some());
    let auth = redis.auth.as_ref().expect("credentials");
    assert_eq!(auth.username.as_deref(), Some("tollgate"));
    assert_eq!(
        auth.password, "s3cret-in-a-file",
        "the line end is not part of it"
    );
    assert!(
        !format!("{config:?}").contains("s3cret"),
        "Debug masks the password"
    );

    let missing = errors("redis: { password_file: /nonexistent/redis-password }\n");
    assert!(
        missing
            .iter()
            .any(|error| error.contains("redis.password_file /nonexistent/redis-password")),
        "{missing:?}"
    );
    for (text, expected) in [
        ("store: { master: m }\n", "store: expected"),
        (
            "store: { sentinels: [redis://a:1], master: m, extra: 1 }\n",
            "unknown",
        ),
        (
            "redis: { tls: { client_cert: c.pem } }\n",
            "client_cert and client_key go together",
        ),
        (
            "redis: { username: tollgate }\n",
            "redis.username: needs redis.password_file",
        ),
    ] {
        let found = errors(text);
        assert!(
            found.iter().any(|error| error.contains(expected)),
            "for {text}: {found:?}"
        );
    }
}

#[test]
fn a_global_store_its_settings_and_the_lease_tuning_are_read_from_the_store_section() {
    let text = "store:\n  region: redis://eu-west.internal:6379\n  global: [redis://g1:6379, redis://g2:6379]\n  \
                leases: { horizon: 300ms, max_share: 5%, idle: 2s, hold: 500ms }\n\
                global_redis: { prefix: 'world:', timeout: 150ms }\n\
                redis: { prefix: 'eu:' }\n\
                policies:\n  - name: tenant\n    key: [tenant]\n    \
                limits: [{ algorithm: fixed_window, quota: 10000/m, scope: global }, { algorithm: gcra, quota: 50/s }]\n";
    let policies = Policies::from_yaml("tiers.yaml", text).expect("valid");
    let config = policies.config();
    assert!(
        matches!(&config.store, StoreConfig::Redis(url) if url.expose() == "redis://eu-west.internal:6379")
    );
    let global = config.global.as_ref().expect("a global store");
    assert!(matches!(&global.store, StoreConfig::RedisCluster(urls) if urls.len() == 2));
    assert_eq!(global.redis.config.prefix, "world:");
    assert_eq!(global.redis.config.timeout, Duration::from_millis(150));
    assert_eq!(config.redis.config.prefix, "eu:");
    assert_eq!(global.leases.horizon, Duration::from_millis(300));
    assert_eq!(global.leases.max_share_percent, 5);
    assert_eq!(global.leases.idle, Duration::from_secs(2));
    assert_eq!(global.leases.hold, Duration::from_millis(500));
    let scopes: Vec<tollgate::Scope> = policies.limits().map(|(_, l)| l.limit.scope()).collect();
    assert_eq!(scopes, [tollgate::Scope::Global, tollgate::Scope::Region]);

    // Without global_redis, the global store takes the redis section's settings.
    let shared = Policies::from_yaml(
        "shared.yaml",
        "store: { global: redis://g:6379 }\nredis: { prefix: 'all:' }\n",
    )
    .expect("valid");
    let global = shared.config().global.as_ref().expect("a global store");
    assert_eq!(global.redis.config.prefix, "all:");
    assert_eq!(
        shared.config().store,
        StoreConfig::Memory,
        "the region in process"
    );

    for (text, expected) in [
        (
            "store: { leases: { horizon: 1s } }\n",
            "store: a global store (store.global) goes with store.leases",
        ),
        ("store: { global: memory }\n", "store.global: expected"),
        (
            "store: { global: redis://g:1, leases: { max_share: 0% } }\n",
            "store.leases.max_share: expected a percentage",
        ),
        (
            "store: { global: redis://g:1, leases: { window: 1s } }\n",
            "unknown",
        ),
        (
            "global_redis: { prefix: 'x:' }\n",
            "global_redis: there is no global store",
        ),
        (
            "policies:\n  - name: p\n    key: [ip]\n    limits: [{ algorithm: gcra, quota: 1/s, scope: planet }]\n",
            "unknown scope \"planet\"",
        ),
        (
            "policies:\n  - name: p\n    key: [ip]\n    limits: [{ algorithm: gcra, quota: 1/s, scope: global, lease: 5 }]\n",
            "takes no fixed lease",
        ),
    ] {
        let found = errors(text);
        assert!(
            found.iter().any(|error| error.contains(expected)),
            "for {text}: {found:?}"
        );
    }
}

fn errors(text: &str) -> Vec<String> {
    match Policies::from_yaml("bad.yaml", text) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn every_bad_configuration_is_refused_with_its_location_and_reason() {
    for (text, expected) in BAD {
        let found = errors(text);
        assert!(
            found.iter().any(|error| error.starts_with(expected)),
            "for:\n{text}\nexpected an error starting with:\n  {expected}\nfound:\n  {}",
            found.join("\n  ")
        );
    }
}

#[test]
fn all_problems_of_a_file_are_reported_at_once() {
    let text = "policies:\n  - name: x\n    limits:\n      - { name: a, algorithm: nope, quota: 5/m }\n      - { name: b, algorithm: gcra, quota: many }\n    shadw: true\n";
    let found = errors(text);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("bad.yaml:4:"), "{found:#?}");
    assert!(found[1].starts_with("bad.yaml:5:"), "{found:#?}");
    assert!(found[2].starts_with("bad.yaml:6:5:"), "{found:#?}");
}

#[test]
fn duplicate_policy_names_are_refused() {
    let text = "policies:\n  - name: x\n    limits: [{ algorithm: gcra, quota: 1/s }]\n  - name: x\n    limits: [{ algorithm: gcra, quota: 1/s }]\n";
    let found = errors(text);
    assert_eq!(
        found,
        ["bad.yaml:4:5: policy \"x\": another policy has the same name"]
    );
}
