//! Values that several sections share: durations, networks, status ranges, access lists, and
//! the small top-level settings.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::MAX_LIST_ENTRIES;
use crate::policy::client_ip::ForwardedHeader;
use crate::policy::model::{
    HeaderFamily, IdempotencyConfig, IdentityHeaders, ListEntry, StatusRange,
};
use crate::yaml::Node;
use tollgate_core::quota::parse_duration;

pub(super) fn read_duration(node: Node<'_, '_>, what: &str) -> Option<Duration> {
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

pub(super) fn read_network(node: Node<'_, '_>, what: &str) -> Option<IpNet> {
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

pub(super) fn read_status_range(node: Node<'_, '_>, what: &str) -> Option<StatusRange> {
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

pub(super) fn read_list(node: Node<'_, '_>, what: &str) -> Vec<ListEntry> {
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

pub(super) fn read_header_families(node: Node<'_, '_>) -> Vec<HeaderFamily> {
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

pub(super) fn read_identity_headers(node: Node<'_, '_>) -> IdentityHeaders {
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

pub(super) fn read_forwarded_header(node: Node<'_, '_>) -> ForwardedHeader {
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

pub(super) fn read_idempotency(node: Node<'_, '_>) -> Option<IdempotencyConfig> {
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
    if let Some(n) = map.get("max_keys") {
        config.max_keys = n
            .number(
                "idempotency.max_keys",
                1..=tollgate_core::limit::MAX_SLIDING_LOG_COUNT,
            )
            .unwrap_or(config.max_keys);
    }
    if let Some(n) = map.get("max_body") {
        config.max_body = n
            .number("idempotency.max_body", 1..=64 << 20)
            .unwrap_or(config.max_body);
    }
    map.deny_unknown("idempotency", &["header", "window", "max_keys", "max_body"]);
    Some(config)
}
