//! Which rule each descriptor of a request gets (its per-request override, or what the
//! domain's tree says), and what it is counted as: its counter's key, its cost and where its
//! statistics go.

use std::collections::HashSet;
use std::sync::Arc;

use tollgate::{Limit, Quota};

use super::decide::{Rls, RlsError};
use super::keys::{bounded_key, detailed_key, escape, stat_part};
use super::proto::common::RateLimitDescriptor;
use super::proto::common::rate_limit_descriptor::RateLimitOverride;
use super::proto::service::RateLimitRequest;
use super::stats::{DescriptorStats, StatKey};
use super::tree::{self, Enforcement, MetricValue, Rule};
use super::unit;
use super::upstream_keys;

/// A descriptor's rule, per entry the value its counter key takes from a wildcard match, and
/// where its statistics go.
pub(super) struct RuleMatch {
    rule: Arc<Rule>,
    shared: Vec<Option<String>>,
    stat: StatSource,
}

/// Where a descriptor's statistics go.
enum StatSource {
    /// The rule's own, under its configured path.
    Rule,
    /// A key made from the request's values.
    Request(StatKey),
}

/// A descriptor's rule for this request, with the key its counter uses.
pub(super) struct Pending {
    pub(super) rule: Arc<Rule>,
    pub(super) key: String,
    /// The window in seconds of a counter kept in envoyproxy/ratelimit's key (then `key` is
    /// that key before the window's start).
    pub(super) window: Option<u64>,
    pub(super) addend: u64,
    pub(super) stats: Option<Arc<DescriptorStats>>,
}

impl Rls {
    /// The rule of a descriptor's per-request `limit` override: a fixed window of its own,
    /// named after the override (a limit of none blocks), its statistics under the request's
    /// entries.
    fn override_rule(
        domain: &str,
        index: usize,
        descriptor: &RateLimitDescriptor,
        limit: &RateLimitOverride,
    ) -> Result<RuleMatch, RlsError> {
        let unit = unit::from_override(limit.unit).ok_or_else(|| {
            RlsError::InvalidArgument(format!(
                "descriptors[{index}].limit.unit: a limit override needs a known unit"
            ))
        })?;
        let seconds = unit::seconds(unit).unwrap_or(1);
        let quota = Quota::new(
            u64::from(limit.requests_per_unit),
            std::time::Duration::from_secs(seconds),
        )
        .map_err(|e| {
            RlsError::InvalidArgument(format!("descriptors[{index}].limit.requests_per_unit: {e}"))
        })?;
        let name = format!(
            "rls:{domain}:override:{}/{}",
            limit.requests_per_unit,
            unit.as_str_name()
        );
        let enforcement = if limit.requests_per_unit == 0 {
            Enforcement::Blocked
        } else {
            Enforcement::Limit(
                Limit::new(name, tollgate::Algorithm::FixedWindow, quota).map_err(|e| {
                    RlsError::InvalidArgument(format!("descriptors[{index}].limit: {e}"))
                })?,
            )
        };
        let rule = Rule {
            requests_per_unit: limit.requests_per_unit,
            unit,
            name: None,
            replaces: Vec::new(),
            shadow: false,
            quota_mode: false,
            metadata: None,
            classic: true,
            counts_refused: true,
            enforcement,
            stat_path: Vec::new(),
            detailed_metric: false,
            stats: std::sync::OnceLock::new(),
            label: std::sync::OnceLock::new(),
        };
        let path = descriptor
            .entries
            .iter()
            .map(|entry| stat_part(&entry.key, MetricValue::Value, &entry.value))
            .collect();
        Ok(RuleMatch {
            rule: Arc::new(rule),
            shared: vec![None; descriptor.entries.len()],
            stat: StatSource::Request(StatKey {
                domain: domain.to_owned(),
                path,
            }),
        })
    }

