//! A quota bucket: Envoy's `BucketId` checked against the caps, named canonically, and
//! resolved through the domain's descriptor tree to what the service assigns it.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Limit, LimitSpec, MAX_KEY_BYTES, Quota};

use crate::rls::proto::common::rate_limit_descriptor::Entry;
use crate::rls::proto::quota::BucketId;
use crate::rls::{Enforcement, RlsConfig, Rule, escape, find};

/// The most entries a bucket id may hold.
pub(crate) const MAX_ENTRIES: usize = 32;
/// The longest bucket id key or value, in bytes.
pub(crate) const MAX_ENTRY_BYTES: usize = 512;

/// A bucket as the service knows it: its id as Envoy sent it, its entries in key order (a
/// `BucketId` is a map, so the descriptor tree is walked in the order of its keys), and its
/// canonical name, which is also the key its share is counted under.
#[derive(Debug, Clone)]
pub(crate) struct BucketName {
    pub(crate) id: BucketId,
    pub(crate) entries: Vec<Entry>,
    pub(crate) key: String,
}

impl BucketName {
    /// Checks a bucket id against the caps and names it.
    pub(crate) fn new(domain: &str, id: Option<&BucketId>) -> Result<Self, String> {
        let id = id.ok_or("a usage report has no bucket_id")?;
        if id.bucket.is_empty() {
            return Err("a bucket_id has no entries".to_owned());
        }
        if id.bucket.len() > MAX_ENTRIES {
            return Err(format!(
                "a bucket_id has {} entries, the maximum is {MAX_ENTRIES}",
                id.bucket.len()
            ));
        }
        let mut entries: Vec<Entry> = id
            .bucket
            .iter()
            .map(|(key, value)| Entry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        let mut key = domain.to_owned();
        for entry in &entries {
            if entry.key.is_empty() || entry.value.is_empty() {
                return Err(format!(
                    "bucket_id entry {:?}: keys and values must not be empty",
                    entry.key
                ));
            }
            if entry.key.len() > MAX_ENTRY_BYTES || entry.value.len() > MAX_ENTRY_BYTES {
                return Err(format!(
                    "bucket_id entry {:?}: longer than {MAX_ENTRY_BYTES} bytes",
                    printable(&entry.key)
                ));
            }
            key.push('|');
            escape(&mut key, &entry.key);
            key.push('=');
            escape(&mut key, &entry.value);
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "a bucket_id is {} bytes long with its domain, the maximum is {MAX_KEY_BYTES}",
                key.len()
            ));
        }
        Ok(Self {
            id: id.clone(),
            entries,
            key,
        })
    }
}

/// At most the first 64 bytes of a name a client sent, for error messages.
pub(crate) fn printable(text: &str) -> &str {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What a bucket is assigned.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Every request allowed: no rule matched and the domain says nothing else, or the rule is
    /// unlimited or in shadow mode.
    AllowAll,
    /// Every request denied: a rule of zero requests, or `unmatched_buckets: deny_all`.
    DenyAll,
    /// A share of a limit.
    Share(Arc<Shared>),
}

/// A limit whose quota the Envoys reporting a bucket share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Requests per period, the units shared.
    pub(crate) quota: u64,
    pub(crate) period: Duration,
    /// The counter of units assigned in the current slot, across every server.
    pub(crate) shares: Limit,
    /// The counter of demand reported in the current slot, across every server.
    pub(crate) demand: Limit,
    /// The rule's state name, to tell a changed rule from the same one.
    pub(crate) rule: String,
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::AllowAll, Self::AllowAll) | (Self::DenyAll, Self::DenyAll) => true,
            (Self::Share(a), Self::Share(b)) => {
                a.rule == b.rule && a.quota == b.quota && a.period == b.period
            }
            _ => false,
        }
    }
}

/// The most demand one server reports in a slot, in requests per period: enough to weigh
/// servers against each other without a report's size mattering.
const MAX_DEMAND: u64 = 1 << 40;

impl Target {
    /// What `name` is assigned under `config`, and the key its counters are kept under, or
    /// `None` if the domain is not configured. `slot` is the length of an assignment slot:
    /// the counters' window. Buckets that a wildcard with `share_threshold` matches share the
    /// pattern's counters (one limit for all of them), as descriptors do.
    pub(crate) fn resolve(
        config: &RlsConfig,
        domain: &str,
        name: &BucketName,
        slot: Duration,
    ) -> Option<(Self, String)> {
        let root = config.domains.get(domain)?;
        let (rule, counter) = match find(root, &name.entries) {
            Some(matched) => {
                let mut counter = domain.to_owned();
                for (entry, shared) in name.entries.iter().zip(&matched.shared_values) {
                    counter.push('|');
                    escape(&mut counter, &entry.key);
                    counter.push('=');
                    escape(&mut counter, shared.unwrap_or(&entry.value));
                }
                (Arc::clone(matched.rule), counter)
            }
            None => match config.unmatched_buckets.get(domain) {
                Some(rule) => (Arc::clone(rule), name.key.clone()),
                None => return Some((Self::AllowAll, name.key.clone())),
            },
        };
        Some((Self::of_rule(&rule, slot), counter))
    }

