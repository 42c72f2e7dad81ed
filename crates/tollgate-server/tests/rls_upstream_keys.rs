//! envoyproxy/ratelimit's pods and Tollgate's side by side on one Redis: with upstream keys,
//! classic fixed windows are counted as upstream counts them (its keys, `INCRBY`, `EXPIRE`), so
//! that the two admit one limit between them. The "upstream pod" here writes its counts as
//! upstream's Go code does, with keys this file computes itself; the library's `Rls` runs on
//! a manual clock, so nothing depends on when the tests run.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::policy::FailureMode;
use tollgate::{AnyStore, Limiter, ManualClock, MemoryStore, RedisConfig, RedisStore};
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::service::{RateLimitRequest, RateLimitResponse};
use tollgate_envoy::rls::proto::types::RateLimitUnit;
use tollgate_envoy::rls::{Rls, RlsConfig, RlsError, RlsFailureMode, UpstreamCounting};
use tollgate_testkit::{RedisCluster, RedisServer};

/// 2023-11-14 22:15:23 UTC: 23 s into a minute.
const NOW: u64 = 1_700_000_123;

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// Upstream's README example: a minute's limit per address under one generic key.
const EDGE: &str = r#"
domain: rl
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 10 }
"#;

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

fn hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(hits),
        ..descriptor(entries)
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// The service on the store `store` makes (given the clock), with `yaml`, its limiter, and
/// the manual clock standing at `at` seconds that they read.
fn node(
    store: impl FnOnce(&ManualClock) -> AnyStore,
    at: u64,
    yaml: &str,
    counting: Option<UpstreamCounting>,
) -> (Rls, Limiter<AnyStore>, ManualClock) {
    let clock = ManualClock::new(at * 1_000_000);
    let limiter = Limiter::builder(store(&clock))
        .clock(Arc::new(clock.clone()))
        .build();
    let config = RlsConfig::from_documents(&[("test.yaml", yaml)]).expect("a valid configuration");
    let rls = Rls::new(limiter.clone(), config, false).with_upstream_keys(counting);
    (rls, limiter, clock)
}

/// An in-process store on `clock`, by which its counters expire.
fn memory(clock: &ManualClock) -> AnyStore {
    AnyStore::Memory(
        MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build(),
    )
}

async fn redis_store(redis: &RedisServer) -> AnyStore {
    AnyStore::Redis(
        RedisStore::connect(&redis.url(), RedisConfig::default())
            .await
            .expect("Redis answers"),
    )
}

/// A store already made, for [`node`].
fn on(store: AnyStore) -> impl FnOnce(&ManualClock) -> AnyStore {
    move |_| store
}

fn upstream() -> Option<UpstreamCounting> {
    Some(UpstreamCounting::default())
}

async fn respond(rls: &Rls, request: &RateLimitRequest) -> RateLimitResponse {
    rls.should_rate_limit(request).await.expect("an answer")
}

/// (code, remaining, seconds until reset) of each status.
async fn answer(rls: &Rls, request: &RateLimitRequest) -> Vec<(Code, u32, i64)> {
    respond(rls, request)
        .await
        .statuses
        .iter()
        .map(|status| {
            (
                Code::try_from(status.code).expect("a known code"),
                status.limit_remaining,
                status
                    .duration_until_reset
                    .as_ref()
                    .map_or(0, |d| d.seconds),
            )
        })
        .collect()
}

fn get(redis: &RedisServer, key: &str) -> Option<u64> {
    redis
        .query(redis::cmd("GET").arg(key))
        .expect("GET answers")
}

fn set(redis: &RedisServer, key: &str, value: u64) {
    let _: () = redis
        .query(redis::cmd("SET").arg(key).arg(value))
        .expect("SET answers");
}

/// Milliseconds the key has left to live.
fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis
        .query(redis::cmd("PTTL").arg(key))
        .expect("PTTL answers")
}

