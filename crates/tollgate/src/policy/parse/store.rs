//! The `store` and `redis` sections.

use super::values::read_duration;
use crate::policy::model::{RedisOptions, StoreConfig};
use crate::yaml::Node;

pub(super) fn read_store(node: Node<'_, '_>) -> StoreConfig {
    let expected =
        "store: expected \"memory\", a redis:// URL, or a list of Redis Cluster node URLs";
    let is_url = |text: &str| text.starts_with("redis://") || text.starts_with("rediss://");
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
    map.deny_unknown(
        "redis",
        &[
            "prefix",
            "timeout",
            "connect_timeout",
            "max_batch",
            "breaker",
            "deny_cache",
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
