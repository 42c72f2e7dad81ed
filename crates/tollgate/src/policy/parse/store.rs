//! The `store`, `redis` and `global_redis` sections.

use super::values::read_duration;
use crate::layer::LeaseTuning;
use crate::policy::model::{RedisOptions, StoreConfig};
use crate::yaml::{Map, Node};

fn is_url(text: &str) -> bool {
    text.starts_with("redis://") || text.starts_with("rediss://")
}

/// The `store` section: the regional store, and the global one with its lease tuning when
/// the section names one (`store: {region: ..., global: ..., leases: {...}}`).
pub(super) fn read_store(node: Node<'_, '_>) -> (StoreConfig, Option<(StoreConfig, LeaseTuning)>) {
    let tiered = node.is_mapping()
        && node.map("store").is_some_and(|map| {
            ["region", "global", "leases"]
                .iter()
                .any(|key| map.get(key).is_some())
        });
    if !tiered {
        return (read_one_store(node, "store"), None);
    }
    let Some(map) = node.map("store") else {
        return (StoreConfig::Memory, None);
    };
    map.deny_unknown("store", &["region", "global", "leases"]);
    let region = map
        .get("region")
        .map_or(StoreConfig::Memory, |n| read_one_store(n, "store.region"));
    let leases = map.get("leases").map(read_leases).unwrap_or_default();
    let Some(global) = map.get("global") else {
        node.error("store: a global store (store.global) goes with store.leases");
        return (region, None);
    };
    let global = read_one_store(global, "store.global");
    if global == StoreConfig::Memory {
        node.error("store.global: expected a redis:// URL, a list of Redis Cluster node URLs, or {sentinels: [URL, ...], master: NAME}");
        return (region, None);
    }
    (region, Some((global, leases)))
}

/// `store.leases`: how leases on the global store are sized and kept.
fn read_leases(node: Node<'_, '_>) -> LeaseTuning {
    let mut tuning = LeaseTuning::default();
    let Some(map) = node.map("store.leases") else {
        return tuning;
    };
    if let Some(n) = map.get("horizon") {
        tuning.horizon = read_duration(n, "store.leases.horizon").unwrap_or(tuning.horizon);
    }
    if let Some(n) = map.get("idle") {
        tuning.idle = read_duration(n, "store.leases.idle").unwrap_or(tuning.idle);
    }
    if let Some(n) = map.get("hold") {
        tuning.hold = read_duration(n, "store.leases.hold").unwrap_or(tuning.hold);
    }
    if let Some(n) = map.get("max_share") {
        let what = "store.leases.max_share";
        let percent = n
            .text(what)
            .and_then(|text| text.strip_suffix('%')?.trim().parse::<u8>().ok())
            .filter(|percent| (1..=100).contains(percent));
        match percent {
            Some(percent) => tuning.max_share_percent = percent,
            None => n.error(format!("{what}: expected a percentage from 1% to 100%")),
        }
    }
    map.deny_unknown("store.leases", &["horizon", "max_share", "idle", "hold"]);
    tuning
}