fn keys(redis: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis
        .query(redis::cmd("KEYS").arg("*"))
        .expect("KEYS answers");
    keys.sort();
    keys
}

/// One hit as envoyproxy/ratelimit's `fixed_cache_impl.go` sends it for a `unit`-second limit
/// of `limit`: `INCRBY key 1` and `EXPIRE key unit+jitter` in one pipeline; whether it was
/// admitted (the count after it at most the limit).
fn upstream_hit(redis: &RedisServer, key: &str, unit: u64, limit: u64) -> bool {
    let mut connection = redis::Client::open(redis.url())
        .expect("a URL")
        .get_connection()
        .expect("a connection");
    let (after,): (u64,) = redis::pipe()
        .cmd("INCRBY")
        .arg(key)
        .arg(1)
        .cmd("EXPIRE")
        .arg(key)
        .arg(unit + fastrand::u64(..300))
        .ignore()
        .query(&mut connection)
        .expect("the pipeline answers");
    after <= limit
}

#[tokio::test]
async fn an_upstream_pod_and_tollgate_admit_the_limit_between_them() {
    let redis = RedisServer::start();
    let (rls, _, clock) = node(on(redis_store(&redis).await), NOW, EDGE, upstream());
    let key = |now: u64| {
        format!(
            "rl_generic_key_api_remote_address_10.1.2.3_{}",
            now / 60 * 60
        )
    };
    let hit = request(
        "rl",
        vec![descriptor(&[
            ("generic_key", "api"),
            ("remote_address", "10.1.2.3"),
        ])],
    );
    let (mut upstream_admitted, mut tollgate_admitted) = (0, 0);
    for round in 0..30 {
        if round % 2 == 0 {
            upstream_admitted += u32::from(upstream_hit(&redis, &key(NOW), 60, 10));
        } else {
            tollgate_admitted += u32::from(answer(&rls, &hit).await[0].0 == OK);
        }
    }
    assert_eq!(
        (upstream_admitted, tollgate_admitted),
        (5, 5),
        "ten admitted between them, never ten each"
    );
    assert_eq!(
        get(&redis, &key(NOW)),
        Some(30),
        "every hit counted on both sides, refused ones too"
    );
    let ttl = pttl(&redis, &key(NOW));
    assert!(
        (30_000..=360_000).contains(&ttl),
        "a minute and at most 300 s of jitter, not {ttl} ms"
    );
    assert_eq!(answer(&rls, &hit).await, [(OVER, 0, 37)]);
    assert_eq!(keys(&redis), [key(NOW)], "no key of Tollgate's own");

    // The next minute is a new counter, for both.
    clock.advance(Duration::from_secs(37));
    assert_eq!(answer(&rls, &hit).await, [(OK, 9, 60)]);
    assert!(upstream_hit(&redis, &key(NOW + 37), 60, 10));
    assert_eq!(get(&redis, &key(NOW + 37)), Some(2));
}

#[tokio::test]
async fn a_store_that_is_gone_answers_by_the_failure_mode() {
    let mut redis = RedisServer::start();
    let (rls, _, _) = node(on(redis_store(&redis).await), NOW, EDGE, upstream());
    let hit = request(
        "rl",
        vec![descriptor(&[
            ("generic_key", "api"),
            ("remote_address", "10.1.2.3"),
        ])],
    );
    assert_eq!(answer(&rls, &hit).await, [(OK, 9, 37)]);
    redis.kill();
    assert!(matches!(
        rls.should_rate_limit(&hit).await,
        Err(RlsError::Unavailable(_))
    ));
    let allowing = rls.with_failure_mode(RlsFailureMode::Decide(FailureMode::Allow));
    assert_eq!(answer(&allowing, &hit).await, [(OK, 0, 0)]);
}

