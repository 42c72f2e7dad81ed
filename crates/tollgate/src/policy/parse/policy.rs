//! One policy: its name, match, key, tiers and failure mode.

use super::limits::{read_concurrency, read_cost, read_limits, read_penalty, read_soft_limit};
use super::usage::read_usage;
use super::values::{read_list, read_status_range};
use super::{KEY_PARTS, POLICY_FIELDS};
use crate::policy::model::{
    CostConfig, FailureMode, KeyPart, LimitConfig, MatchConfig, PolicyConfig, TierSource,
};
use crate::yaml::Node;

pub(super) fn read_policy(node: Node<'_, '_>) -> Option<PolicyConfig> {
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
    if let Some(n) = map.get("tiers") {
        policy.tiers = read_tiers(n, &what, &policy.name);
    }
    if let Some(n) = map.get("tier_from") {
        policy.tier_from = read_tier_from(n, &what).unwrap_or(policy.tier_from);
    }
    if let Some(n) = map.get("default_tier") {
        policy.default_tier = n.text("default_tier").map(|t| t.into_owned());
    }
    if let Some(n) = map.get("cost") {
        policy.cost = read_cost(n, &what).unwrap_or(CostConfig::Fixed(1));
    }
    if let Some(n) = map.get("usage") {
        policy.usage = read_usage(n, &what);
    }
    if let Some(n) = map.get("partition_key") {
        policy.partition_key = n
            .boolean(&format!("{what}: partition_key"))
            .unwrap_or(false);
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
        policy.on_store_error = read_failure_mode(n, &what).unwrap_or(policy.on_store_error);
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

fn read_tiers(node: Node<'_, '_>, what: &str, policy: &str) -> Vec<(String, Vec<LimitConfig>)> {
    let Some(tiers) = node.map(&format!("{what}: tiers")) else {
        return Vec::new();
    };
    tiers
        .entries()
        .map(|(tier, _, limits)| {
            let limits = read_limits(
                limits,
                &format!("{what}, tier {tier:?}"),
                &format!("{policy}-{tier}"),
            );
            (tier.to_owned(), limits)
        })
        .collect()
}

fn read_tier_from(node: Node<'_, '_>, what: &str) -> Option<TierSource> {
    let text = node.text("tier_from")?;
    match (text.as_ref(), text.split_once(':')) {
        ("plan", _) => Some(TierSource::Plan),
        (_, Some(("header", header))) if !header.is_empty() => {
            Some(TierSource::Header(header.to_ascii_lowercase()))
        }
        _ => {
            node.error(format!(
                "{what}: tier_from: expected \"plan\" or \"header:<name>\", found {text:?}"
            ));
            None
        }
    }
}

fn read_failure_mode(node: Node<'_, '_>, what: &str) -> Option<FailureMode> {
    match node.text("on_store_error")?.parse() {
        Ok(mode) => Some(mode),
        Err(error) => {
            node.error(format!("{what}: on_store_error: {error}"));
            None
        }
    }
}

pub(super) fn read_match(node: Node<'_, '_>, what: &str) -> MatchConfig {
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
        && let Err(problem) = crate::policy::matcher::check_template(template)
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

pub(super) fn read_key(node: Node<'_, '_>, what: &str) -> Vec<KeyPart> {
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