    /// The rule a descriptor gets: its per-request override, else what the tree says.
    fn rule_of(
        domain: &str,
        root: &tree::Node,
        index: usize,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Option<RuleMatch>, RlsError> {
        if let Some(limit) = &descriptor.limit {
            return Self::override_rule(domain, index, descriptor, limit).map(Some);
        }
        Ok(tree::find(root, &descriptor.entries).map(|matched| {
            let shared = matched
                .shared_values
                .iter()
                .map(|v| v.map(str::to_owned))
                .collect();
            let stat = if matched.rule.detailed_metric {
                StatSource::Request(detailed_key(domain, descriptor, &matched.shared_values))
            } else if matched.valued_metric {
                let path = descriptor
                    .entries
                    .iter()
                    .zip(&matched.metric_values)
                    .map(|(entry, metric)| stat_part(&entry.key, *metric, &entry.value))
                    .collect();
                StatSource::Request(StatKey {
                    domain: domain.to_owned(),
                    path,
                })
            } else {
                StatSource::Rule
            };
            RuleMatch {
                rule: Arc::clone(matched.rule),
                shared,
                stat,
            }
        }))
    }

    /// Every descriptor's rule and counter, in order (`None` where none is matched, or the
    /// matched rule is replaced by another matched rule's `replaces`).
    pub(super) fn pending_all(
        &self,
        request: &RateLimitRequest,
        root: &tree::Node,
    ) -> Result<Vec<Option<Pending>>, RlsError> {
        let mut rules = Vec::with_capacity(request.descriptors.len());
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            rules.push(Self::rule_of(&request.domain, root, index, descriptor)?);
        }
        // A matched rule named in another matched rule's `replaces` is dropped for this request
        // (the set is made only when a matched rule replaces any: most configurations have none).
        let mut replacing = rules
            .iter()
            .flatten()
            .flat_map(|matched| matched.rule.replaces.iter().map(String::as_str))
            .peekable();
        let replaced: Option<HashSet<&str>> =
            replacing.peek().is_some().then(|| replacing.collect());
        let pending: Vec<Option<Pending>> = rules
            .iter()
            .zip(&request.descriptors)
            .map(|(rule, descriptor)| {
                let matched = rule.as_ref()?;
                let replaced_here =
                    matched.rule.name.as_deref().is_some_and(|name| {
                        replaced.as_ref().is_some_and(|set| set.contains(name))
                    });
                (!replaced_here).then(|| self.pending(request, descriptor, matched))
            })
            .collect();
        Ok(pending)
    }

    /// What a descriptor matched by `matched` is counted as: its counter's key (in
    /// envoyproxy/ratelimit's form where those keys are kept), its cost and its statistics.
    fn pending(
        &self,
        request: &RateLimitRequest,
        descriptor: &RateLimitDescriptor,
        matched: &RuleMatch,
    ) -> Pending {
        let RuleMatch { rule, shared, stat } = matched;
        let window = self
            .upstream_keys
            .as_ref()
            .and_then(|_| rule.upstream_window());
        let key = match (&self.upstream_keys, window) {
            (Some(counting), Some(_)) => upstream_keys::counter_key(
                &counting.prefix,
                &request.domain,
                &descriptor.entries,
                shared,
            ),
            _ => {
                // Sized for the usual key, with nothing to escape: one allocation.
                let parts: usize = descriptor
                    .entries
                    .iter()
                    .map(|entry| entry.key.len() + entry.value.len() + 2)
                    .sum();
                let mut key = String::with_capacity(request.domain.len() + parts);
                key.push_str(&request.domain);
                for (entry, shared) in descriptor.entries.iter().zip(shared) {
                    key.push('|');
                    escape(&mut key, &entry.key);
                    key.push('=');
                    escape(&mut key, shared.as_deref().unwrap_or(&entry.value));
                }
                bounded_key(key)
            }
        };
        let addend = match &descriptor.hits_addend {
            Some(addend) => *addend,
            None => u64::from(request.hits_addend.max(1)),
        };
        let stats = match (&rule.enforcement, stat) {
            (Enforcement::Unlimited, _) => None,
            (_, StatSource::Rule) => rule.stats.get().cloned(),
            (_, StatSource::Request(key)) => self.stats.observed(key.clone(), addend),
        };
        Pending {
            rule: Arc::clone(rule),
            key,
            window,
            addend,
            stats,
        }
    }
}