#[tokio::test]
async fn a_store_that_is_gone_decides_locally_on_each_nodes_share_of_the_limit() {
    let mut redis = RedisServer::start();
    let (rls, limiter, _) = node(on(redis_store(&redis).await), NOW, EDGE, None);
    let rls = rls
        .with_failure_mode(RlsFailureMode::Decide(FailureMode::Local))
        .with_local_nodes(2);
    let hit = request(
        "rl",
        vec![descriptor(&[
            ("generic_key", "api"),
            ("remote_address", "10.1.2.3"),
        ])],
    );
    let (code, remaining, _) = answer(&rls, &hit).await[0];
    assert_eq!(
        (code, remaining),
        (OK, 9),
        "the store decides, on its own clock"
    );
    redis.kill();
    for left in (0..5).rev() {
        assert_eq!(
            answer(&rls, &hit).await,
            [(OK, left, 37)],
            "half of 10 a minute, decided in process"
        );
    }
    assert_eq!(answer(&rls, &hit).await, [(OVER, 0, 37)]);
    let metrics = limiter.telemetry().metrics_text();
    let local = metrics
        .lines()
        .find(|line| {
            line.starts_with("tollgate_decisions_total{policy=\"rl\"")
                && line.contains("outcome=\"local_fallback\"")
        })
        .unwrap_or_else(|| panic!("no local decisions counted in\n{metrics}"));
    assert!(local.ends_with(" 6"), "{local}");
}

/// The configuration of upstream's `test/redis/fixed_cache_impl_test.go` cases.
const UPSTREAM_CASES: &str = r#"
domain: domain
descriptors:
  - key: key
    value: value
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: key2
    value: value2
    descriptors:
      - key: subkey2
        value: subvalue2
        rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: key3
    value: value3
    rate_limit: { unit: hour, requests_per_unit: 10 }
    descriptors:
      - key: subkey3
        value: subvalue3
        rate_limit: { unit: day, requests_per_unit: 10 }
  - key: path
    value: "files*"
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 10 }
"#;

#[tokio::test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn keys_are_upstreams_own_as_its_tests_name_them() {
    let redis = RedisServer::start();
    // What an upstream pod counted before: Tollgate's answers come from these counts.
    set(&redis, "domain_key_value_1234", 4);
    set(&redis, "domain_key2_value2_subkey2_subvalue2_1200", 10);
    set(&redis, "domain_key3_value3_997200", 11);
    set(&redis, "domain_key3_value3_subkey3_subvalue3_950400", 12);
    let (rls, _, clock) = node(
        on(redis_store(&redis).await),
        1_234,
        UPSTREAM_CASES,
        upstream(),
    );

    let second = request("domain", vec![descriptor(&[("key", "value")])]);
    assert_eq!(answer(&rls, &second).await, [(OK, 5, 1)]);
    let minute = request(
        "domain",
        vec![
            hits(&[("key2", "value2")], 0),
            hits(&[("key2", "value2"), ("subkey2", "subvalue2")], 1),
        ],
    );
    assert_eq!(answer(&rls, &minute).await, [(OK, 0, 0), (OVER, 0, 26)]);
    assert_eq!(
        get(&redis, "domain_key2_value2_subkey2_subvalue2_1200"),
        Some(11)
    );
    let ttl = pttl(&redis, "domain_key2_value2_subkey2_subvalue2_1200");
    assert!((30_000..=360_000).contains(&ttl), "{ttl} ms");

    clock.set(1_000_000 * 1_000_000);
    let hour_and_day = request(
        "domain",
        vec![
            hits(&[("key3", "value3")], 0),
            hits(&[("key3", "value3"), ("subkey3", "subvalue3")], 1),
        ],
    );
    assert_eq!(
        answer(&rls, &hour_and_day).await,
        [(OVER, 0, 800), (OVER, 0, 36_800)]
    );
    assert_eq!(get(&redis, "domain_key3_value3_997200"), Some(11), "a look");
    assert_eq!(
        get(&redis, "domain_key3_value3_subkey3_subvalue3_950400"),
        Some(13)
    );
    let ttl = pttl(&redis, "domain_key3_value3_997200");
    assert!((3_570_000..=3_900_000).contains(&ttl), "{ttl} ms");
    let ttl = pttl(&redis, "domain_key3_value3_subkey3_subvalue3_950400");
    assert!((86_370_000..=86_700_000).contains(&ttl), "{ttl} ms");

    // share_threshold: every value the wildcard matches counts under the pattern.
    for file in ["files/a", "files/b"] {
        respond(
            &rls,
            &request("domain", vec![descriptor(&[("path", file)])]),
        )
        .await;
    }
    assert_eq!(get(&redis, "domain_path_files*_997200"), Some(2));

    // CACHE_KEY_PREFIX, and a request's own limit, whose unit names the window.
    let prefixed = UpstreamCounting {
        prefix: "ratelimit:".to_owned(),
        ..UpstreamCounting::default()
    };
    let (rls, _, _) = node(
        on(redis_store(&redis).await),
        1_000_000,
        UPSTREAM_CASES,
        Some(prefixed),
    );
    let mut overridden = descriptor(&[("key", "value")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: RateLimitUnit::Hour as i32,
    });
    let response = respond(&rls, &request("domain", vec![overridden])).await;
    let status = &response.statuses[0];
    assert_eq!(
        (
            status.limit_remaining,
            status.current_limit.as_ref().map(|l| l.requests_per_unit)
        ),
        (4, Some(5))
    );
    assert_eq!(get(&redis, "ratelimit:domain_key_value_997200"), Some(1));
    let ttl = pttl(&redis, "ratelimit:domain_key_value_997200");
    assert!((3_570_000..=3_900_000).contains(&ttl), "{ttl} ms");
}

