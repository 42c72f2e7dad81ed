//! Reading one domain's YAML document into a descriptor tree, with every error located.

use std::sync::Arc;

use tollgate::yaml::{ConfigErrors, Map, Node as Yaml, Reader};
use tollgate::{Algorithm, parse_duration};

use super::config::{MAX_DEPTH, RuleLimit, RuleOptions};
use super::proto::service::rate_limit_response::rate_limit::Unit;
use super::tree::{Enforcement, Node, Rule, Wildcard};
use super::unit;

const ROOT_FIELDS: &[&str] = &["domain", "descriptors", "unmatched_buckets"];
const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "quota_mode",
    "metadata",
];
const LIMIT_FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "period",
    "count_refused",
    "calendar",
];

/// One domain's document: its name, descriptor tree, and what the quota service assigns a
/// bucket that no descriptor matches.
pub(crate) struct Document {
    pub(crate) domain: String,
    pub(crate) root: Node,
    pub(crate) unmatched_buckets: Option<Arc<Rule>>,
}

/// Parses a document: its domain and tree.
pub(crate) fn document(source: &str, text: &str) -> Result<Document, ConfigErrors> {
    let (reader, documents) = Reader::parse(source, text)?;
    let mut domain = String::new();
    let mut root = Node::default();
    let mut unmatched_buckets = None;
    match documents.as_slice() {
        [] => {}
        [document] => {
            let node = reader.node(document);
            if let Some(map) = node.map("the configuration") {
                match map.get("domain").and_then(|n| n.text("domain")) {
                    Some(text) if !text.is_empty() => domain = text.into_owned(),
                    _ => map.error("the configuration needs a non-empty \"domain\""),
                }
                // `descriptors:` with nothing after it is an empty list, as upstream reads it.
                if let Some(items) = map
                    .get("descriptors")
                    .filter(|n| !n.is_null())
                    .and_then(|n| n.strict_list("descriptors"))
                {
                    root = children(&items, &domain, "", &[], 1);
                }
                if let Some(node) = map.get("unmatched_buckets") {
                    unmatched_buckets = unmatched(node, &domain);
                }
                map.deny_unknown("the configuration", ROOT_FIELDS);
            }
        }
        [_, second, ..] => reader
            .node(second)
            .error("expected one YAML document (one domain) per file"),
    }
    if documents.is_empty() {
        reader.error(
            Default::default(),
            "the file is empty: it needs a \"domain\"",
        );
    }
    reader.finish()?;
    Ok(Document {
        domain,
        root,
        unmatched_buckets,
    })
}

/// `unmatched_buckets`: `allow_all`, `deny_all`, or a `rate_limit` shared by every bucket of
/// the quota service that no descriptor matches.
fn unmatched(node: Yaml<'_, '_>, domain: &str) -> Option<Arc<Rule>> {
    const WHAT: &str = "unmatched_buckets";
    let blanket = |enforcement| {
        Some(Arc::new(Rule {
            requests_per_unit: 0,
            unit: Unit::Unknown,
            name: None,
            replaces: Vec::new(),
            shadow: false,
            quota_mode: false,
            metadata: None,
            classic: false,
            counts_refused: false,
            enforcement,
            stat_path: Vec::new(),
            detailed_metric: false,
            stats: std::sync::OnceLock::new(),
            label: std::sync::OnceLock::new(),
        }))
    };
    if node.is_mapping() {
        let limit = rule_limit(node, WHAT)?;
        return match limit.build(format!("rls:{domain}:{WHAT}")) {
            Ok(built) => Some(limit.into_rule(built, RuleOptions::default())),
            Err(message) => {
                node.error(format!("{WHAT}: {message}"));
                None
            }
        };
    }
    match node.text(WHAT).as_deref() {
        Some("allow_all") => blanket(Enforcement::Unlimited),
        Some("deny_all") => blanket(Enforcement::Blocked),
        Some(other) => {
            node.error(format!(
                "{WHAT}: {other:?} is none of allow_all, deny_all or a rate_limit mapping"
            ));
            None
        }
        None => None,
    }
}

/// Reads a list of descriptors into the children of a node. `path` names the parent for state
/// names and messages (`key_value.key`...); `levels` is the same path a level at a time, for
/// statistics.
fn children(
    items: &[Yaml<'_, '_>],
    domain: &str,
    path: &str,
    levels: &[String],
    depth: usize,
) -> Node {
    let mut node = Node::default();
    if depth > MAX_DEPTH {
        if let Some(first) = items.first() {
            first.error(format!("descriptors nested deeper than {MAX_DEPTH} levels"));
        }
        return node;
    }
    for item in items {
        descriptor(&mut node, item, domain, path, levels, depth);
    }
    node
}

