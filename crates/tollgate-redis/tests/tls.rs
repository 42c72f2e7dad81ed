//! The Redis store over TLS, as managed Redis services and meshes run it: a TLS-only
//! redis-server with certificates made by the test, the default user switched off and an ACL
//! user for Tollgate; each way of getting the connection wrong gives an error that says which.

use std::time::Duration;

use tollgate_core::algorithm::Algorithm;
use tollgate_core::check::Check;
use tollgate_core::limit::Limit;
use tollgate_core::store::Store;
use tollgate_redis::{RedisAuth, RedisConfig, RedisStore, RedisTls};
use tollgate_testkit::{Certificates, RedisServer};

/// The ACL rules the README gives Tollgate's user.
const RULES: &str = "on >secret ~tg:* +fcall +function|load +evalsha +script|load +time +mget +set +del +ping +hget +hset +hdel +hgetall +incr";

/// A TLS-only server requiring client certificates, with Tollgate's ACL user and the default
/// user off.
fn locked_down_server(certificates: &Certificates) -> RedisServer {
    let server = RedisServer::start_tls(certificates, &["--tls-auth-clients", "yes"]);
    let created: String = server
        .query(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("limiter")
                .arg(RULES.split(' ').collect::<Vec<_>>()),
        )
        .expect("ACL SETUSER limiter");
    assert_eq!(created, "OK");
    let off: String = server
        .query(redis::cmd("ACL").arg("SETUSER").arg("default").arg("off"))
        .expect("ACL SETUSER default off");
    assert_eq!(off, "OK");
    server
}

fn tls_url(server: &RedisServer) -> String {
    format!("rediss://127.0.0.1:{}", server.port())
}

fn config(certificates: &Certificates, password: &str) -> RedisConfig {
    RedisConfig {
        timeout: Duration::from_secs(2),
        tls: RedisTls {
            ca_file: Some(certificates.ca.clone()),
            client_cert: Some(certificates.client_cert.clone()),
            client_key: Some(certificates.client_key.clone()),
        },
        auth: Some(RedisAuth {
            username: Some("limiter".to_owned()),
            password: password.to_owned(),
        }),
        ..RedisConfig::default()
    }
}

#[tokio::test]
async fn two_limiters_over_mutual_tls_as_an_acl_user_stay_exact() {
    let certificates = Certificates::generate();
    let server = locked_down_server(&certificates);
    let url = tls_url(&server);
    let first = RedisStore::connect(&url, config(&certificates, "secret"))
        .await
        .unwrap();
    let second = RedisStore::connect(&url, config(&certificates, "secret"))
        .await
        .unwrap();
    let limit = Limit::new("per-user", Algorithm::Gcra, "30/h".parse().unwrap()).unwrap();
    let check = Check::one("user:1", &limit);
    let checks = (0..50).flat_map(|_| [first.check(&check, None), second.check(&check, None)]);
    let verdicts = futures_util::future::join_all(checks).await;
    let admitted = verdicts
        .into_iter()
        .map(|verdict| verdict.expect("decided over TLS"))
        .filter(|verdict| verdict.is_allowed())
        .count();
    assert_eq!(admitted, 30, "100 checks from two limiters on a 30/h limit");
}