#[tokio::test]
async fn stop_increment_over_limit_raises_only_the_counters_that_would_pass() {
    let redis = RedisServer::start();
    set(&redis, "domain_key4_value4_997200", 10);
    set(&redis, "domain_key5_value5_997200", 10);
    let yaml = r#"
domain: domain
descriptors:
  - key: key4
    value: value4
    rate_limit: { unit: hour, requests_per_unit: 15 }
  - key: key5
    value: value5
    rate_limit: { unit: hour, requests_per_unit: 14 }
"#;
    // As upstream's TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig: a local cache too.
    let counting = UpstreamCounting {
        stop_increment_over_limit: true,
        local_cache: true,
        ..UpstreamCounting::default()
    };
    let (rls, limiter, _) = node(
        on(redis_store(&redis).await),
        1_000_000,
        yaml,
        Some(counting),
    );
    let both = |n| {
        request(
            "domain",
            vec![
                hits(&[("key4", "value4")], n),
                hits(&[("key5", "value5")], n),
            ],
        )
    };
    let counts = || {
        (
            get(&redis, "domain_key4_value4_997200"),
            get(&redis, "domain_key5_value5_997200"),
        )
    };
    assert_eq!(answer(&rls, &both(1)).await, [(OK, 4, 800), (OK, 3, 800)]);
    assert_eq!(counts(), (Some(11), Some(11)));
    assert_eq!(answer(&rls, &both(2)).await, [(OK, 2, 800), (OK, 1, 800)]);
    assert_eq!(counts(), (Some(13), Some(13)));
    // 13 + 2 passes 14: only key5 is raised; key4 keeps its room.
    assert_eq!(answer(&rls, &both(2)).await, [(OK, 2, 800), (OVER, 0, 800)]);
    assert_eq!(counts(), (Some(13), Some(15)));
    // key5 is over in the local cache now: it is not sent, and key4 is raised by nothing
    // (without the cache key5 would read 15, pass, and be raised to 17).
    assert_eq!(answer(&rls, &both(2)).await, [(OK, 2, 800), (OVER, 0, 800)]);
    assert_eq!(counts(), (Some(13), Some(15)));
    assert_eq!(limiter.telemetry().deny_cache_hits(), 1);
}

