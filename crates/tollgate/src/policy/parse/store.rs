//! The `store` and `redis` sections.

use super::values::read_duration;
use crate::policy::model::{RedisOptions, StoreConfig};
use crate::yaml::{Map, Node};

fn is_url(text: &str) -> bool {
    text.starts_with("redis://") || text.starts_with("rediss://")
}

pub(super) fn read_store(node: Node<'_, '_>) -> StoreConfig {
    let expected = "store: expected \"memory\", a redis:// URL, a list of Redis Cluster node \
                    URLs, or {sentinels: [URL, ...], master: NAME}";
    if node.is_mapping() {
        return match node.map("store") {
            Some(map) => read_sentinel(&map, node, expected),
            None => StoreConfig::Memory,
        };
    }
    let items = node.list();
    if items.len() == 1 && items[0].origin() == node.origin() {
        return match node.text("store").as_deref() {
            Some("memory") => StoreConfig::Memory,
            Some(url) if is_url(url) => StoreConfig::Redis(url.into()),
            Some(_) => {
                node.error(expected);
                StoreConfig::Memory
            }
            None => StoreConfig::Memory,
        };
    }
    let mut urls = Vec::new();
    for item in items {
        match item.text("store") {
            Some(url) if is_url(&url) => urls.push(url.into_owned().into()),
            Some(_) => item.error(expected),
            None => {}
        }
    }
    if urls.is_empty() {
        node.error(expected);
        return StoreConfig::Memory;
    }
    StoreConfig::RedisCluster(urls)
}

/// `store: {sentinels: [URL, ...], master: NAME}`.
fn read_sentinel(map: &Map<'_, '_>, node: Node<'_, '_>, expected: &str) -> StoreConfig {
    let mut sentinels = Vec::new();
    if let Some(list) = map.get("sentinels") {
        for item in list.list() {
            match item.text("store.sentinels") {
                Some(url) if is_url(&url) => sentinels.push(url.into_owned().into()),
                Some(_) => item.error("store.sentinels: expected redis:// or rediss:// URLs"),
                None => {}
            }
        }
    }
    let master = map
        .get("master")
        .and_then(|n| n.text("store.master"))
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_default();
    map.deny_unknown("store", &["sentinels", "master"]);
    if sentinels.is_empty() || master.is_empty() {
        node.error(expected);
        return StoreConfig::Memory;
    }
    StoreConfig::RedisSentinel { sentinels, master }
}

/// `redis.tls`: the PEM files for `rediss://` URLs.
fn read_tls(node: Node<'_, '_>) -> crate::RedisTls {
    let mut tls = crate::RedisTls::default();
    let Some(map) = node.map("redis.tls") else {
        return tls;
    };
    let path = |key: &str| {
        map.get(key)
            .and_then(|n| n.text(&format!("redis.tls.{key}")))
            .map(|text| std::path::PathBuf::from(text.into_owned()))
    };
    tls.ca_file = path("ca_file");
    tls.client_cert = path("client_cert");
    tls.client_key = path("client_key");
    if tls.client_cert.is_some() != tls.client_key.is_some() {
        node.error("redis.tls: client_cert and client_key go together");
    }
    map.deny_unknown("redis.tls", &["ca_file", "client_cert", "client_key"]);
    tls
}

/// `redis.username` and `redis.password_file`: the password is read from the file here, so
/// that it never sits in the policy file itself.
fn read_auth(map: &Map<'_, '_>) -> Option<crate::RedisAuth> {
    let username = map
        .get("username")
        .and_then(|n| n.text("redis.username"))
        .map(std::borrow::Cow::into_owned);
    let Some(file) = map.get("password_file") else {
        if let Some(n) = map.get("username") {
            n.error("redis.username: needs redis.password_file");
        }
        return None;
    };
    let path = file.text("redis.password_file")?;
    match std::fs::read_to_string(path.as_ref()) {
        Ok(password) => Some(crate::RedisAuth {
            username,
            password: password.trim_end_matches(['\r', '\n']).to_owned(),
        }),
        Err(error) => {
            file.error(format!("redis.password_file {path}: {error}"));
            None
        }
    }
}

pub(super) fn read_redis(node: Node<'_, '_>) -> RedisOptions {
    let mut options = RedisOptions::default();
    let Some(map) = node.map("redis") else {
        return options;
    };
    if let Some(n) = map.get("prefix")
        && let Some(prefix) = n.text("redis.prefix")
    {
        options.config.prefix = prefix.into_owned();
        if let Err(error) = options.config.validate_prefix() {
            n.error(format!("redis.prefix: {error}"));
        }
    }
    if let Some(n) = map.get("timeout") {
        let config = &mut options.config;
        config.timeout = read_duration(n, "redis.timeout").unwrap_or(config.timeout);
    }
    if let Some(n) = map.get("connect_timeout") {
        let config = &mut options.config;
        config.connect_timeout =
            read_duration(n, "redis.connect_timeout").unwrap_or(config.connect_timeout);
    }
    if let Some(n) = map.get("max_batch") {
        options.config.max_batch = n.number("redis.max_batch", 1..=1024).unwrap_or(16) as usize;
    }
    if let Some(n) = map.get("breaker") {
        options.breaker = read_breaker(n);
    }
    if let Some(n) = map.get("deny_cache") {
        options.deny_cache = n.boolean("redis.deny_cache").unwrap_or(true);
    }
    if let Some(n) = map.get("tls") {
        options.config.tls = read_tls(n);
    }
    options.config.auth = read_auth(&map);
    map.deny_unknown(
        "redis",
        &[
            "prefix",
            "timeout",
            "connect_timeout",
            "max_batch",
            "breaker",
            "deny_cache",
            "tls",
            "username",
            "password_file",
        ],
    );
    options
}

pub(super) fn read_breaker(node: Node<'_, '_>) -> crate::BreakerConfig {
    let mut breaker = crate::BreakerConfig::default();
    let Some(map) = node.map("redis.breaker") else {
        return breaker;
    };
    if let Some(n) = map.get("failures") {
        breaker.failures = n
            .number("redis.breaker.failures", 1..=10_000)
            .map_or(breaker.failures, |n| n as u32);
    }
    if let Some(n) = map.get("cooldown") {
        breaker.cooldown = read_duration(n, "redis.breaker.cooldown").unwrap_or(breaker.cooldown);
    }
    map.deny_unknown("redis.breaker", &["failures", "cooldown"]);
    breaker
}
