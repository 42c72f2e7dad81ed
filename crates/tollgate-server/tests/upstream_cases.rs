//! envoyproxy/ratelimit's own integration cases (`test/integration/integration_test.go`:
//! `testBasicBaseConfig` and `testShareThreshold`, with its configuration files `basic.yaml`,
//! `another.yaml` and `share_threshold.yaml`) against `tollgate serve` started as upstream's
//! Deployment starts upstream: nothing but upstream's environment (Redis, a per-second Redis,
//! the runtime directory) and the files in a mounted ConfigMap, over gRPC on upstream's port.
//! Each case runs in upstream's settings as its suite runs them: plain, and with
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and a local cache.

mod support;

use std::time::Duration;

use support::Tollgate;
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::service::rate_limit_response::{Code, DescriptorStatus};
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::rls::proto::service::{RateLimitRequest, RateLimitResponse};
use tollgate_envoy::rls::proto::types::RateLimitUnit;
use tollgate_testkit::RedisServer;
use tonic::transport::Channel;

/// Upstream's `test/integration/runtime/current/ratelimit/config/basic.yaml`.
const BASIC: &str = "\
domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50

  - key: key1_local
    rate_limit:
      unit: second
      requests_per_unit: 50

  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
";

/// Upstream's `another.yaml`.
const ANOTHER: &str = "\
domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: key2_local
    rate_limit:
      unit: minute
      requests_per_unit: 20

  - key: key3_local
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20

  - key: key4_local
    rate_limit:
      unit: day
      requests_per_unit: 20
";