#[tokio::test]
async fn each_wrong_connection_says_what_is_wrong() {
    let certificates = Certificates::generate();
    let server = locked_down_server(&certificates);
    let url = tls_url(&server);
    let error = |result: Result<RedisStore, tollgate_core::store::StoreError>| {
        result.expect_err("the connection must fail").to_string()
    };
    let wrong_password = error(RedisStore::connect(&url, config(&certificates, "guess")).await);
    assert!(
        wrong_password.contains("Redis refused the user name or password"),
        "{wrong_password}"
    );
    let mut untrusted = config(&certificates, "secret");
    untrusted.tls.ca_file = Some(certificates.other_ca.clone());
    let untrusted = error(RedisStore::connect(&url, untrusted).await);
    assert!(
        untrusted.contains("TLS certificate does not verify")
            && untrusted.contains("UnknownIssuer"),
        "{untrusted}"
    );
    let mut no_client_certificate = config(&certificates, "secret");
    no_client_certificate.tls.client_cert = None;
    no_client_certificate.tls.client_key = None;
    let no_client_certificate = error(RedisStore::connect(&url, no_client_certificate).await);
    assert!(
        no_client_certificate.contains("requires a client certificate"),
        "{no_client_certificate}"
    );
    let plain_config = RedisConfig {
        tls: RedisTls::default(),
        ..config(&certificates, "secret")
    };
    let plain_url = format!("redis://127.0.0.1:{}", server.port());
    let plain_to_tls = error(RedisStore::connect(&plain_url, plain_config.clone()).await);
    assert!(plain_to_tls.contains("use rediss://"), "{plain_to_tls}");
    let plain_server = RedisServer::start();
    let tls_to_plain =
        error(RedisStore::connect(&tls_url(&plain_server), config(&certificates, "secret")).await);
    assert!(
        tls_to_plain.contains("if this port is plain Redis, use redis://"),
        "{tls_to_plain}"
    );
    let certificates_on_a_plain_url = RedisStore::open(&plain_url, config(&certificates, "secret"))
        .expect_err("certificates with a redis:// URL are refused")
        .to_string();
    assert!(
        certificates_on_a_plain_url.contains("is not a rediss:// URL"),
        "{certificates_on_a_plain_url}"
    );
    let all = [
        wrong_password,
        untrusted,
        no_client_certificate,
        plain_to_tls,
        tls_to_plain,
        certificates_on_a_plain_url,
    ];
    assert!(
        all.iter()
            .all(|message| !message.contains("secret") && !message.contains("guess")),
        "{all:?}"
    );
}

/// The server's certificate must hold the name the store connected by: a certificate for
/// another name, signed by a trusted CA, is refused.
#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let certificates = Certificates::for_server_names(&["redis.example.com"]);
    let server = RedisServer::start_tls(&certificates, &[]);
    let config = RedisConfig {
        tls: RedisTls {
            ca_file: Some(certificates.ca.clone()),
            ..RedisTls::default()
        },
        ..RedisConfig::default()
    };
    let error = RedisStore::connect(&tls_url(&server), config)
        .await
        .expect_err("the name does not match")
        .to_string();
    assert!(
        error.contains("TLS certificate does not verify")
            && error.contains("not valid for name \"127.0.0.1\""),
        "{error}"
    );
}

/// A Redis Cluster that speaks only TLS (clients, bus and replication): the store follows the
/// slots over TLS and decides exactly, a cross-slot check included.
#[tokio::test]
async fn a_tls_cluster_decides_exactly() {
    let certificates = Certificates::generate();
    let cluster = tollgate_testkit::RedisCluster::start_tls(&certificates);
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("rediss://127.0.0.1:{}", node.port()))
        .collect();
    let config = RedisConfig {
        timeout: Duration::from_secs(2),
        tls: RedisTls {
            ca_file: Some(certificates.ca.clone()),
            ..RedisTls::default()
        },
        ..RedisConfig::default()
    };
    let store = RedisStore::connect_cluster(&urls, config)
        .await
        .expect("the store reaches the cluster over TLS");
    let limit = Limit::new("per-user", Algorithm::FixedWindow, "5/h".parse().unwrap()).unwrap();
    for user in ["user:1", "user:2", "user:3"] {
        let mut admitted = 0;
        for _ in 0..8 {
            admitted += usize::from(
                store
                    .check(&Check::one(user, &limit), None)
                    .await
                    .expect("decided over TLS")
                    .is_allowed(),
            );
        }
        assert_eq!(admitted, 5, "{user}");
    }
    let both = Check::new(1)
        .limit("user:4", &limit)
        .limit("user:5", &limit);
    let mut admitted = 0;
    for _ in 0..8 {
        admitted += usize::from(store.check(&both, None).await.unwrap().is_allowed());
    }
    assert_eq!(admitted, 5, "a check across two slots, all or nothing");
}
