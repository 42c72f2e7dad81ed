//! envoyproxy/ratelimit's per-descriptor statistics: for every rule (or, with `detailed_metric`
//! and `value_to_metric`, every request value), the hits, those over the limit, near it, within
//! it and over it in shadow mode, counted as upstream counts them and exposed under upstream's
//! Prometheus names with a `tollgate_` prefix.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::config::RlsConfig;

/// The statistics' flags.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct RlsStatsFlags {
    /// The fraction of a limit past which hits count as near it, as envoyproxy/ratelimit's
    /// NEAR_LIMIT_RATIO.
    #[arg(long = "rls-near-limit-ratio", env = "TOLLGATE_RLS_NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = ratio)]
    pub near_limit_ratio: f32,
    /// The most statistics keys made from request values (`detailed_metric`,
    /// `value_to_metric`, per-request limits); hits of further keys are counted only in
    /// `tollgate_rls_stat_keys_refused`.
    #[arg(
        long = "rls-max-stat-keys",
        env = "TOLLGATE_RLS_MAX_STAT_KEYS",
        default_value_t = 10_000
    )]
    pub max_stat_keys: usize,
}

impl Default for RlsStatsFlags {
    fn default() -> Self {
        Self {
            near_limit_ratio: 0.8,
            max_stat_keys: 10_000,
        }
    }
}

fn ratio(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text:?} is not a ratio from 0 to 1")),
    }
}

/// One statistic, in upstream's order and with its name.
#[derive(Debug, Clone, Copy)]
enum Stat {
    TotalHits,
    OverLimit,
    NearLimit,
    WithinLimit,
    ShadowMode,
}

impl Stat {
    const ALL: [Stat; 5] = [
        Stat::TotalHits,
        Stat::OverLimit,
        Stat::NearLimit,
        Stat::WithinLimit,
        Stat::ShadowMode,
    ];

    fn name(self) -> &'static str {
        match self {
            Stat::TotalHits => "total_hits",
            Stat::OverLimit => "over_limit",
            Stat::NearLimit => "near_limit",
            Stat::WithinLimit => "within_limit",
            Stat::ShadowMode => "shadow_mode",
        }
    }
}

/// The counts of one statistics key.
#[derive(Debug, Default)]
pub(crate) struct DescriptorStats {
    counts: [AtomicU64; 5],
}

impl DescriptorStats {
    fn add(&self, stat: Stat, hits: u64) {
        if hits > 0 {
            self.counts[stat as usize].fetch_add(hits, Ordering::Relaxed);
        }
    }

    fn read(&self) -> [u64; 5] {
        Stat::ALL.map(|stat| self.counts[stat as usize].load(Ordering::Relaxed))
    }
}

/// One descriptor's hits against its limit, for the statistics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted {
    /// The hits (the descriptor's addend).
    pub(crate) hits: u64,
    /// The limit (requests per unit; the burst for the rate algorithms).
    pub(crate) limit: u64,
    /// What was used of it before these hits.
    pub(crate) before: u64,
    /// Whether the limit admitted them.
    pub(crate) admitted: bool,
    /// Whether the rule is in shadow mode.
    pub(crate) shadow: bool,
}

/// A statistics key: the domain and, per level, `key`, `key_value` or `key_pattern`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct StatKey {
    pub(crate) domain: String,
    pub(crate) path: Vec<String>,
}

/// Every statistics key's counts, kept across configuration reloads.
#[derive(Debug)]
pub struct RlsStats {
    flags: RlsStatsFlags,
    /// The rules' own keys, from the configuration in force.
    configured: RwLock<HashMap<StatKey, Arc<DescriptorStats>>>,
    /// Keys made from request values, at most `flags.max_stat_keys`.
    observed: RwLock<HashMap<StatKey, Arc<DescriptorStats>>>,
    /// Hits whose key was refused for the cap.
    refused: AtomicU64,
}

impl Default for RlsStats {
    fn default() -> Self {
        Self::new(RlsStatsFlags::default())
    }
}

impl RlsStats {
    /// Statistics counted by `flags`.
    pub fn new(flags: RlsStatsFlags) -> Self {
        Self {
            flags,
            configured: RwLock::default(),
            observed: RwLock::default(),
            refused: AtomicU64::new(0),
        }
    }

