//! What the Redis tests of this crate and of `tollgate` share: one server and one cluster per
//! test binary (their processes die with it), fresh key prefixes so tests never see each other's
//! keys, the workloads' keys, and the runner of the differential tests. `tollgate`'s tests
//! include this file (`crates/tollgate/tests/common/mod.rs`).

#![allow(dead_code, unreachable_pub)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_testkit::{RedisCluster, RedisServer};

pub fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

pub fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A proptest configuration of `cases` cases (or `PROPTEST_CASES`) for a hand-built runner,
/// keeping the failures it shrinks in `tests/<name>.proptest-regressions` and replaying them
/// first on every run, as `proptest!` does for its own tests.
pub fn differential_config(name: &str, cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let path: &'static str = format!("tests/{name}.proptest-regressions").leak();
    proptest::test_runner::Config {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(path),
        )),
        ..proptest::test_runner::Config::with_cases(cases)
    }
}

/// A configuration whose key prefix no other test in this process uses.
pub fn fresh_config() -> RedisConfig {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    RedisConfig {
        prefix: format!("t{}:", NEXT.fetch_add(1, Ordering::Relaxed)),
        timeout: std::time::Duration::from_secs(2),
        ..RedisConfig::default()
    }
}

pub async fn single_store() -> RedisStore {
    RedisStore::connect(&server().url(), fresh_config())
        .await
        .expect("connect to the test redis")
}

pub async fn cluster_store() -> RedisStore {
    RedisStore::connect_cluster(&cluster().urls(), fresh_config())
        .await
        .expect("connect to the test cluster")
}

/// The keys of the workloads.
pub const KEYS: [&str; 3] = ["user:1", "ip:203.0.113.7", "tenant:{acme}"];
