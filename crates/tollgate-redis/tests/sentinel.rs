//! The Redis store through Redis Sentinel: the master found by name, a failover followed, and
//! the count kept. Real processes: a master, its replica and three sentinels.

#![allow(clippy::disallowed_methods)] // The test times its own run: how long checks waited.

use std::time::{Duration, Instant};

use tollgate_core::algorithm::Algorithm;
use tollgate_core::check::Check;
use tollgate_core::limit::Limit;
use tollgate_core::store::{Store, StoreError};
use tollgate_redis::{RedisConfig, RedisStore};
use tollgate_testkit::{MASTER_NAME, RedisSentinels};

/// The longest a failover may take here: one second to call the master down, then the
/// election and the promotion.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(30);

fn config() -> RedisConfig {
    RedisConfig {
        timeout: Duration::from_millis(250),
        connect_timeout: Duration::from_millis(250),
        ..RedisConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_and_the_promoted_replica_holds_the_count() {
    let mut group = RedisSentinels::start();
    let store = RedisStore::connect_sentinel(&group.sentinel_urls(), MASTER_NAME, config())
        .await
        .expect("the sentinels name the master");
    let limit = Limit::new("per-user", Algorithm::Gcra, "100/h".parse().unwrap()).unwrap();
    let check = Check::one("user:1", &limit);
    for _ in 0..10 {
        assert!(store.check(&check, None).await.unwrap().is_allowed());
    }
    // Replication is asynchronous: the kill waits until the replica has the ten writes.
    let acknowledged: i64 = group
        .master
        .query(redis::cmd("WAIT").arg(1).arg(5000))
        .unwrap();
    assert_eq!(acknowledged, 1, "the replica acknowledged the writes");
    let old_master = group.master.port();
    let replica = group.replica.port();
    group.master.kill();
    let killed = Instant::now();

    let mut failed = 0;
    let mut promoted_at = None;
    let decided = loop {
        assert!(
            killed.elapsed() < FAILOVER_DEADLINE,
            "no check was decided by the store within {FAILOVER_DEADLINE:?} of the kill"
        );
        if promoted_at.is_none() && group.master_port() == Some(replica) {
            promoted_at = Some(Instant::now());
        }
        let sent = Instant::now();
        let outcome = store.check(&check, None).await;
        let waited = sent.elapsed();
        assert!(
            waited < config().timeout + Duration::from_secs(1),
            "a check waited {waited:?}, past the store's timeout"
        );
        match outcome {
            Ok(verdict) => break verdict,
            Err(StoreError::Unavailable(_) | StoreError::Timeout(_) | StoreError::Failed(_)) => {
                failed += 1;
            }
            Err(other) => panic!("an unexpected error during the failover: {other}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let promoted_at = promoted_at.unwrap_or_else(Instant::now);
    println!(
        "master {old_master} killed; replica {replica} promoted {:?} later; the first check \
         decided by the store {:?} after the promotion; {failed} checks failed meanwhile",
        promoted_at - killed,
        promoted_at.elapsed()
    );
    assert_eq!(
        decided.decisions()[0].remaining(),
        89,
        "the promoted replica held the ten checks before the kill, and took the eleventh"
    );
    assert!(failed > 0, "checks failed while there was no master");
}

#[tokio::test]
async fn a_master_name_the_sentinels_do_not_know_is_an_error_that_says_so() {
    let group = RedisSentinels::start();
    let error = RedisStore::connect_sentinel(&group.sentinel_urls(), "no-such-master", config())
        .await
        .expect_err("no master of that name")
        .to_string();
    assert!(error.contains("not found"), "{error}");
    let refused = RedisStore::open_sentinel(&[] as &[&str], MASTER_NAME, config())
        .expect_err("no sentinels")
        .to_string();
    assert!(refused.contains("at least one sentinel"), "{refused}");
}

/// Sentinels and data nodes that speak only TLS, with a private CA, each with a password of its
/// own: `rediss://` sentinel URLs mean TLS to both; the URLs carry the sentinels' password, the
/// configuration the data nodes'.
#[tokio::test]
async fn sentinels_and_their_master_over_tls_with_passwords() {
    let certificates = tollgate_testkit::Certificates::generate();
    let group = RedisSentinels::start_tls(&certificates);
    let config = RedisConfig {
        tls: tollgate_redis::RedisTls {
            ca_file: Some(certificates.ca.clone()),
            ..tollgate_redis::RedisTls::default()
        },
        timeout: Duration::from_secs(2),
        auth: Some(tollgate_redis::RedisAuth {
            username: None,
            password: tollgate_testkit::DATA_PASSWORD.to_owned(),
        }),
        ..config()
    };
    let store = RedisStore::connect_sentinel(&group.sentinel_tls_urls(), MASTER_NAME, config)
        .await
        .expect("the sentinels name the master over TLS");
    let limit = Limit::new("per-user", Algorithm::Gcra, "2/h".parse().unwrap()).unwrap();
    let check = Check::one("user:1", &limit);
    let mut admitted = Vec::new();
    for _ in 0..3 {
        admitted.push(store.check(&check, None).await.unwrap().is_allowed());
    }
    assert_eq!(admitted, [true, true, false]);
    let keys: Vec<String> = group.master.query(redis::cmd("KEYS").arg("tg:*")).unwrap();
    assert_eq!(keys.len(), 1, "the state is on the master: {keys:?}");
}