/// One store: `memory`, a URL, a list of cluster node URLs, or a Sentinel mapping.
fn read_one_store(node: Node<'_, '_>, what: &str) -> StoreConfig {
    let expected = format!(
        "{what}: expected \"memory\", a redis:// URL, a list of Redis Cluster node URLs, or \
         {{sentinels: [URL, ...], master: NAME}}"
    );
    if node.is_mapping() {
        return match node.map(what) {
            Some(map) => read_sentinel(&map, node, what, &expected),
            None => StoreConfig::Memory,
        };
    }
    let items = node.list();
    if items.len() == 1 && items[0].origin() == node.origin() {
        return match node.text(what).as_deref() {
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
        match item.text(what) {
            Some(url) if is_url(&url) => urls.push(url.into_owned().into()),
            Some(_) => item.error(expected.clone()),
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
fn read_sentinel(map: &Map<'_, '_>, node: Node<'_, '_>, what: &str, expected: &str) -> StoreConfig {
    let mut sentinels = Vec::new();
    if let Some(list) = map.get("sentinels") {
        for item in list.list() {
            match item.text(&format!("{what}.sentinels")) {
                Some(url) if is_url(&url) => sentinels.push(url.into_owned().into()),
                Some(_) => item.error(format!(
                    "{what}.sentinels: expected redis:// or rediss:// URLs"
                )),
                None => {}
            }
        }
    }
    let master = map
        .get("master")
        .and_then(|n| n.text(&format!("{what}.master")))
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_default();
    map.deny_unknown(what, &["sentinels", "master"]);
    if sentinels.is_empty() || master.is_empty() {
        node.error(expected);
        return StoreConfig::Memory;
    }
    StoreConfig::RedisSentinel { sentinels, master }
}

/// `redis.tls` (or `global_redis.tls`): the PEM files for `rediss://` URLs.
fn read_tls(node: Node<'_, '_>, section: &str) -> crate::RedisTls {
    let mut tls = crate::RedisTls::default();
    let Some(map) = node.map(&format!("{section}.tls")) else {
        return tls;
    };
    let path = |key: &str| {
        map.get(key)
            .and_then(|n| n.text(&format!("{section}.tls.{key}")))
            .map(|text| std::path::PathBuf::from(text.into_owned()))
    };
    tls.ca_file = path("ca_file");
    tls.client_cert = path("client_cert");
    tls.client_key = path("client_key");
    if tls.client_cert.is_some() != tls.client_key.is_some() {
        node.error(format!(
            "{section}.tls: client_cert and client_key go together"
        ));
    }
    map.deny_unknown(
        &format!("{section}.tls"),
        &["ca_file", "client_cert", "client_key"],
    );
    tls
}

/// `redis.username` and `redis.password_file`: the password is read from the file here, so
/// that it never sits in the policy file itself.
fn read_auth(map: &Map<'_, '_>, section: &str) -> Option<crate::RedisAuth> {
    let username = map
        .get("username")
        .and_then(|n| n.text(&format!("{section}.username")))
        .map(std::borrow::Cow::into_owned);
    let Some(file) = map.get("password_file") else {
        if let Some(n) = map.get("username") {
            n.error(format!("{section}.username: needs {section}.password_file"));
        }
        return None;
    };
    let path = file.text(&format!("{section}.password_file"))?;
    match std::fs::read_to_string(path.as_ref()) {
        Ok(password) => Some(crate::RedisAuth {
            username,
            password: password.trim_end_matches(['\r', '\n']).to_owned(),
        }),
        Err(error) => {
            file.error(format!("{section}.password_file {path}: {error}"));
            None
        }
    }
}

pub(super) fn read_redis(node: Node<'_, '_>, section: &str) -> RedisOptions {
    let mut options = RedisOptions::default();
    let Some(map) = node.map(section) else {
        return options;
    };
    if let Some(n) = map.get("prefix")
        && let Some(prefix) = n.text(&format!("{section}.prefix"))
    {
        options.config.prefix = prefix.into_owned();
        if let Err(error) = options.config.validate_prefix() {
            n.error(format!("{section}.prefix: {error}"));
        }
    }
    if let Some(n) = map.get("timeout") {
        let config = &mut options.config;
        config.timeout = read_duration(n, &format!("{section}.timeout")).unwrap_or(config.timeout);
    }
    if let Some(n) = map.get("connect_timeout") {
        let config = &mut options.config;
        config.connect_timeout = read_duration(n, &format!("{section}.connect_timeout"))
            .unwrap_or(config.connect_timeout);
    }
    if let Some(n) = map.get("max_batch") {
        options.config.max_batch = n
            .number(&format!("{section}.max_batch"), 1..=1024)
            .unwrap_or(16) as usize;
    }
    if let Some(n) = map.get("breaker") {
        options.breaker = read_breaker(n, section);
    }
    if let Some(n) = map.get("deny_cache") {
        options.deny_cache = n.boolean(&format!("{section}.deny_cache")).unwrap_or(true);
    }
    if let Some(n) = map.get("tls") {
        options.config.tls = read_tls(n, section);
    }
    options.config.auth = read_auth(&map, section);
    map.deny_unknown(
        section,
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

pub(super) fn read_breaker(node: Node<'_, '_>, section: &str) -> crate::BreakerConfig {
    let mut breaker = crate::BreakerConfig::default();
    let Some(map) = node.map(&format!("{section}.breaker")) else {
        return breaker;
    };
    if let Some(n) = map.get("failures") {
        breaker.failures = n
            .number(&format!("{section}.breaker.failures"), 1..=10_000)
            .map_or(breaker.failures, |n| n as u32);
    }
    if let Some(n) = map.get("cooldown") {
        breaker.cooldown =
            read_duration(n, &format!("{section}.breaker.cooldown")).unwrap_or(breaker.cooldown);
    }
    map.deny_unknown(&format!("{section}.breaker"), &["failures", "cooldown"]);
    breaker
}