    /// An Envoy's demand in requests per the limit's period, from what it reports it allowed
    /// and denied over `elapsed`, bounded by what it can be shown to use: what it says it
    /// allowed counts only up to what its `share` (when it has one) lets through in that time,
    /// and its demand is at most twice its share (and a sixteenth of the limit, so that one
    /// with little can grow) and at most the whole limit. A report cannot buy a larger share
    /// than a doubling of what the Envoy was given. For a shared limit and a time to measure
    /// over.
    pub(crate) fn demand(
        &self,
        allowed: u64,
        denied: u64,
        elapsed: Duration,
        share: Option<u64>,
    ) -> Option<f64> {
        let Self::Share(shared) = self else {
            return None;
        };
        if elapsed.is_zero() {
            return None;
        }
        let period = shared.period.as_secs_f64();
        let span = elapsed.as_secs_f64();
        let (allowed, cap) = match share {
            Some(share) => {
                let share = share as f64;
                // The token bucket of an assignment holds a second's worth, at least one.
                let served = share * span / period + (share / period).ceil().max(1.0);
                let cap = 2.0 * share + shared.quota as f64 / 16.0;
                ((allowed as f64).min(served), cap)
            }
            None => (allowed as f64, f64::INFINITY),
        };
        let demand = (allowed + denied as f64) * period / span;
        Some(demand.min(cap).min(shared.quota as f64))
    }

    fn of_rule(rule: &Rule, slot: Duration) -> Self {
        match &rule.enforcement {
            Enforcement::Unlimited => Self::AllowAll,
            Enforcement::Blocked => Self::DenyAll,
            _ if rule.shadow => Self::AllowAll,
            Enforcement::Limit(limit) => {
                let quota = limit.quota();
                let counter = |what: &str, count: u64| {
                    let quota = Quota::new(count, slot).ok()?;
                    LimitSpec::new(Algorithm::FixedWindow, quota)
                        .build(format!("rlqs-{what}:{}", limit.name()))
                        .ok()
                };
                match (
                    counter("shares", quota.count()),
                    counter("demand", MAX_DEMAND),
                ) {
                    (Some(shares), Some(demand)) => Self::Share(Arc::new(Shared {
                        quota: quota.count(),
                        period: quota.period(),
                        shares,
                        demand,
                        rule: limit.name().to_owned(),
                    })),
                    // A slot the counters cannot take was refused with the flags.
                    _ => Self::DenyAll,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::bucket_id as id;

    #[test]
    fn a_bucket_is_named_by_its_entries_in_key_order() {
        let name = BucketName::new("envoy", Some(&id(&[("tenant", "a|b"), ("route", "/x")])))
            .expect("a valid bucket");
        assert_eq!(name.key, "envoy|route=/x|tenant=a%7Cb");
        assert_eq!(name.entries[0].key, "route");
    }

    #[test]
    fn bad_bucket_ids_are_refused_with_what_is_wrong() {
        let refused = |id: Option<&BucketId>| BucketName::new("envoy", id).expect_err("refused");
        assert_eq!(refused(None), "a usage report has no bucket_id");
        assert_eq!(refused(Some(&id(&[]))), "a bucket_id has no entries");
        assert!(refused(Some(&id(&[("k", "")]))).contains("must not be empty"));
        let long = "v".repeat(MAX_ENTRY_BYTES + 1);
        assert!(refused(Some(&id(&[("k", &long)]))).contains("longer than 512 bytes"));
        let many: Vec<(String, String)> = (0..=MAX_ENTRIES)
            .map(|n| (format!("k{n}"), "v".to_owned()))
            .collect();
        let many = BucketId {
            bucket: many.into_iter().collect(),
        };
        assert!(refused(Some(&many)).contains("entries, the maximum is 32"));
        let wide: Vec<(String, String)> =
            (0..4).map(|n| (format!("k{n}"), "v".repeat(400))).collect();
        let wide = BucketId {
            bucket: wide.into_iter().collect(),
        };
        assert!(refused(Some(&wide)).contains("the maximum is 1024"));
    }

    #[test]
    fn buckets_resolve_through_the_descriptor_tree() {
        let config = RlsConfig::from_documents(&[(
            "examples/rls/quota.yaml",
            include_str!("../../../../examples/rls/quota.yaml"),
        )])
        .expect("a valid configuration");
        let slot = Duration::from_secs(2);
        let resolve = |pairs: &[(&str, &str)]| {
            let name = BucketName::new("envoy", Some(&id(pairs))).expect("a valid bucket");
            Target::resolve(&config, "envoy", &name, slot).map(|(target, _)| target)
        };
        match resolve(&[("tenant", "acme")]) {
            Some(Target::Share(shared)) => {
                assert_eq!(
                    (shared.quota, shared.period),
                    (600, Duration::from_secs(60))
                );
                assert_eq!(shared.shares.quota().period(), slot);
            }
            other => panic!("a share of the tenant limit, not {other:?}"),
        }
        assert_eq!(resolve(&[("route", "/free")]), Some(Target::AllowAll));
        assert_eq!(resolve(&[("user", "x")]), Some(Target::DenyAll));
        let name = BucketName::new("other", Some(&id(&[("a", "b")]))).expect("valid");
        let shared = RlsConfig::from_documents(&[(
            "shared.yaml",
            "domain: shared\n\
             descriptors:\n\
             \x20 - key: user\n\
             \x20   value: bot-*\n\
             \x20   share_threshold: true\n\
             \x20   rate_limit: { unit: second, requests_per_unit: 5 }\n",
        )])
        .expect("a valid configuration");
        let counter = |value: &str| {
            let name = BucketName::new("shared", Some(&id(&[("user", value)]))).expect("valid");
            Target::resolve(&shared, "shared", &name, slot).map(|(_, counter)| counter)
        };
        assert_eq!(
            counter("bot-1"),
            Some("shared|user=bot-*".to_owned()),
            "every match of a shared wildcard counts as one"
        );
        assert_eq!(counter("bot-1"), counter("bot-2"));
        assert!(Target::resolve(&config, "other", &name, slot).is_none());
    }
}
