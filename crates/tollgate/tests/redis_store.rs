//! The Redis store's override table against a real redis-server, with the ACL users the README
//! gives: the documented user loads the code, checks, refunds and writes overrides; a user with
//! the limits' permissions only reads an empty table and is refused a write. The store's own
//! tests are in `crates/tollgate-redis/tests/redis_store.rs`.

use tollgate::overrides::{OverrideBackend, OverrideWritten};
use tollgate::{Adjustment, Algorithm, Check, Limit, RedisConfig, RedisStore, Store};

/// The ACL user the README gives: enough to load the library, check and refund.
#[tokio::test]
async fn the_documented_acl_user_can_load_check_and_refund() {
    let own = tollgate_testkit::RedisServer::start();
    let rules = "on >secret ~tg:* +fcall +function|load +evalsha +script|load +time +mget +set +del +ping +hget +hset +hdel +hgetall +incr";
    let created: String = own
        .query(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("tollgate")
                .arg(rules.split(' ').collect::<Vec<_>>()),
        )
        .unwrap();
    assert_eq!(created, "OK");
    let url = own.url().replace("redis://", "redis://tollgate:secret@");
    let store = RedisStore::connect(&url, RedisConfig::default())
        .await
        .unwrap();
    let limit = Limit::new("l", Algorithm::Gcra, "2/h".parse().unwrap()).unwrap();
    let check = Check::one("k", &limit);
    let first = store.check(&check, None).await.unwrap();
    assert!(first.is_allowed());
    let refund = [Adjustment::Refund {
        charged_at: first.at(),
    }];
    store.adjust(&check, &refund, None).await.unwrap();
    let mut admitted = Vec::new();
    for _ in 0..3 {
        admitted.push(store.check(&check, None).await.unwrap().is_allowed());
    }
    assert_eq!(admitted, [true, true, false], "the refund gave one back");
    assert_eq!(
        own.calls_by_kind().1,
        0,
        "the library was loaded and called, no script"
    );
    // And it reads and writes overrides.
    let overrides = store.override_backend();
    assert_eq!(overrides.version().await.unwrap(), 0);
    assert_eq!(
        overrides.write("id", 0, Some("{}")).await.unwrap(),
        OverrideWritten::Done { version: 1 }
    );
    assert_eq!(overrides.load().await.unwrap().records.len(), 1);
}

/// A Redis user with the limits' permissions only reads an empty override table (so that the
/// table's follower stays quiet) and is refused a write, with Redis's reason.
#[tokio::test]
async fn a_user_without_the_override_permissions_reads_none_and_cannot_write() {
    let own = tollgate_testkit::RedisServer::start();
    let rules =
        "on >secret ~tg:* +fcall +function|load +evalsha +script|load +time +mget +set +del +ping";
    let _: String = own
        .query(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("tollgate")
                .arg(rules.split(' ').collect::<Vec<_>>()),
        )
        .unwrap();
    let url = own.url().replace("redis://", "redis://tollgate:secret@");
    let store = RedisStore::connect(&url, RedisConfig::default())
        .await
        .unwrap();
    let overrides = store.override_backend();
    assert_eq!(overrides.version().await.unwrap(), 0);
    let error = overrides.write("id", 0, Some("{}")).await.unwrap_err();
    assert!(error.to_string().contains("lacks a permission"), "{error}");
}