/// Upstream's `share_threshold.yaml`.
const SHARE_THRESHOLD: &str = "\
domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  - key: files_no_share
    value: files_no_share/*
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

/// Upstream's settings for one run of its suite.
struct Settings {
    stop_increment_over_limit: bool,
    local_cache: bool,
}

/// The server as upstream's Deployment starts upstream, on `redis` with one-second limits in
/// `per_second`, the files in a ConfigMap under `root`.
fn start(
    root: &std::path::Path,
    redis: &RedisServer,
    per_second: &RedisServer,
    settings: &Settings,
) -> Tollgate {
    let config = root.join("ratelimit/config");
    let files = [
        ("basic.yaml", BASIC),
        ("another.yaml", ANOTHER),
        ("share_threshold.yaml", SHARE_THRESHOLD),
    ]
    .map(|(name, text)| (name.to_owned(), text.to_owned()));
    support::project_configmap(&config, &files, 1);
    let port = || tollgate_testkit::free_port().to_string();
    let mut env = vec![
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("REDIS_PERSECOND", "true".to_owned()),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp".to_owned()),
        (
            "REDIS_PERSECOND_URL",
            format!("127.0.0.1:{}", per_second.port()),
        ),
        ("USE_STATSD", "false".to_owned()),
        ("RUNTIME_ROOT", root.to_string_lossy().into_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("RUNTIME_WATCH_ROOT", "false".to_owned()),
        ("HOST", "127.0.0.1".to_owned()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("PORT", port()),
        ("GRPC_PORT", port()),
        ("DEBUG_PORT", port()),
    ];
    if settings.stop_increment_over_limit {
        env.push(("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true".to_owned()));
    }
    if settings.local_cache {
        env.push(("LOCAL_CACHE_SIZE_IN_BYTES", "1000000".to_owned()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
    Tollgate::start_with_env(&["serve"], &env)
}

fn request(domain: &str, descriptors: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|(key, value)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*key).to_owned(),
                    value: (*value).to_owned(),
                }],
                limit: None,
                hits_addend: None,
            })
            .collect(),
        hits_addend: 1,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("an answer")
        .into_inner()
}

/// A status as upstream's `newDescriptorStatus` writes it: the code, the limit and the
/// remaining count; the reset is checked to lie within the unit.
fn assert_status(
    status: &DescriptorStatus,
    code: Code,
    limit: (u32, RateLimitUnit),
    remaining: u32,
    what: &str,
) {
    assert_eq!(status.code, code as i32, "{what}: {status:?}");
    let current = status.current_limit.as_ref().expect("a limit");
    assert_eq!(
        (current.requests_per_unit, current.unit),
        (limit.0, limit.1 as i32),
        "{what}"
    );
    assert_eq!(status.limit_remaining, remaining, "{what}");
    let unit = match limit.1 {
        RateLimitUnit::Second => 1,
        RateLimitUnit::Minute => 60,
        RateLimitUnit::Hour => 3_600,
        RateLimitUnit::Day => 86_400,
        other => panic!("{other:?} is not used here"),
    };
    let reset = status
        .duration_until_reset
        .as_ref()
        .expect("a reset")
        .seconds;
    assert!((0..=unit).contains(&reset), "{what}: reset {reset} s");
}

/// Holds the cases clear of a minute's end, where upstream's own suite would fail too: its
/// counts of a minute's limit must all fall in one window.
async fn clear_of_a_minutes_end() {
    let into = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        % 60;
    if into >= 45 {
        tokio::time::sleep(Duration::from_secs(61 - into)).await;
    }
}

fn keys(redis: &RedisServer, pattern: &str) -> Vec<String> {
    redis.query(redis::cmd("KEYS").arg(pattern)).expect("keys")
}

/// `testBasicBaseConfig`.
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn run_basic_base_config(settings: Settings) {
    let (redis, per_second) = (RedisServer::start(), RedisServer::start());
    let root = tempfile::tempdir().expect("a directory");
    let server = start(root.path(), &redis, &per_second, &settings);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
        .await
        .expect("connects");
    clear_of_a_minutes_end().await;
    let random = fastrand::u64(..).to_string();

    // A domain that is not configured: OK, no limit.
    let answer = ask(&mut client, request("foo", &[("hello", "world")])).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(answer.statuses.len(), 1);
    assert_eq!(answer.statuses[0].code, Code::Ok as i32);
    assert_eq!(answer.statuses[0].current_limit, None);
    assert_eq!(answer.statuses[0].limit_remaining, 0);

    // A per-second limit, counted in the per-second Redis.
    let answer = ask(&mut client, request("basic", &[("key1", "foo")])).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_status(
        &answer.statuses[0],
        Code::Ok,
        (50, RateLimitUnit::Second),
        49,
        "key1",
    );
    assert!(!keys(&per_second, "basic_key1_foo_*").is_empty());
    assert!(keys(&redis, "basic_key1_foo_*").is_empty());

    // One key of a minute's limit: 20 within, then over.
    for i in 0..25u32 {
        let answer = ask(&mut client, request("another", &[("key2", &random)])).await;
        let (code, remaining) = if i >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (i + 1))
        };
        assert_eq!(answer.overall_code, code as i32, "key2 hit {i}");
        assert_status(
            &answer.statuses[0],
            code,
            (20, RateLimitUnit::Minute),
            remaining,
            &format!("key2 hit {i}"),
        );
    }
    let counted: Vec<String> = keys(&redis, &format!("another_key2_{random}_*"));
    assert_eq!(counted.len(), 1, "upstream's key: {counted:?}");
    let count: u64 = redis
        .query(redis::cmd("GET").arg(&counted[0]))
        .expect("a count");
    // Every hit is counted, as upstream counts them, but for those its local cache answers
    // once the counter is over its limit.
    let expected = if settings.local_cache { 21 } else { 25 };
    assert_eq!(count, expected, "the count in upstream's key");

    // Two keys in one domain: the hour's limit runs out first.
    let random = fastrand::u64(..).to_string();
    for i in 0..15u32 {
        let answer = ask(
            &mut client,
            request("another", &[("key2", &random), ("key3", &random)]),
        )
        .await;
        let mut remaining_minute = 20 - (i + 1);
        let (code, remaining_hour) = if i >= 10 {
            if settings.stop_increment_over_limit {
                // Upstream stops raising every counter of a request one of whose counters
                // would pass its limit.
                remaining_minute = 10;
            }
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 10 - (i + 1))
        };
        assert_eq!(answer.overall_code, code as i32, "key2 and key3 hit {i}");
        assert_status(
            &answer.statuses[0],
            Code::Ok,
            (20, RateLimitUnit::Minute),
            remaining_minute,
            &format!("key2 beside key3, hit {i}"),
        );
        assert_status(
            &answer.statuses[1],
            code,
            (10, RateLimitUnit::Hour),
            remaining_hour,
            &format!("key3, hit {i}"),
        );
    }

    // The reset counts down.
    let first = ask(&mut client, request("another", &[("key4", "durTest")])).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = ask(&mut client, request("another", &[("key4", "durTest")])).await;
    let reset = |answer: &RateLimitResponse| {
        answer.statuses[0]
            .duration_until_reset
            .as_ref()
            .expect("a reset")
            .seconds
    };
    assert!(reset(&second) < reset(&first), "{first:?} then {second:?}");
}

/// `testShareThreshold`.
async fn run_share_threshold(settings: Settings) {
    let (redis, per_second) = (RedisServer::start(), RedisServer::start());
    let root = tempfile::tempdir().expect("a directory");
    let server = start(root.path(), &redis, &per_second, &settings);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.address("grpc")))
        .await
        .expect("connects");
    clear_of_a_minutes_end().await;
    let domain = "share-threshold-test";
    for i in 0..10 {
        let answer = ask(&mut client, request(domain, &[("files", "files/a.pdf")])).await;
        assert_eq!(answer.overall_code, Code::Ok as i32, "files/a.pdf hit {i}");
    }
    // Another value under the shared pattern counts in the same counter.
    let answer = ask(&mut client, request(domain, &[("files", "files/b.csv")])).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert_status(
        &answer.statuses[0],
        Code::OverLimit,
        (10, RateLimitUnit::Hour),
        0,
        "files/b.csv",
    );
    assert_eq!(
        keys(&redis, "share-threshold-test_files_files/*_*").len(),
        1
    );
    // Without share_threshold, each value has its own.
    for i in 0..10 {
        let value = format!("files_no_share/{i}-{}", fastrand::u64(..));
        let answer = ask(&mut client, request(domain, &[("files_no_share", &value)])).await;
        assert_status(
            &answer.statuses[0],
            Code::Ok,
            (10, RateLimitUnit::Hour),
            9,
            &value,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_base_config() {
    run_basic_base_config(Settings {
        stop_increment_over_limit: false,
        local_cache: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_base_config_with_a_local_cache_and_stop_increment_when_over_limit() {
    run_basic_base_config(Settings {
        stop_increment_over_limit: true,
        local_cache: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold() {
    run_share_threshold(Settings {
        stop_increment_over_limit: false,
        local_cache: false,
    })
    .await;
}
