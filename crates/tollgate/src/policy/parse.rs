//! Reading a [`Config`] from YAML, checking every value where it is written.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::client_ip::ForwardedHeader;
use super::model::{
    ConcurrencyConfig, Config, CostConfig, FailureMode, HeaderFamily, IdempotencyConfig,
    IdentityHeaders, KeyPart, LimitConfig, ListEntry, MatchConfig, PenaltyConfig, PolicyConfig,
    RedisOptions, SoftLimit, StatusRange, StoreConfig, TierSource,
};
use crate::algorithm::Algorithm;
use crate::quota::{Quota, parse_duration};
use crate::spec::{LimitSpec, leaky_mode};
use crate::yaml::{ConfigErrors, Node, Reader};

/// The most policies one file may hold.
pub const MAX_POLICIES: usize = 1_000;
/// The most limits one policy (or one tier) may hold.
pub const MAX_LIMITS_PER_POLICY: usize = 16;
/// The most entries an allow or deny list may hold.
pub const MAX_LIST_ENTRIES: usize = 100_000;

const TOP_FIELDS: &[&str] = &[
    "store",
    "redis",
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
    if let Some(node) = map.get("store") {
        config.store = read_store(node);
    }
    if let Some(node) = map.get("redis") {
        config.redis = read_redis(node);
    }
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

fn read_store(node: Node<'_, '_>) -> StoreConfig {
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

fn read_redis(node: Node<'_, '_>) -> RedisOptions {
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

fn read_breaker(node: Node<'_, '_>) -> crate::BreakerConfig {
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

fn read_duration(node: Node<'_, '_>, what: &str) -> Option<Duration> {
    let text = node.text(what)?;
    match parse_duration(&text) {
        Ok(duration) if !duration.is_zero() => Some(duration),
        Ok(_) => {
            node.error(format!("{what}: must be longer than zero"));
            None
        }
        Err(error) => {
            node.error(format!("{what}: {error}"));
            None
        }
    }
}

fn read_network(node: Node<'_, '_>, what: &str) -> Option<IpNet> {
    let text = node.text(what)?;
    let text = text.trim();
    let parsed = text
        .parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from));
    if parsed.is_none() {
        node.error(format!(
            "{what}: {text:?} is not an IP address or network (such as 10.0.0.0/8 or 2001:db8::/32)"
        ));
    }
    parsed
}

fn read_identity_headers(node: Node<'_, '_>) -> IdentityHeaders {
    let mut headers = IdentityHeaders::default();
    let Some(map) = node.map("identity_headers") else {
        return headers;
    };
    let name = |key: &str| {
        map.get(key)
            .and_then(|n| n.text(&format!("identity_headers.{key}")))
            .map(|text| text.to_ascii_lowercase())
    };
    headers.user = name("user");
    headers.tenant = name("tenant");
    headers.plan = name("plan");
    headers.api_key = name("api_key");
    map.deny_unknown("identity_headers", &["user", "tenant", "plan", "api_key"]);
    headers
}

fn read_forwarded_header(node: Node<'_, '_>) -> ForwardedHeader {
    let Some(name) = node.text("forwarded_header") else {
        return ForwardedHeader::default();
    };
    ForwardedHeader::from_name(&name).unwrap_or_else(|| {
        node.error(format!(
            "forwarded_header: unknown header {name:?} (expected one of: {})",
            ForwardedHeader::NAMES
        ));
        ForwardedHeader::default()
    })
}

fn read_header_families(node: Node<'_, '_>) -> Vec<HeaderFamily> {
    let mut families = Vec::new();
    for item in node.list() {
        match item.text("headers").as_deref() {
            Some("ietf") => families.push(HeaderFamily::Ietf),
            Some("draft") => families.push(HeaderFamily::Draft),
            Some("legacy") => families.push(HeaderFamily::Legacy),
            Some("none") => {}
            Some(other) => item.error(format!(
                "headers: unknown header family {other:?} (expected one of: ietf, draft, legacy, none)"
            )),
            None => {}
        }
    }
    families.dedup();
    families
}

fn read_list(node: Node<'_, '_>, what: &str) -> Vec<ListEntry> {
    let items = node.list();
    if items.len() > MAX_LIST_ENTRIES {
        node.error(format!(
            "{what}: {} entries, the maximum is {MAX_LIST_ENTRIES}",
            items.len()
        ));
    }
    let mut entries = Vec::new();
    for item in items.into_iter().take(MAX_LIST_ENTRIES) {
        let Some(text) = item.text(what) else {
            continue;
        };
        let text = text.trim();
        let (part, value) = text.split_once(':').unwrap_or(("", text));
        match part {
            "user" | "api_key" | "tenant" if !value.is_empty() => {
                entries.push(ListEntry::Key(text.to_owned()))
            }
            _ => {
                let address = if part == "ip" { value } else { text };
                let parsed = address
                    .parse::<IpNet>()
                    .ok()
                    .or_else(|| address.parse::<IpAddr>().ok().map(IpNet::from));
                match parsed {
                    Some(network) => entries.push(ListEntry::Network(network)),
                    None => item.error(format!(
                        "{what}: {text:?} is neither an address or network nor user:<id>, api_key:<key> or tenant:<id>"
                    )),
                }
            }
        }
    }
    entries
}

fn read_idempotency(node: Node<'_, '_>) -> Option<IdempotencyConfig> {
    if let Some(flag) = node.as_bool() {
        return flag.then(IdempotencyConfig::default);
    }
    let map = node.map("idempotency")?;
    let mut config = IdempotencyConfig::default();
    if let Some(n) = map.get("header") {
        config.header = n
            .text("idempotency.header")
            .map_or(config.header, |t| t.to_ascii_lowercase());
    }
    if let Some(n) = map.get("window") {
        config.window = read_duration(n, "idempotency.window").unwrap_or(config.window);
    }
    map.deny_unknown("idempotency", &["header", "window"]);
    Some(config)
}

fn read_policy(node: Node<'_, '_>) -> Option<PolicyConfig> {
    let map = node.map("a policy")?;
    let name = map
        .required("name", "a policy")
        .and_then(|n| n.text("name"))
        .map(|t| t.into_owned());
    let what = format!("policy {:?}", name.as_deref().unwrap_or("?"));
    let mut policy = PolicyConfig::new(name.clone().unwrap_or_default());
    policy.origin = map.origin();
    if let Some(n) = map.get("match") {
        policy.matcher = read_match(n, &what);
    }
    if let Some(n) = map.get("key") {
        policy.key = read_key(n, &what);
    }
    if let Some(n) = map.get("limits") {
        policy.limits = read_limits(n, &what, &policy.name);
    }
    if let Some(n) = map.get("tiers")
        && let Some(tiers) = n.map(&format!("{what}: tiers"))
    {
        for (tier, _, limits) in tiers.entries() {
            let limits = read_limits(
                limits,
                &format!("{what}, tier {tier:?}"),
                &format!("{}-{tier}", policy.name),
            );
            policy.tiers.push((tier.to_owned(), limits));
        }
    }
    if let Some(n) = map.get("tier_from")
        && let Some(text) = n.text("tier_from")
    {
        match (text.as_ref(), text.split_once(':')) {
            ("plan", _) => policy.tier_from = TierSource::Plan,
            (_, Some(("header", header))) if !header.is_empty() => {
                policy.tier_from = TierSource::Header(header.to_ascii_lowercase());
            }
            _ => n.error(format!(
                "{what}: tier_from: expected \"plan\" or \"header:<name>\", found {text:?}"
            )),
        }
    }
    if let Some(n) = map.get("default_tier") {
        policy.default_tier = n.text("default_tier").map(|t| t.into_owned());
    }
    if let Some(n) = map.get("cost") {
        policy.cost = read_cost(n, &what).unwrap_or(CostConfig::Fixed(1));
    }
    if let Some(n) = map.get("shadow") {
        policy.shadow = n.boolean(&format!("{what}: shadow")).unwrap_or(false);
    }
    if let Some(n) = map.get("soft_limit") {
        policy.soft_limit = read_soft_limit(n, &what);
    }
    if let Some(n) = map.get("penalty") {
        policy.penalty = read_penalty(n, &what);
    }
    if let Some(n) = map.get("concurrency") {
        policy.concurrency = read_concurrency(n, &what);
    }
    if let Some(n) = map.get("idempotency") {
        policy.idempotency = n.boolean(&format!("{what}: idempotency")).unwrap_or(true);
    }
    if let Some(n) = map.get("refund_on") {
        policy.refund_on = n
            .list()
            .iter()
            .filter_map(|s| read_status_range(*s, &what))
            .collect();
    }
    if let Some(n) = map.get("on_store_error") {
        match n.text("on_store_error").as_deref() {
            Some("allow") => policy.on_store_error = FailureMode::Allow,
            Some("deny") => policy.on_store_error = FailureMode::Deny,
            Some("local") => policy.on_store_error = FailureMode::Local,
            Some(other) => n.error(format!(
                "{what}: on_store_error: unknown mode {other:?} (expected one of: allow, deny, local)"
            )),
            None => {}
        }
    }
    if let Some(n) = map.get("local_nodes") {
        policy.local_nodes = n
            .number(&format!("{what}: local_nodes"), 1..=10_000)
            .unwrap_or(1);
    }
    if let Some(n) = map.get("allow") {
        policy.allow = read_list(n, &format!("{what}: allow"));
    }
    if let Some(n) = map.get("deny") {
        policy.deny = read_list(n, &format!("{what}: deny"));
    }
    map.deny_unknown(&what, POLICY_FIELDS);
    name.map(|_| policy)
}

fn read_match(node: Node<'_, '_>, what: &str) -> MatchConfig {
    let mut matcher = MatchConfig::default();
    let Some(map) = node.map(&format!("{what}: match")) else {
        return matcher;
    };
    if let Some(n) = map.get("method") {
        matcher.methods = n
            .list()
            .iter()
            .filter_map(|m| m.text("method"))
            .map(|m| m.to_ascii_uppercase())
            .collect();
    }
    if let Some(n) = map.get("host") {
        matcher.hosts = n
            .list()
            .iter()
            .filter_map(|h| h.text("host"))
            .map(|h| h.to_ascii_lowercase())
            .collect();
    }
    for (field, slot) in [
        ("path", &mut matcher.path),
        ("path_prefix", &mut matcher.path_prefix),
    ] {
        if let Some(n) = map.get(field)
            && let Some(path) = n.text(field)
        {
            if !path.starts_with('/') {
                n.error(format!(
                    "{what}: match.{field}: must start with '/', found {path:?}"
                ));
            }
            *slot = Some(path.into_owned());
        }
    }
    if let Some(template) = &matcher.path
        && let Err(problem) = super::matcher::check_template(template)
        && let Some(n) = map.get("path")
    {
        n.error(format!("{what}: match.path: {problem}"));
    }
    map.deny_unknown(
        &format!("{what}: match"),
        &["method", "host", "path", "path_prefix"],
    );
    matcher
}

fn read_key(node: Node<'_, '_>, what: &str) -> Vec<KeyPart> {
    let mut parts = Vec::new();
    for item in node.list() {
        let Some(text) = item.text("key") else {
            continue;
        };
        for piece in text.split('+') {
            match parse_key_part(piece.trim()) {
                Some(part) => parts.push(part),
                None => item.error(format!(
                    "{what}: key: unknown key part {piece:?} (expected one of: {KEY_PARTS})"
                )),
            }
        }
    }
    if parts.is_empty() {
        node.error(format!(
            "{what}: key: expected at least one key part ({KEY_PARTS})"
        ));
        parts.push(KeyPart::Ip);
    }
    parts
}

/// Reads one key part: `ip`, `header:x-team`, `const:all`...
pub(crate) fn parse_key_part(text: &str) -> Option<KeyPart> {
    let part = match text {
        "ip" => KeyPart::Ip,
        "user" => KeyPart::User,
        "api_key" => KeyPart::ApiKey,
        "tenant" => KeyPart::Tenant,
        "route" => KeyPart::Route,
        "method" => KeyPart::Method,
        "host" => KeyPart::Host,
        "global" => KeyPart::Const("global".to_owned()),
        _ => match text.split_once(':')? {
            ("header", name) if !name.is_empty() => KeyPart::Header(name.to_ascii_lowercase()),
            ("param", name) if !name.is_empty() => KeyPart::Param(name.to_owned()),
            ("const", value) if !value.is_empty() => KeyPart::Const(value.to_owned()),
            _ => return None,
        },
    };
    Some(part)
}

fn read_limits(node: Node<'_, '_>, what: &str, default_name: &str) -> Vec<LimitConfig> {
    let Some(items) = node.strict_list(&format!("{what}: limits")) else {
        return Vec::new();
    };
    if items.len() > MAX_LIMITS_PER_POLICY {
        node.error(format!(
            "{what}: {} limits, the maximum is {MAX_LIMITS_PER_POLICY}",
            items.len()
        ));
    }
    items
        .iter()
        .take(MAX_LIMITS_PER_POLICY)
        .enumerate()
        .filter_map(|(index, item)| {
            let fallback = if index == 0 {
                default_name.to_owned()
            } else {
                format!("{default_name}-{}", index + 1)
            };
            read_limit(*item, what, fallback)
        })
        .collect()
}

fn read_limit(node: Node<'_, '_>, what: &str, fallback: String) -> Option<LimitConfig> {
    let map = node.map(&format!("{what}: a limit"))?;
    let name = map
        .get("name")
        .and_then(|n| n.text("name"))
        .map_or(fallback, |t| t.into_owned());
    let what = format!("{what}, limit {name:?}");
    let algorithm = map
        .required("algorithm", &what)
        .and_then(|n| n.parse::<Algorithm>(&format!("{what}: algorithm")));
    let quota = map
        .required("quota", &what)
        .and_then(|n| n.parse::<Quota>(&format!("{what}: quota")));
    let burst = map
        .get("burst")
        .and_then(|n| n.number(&format!("{what}: burst"), 1..=crate::quota::MAX_COUNT));
    let delay_after = map
        .get("delay_after")
        .and_then(|n| n.number(&format!("{what}: delay_after"), 1..=crate::quota::MAX_COUNT));
    let mode_node = map.get("mode");
    let mode_text = mode_node.and_then(|n| n.text("mode"));
    let mode = leaky_mode(mode_text.as_deref(), delay_after).unwrap_or_else(|error| {
        mode_node
            .unwrap_or(node)
            .error(format!("{what}: mode: {error}"));
        None
    });
    let lease = map
        .get("lease")
        .and_then(|n| n.number(&format!("{what}: lease"), 1..=crate::quota::MAX_COUNT))
        .unwrap_or(0);
    map.deny_unknown(&what, LIMIT_FIELDS);
    Some(LimitConfig {
        name,
        spec: LimitSpec {
            algorithm: algorithm?,
            quota: quota?,
            burst,
            mode,
            lease,
        },
        origin: map.origin(),
    })
}

fn read_cost(node: Node<'_, '_>, what: &str) -> Option<CostConfig> {
    if node.is_mapping() {
        let map = node.map(&format!("{what}: cost"))?;
        let header = map
            .required("header", &format!("{what}: cost"))
            .and_then(|n| n.text("cost.header"))
            .map(|t| t.to_ascii_lowercase());
        let default = map
            .get("default")
            .and_then(|n| n.number("cost.default", 0..=crate::check::MAX_COST));
        let max = map
            .get("max")
            .and_then(|n| n.number("cost.max", 1..=crate::check::MAX_COST));
        map.deny_unknown(&format!("{what}: cost"), &["header", "default", "max"]);
        return Some(CostConfig::Header {
            name: header?,
            default: default.unwrap_or(1),
            max: max.unwrap_or(crate::check::MAX_COST),
        });
    }
    let text = node.text(&format!("{what}: cost"))?;
    if text == "body" {
        return Some(CostConfig::Body);
    }
    if let Some(("header", name)) = text.split_once(':')
        && !name.is_empty()
    {
        return Some(CostConfig::Header {
            name: name.to_ascii_lowercase(),
            default: 1,
            max: crate::check::MAX_COST,
        });
    }
    match text.parse::<u64>() {
        Ok(cost) if cost <= crate::check::MAX_COST => Some(CostConfig::Fixed(cost)),
        _ => {
            node.error(format!(
                "{what}: cost: expected a whole number, \"header:<name>\", \"body\" or {{header, default, max}}, found {text:?}"
            ));
            None
        }
    }
}

fn read_soft_limit(node: Node<'_, '_>, what: &str) -> Option<SoftLimit> {
    let map = node.map(&format!("{what}: soft_limit"))?;
    let at = map
        .required("at", &format!("{what}: soft_limit"))
        .and_then(|n| {
            n.parse::<f64>(&format!("{what}: soft_limit.at"))
                .map(|at| (n, at))
        });
    let tarpit = map
        .get("tarpit")
        .and_then(|n| read_duration(n, &format!("{what}: soft_limit.tarpit")));
    map.deny_unknown(&format!("{what}: soft_limit"), &["at", "tarpit"]);
    let (n, at) = at?;
    if !(0.0..1.0).contains(&at) || at == 0.0 {
        n.error(format!(
            "{what}: soft_limit.at: expected a fraction between 0 and 1, such as 0.8"
        ));
        return None;
    }
    Some(SoftLimit { at, tarpit })
}

fn read_penalty(node: Node<'_, '_>, what: &str) -> Option<PenaltyConfig> {
    let what = format!("{what}: penalty");
    let map = node.map(&what)?;
    let after = map
        .required("after", &what)
        .and_then(|n| n.number(&format!("{what}.after"), 1..=10_000));
    let block: Option<(usize, Vec<Duration>)> = map.required("block", &what).map(|n| {
        let items = n.list();
        let durations = items
            .iter()
            .filter_map(|d| read_duration(*d, &format!("{what}.block")))
            .collect();
        (items.len(), durations)
    });
    let within = map
        .get("within")
        .and_then(|n| read_duration(n, &format!("{what}.within")));
    let decay = map
        .get("decay")
        .and_then(|n| read_duration(n, &format!("{what}.decay")));
    map.deny_unknown(&what, &["after", "block", "within", "decay"]);
    let (written, block) = block?;
    if block.is_empty() {
        if written == 0 {
            map.error(format!(
                "{what}.block: expected at least one duration, such as [1m, 10m, 1h]"
            ));
        }
        return None;
    }
    Some(PenaltyConfig {
        after: after?,
        block,
        within,
        decay,
    })
}

fn read_concurrency(node: Node<'_, '_>, what: &str) -> Option<ConcurrencyConfig> {
    let what = format!("{what}: concurrency");
    if !node.is_mapping() {
        let max = node.number(&what, 1..=1_000_000)?;
        return Some(ConcurrencyConfig {
            max,
            lease: Duration::from_secs(60),
        });
    }
    let map = node.map(&what)?;
    let max = map
        .required("max", &what)
        .and_then(|n| n.number(&format!("{what}.max"), 1..=1_000_000));
    let lease = map
        .get("lease")
        .and_then(|n| read_duration(n, &format!("{what}.lease")));
    map.deny_unknown(&what, &["max", "lease"]);
    Some(ConcurrencyConfig {
        max: max?,
        lease: lease.unwrap_or(Duration::from_secs(60)),
    })
}

fn read_status_range(node: Node<'_, '_>, what: &str) -> Option<StatusRange> {
    let text = node.text("refund_on")?;
    let text = text.trim();
    let parsed = if let Some(class) = text.strip_suffix("xx").and_then(|d| d.parse::<u16>().ok()) {
        Some((class * 100, class * 100 + 99))
    } else if let Some((low, high)) = text.split_once('-') {
        low.trim().parse().ok().zip(high.trim().parse().ok())
    } else {
        text.parse().ok().map(|status| (status, status))
    };
    match parsed {
        Some((low, high)) if (100..=599).contains(&low) && (low..=599).contains(&high) => {
            Some((low, high))
        }
        _ => {
            node.error(format!(
                "{what}: refund_on: {text:?} is not a status, a class (5xx) or a range (500-599)"
            ));
            None
        }
    }
}