/// Reads one descriptor of a list into `node`, with its own descriptors below it.
fn descriptor(
    node: &mut Node,
    item: &Yaml<'_, '_>,
    domain: &str,
    path: &str,
    levels: &[String],
    depth: usize,
) {
    let Some(map) = item.map("a descriptor") else {
        return;
    };
    let Some((key, value)) = key_and_value(&map) else {
        return;
    };
    let this = match &value {
        Some(value) => format!("{key}_{value}"),
        None => key.clone(),
    };
    let here = if path.is_empty() {
        this.clone()
    } else {
        format!("{path}.{this}")
    };
    let what = format!("descriptor {here:?}");
    let flag = |field: &str| {
        map.get(field)
            .and_then(|n| n.boolean(&format!("{what}: {field}")))
            .unwrap_or(false)
    };
    let shadow = flag("shadow_mode");
    let quota_mode = flag("quota_mode");
    let metadata = map
        .get("metadata")
        .and_then(|node| super::metadata::from_yaml(node, &format!("{what}: metadata")));
    let share_threshold = flag("share_threshold");
    let detailed_metric = flag("detailed_metric");
    let mut stat_path = levels.to_vec();
    stat_path.push(this.clone());
    let mut child = map
        .get("descriptors")
        .filter(|n| !n.is_null())
        .and_then(|n| n.strict_list(&format!("{what}: descriptors")))
        .map(|items| children(&items, domain, &here, &stat_path, depth + 1))
        .unwrap_or_default();
    child.value_to_metric = flag("value_to_metric");
    if let Some(limit_node) = map.get("rate_limit")
        && let Some(limit) = rule_limit(limit_node, &what)
    {
        match limit.build(format!("rls:{domain}:{here}")) {
            Ok(built) => {
                let options = RuleOptions {
                    shadow,
                    quota_mode,
                    metadata,
                    detailed_metric,
                    stat_path,
                };
                child.rule = Some(limit.into_rule(built, options));
            }
            Err(message) => limit_node.error(format!("{what}: rate_limit: {message}")),
        }
    }
    map.deny_unknown(&what, DESCRIPTOR_FIELDS);
    let wildcard = value.as_deref().is_some_and(|v| v.contains('*'));
    if share_threshold && !wildcard {
        map.error(format!(
            "{what}: share_threshold can only be used with a wildcard value (one containing '*')"
        ));
    }
    let duplicate = node.place(key, value, wildcard, child, share_threshold);
    if duplicate {
        map.error(format!(
            "{what}: the same key and value appear twice under one parent"
        ));
    }
}

/// A descriptor's key (which it must have) and value (none if empty).
fn key_and_value(map: &Map<'_, '_>) -> Option<(String, Option<String>)> {
    let key = match map.get("key").and_then(|n| n.text("key")) {
        Some(key) if !key.is_empty() => key.into_owned(),
        _ => {
            map.error("a descriptor needs a non-empty \"key\"");
            return None;
        }
    };
    let value = map
        .get("value")
        .and_then(|n| n.text("value"))
        .map(|v| v.into_owned())
        .filter(|v| !v.is_empty());
    Some((key, value))
}

impl Node {
    /// Files `child` under `key` (and `value`, exact or a wildcard pattern, if given); whether
    /// the same key and value were already there.
    fn place(
        &mut self,
        key: String,
        value: Option<String>,
        wildcard: bool,
        child: Node,
        share_threshold: bool,
    ) -> bool {
        match value {
            Some(pattern) if wildcard => {
                let seen = self
                    .wildcards
                    .iter()
                    .any(|w| w.key == key && w.pattern == pattern);
                self.wildcards
                    .push(Wildcard::new(key, &pattern, child, share_threshold));
                seen
            }
            Some(value) => self
                .exact
                .entry(key)
                .or_default()
                .insert(value, child)
                .is_some(),
            None => self.defaults.insert(key, child).is_some(),
        }
    }
}