#[tokio::test]
async fn the_local_cache_answers_a_counter_over_its_limit_until_its_window_ends() {
    let redis = RedisServer::start();
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";
    let counting = UpstreamCounting {
        local_cache: true,
        ..UpstreamCounting::default()
    };
    let (rls, limiter, clock) = node(
        on(redis_store(&redis).await),
        1_000_000,
        yaml,
        Some(counting),
    );
    let hit = request("d", vec![descriptor(&[("k", "v")])]);
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(answer(&rls, &hit).await[0].0);
    }
    assert_eq!(answers, [OK, OK, OVER, OVER, OVER]);
    assert_eq!(
        get(&redis, "d_k_v_997200"),
        Some(3),
        "counted until found over, then answered in process"
    );
    assert_eq!(limiter.telemetry().deny_cache_hits(), 2);
    clock.advance(Duration::from_secs(800));
    assert_eq!(answer(&rls, &hit).await, [(OK, 1, 3_600)]);
    assert_eq!(get(&redis, "d_k_v_1000800"), Some(1));
}

#[tokio::test]
async fn per_second_limits_go_to_the_per_second_store() {
    let (main, per_second) = (RedisServer::start(), RedisServer::start());
    let yaml = r#"
domain: d
descriptors:
  - key: burst
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: steady
    rate_limit: { unit: minute, requests_per_unit: 10 }
"#;
    // The per-second store's count, so that its answer shows where the hit went.
    set(&per_second, "d_burst_x_1700000123", 4);
    for stop in [false, true] {
        let counting = UpstreamCounting {
            stop_increment_over_limit: stop,
            ..UpstreamCounting::default()
        };
        let (rls, limiter, _) = node(on(redis_store(&main).await), NOW, yaml, Some(counting));
        limiter
            .settings()
            .set_per_second_store(Some(redis_store(&per_second).await));
        let both = request(
            "d",
            vec![
                descriptor(&[("burst", "x")]),
                descriptor(&[("steady", "x")]),
            ],
        );
        let remaining: Vec<u32> = answer(&rls, &both).await.iter().map(|a| a.1).collect();
        let expected = if stop { [4, 8] } else { [5, 9] };
        assert_eq!(remaining, expected, "stop increment: {stop}");
    }
    assert_eq!(keys(&main), ["d_steady_x_1700000100"]);
    assert_eq!(get(&per_second, "d_steady_x_1700000100"), None);
}

#[tokio::test]
async fn a_cluster_takes_a_pipeline_per_key() {
    let cluster = RedisCluster::start();
    let store = AnyStore::Redis(
        RedisStore::connect_cluster(&cluster.urls(), RedisConfig::default())
            .await
            .expect("the cluster answers"),
    );
    let counting = UpstreamCounting {
        stop_increment_over_limit: true,
        ..UpstreamCounting::default()
    };
    let (rls, _, _) = node(on(store), NOW, EDGE, Some(counting));
    let addresses = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"];
    let every = request(
        "rl",
        addresses
            .iter()
            .map(|address| descriptor(&[("generic_key", "api"), ("remote_address", address)]))
            .collect(),
    );
    for round in 1..=3 {
        let left: Vec<u32> = answer(&rls, &every).await.iter().map(|a| a.1).collect();
        assert_eq!(left, [10 - round; 5]);
    }
    let mut slots = std::collections::HashSet::new();
    for address in addresses {
        let key = format!("rl_generic_key_api_remote_address_{address}_1700000100");
        let slot: u16 = cluster.nodes()[0]
            .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key))
            .expect("KEYSLOT answers");
        slots.insert(cluster.master_of(slot).port());
        let count: Option<u64> = cluster
            .master_of(slot)
            .query(redis::cmd("GET").arg(&key))
            .expect("GET answers");
        assert_eq!(count, Some(3), "{key}");
    }
    assert!(slots.len() > 1, "the keys live on several masters");
}

