//! A policy's `usage`: where its responses report what their requests really cost.

use crate::policy::model::{UsageConfig, UsageSource};
use crate::yaml::Node;

/// The most member names a body path may have.
const MAX_PATH_DEPTH: usize = 8;

pub(super) fn read_usage(node: Node<'_, '_>, what: &str) -> Option<UsageConfig> {
    let what = format!("{what}: usage");
    let map = node.map(&what)?;
    let mut sources = Vec::new();
    if let Some(n) = map.get("header") {
        sources.push(n.text(&format!("{what}.header")).and_then(|name| {
            field_name(n, &name, &format!("{what}.header")).map(UsageSource::Header)
        }));
    }
    if let Some(n) = map.get("trailer") {
        sources.push(n.text(&format!("{what}.trailer")).and_then(|name| {
            field_name(n, &name, &format!("{what}.trailer")).map(UsageSource::Trailer)
        }));
    }
    if let Some(n) = map.get("body") {
        sources.push(
            n.text(&format!("{what}.body"))
                .and_then(|path| body_path(n, &path, &format!("{what}.body"))),
        );
    }
    let max = map
        .get("max")
        .and_then(|n| n.number(&format!("{what}.max"), 1..=tollgate_core::check::MAX_COST));
    map.deny_unknown(&what, &["header", "trailer", "body", "max"]);
    if sources.len() != 1 {
        map.error(format!(
            "{what}: expected exactly one of header, trailer or body, found {}",
            sources.len()
        ));
        return None;
    }
    Some(UsageConfig {
        source: sources.pop().flatten()?,
        max: max.unwrap_or(tollgate_core::check::MAX_COST),
    })
}

fn field_name(node: Node<'_, '_>, name: &str, what: &str) -> Option<String> {
    if http_token(name) {
        return Some(name.to_ascii_lowercase());
    }
    node.error(format!("{what}: {name:?} is not a header field name"));
    None
}

/// Whether `name` is an HTTP field name (RFC 9110 token).
fn http_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn body_path(node: Node<'_, '_>, path: &str, what: &str) -> Option<UsageSource> {
    let names: Vec<String> = path.split('.').map(str::to_owned).collect();
    if names.iter().any(String::is_empty) || names.len() > MAX_PATH_DEPTH {
        node.error(format!(
            "{what}: expected member names joined by dots (at most {MAX_PATH_DEPTH}), such as usage.completion_tokens, found {path:?}"
        ));
        return None;
    }
    Some(UsageSource::Body(names))
}
