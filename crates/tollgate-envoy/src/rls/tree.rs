//! The descriptor tree of a domain and envoyproxy/ratelimit's walk through it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use tollgate::Limit;

use super::proto::common::rate_limit_descriptor::Entry;
use super::proto::service::rate_limit_response::rate_limit::Unit;
use super::stats::DescriptorStats;

/// What a matched rule says.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
    pub(crate) name: Option<String>,
    pub(crate) replaces: Vec<String>,
    pub(crate) shadow: bool,
    /// `quota_mode`: over its limit, the descriptor says so, but the request is refused only
    /// if every quota-mode descriptor of it is over.
    pub(crate) quota_mode: bool,
    /// `metadata`: given back in the answer's dynamic metadata when the descriptor passes.
    pub(crate) metadata: Option<prost_types::Struct>,
    /// The classic fixed window, whose reset is the end of the window.
    pub(crate) classic: bool,
    /// Hits refused are charged too: always for the classic fixed window (as
    /// envoyproxy/ratelimit counts them), with `count_refused: true` for other algorithms.
    pub(crate) counts_refused: bool,
    /// What the rule does with a hit.
    pub(crate) enforcement: Enforcement,
    /// Where its statistics are kept under its domain: `key_value` or `key` per level, as
    /// configured (envoyproxy/ratelimit's stats key).
    pub(crate) stat_path: Vec<String>,
    /// `detailed_metric`: statistics under the request's values instead of `stat_path`.
    pub(crate) detailed_metric: bool,
    /// Its statistics under `stat_path`, attached when the configuration is put in force.
    pub(crate) stats: OnceLock<Arc<DescriptorStats>>,
    /// [`metric_label`](Self::metric_label), joined once at its first use.
    pub(crate) label: OnceLock<String>,
}

/// Calls `visit` with every rule under `root`.
pub(crate) fn visit_rules(root: &Node, visit: &mut impl FnMut(&Rule)) {
    let mut pending = vec![root];
    while let Some(node) = pending.pop() {
        if let Some(rule) = &node.rule {
            visit(rule);
        }
        pending.extend(
            node.exact
                .values()
                .flat_map(HashMap::values)
                .chain(node.wildcards.iter().map(|w| &w.node))
                .chain(node.defaults.values()),
        );
    }
}

impl Rule {
    /// The window, in seconds, of a rule envoyproxy/ratelimit would count in its own key: a
    /// classic fixed window of one of its units, or a rule of zero requests, refused hits
    /// counted.
    pub(crate) fn upstream_window(&self) -> Option<u64> {
        if !self.classic || !self.counts_refused {
            return None;
        }
        match self.enforcement {
            Enforcement::Unlimited => None,
            Enforcement::Blocked | Enforcement::Limit(_) => super::unit::seconds(self.unit),
        }
    }

    /// What metrics call the rule under its domain: its name, else its place in the
    /// configuration (`key_value.key`, as upstream's statistics name it), else `override` for
    /// a request's own limit. From configuration only, so the label values stay bounded.
    pub(crate) fn metric_label(&self) -> &str {
        match (&self.name, self.stat_path.is_empty()) {
            (Some(name), _) => name,
            (None, false) => self.label.get_or_init(|| self.stat_path.join(".")),
            (None, true) => "override",
        }
    }
}

/// What a rule does with a hit.
#[derive(Debug)]
pub(crate) enum Enforcement {
    /// `unlimited: true`: every hit is under the limit.
    Unlimited,
    /// `requests_per_unit: 0`: every hit is over the limit, as envoyproxy/ratelimit answers.
    Blocked,
    /// Counted against this limit.
    Limit(Limit),
}

/// A wildcard value, split at its `*`s: it matches a value that starts with the first part,
/// ends with the last, and holds the middle parts in order.
#[derive(Debug)]
pub(crate) struct Wildcard {
    pub(crate) key: String,
    pub(crate) pattern: String,
    parts: Vec<String>,
    pub(crate) node: Node,
    /// `share_threshold`: every matching value shares one counter, keyed by the pattern.
    pub(crate) shared: Option<String>,
}

impl Wildcard {
    pub(crate) fn new(key: String, pattern: &str, node: Node, share_threshold: bool) -> Self {
        Self {
            key,
            pattern: pattern.to_owned(),
            parts: pattern.split('*').map(str::to_owned).collect(),
            node,
            shared: share_threshold.then(|| pattern.to_owned()),
        }
    }

    fn matches(&self, value: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some(split) => split,
            None => return false,
        };
        let Some(mut remaining) = value.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return remaining.is_empty();
        };
        for part in middle {
            match remaining.find(part.as_str()) {
                Some(at) => remaining = &remaining[at + part.len()..],
                None => return false,
            }
        }
        remaining.len() >= last.len() && remaining.ends_with(last.as_str())
    }
}

/// A node: its rule, if any, and its children.
#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) rule: Option<Arc<Rule>>,
    /// Children with a value, by key and then value (two maps rather than one keyed by the
    /// pair, so that a request's entry is looked up by reference, without copying it).
    pub(crate) exact: HashMap<String, HashMap<String, Node>>,
    /// Children with a wildcard value, in file order.
    pub(crate) wildcards: Vec<Wildcard>,
    /// Children with a key and no value: the default for any other value of that key.
    pub(crate) defaults: HashMap<String, Node>,
    /// `value_to_metric`: statistics name the request's value at this level where the node
    /// has none of its own (a key-only default or a wildcard).
    pub(crate) value_to_metric: bool,
}