/// Limits of every kind the service answers, for comparing stores and keys.
const MIXED: &str = r#"
domain: m
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: trial
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: free
    rate_limit: { unlimited: true }
  - key: blocked
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: specific
    rate_limit: { unit: minute, requests_per_unit: 2, name: specific, replaces: [{ name: generic }] }
  - key: generic
    rate_limit: { unit: minute, requests_per_unit: 1, name: generic }
"#;

/// A sequence of requests and clock steps (seconds to advance before the request).
fn script() -> Vec<(u64, RateLimitRequest)> {
    let one = |entries: &[(&str, &str)]| request("m", vec![descriptor(entries)]);
    let mut overridden = descriptor(&[("user", "o")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: RateLimitUnit::Second as i32,
    });
    let mixed = request(
        "m",
        vec![
            descriptor(&[("user", "a")]),
            hits(&[("tenant", "t")], 2),
            descriptor(&[("trial", "x")]),
            descriptor(&[("free", "x")]),
            descriptor(&[("blocked", "x")]),
            descriptor(&[("specific", "x")]),
            descriptor(&[("generic", "x")]),
            descriptor(&[("nothing", "x")]),
        ],
    );
    let mut steps = Vec::new();
    for _ in 0..4 {
        steps.push((0, mixed.clone()));
        steps.push((0, one(&[("user", "b")])));
    }
    steps.push((0, request("m", vec![hits(&[("user", "a")], 0)])));
    steps.push((0, request("m", vec![hits(&[("tenant", "t")], 9)])));
    steps.push((0, request("m", vec![overridden.clone()])));
    steps.push((37, mixed.clone()));
    steps.push((1, request("m", vec![overridden.clone(), overridden])));
    steps.push((3_600, mixed));
    steps
}

#[tokio::test]
async fn memory_redis_and_tollgates_own_keys_answer_alike() {
    let redis = RedisServer::start();
    let nodes = [
        node(memory, NOW, MIXED, upstream()),
        node(on(redis_store(&redis).await), NOW, MIXED, upstream()),
        node(memory, NOW, MIXED, None),
    ];
    for (step, (advance, request)) in script().into_iter().enumerate() {
        let mut responses = Vec::new();
        for (rls, _, clock) in &nodes {
            clock.advance(Duration::from_secs(advance));
            responses.push(respond(rls, &request).await);
        }
        assert_eq!(responses[0], responses[1], "step {step}: memory and Redis");
        assert_eq!(
            responses[0], responses[2],
            "step {step}: upstream's keys and Tollgate's"
        );
    }
}

#[tokio::test]
async fn read_first_and_the_local_cache_answer_alike_in_memory_and_redis() {
    let redis = RedisServer::start();
    let counting = Some(UpstreamCounting {
        stop_increment_over_limit: true,
        local_cache: true,
        ..UpstreamCounting::default()
    });
    let nodes = [
        node(memory, NOW, MIXED, counting.clone()),
        node(on(redis_store(&redis).await), NOW, MIXED, counting),
    ];
    for (step, (advance, request)) in script().into_iter().enumerate() {
        let mut responses = Vec::new();
        for (rls, _, clock) in &nodes {
            clock.advance(Duration::from_secs(advance));
            responses.push(respond(rls, &request).await);
        }
        assert_eq!(responses[0], responses[1], "step {step}");
    }
}

#[tokio::test]
async fn tollgates_own_algorithms_keep_their_own_keys() {
    let yaml = r#"
domain: own
descriptors:
  - key: classic
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: rate
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: gcra }
  - key: period
    rate_limit: { period: 30s, requests_per_unit: 5 }
  - key: refused_free
    rate_limit: { unit: minute, requests_per_unit: 5, count_refused: false }