    /// Gives every rule of `config` its counts: those its key had under the configuration
    /// before, or new ones. Keys no rule has any more are dropped.
    pub(crate) fn adopt(&self, config: &RlsConfig) {
        let mut configured = self.configured.write().unwrap_or_else(|e| e.into_inner());
        let mut adopted = HashMap::new();
        for (domain, root) in &config.domains {
            super::tree::visit_rules(root, &mut |rule| {
                let key = StatKey {
                    domain: domain.clone(),
                    path: rule.stat_path.clone(),
                };
                let stats = configured.get(&key).cloned().unwrap_or_default();
                // A rule already in force keeps the counts it has.
                let stats = rule.stats.get_or_init(|| stats).clone();
                adopted.insert(key, stats);
            });
        }
        *configured = adopted;
    }

    /// The counts of a key made from request values, or `None` once the cap is reached.
    pub(crate) fn observed(&self, key: StatKey, hits: u64) -> Option<Arc<DescriptorStats>> {
        if let Some(stats) = self
            .observed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Some(Arc::clone(stats));
        }
        let mut observed = self.observed.write().unwrap_or_else(|e| e.into_inner());
        if !observed.contains_key(&key) && observed.len() >= self.flags.max_stat_keys {
            self.refused.fetch_add(hits, Ordering::Relaxed);
            return None;
        }
        Some(Arc::clone(observed.entry(key).or_default()))
    }

    /// Counts `counted` in `stats` as envoyproxy/ratelimit does: every hit in total; admitted
    /// hits within the limit, and near it past the near-limit threshold; refused hits over
    /// it (only those past the limit when the count crossed it, the rest near it), and in
    /// shadow mode for a shadow rule.
    pub(crate) fn record(&self, stats: &DescriptorStats, counted: Counted) {
        let Counted {
            hits,
            limit,
            before,
            admitted,
            shadow,
        } = counted;
        let near = (limit as f32 * self.flags.near_limit_ratio).floor() as u64;
        let after = before.saturating_add(hits);
        stats.add(Stat::TotalHits, hits);
        if admitted {
            if after > near {
                stats.add(Stat::NearLimit, hits.min(after - near));
            }
            stats.add(Stat::WithinLimit, hits);
            return;
        }
        let over = if before >= limit {
            hits
        } else {
            stats.add(Stat::NearLimit, limit - near.max(before));
            after.saturating_sub(limit)
        };
        stats.add(Stat::OverLimit, over);
        if shadow {
            stats.add(Stat::ShadowMode, over);
        }
    }

    /// The statistics as Prometheus metrics, named as envoyproxy/ratelimit's Prometheus
    /// mapping names them with a `tollgate_` prefix (`tollgate_ratelimit_service_rate_limit_
    /// total_hits{domain, key1, key2}`, ...). Keys deeper than two levels are summed under
    /// their first two, as upstream's mapping reads them; keys never hit are left out.
    pub fn registry(&self) -> Registry {
        let mut rows: BTreeMap<Labels, [u64; 5]> = BTreeMap::new();
        let observed = self.observed.read().unwrap_or_else(|e| e.into_inner());
        let configured = self.configured.read().unwrap_or_else(|e| e.into_inner());
        for (key, stats) in configured.iter().chain(observed.iter()) {
            let counts = stats.read();
            if counts == [0; 5] {
                continue;
            }
            let row = rows.entry(labels(key)).or_default();
            for (sum, count) in row.iter_mut().zip(counts) {
                *sum = sum.saturating_add(count);
            }
        }
        let keys = observed.len();
        drop((observed, configured));
        let mut registry = Registry::with_prefix("tollgate");
        for stat in Stat::ALL {
            let samples = rows
                .iter()
                .filter(|(_, counts)| counts[stat as usize] > 0)
                .map(|(labels, counts)| (labels.clone(), counts[stat as usize]))
                .collect();
            registry.register(
                format!("ratelimit_service_rate_limit_{}", stat.name()),
                format!(
                    "Rate limit service hits by descriptor: {} (envoyproxy/ratelimit's statistic)",
                    stat.name().replace('_', " ")
                ),
                Untyped(samples),
            );
        }
        registry.register(
            "rls_stat_keys",
            "Statistics keys made from request values (detailed_metric, value_to_metric)",
            ConstGauge::new(keys as i64),
        );
        registry.register(
            "rls_stat_keys_refused",
            "Hits not counted in per-descriptor statistics because --rls-max-stat-keys was reached",
            ConstCounter::new(self.refused.load(Ordering::Relaxed)),
        );
        registry
    }
}