/// A rate limit's unit (or `Unknown` for a period that is none) and its period, from `unit`
/// or `period`, whichever is given.
fn unit_and_period(
    unit_node: Option<Yaml<'_, '_>>,
    period_node: Option<Yaml<'_, '_>>,
    what: &str,
) -> (Unit, Option<std::time::Duration>) {
    let mut unit = Unit::Unknown;
    let mut period = None;
    if let Some(n) = unit_node
        && let Some(text) = n.text(&format!("{what}.unit"))
    {
        match unit::parse(&text) {
            Some(parsed) => {
                unit = parsed;
                period = unit::seconds(parsed).map(std::time::Duration::from_secs);
            }
            None => n.error(format!(
                "{what}.unit: unknown unit {text:?} (expected one of: second, minute, hour, day, week, month, year)"
            )),
        }
    }
    if let Some(n) = period_node
        && let Some(text) = n.text(&format!("{what}.period"))
    {
        if unit_node.is_some() {
            n.error(format!("{what}: give a unit or a period, not both"));
        }
        match parse_duration(&text) {
            Ok(parsed) if !parsed.is_zero() => {
                period = Some(parsed);
                unit = unit::of_period(parsed);
            }
            Ok(_) => n.error(format!("{what}.period: must be longer than zero")),
            Err(error) => n.error(format!("{what}.period: {error}")),
        }
    }
    (unit, period)
}

/// The names a `replaces` list gives, each entry `{ name: ... }`.
fn replaced_names(node: Yaml<'_, '_>, what: &str) -> Vec<String> {
    let mut replaces = Vec::new();
    let Some(list) = node.strict_list(&format!("{what}.replaces")) else {
        return replaces;
    };
    for entry in list {
        let name = entry
            .map(&format!("{what}.replaces"))
            .and_then(|m| {
                let name = m
                    .get("name")
                    .and_then(|n| n.text("name"))
                    .map(|t| t.into_owned());
                m.deny_unknown(&format!("{what}.replaces"), &["name"]);
                name
            })
            .filter(|name| !name.is_empty());
        match name {
            Some(name) => replaces.push(name),
            None => entry.error(format!(
                "{what}.replaces: every entry needs a non-empty \"name\""
            )),
        }
    }
    replaces
}

fn rule_limit(node: Yaml<'_, '_>, what: &str) -> Option<RuleLimit> {
    let what = format!("{what}: rate_limit");
    let map = node.map(&what)?;
    let unlimited = map
        .get("unlimited")
        .and_then(|n| n.boolean(&format!("{what}.unlimited")))
        .unwrap_or(false);
    let unit_node = map.get("unit");
    let period_node = map.get("period");
    let (unit, period) = unit_and_period(unit_node, period_node, &what);
    let requests_per_unit = map
        .get("requests_per_unit")
        .and_then(|n| {
            n.number(
                &format!("{what}.requests_per_unit"),
                0..=u64::from(u32::MAX),
            )
        })
        .unwrap_or(0) as u32;
    let algorithm = map
        .get("algorithm")
        .and_then(|n| n.parse::<Algorithm>(&format!("{what}.algorithm")))
        .unwrap_or(Algorithm::FixedWindow);
    let burst = map
        .get("burst")
        .and_then(|n| n.number(&format!("{what}.burst"), 1..=tollgate::MAX_COUNT));
    let name = map
        .get("name")
        .and_then(|n| n.text(&format!("{what}.name")))
        .map(|t| t.into_owned());
    let replaces = map
        .get("replaces")
        .map_or_else(Vec::new, |node| replaced_names(node, &what));
    let count_refused = map
        .get("count_refused")
        .and_then(|n| n.boolean(&format!("{what}.count_refused")));
    let calendar = match map.get("calendar") {
        Some(node) => Some(tollgate::yaml::read_calendar(node, &what)?),
        None => None,
    };
    map.deny_unknown(&what, LIMIT_FIELDS);
    if name.is_some() && replaces.iter().any(|r| Some(r) == name.as_ref()) {
        map.error(format!("{what}: replaces may not name the limit itself"));
    }
    if unlimited {
        if unit_node.is_some() || period_node.is_some() {
            map.error(format!(
                "{what}: an unlimited limit takes no unit or period"
            ));
        }
    } else if period.is_none() {
        if unit_node.is_none() && period_node.is_none() {
            map.error(format!(
                "{what}: needs a unit (second, minute, hour, day, week, month, year) or a period"
            ));
        }
        return None;
    }
    if algorithm.is_rate() && requests_per_unit == 0 {
        map.error(format!(
            "{what}: {algorithm} needs requests_per_unit of at least 1"
        ));
        return None;
    }
    Some(RuleLimit {
        unlimited,
        requests_per_unit,
        unit,
        period: period.unwrap_or_default(),
        algorithm,
        burst,
        name,
        replaces,
        count_refused,
        calendar,
    })
}