impl Node {
    /// Adds `other`'s children to this node's, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG
    /// adds a second file's descriptors to a domain; returns the keys (`key` or `key_value`)
    /// both had, which are errors there too.
    pub(crate) fn merge(&mut self, other: Node) -> Vec<String> {
        let mut duplicates = Vec::new();
        for (key, values) in other.exact {
            let ours = self.exact.entry(key.clone()).or_default();
            for (value, child) in values {
                match ours.entry(value) {
                    std::collections::hash_map::Entry::Occupied(taken) => {
                        duplicates.push(format!("{key}_{}", taken.key()));
                    }
                    std::collections::hash_map::Entry::Vacant(free) => {
                        free.insert(child);
                    }
                }
            }
        }
        for (key, child) in other.defaults {
            match self.defaults.entry(key) {
                std::collections::hash_map::Entry::Occupied(taken) => {
                    duplicates.push(taken.key().clone());
                }
                std::collections::hash_map::Entry::Vacant(free) => {
                    free.insert(child);
                }
            }
        }
        for wildcard in other.wildcards {
            if self
                .wildcards
                .iter()
                .any(|w| w.key == wildcard.key && w.pattern == wildcard.pattern)
            {
                duplicates.push(format!("{}_{}", wildcard.key, wildcard.pattern));
            } else {
                self.wildcards.push(wildcard);
            }
        }
        duplicates
    }

    pub(crate) fn has_children(&self) -> bool {
        !self.exact.is_empty() || !self.wildcards.is_empty() || !self.defaults.is_empty()
    }
}

/// What names an entry in statistics: the key alone, the key and the request's value, or the
/// key and the wildcard pattern that matched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricValue<'t> {
    Key,
    Value,
    Pattern(&'t str),
}

/// A match: the rule, and for each entry the value its counter is keyed by (the wildcard
/// pattern where the node shares one counter) and what names it in statistics.
pub(crate) struct Matched<'t> {
    pub(crate) rule: &'t Arc<Rule>,
    pub(crate) shared_values: Vec<Option<&'t str>>,
    pub(crate) metric_values: Vec<MetricValue<'t>>,
    /// Whether a `value_to_metric` node named an entry by its value where the configured path
    /// does not (so the statistics are not the rule's own).
    pub(crate) valued_metric: bool,
}

/// Walks `root` entry by entry: an exact key and value first, then the first wildcard (in file
/// order) that matches, then the key-only default. The rule applies only if the walk reaches the
/// node of the last entry and that node has one; an exact node without a rule does not fall back.
pub(crate) fn find<'t>(root: &'t Node, entries: &[Entry]) -> Option<Matched<'t>> {
    let mut node = root;
    let mut shared_values = Vec::with_capacity(entries.len());
    let mut metric_values = Vec::with_capacity(entries.len());
    let mut valued_metric = false;
    for (index, entry) in entries.iter().enumerate() {
        let exact = (!entry.value.is_empty())
            .then(|| node.exact.get(entry.key.as_str()))
            .flatten()
            .and_then(|values| values.get(entry.value.as_str()));
        let (next, shared, metric) = match exact {
            Some(next) => (Some(next), None, MetricValue::Value),
            None => match node
                .wildcards
                .iter()
                .find(|wildcard| wildcard.key == entry.key && wildcard.matches(&entry.value))
            {
                Some(wildcard) => {
                    let metric = if wildcard.shared.is_none() && wildcard.node.value_to_metric {
                        valued_metric = true;
                        MetricValue::Value
                    } else {
                        MetricValue::Pattern(&wildcard.pattern)
                    };
                    (Some(&wildcard.node), wildcard.shared.as_deref(), metric)
                }
                None => {
                    let next = node.defaults.get(&entry.key);
                    let valued = next.is_some_and(|n| n.value_to_metric) && !entry.value.is_empty();
                    valued_metric |= valued;
                    let metric = if valued {
                        MetricValue::Value
                    } else {
                        MetricValue::Key
                    };
                    (next, None, metric)
                }
            },
        };
        let next = next?;
        shared_values.push(shared);
        metric_values.push(metric);
        if index + 1 == entries.len() {
            return next.rule.as_ref().map(|rule| Matched {
                rule,
                shared_values,
                metric_values,
                valued_metric,
            });
        }
        if !next.has_children() {
            return None;
        }
        node = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_anywhere_in_the_value() {
        let wildcard = |pattern: &str| Wildcard::new("k".into(), pattern, Node::default(), false);
        assert!(wildcard("/api/*").matches("/api/v1/users"));
        assert!(wildcard("/api/*").matches("/api/"));
        assert!(!wildcard("/api/*").matches("/apx"));
        assert!(wildcard("bar*b").matches("barab"));
        assert!(!wildcard("bar*b").matches("bar"));
        assert!(wildcard("*").matches(""));
        assert!(wildcard("a*b*c").matches("a-b-c"));
        assert!(!wildcard("a*b*c").matches("a-c-b"));
        assert!(
            !wildcard("ab*ba").matches("aba"),
            "the parts may not overlap"
        );
    }
}