/// A sample's labels: `domain`, `key1` and, for keys of two levels or more, `key2`.
type Labels = Vec<(&'static str, String)>;

fn labels(key: &StatKey) -> Labels {
    let mut labels = vec![("domain", sanitize(&key.domain))];
    for (name, level) in ["key1", "key2"].into_iter().zip(&key.path) {
        labels.push((name, sanitize(level)));
    }
    labels
}

/// The name upstream gives a stats key part: `:` and `|` become `_`, and so do the dots of
/// anything shaped like an IPv4 address (which statsd would take for separators).
fn sanitize(text: &str) -> String {
    let replaced: String = text
        .chars()
        .map(|c| if c == ':' || c == '|' { '_' } else { c })
        .collect();
    let bytes = replaced.as_bytes();
    let mut out = replaced.clone().into_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match ipv4_at(bytes, at) {
            Some(end) => {
                for byte in &mut out[at..end] {
                    if *byte == b'.' {
                        *byte = b'_';
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    // Only ASCII dots were replaced, so the bytes are still UTF-8.
    String::from_utf8(out).unwrap_or(replaced)
}

/// Where an IPv4-shaped run (`\d{1,3}(\.\d{1,3}){3}`, leftmost and longest, as upstream's
/// regular expression matches) starting at `at` ends.
fn ipv4_at(bytes: &[u8], at: usize) -> Option<usize> {
    let mut position = at;
    for group in 0..4 {
        if group > 0 {
            if bytes.get(position) != Some(&b'.') {
                return None;
            }
            position += 1;
        }
        let digits = bytes[position.min(bytes.len())..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        position += digits;
    }
    Some(position)
}

/// Samples of a metric typed `unknown`, so that its name is exactly the one given: an
/// OpenMetrics counter would add `_total`, which upstream's names do not have.
#[derive(Debug)]
struct Untyped(Vec<(Labels, u64)>);

impl EncodeMetric for Untyped {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (labels, value) in &self.0 {
            encoder.encode_family(labels)?.encode_gauge(value)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(hits: u64, limit: u64, before: u64, admitted: bool) -> Counted {
        Counted {
            hits,
            limit,
            before,
            admitted,
            shadow: false,
        }
    }

    fn after(records: &[Counted]) -> [u64; 5] {
        let rls = RlsStats::default();
        let stats = DescriptorStats::default();
        for record in records {
            rls.record(&stats, *record);
        }
        stats.read()
    }

    #[test]
    fn hits_are_split_as_upstream_splits_them() {
        // A limit of 10: near past 8. Hits 1 to 8 within, 9 and 10 within and near.
        let within: Vec<_> = (0..10).map(|n| counted(1, 10, n, true)).collect();
        assert_eq!(after(&within), [10, 0, 2, 10, 0]);
        // 3 hits from 6 used: all within, the one past 8 near.
        assert_eq!(after(&[counted(3, 10, 6, true)]), [3, 0, 1, 3, 0]);
        // 4 hits refused from 8 used: 2 over (11, 12), 2 near (9, 10).
        assert_eq!(after(&[counted(4, 10, 8, false)]), [4, 2, 2, 0, 0]);
        // Refused from 5 used: the near range (8, 10] is whole, 1 over.
        assert_eq!(after(&[counted(6, 10, 5, false)]), [6, 1, 2, 0, 0]);
        // Refused when already full: every hit over.
        assert_eq!(after(&[counted(3, 10, 10, false)]), [3, 3, 0, 0, 0]);
        // A look-only check counts nothing.
        assert_eq!(after(&[counted(0, 10, 10, false)]), [0; 5]);
        let shadow = Counted {
            shadow: true,
            ..counted(3, 10, 9, false)
        };
        assert_eq!(after(&[shadow]), [3, 2, 1, 0, 2]);
    }

    #[test]
    fn ipv4_addresses_lose_their_dots_as_upstream_names_them() {
        assert_eq!(
            sanitize("remote_address_10.0.0.1"),
            "remote_address_10_0_0_1"
        );
        assert_eq!(sanitize("path_/v1.2/x"), "path_/v1.2/x");
        assert_eq!(sanitize("a:b|c"), "a_b_c");
        assert_eq!(sanitize("1234.5.6.7"), "1234_5_6_7");
        assert_eq!(sanitize("ip_1.2.3"), "ip_1.2.3");
    }

    #[test]
    fn keys_from_request_values_stop_at_the_cap() {
        let rls = RlsStats::new(RlsStatsFlags {
            max_stat_keys: 2,
            ..RlsStatsFlags::default()
        });
        let key = |value: &str| StatKey {
            domain: "d".into(),
            path: vec![format!("user_{value}")],
        };
        assert!(rls.observed(key("a"), 1).is_some());
        assert!(rls.observed(key("b"), 1).is_some());
        assert!(rls.observed(key("c"), 5).is_none());
        assert!(
            rls.observed(key("a"), 1).is_some(),
            "a known key still counts"
        );
        assert_eq!(rls.refused.load(Ordering::Relaxed), 5);
    }
}