"#;
    let every = request(
        "own",
        vec![
            descriptor(&[("classic", "x")]),
            descriptor(&[("rate", "x")]),
            descriptor(&[("period", "x")]),
            descriptor(&[("refused_free", "x")]),
        ],
    );
    for counting in [upstream(), None] {
        let redis = RedisServer::start();
        let (rls, _, _) = node(on(redis_store(&redis).await), NOW, yaml, counting.clone());
        respond(&rls, &every).await;
        let found = keys(&redis);
        let upstreams: Vec<&String> = found.iter().filter(|k| !k.starts_with("tg:")).collect();
        if counting.is_some() {
            assert_eq!(upstreams, ["own_classic_x_1700000100"], "{found:?}");
            assert_eq!(
                found.len(),
                4,
                "the three others under Tollgate's keys: {found:?}"
            );
        } else {
            assert!(upstreams.is_empty(), "{found:?}");
            assert_eq!(found.len(), 4, "{found:?}");
        }
    }
}

/// `POST /json` to the server at `base`; whether it admitted.
async fn json_hit(base: &str, body: &serde_json::Value) -> bool {
    let response = reqwest::Client::new()
        .post(format!("{base}/json"))
        .json(body)
        .send()
        .await
        .expect("an answer");
    match response.status().as_u16() {
        200 => true,
        429 => false,
        other => panic!(
            "status {other}: {}",
            response.text().await.unwrap_or_default()
        ),
    }
}

/// The system clock in seconds, for the keys the real binary names by it.
fn system_seconds() -> u64 {
    #[allow(clippy::disallowed_methods)] // The binary's window comes from the node's clock.
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

#[tokio::test]
async fn the_server_shares_upstreams_counters_through_its_flags() {
    let (redis, per_second) = (RedisServer::start(), RedisServer::start());
    let directory = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        directory.path().join("edge.yaml"),
        "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 6 }\n  - key: burst\n    rate_limit: { unit: second, requests_per_unit: 10 }\n",
    )
    .expect("written");
    let server = support::Tollgate::serve(&[
        "--redis",
        &redis.url(),
        "--rls-config",
        directory.path().to_str().expect("UTF-8"),
        "--rls-upstream-keys",
        "--rls-key-prefix",
        "ratelimit:",
        "--rls-per-second-redis",
        &per_second.url(),
    ]);
    let base = server.http_url();
    let user =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "u1"}]}]});
    // The binary names the hour by its clock; a run that an hour's end cuts in two goes again.
    let (upstream_admitted, tollgate_admitted, key) = loop {
        let hour = system_seconds() / 3_600 * 3_600;
        let key = format!("ratelimit:rl_user_u1_{hour}");
        let _: () = redis
            .query(&mut redis::cmd("FLUSHALL"))
            .expect("FLUSHALL answers");
        let (mut upstream_admitted, mut tollgate_admitted) = (0, 0);
        for round in 0..12 {
            if round % 2 == 0 {
                upstream_admitted += u32::from(upstream_hit(&redis, &key, 3_600, 6));
            } else {
                tollgate_admitted += u32::from(json_hit(&base, &user).await);
            }
        }
        if system_seconds() / 3_600 * 3_600 == hour {
            break (upstream_admitted, tollgate_admitted, key);
        }
    };
    assert_eq!((upstream_admitted, tollgate_admitted), (3, 3));
    assert_eq!(get(&redis, &key), Some(12));
    let ttl = pttl(&redis, &key);
    assert!((3_570_000..=3_900_000).contains(&ttl), "{ttl} ms");

    // One-second counters go to the per-second Redis: full there for the next minute, so the
    // hit is refused whichever second it lands in (the main Redis would admit it).
    let now = system_seconds();
    for second in now..now + 60 {
        set(&per_second, &format!("ratelimit:rl_burst_b_{second}"), 100);
    }
    let burst =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "burst", "value": "b"}]}]});
    assert!(!json_hit(&base, &burst).await);
    assert!(
        keys(&redis).iter().all(|key| !key.contains("burst")),
        "{:?}",
        keys(&redis)
    );
}
