//! Reading a [`Config`] from YAML, checking every value where it is written.

use super::model::{Config, GlobalConfig};
use crate::yaml::{ConfigErrors, Node, Reader};

mod limits;
mod policy;
mod store;
mod usage;
mod values;

use self::policy::read_policy;
use self::store::{read_redis, read_store};
use self::values::{
    read_forwarded_header, read_header_families, read_idempotency, read_identity_headers,
    read_list, read_network,
};

/// The most policies one file may hold.
pub const MAX_POLICIES: usize = 1_000;
/// The most limits one policy (or one tier) may hold.
pub const MAX_LIMITS_PER_POLICY: usize = 16;
/// The most entries an allow or deny list may hold.
pub const MAX_LIST_ENTRIES: usize = 100_000;

const TOP_FIELDS: &[&str] = &[
    "store",
    "redis",
    "global_redis",
    "trusted_proxies",
    "forwarded_header",
    "ipv4_prefix",
    "ipv6_prefix",
    "identity_headers",
    "headers",
    "deny_status",
    "allow",
    "deny",
    "max_delayed",
    "idempotency",
    "memory",
    "policies",
];
const POLICY_FIELDS: &[&str] = &[
    "name",
    "match",
    "key",
    "limits",
    "tiers",
    "tier_from",
    "default_tier",
    "cost",
    "usage",
    "partition_key",
    "shadow",
    "soft_limit",
    "penalty",
    "concurrency",
    "idempotency",
    "refund_on",
    "on_store_error",
    "local_nodes",
    "allow",
    "deny",
];
const LIMIT_FIELDS: &[&str] = &[
    "name",
    "algorithm",
    "quota",
    "burst",
    "mode",
    "delay_after",
    "lease",
    "scope",
    "max_debt",
    "calendar",
];
const KEY_PARTS: &str = "ip, user, api_key, tenant, route, method, host, header:<name>, param:<name>, const:<value>, global";

impl Config {
    /// Reads a configuration from YAML text; `source` names it in error messages (a file path).
    /// Every problem is reported, each with its line and column.
    pub fn from_yaml(source: &str, text: &str) -> Result<Config, ConfigErrors> {
        let (reader, documents) = Reader::parse(source, text)?;
        let config = match documents.as_slice() {
            [] => Config::default(),
            [document] => read_config(reader.node(document)),
            [_, second, ..] => {
                reader
                    .node(second)
                    .error("expected one YAML document, found several");
                Config::default()
            }
        };
        reader.finish()?;
        Ok(config)
    }
}

fn read_config(root: Node<'_, '_>) -> Config {
    let mut config = Config::default();
    if root.is_null() {
        return config;
    }
    let Some(map) = root.map("the configuration") else {
        return config;
    };
    let mut global = None;
    if let Some(node) = map.get("store") {
        (config.store, global) = read_store(node);
    }
    if let Some(node) = map.get("redis") {
        config.redis = read_redis(node, "redis");
    }
    let global_redis = map.get("global_redis").map(|node| {
        let options = read_redis(node, "global_redis");
        // Not a mapping: read_redis has said so already.
        let timed = node.is_mapping()
            && node
                .map("global_redis")
                .is_some_and(|section| section.get("timeout").is_some());
        if timed { options } else { options.for_global() }
    });
    if let (Some(node), None) = (map.get("global_redis"), &global) {
        node.error("global_redis: there is no global store (store.global)");
    }
    config.global = global.map(|(store, leases)| GlobalConfig {
        store,
        redis: global_redis.unwrap_or_else(|| config.redis.clone().for_global()),
        leases,
    });
    if let Some(node) = map.get("trusted_proxies") {
        config.trusted_proxies = node
            .list()
            .iter()
            .filter_map(|n| read_network(*n, "trusted_proxies"))
            .collect();
    }
    if let Some(node) = map.get("forwarded_header") {
        config.forwarded_header = read_forwarded_header(node);
    }
    if let Some(node) = map.get("ipv4_prefix") {
        config.ipv4_prefix = node.number("ipv4_prefix", 1..=32).map_or(32, |n| n as u8);
    }
    if let Some(node) = map.get("ipv6_prefix") {
        config.ipv6_prefix = node.number("ipv6_prefix", 1..=128).map_or(64, |n| n as u8);
    }
    if let Some(node) = map.get("identity_headers") {
        config.identity_headers = read_identity_headers(node);
    }
    if let Some(node) = map.get("headers") {
        config.headers = read_header_families(node);
    }
    if let Some(node) = map.get("deny_status") {
        match node.number("deny_status", 100..=599) {
            Some(status @ (403 | 429)) => config.deny_status = status as u16,
            Some(_) => node.error("deny_status: expected 403 or 429"),
            None => {}
        }
    }
    if let Some(node) = map.get("allow") {
        config.allow = read_list(node, "allow");
    }
    if let Some(node) = map.get("deny") {
        config.deny = read_list(node, "deny");
    }
    if let Some(node) = map.get("max_delayed") {
        config.max_delayed = node.number("max_delayed", 0..=1_000_000).unwrap_or(1024) as usize;
    }
    if let Some(node) = map.get("idempotency") {
        config.idempotency = read_idempotency(node);
    }
    if let Some(node) = map.get("memory")
        && let Some(memory) = node.map("memory")
    {
        if let Some(n) = memory.get("max_keys") {
            config.memory_max_keys = n
                .number("memory.max_keys", 1_000..=1_000_000_000)
                .map_or(config.memory_max_keys, |n| n as usize);
        }
        memory.deny_unknown("memory", &["max_keys"]);
    }
    let listed = map.get("policies");
    config.policies_listed = listed.is_some();
    if let Some(node) = listed
        && let Some(items) = node.strict_list("policies")
    {
        if items.len() > MAX_POLICIES {
            node.error(format!(
                "policies: {} given, the maximum is {MAX_POLICIES}",
                items.len()
            ));
        }
        config.policies = items
            .iter()
            .take(MAX_POLICIES)
            .filter_map(|n| read_policy(*n))
            .collect();
    }
    map.deny_unknown("the configuration", TOP_FIELDS);
    config
}
