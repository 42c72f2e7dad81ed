//! Answering `ShouldRateLimit` as envoyproxy/ratelimit does, through the limiter: its guards
//! (circuit breaker, over-limit cache, leases), its metrics, and a failure mode of its own.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use arc_swap::ArcSwap;
use clap::builder::TypedValueParser as _;
use futures_util::future::join_all;
use sha2::{Digest, Sha256};
use tollgate::counter::{Count, Counter, Tally};
use tollgate::headers::envoy_fields;
use tollgate::metrics::MetricOutcome;
use tollgate::{
    Adjustment, AnyStore, Check, Limit, Limiter, MAX_COST, MAX_KEY_BYTES, Quota, Store, StoreError,
    Verdict,
};

use super::config::RlsConfig;
use super::proto::common::RateLimitDescriptor;
use super::proto::core::HeaderValue;
use super::proto::service::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::proto::service::{RateLimitRequest, RateLimitResponse};
use super::stats::{Counted, DescriptorStats, RlsStats, StatKey};
use super::tree::{self, Enforcement, MetricValue, Rule};
use super::unit;
use super::upstream_keys::{self, UpstreamCounting};

/// What one request may hold. The defaults are above what Envoy builds from real traffic
/// (descriptors come from paths and headers, which can be long); they are there to bound memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct RlsLimits {
    /// The most descriptors one rate limit service request may hold.
    #[arg(long = "rls-max-descriptors", env = "TOLLGATE_RLS_MAX_DESCRIPTORS", default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from))]
    pub max_descriptors: usize,
    /// The most entries one descriptor may hold.
    #[arg(long = "rls-max-entries", env = "TOLLGATE_RLS_MAX_ENTRIES", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024).map(usize::from))]
    pub max_entries: usize,
    /// The longest entry key or value, in bytes.
    #[arg(long = "rls-max-entry-bytes", env = "TOLLGATE_RLS_MAX_ENTRY_BYTES", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65_536).map(|n| n as usize))]
    pub max_entry_bytes: usize,
}

impl Default for RlsLimits {
    fn default() -> Self {
        Self {
            max_descriptors: 128,
            max_entries: 64,
            max_entry_bytes: 4096,
        }
    }
}

/// envoyproxy/ratelimit's server-wide switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::Args)]
pub struct RlsModes {
    /// Every request is answered OK overall, whatever its descriptors' statuses say (which
    /// stay as they are), as envoyproxy/ratelimit's SHADOW_MODE does: to watch limits before
    /// enforcing them.
    #[arg(long = "rls-shadow-mode", env = "TOLLGATE_RLS_SHADOW_MODE")]
    pub shadow: bool,
    /// Every descriptor is in quota mode, as envoyproxy/ratelimit's QUOTA_MODE makes it: a
    /// request is refused only if every one of its descriptors is over its limit.
    #[arg(long = "rls-quota-mode", env = "TOLLGATE_RLS_QUOTA_MODE")]
    pub quota: bool,
    /// Answers carry dynamic metadata (the domain, the descriptors, and the `metadata` of the
    /// descriptors that passed), as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does.
    #[arg(
        long = "rls-response-dynamic-metadata",
        env = "TOLLGATE_RLS_RESPONSE_DYNAMIC_METADATA"
    )]
    pub dynamic_metadata: bool,
    /// A domain configured in several files has the descriptors of them all, as
    /// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does (without it, that is an error).
    #[arg(long = "rls-merge-domains", env = "TOLLGATE_RLS_MERGE_DOMAINS")]
    pub merge_domains: bool,
}

/// The names of the rate-limit fields answers carry with `--rls-response-headers`, as
/// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER
/// name them.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RlsHeaderNames {
    /// The field that carries the limit.
    #[arg(long = "rls-limit-header", env = "TOLLGATE_RLS_LIMIT_HEADER", default_value = "RateLimit-Limit", value_parser = header_name)]
    pub limit: String,
    /// The field that carries what is left.
    #[arg(long = "rls-remaining-header", env = "TOLLGATE_RLS_REMAINING_HEADER", default_value = "RateLimit-Remaining", value_parser = header_name)]
    pub remaining: String,
    /// The field that carries the seconds until the limit resets.
    #[arg(long = "rls-reset-header", env = "TOLLGATE_RLS_RESET_HEADER", default_value = "RateLimit-Reset", value_parser = header_name)]
    pub reset: String,
}

impl Default for RlsHeaderNames {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

/// A header field name flag: a valid HTTP field name.
fn header_name(text: &str) -> Result<String, String> {
    axum::http::HeaderName::from_bytes(text.as_bytes())
        .map(|_| text.to_owned())
        .map_err(|_| format!("{text:?} is not an HTTP header field name"))
}

/// A counter key the store takes: the key itself, or, past the store's cap on key size, its
/// first part and the SHA-256 of the whole, so that long descriptor values (paths, headers) are
/// counted as upstream counts them, each under its own key.
fn bounded_key(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = 256;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut bounded = String::with_capacity(end + 1 + 64);
    bounded.push_str(&key[..end]);
    bounded.push('#');
    for byte in digest {
        let _ = write!(bounded, "{byte:02x}");
    }
    bounded
}

/// Why a request could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlsError {
    /// The request is malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// The store could not decide.
    #[error("the rate limit store failed: {0}")]
    Unavailable(StoreError),
    /// No configuration has arrived yet from the xDS server, as envoyproxy/ratelimit says
    /// then: not an answer of OK to everything, but an error Envoy's failure mode decides.
    #[error("no rate limit configuration loaded")]
    NotConfigured,
}

/// What the service answers when the store cannot decide (it is down, or resting behind the
/// circuit breaker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RlsFailureMode {
    /// `UNAVAILABLE`, so that Envoy applies its own `failure_mode_deny`.
    #[default]
    Error,
    /// `OK` for every descriptor: traffic flows unlimited until the store is back.
    Allow,
    /// `OVER_LIMIT` for every descriptor: traffic stops until the store is back.
    Deny,
}

/// The rate limit service: descriptor trees by domain, swapped whole on reload.
#[derive(Debug)]
pub struct Rls {
    limiter: Limiter<AnyStore>,
    config: ArcSwap<RlsConfig>,
    response_headers: bool,
    failure_mode: RlsFailureMode,
    limits: RlsLimits,
    modes: RlsModes,
    header_names: RlsHeaderNames,
    stats: RlsStats,
    /// Classic fixed windows are counted in envoyproxy/ratelimit's keys.
    upstream_keys: Option<UpstreamCounting>,
    /// Set until the first configuration arrives from an xDS server.
    awaiting_config: std::sync::atomic::AtomicBool,
}

/// A descriptor's rule, per entry the value its counter key takes from a wildcard match, and
/// where its statistics go.
struct RuleMatch {
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
struct Pending {
    rule: Arc<Rule>,
    key: String,
    /// The window in seconds of a counter kept in envoyproxy/ratelimit's key (then `key` is
    /// that key before the window's start).
    window: Option<u64>,
    addend: u64,
    stats: Option<Arc<DescriptorStats>>,
}

pub(crate) fn escape(key: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' => key.push_str("%25"),
            '|' => key.push_str("%7C"),
            '=' => key.push_str("%3D"),
            c => key.push(c),
        }
    }
}

impl Rls {
    /// A service over `store` with `config`; with `response_headers`, answers carry
    /// `RateLimit-Limit`, `-Remaining` and `-Reset` in `response_headers_to_add`, as
    /// envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED` does.
    pub fn new(limiter: Limiter<AnyStore>, config: RlsConfig, response_headers: bool) -> Self {
        let stats = RlsStats::default();
        stats.adopt(&config);
        declare(&limiter, &config);
        Self {
            limiter,
            config: ArcSwap::from_pointee(config),
            response_headers,
            failure_mode: RlsFailureMode::default(),
            limits: RlsLimits::default(),
            modes: RlsModes::default(),
            header_names: RlsHeaderNames::default(),
            stats,
            upstream_keys: None,
            awaiting_config: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The same service, answering every request with [`RlsError::NotConfigured`] until a
    /// configuration is set (one pushed over xDS, the service having started without it).
    #[must_use]
    pub fn awaiting_config(self) -> Self {
        self.awaiting_config
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The same service, counting classic fixed windows (a unit, every hit counted, no
    /// `algorithm:`) as envoyproxy/ratelimit counts them in Redis when `counting` says so, so
    /// that its pods and these share the counters; other rules keep Tollgate's own keys.
    pub fn with_upstream_keys(mut self, counting: Option<UpstreamCounting>) -> Self {
        self.upstream_keys = counting;
        self
    }

    /// The same service, counting per-descriptor statistics by `flags`.
    pub fn with_stats(mut self, flags: super::stats::RlsStatsFlags) -> Self {
        self.stats = RlsStats::new(flags);
        self.stats.adopt(&self.config.load());
        self
    }

    /// Its per-descriptor statistics.
    pub fn stats(&self) -> &RlsStats {
        &self.stats
    }

    /// The same service, naming the rate-limit fields of its answers `names`.
    pub fn with_header_names(mut self, names: RlsHeaderNames) -> Self {
        self.header_names = names;
        self
    }

    /// The same service, with server-wide `modes`.
    pub fn with_modes(mut self, modes: RlsModes) -> Self {
        self.modes = modes;
        self
    }

    /// The same service, with `limits` on what a request may hold.
    pub fn with_limits(mut self, limits: RlsLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The same service, answering by `mode` when the store cannot decide.
    pub fn with_failure_mode(mut self, mode: RlsFailureMode) -> Self {
        self.failure_mode = mode;
        self
    }

    /// Replaces the configuration; requests under way finish with the old one.
    pub fn set_config(&self, config: RlsConfig) {
        self.stats.adopt(&config);
        declare(&self.limiter, &config);
        self.config.store(Arc::new(config));
        self.awaiting_config
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Whether its configuration files are read merging a domain's files.
    pub fn merges_domains(&self) -> bool {
        self.modes.merge_domains
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<RlsConfig> {
        self.config.load_full()
    }

    fn validate(&self, request: &RateLimitRequest) -> Result<(), RlsError> {
        let limits = self.limits;
        let invalid = |message: String| Err(RlsError::InvalidArgument(message));
        if request.domain.is_empty() {
            return invalid("rate limit domain must not be empty".to_owned());
        }
        if request.descriptors.is_empty() {
            return invalid("rate limit descriptor list must not be empty".to_owned());
        }
        if request.descriptors.len() > limits.max_descriptors {
            return invalid(format!(
                "{} descriptors, above the cap of {} (--rls-max-descriptors)",
                request.descriptors.len(),
                limits.max_descriptors
            ));
        }
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            if descriptor.entries.len() > limits.max_entries {
                return invalid(format!(
                    "descriptors[{index}]: {} entries, above the cap of {} (--rls-max-entries)",
                    descriptor.entries.len(),
                    limits.max_entries
                ));
            }
            if let Some(addend) = descriptor.hits_addend
                && addend > MAX_COST
            {
                return invalid(format!(
                    "descriptors[{index}].hits_addend: {addend} is above the maximum of {MAX_COST}"
                ));
            }
            if let Some(limit) = &descriptor.limit
                && unit::from_override(limit.unit).is_none()
            {
                return invalid(format!(
                    "descriptors[{index}].limit.unit: a limit override needs a known unit (SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)"
                ));
            }
            for (position, entry) in descriptor.entries.iter().enumerate() {
                if entry.key.is_empty() {
                    return invalid(format!(
                        "descriptor {index}, entry {position}: the key is empty"
                    ));
                }
                if entry.key.len() > limits.max_entry_bytes
                    || entry.value.len() > limits.max_entry_bytes
                {
                    return invalid(format!(
                        "descriptors[{index}].entries[{position}]: longer than the cap of {} bytes (--rls-max-entry-bytes)",
                        limits.max_entry_bytes
                    ));
                }
            }
        }
        Ok(())
    }

    /// The rule a descriptor gets: its per-request override, else what the tree says.
    fn rule_of(
        domain: &str,
        root: &tree::Node,
        index: usize,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Option<RuleMatch>, RlsError> {
        if let Some(limit) = &descriptor.limit {
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
                RlsError::InvalidArgument(format!(
                    "descriptors[{index}].limit.requests_per_unit: {e}"
                ))
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
            };
            let path = descriptor
                .entries
                .iter()
                .map(|entry| stat_part(&entry.key, MetricValue::Value, &entry.value))
                .collect();
            return Ok(Some(RuleMatch {
                rule: Arc::new(rule),
                shared: vec![None; descriptor.entries.len()],
                stat: StatSource::Request(StatKey {
                    domain: domain.to_owned(),
                    path,
                }),
            }));
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

    /// Whether the request as a whole is over, as envoyproxy/ratelimit reckons it: any
    /// descriptor over its limit refuses it, except those in quota mode, which refuse it only
    /// if every quota-mode descriptor is over (unlimited ones count for neither; with the
    /// global quota mode, a descriptor no rule matched counts as a quota descriptor that
    /// passed). Global shadow mode answers OK whatever.
    fn over_overall(&self, pending: &[Option<Pending>], statuses: &[DescriptorStatus]) -> bool {
        let (mut failed, mut quota, mut quota_failed) = (0, 0, 0);
        for (pending, status) in pending.iter().zip(statuses) {
            let over = status.code == Code::OverLimit as i32;
            match pending {
                Some(pending) if matches!(pending.rule.enforcement, Enforcement::Unlimited) => {}
                Some(pending) if self.modes.quota || pending.rule.quota_mode => {
                    quota += 1;
                    quota_failed += usize::from(over);
                }
                Some(_) => failed += usize::from(over),
                None if self.modes.quota => quota += 1,
                None => {}
            }
        }
        let over = failed > 0 || (quota > 0 && quota == quota_failed);
        if over && self.modes.shadow {
            tracing::debug!("global shadow mode: a request over its limits is answered OK");
            return false;
        }
        over
    }

    /// Decides a request: one status per descriptor, in order.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, RlsError> {
        self.validate(request)?;
        if self
            .awaiting_config
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(RlsError::NotConfigured);
        }
        let config = self.config.load();
        let Some(root) = config.domains.get(&request.domain) else {
            return Ok(Self::all_ok(request.descriptors.len()));
        };
        let mut rules = Vec::with_capacity(request.descriptors.len());
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            rules.push(Self::rule_of(&request.domain, root, index, descriptor)?);
        }
        // A matched rule named in another matched rule's `replaces` is dropped for this request.
        let replaced: HashSet<&str> = rules
            .iter()
            .flatten()
            .flat_map(|matched| matched.rule.replaces.iter().map(String::as_str))
            .collect();
        let pending: Vec<Option<Pending>> = rules
            .iter()
            .zip(&request.descriptors)
            .map(|(rule, descriptor)| {
                let RuleMatch { rule, shared, stat } = rule.as_ref()?;
                if rule
                    .name
                    .as_deref()
                    .is_some_and(|name| replaced.contains(name))
                {
                    return None;
                }
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
                        let mut key = request.domain.clone();
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
                Some(Pending {
                    rule: Arc::clone(rule),
                    key,
                    window,
                    addend,
                    stats,
                })
            })
            .collect();
        let domain = request.domain.as_str();
        let decided = match &self.upstream_keys {
            None => {
                join_all(
                    pending
                        .iter()
                        .map(|pending| self.decide(domain, pending.as_ref())),
                )
                .await
            }
            Some(counting) => self.decide_counted(counting, domain, &pending).await,
        };
        let mut statuses = Vec::with_capacity(decided.len());
        for (index, status) in decided.into_iter().enumerate() {
            match status {
                Ok(status) => statuses.push(status),
                Err(RlsError::Unavailable(error)) => {
                    return self.fail_over(request, &pending, error);
                }
                // A check the store refuses as malformed (a counter key over the size cap, say)
                // is the caller's mistake, not an outage: Envoy must not apply its failure mode.
                Err(RlsError::InvalidArgument(message)) => {
                    return Err(RlsError::InvalidArgument(format!(
                        "descriptors[{index}]: {message}"
                    )));
                }
                Err(RlsError::NotConfigured) => return Err(RlsError::NotConfigured),
            }
        }
        let over = self.over_overall(&pending, &statuses);
        let dynamic_metadata = self.modes.dynamic_metadata.then(|| {
            let mut passed = prost_types::Struct::default();
            for (pending, status) in pending.iter().zip(&statuses) {
                if let Some(metadata) = pending.as_ref().and_then(|p| p.rule.metadata.as_ref())
                    && status.code != Code::OverLimit as i32
                {
                    super::metadata::merge(&mut passed, metadata);
                }
            }
            super::metadata::dynamic(request, passed)
        });
        let response_headers_to_add = if self.response_headers {
            headers(&statuses, &self.header_names)
        } else {
            Vec::new()
        };
        Ok(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..RateLimitResponse::default()
        })
    }

    /// The answer by the failure mode when the store could not decide, counted in the metrics
    /// under the domain and each matched rule.
    fn fail_over(
        &self,
        request: &RateLimitRequest,
        pending: &[Option<Pending>],
        error: StoreError,
    ) -> Result<RateLimitResponse, RlsError> {
        let metrics = self.limiter.metrics();
        let count = request.descriptors.len();
        let (outcome, code) = match self.failure_mode {
            RlsFailureMode::Error => return Err(RlsError::Unavailable(error)),
            RlsFailureMode::Allow => (MetricOutcome::FailedOpen, Code::Ok),
            RlsFailureMode::Deny => (MetricOutcome::FailedClosed, Code::OverLimit),
        };
        for pending in pending.iter().flatten() {
            metrics.record_decision(&request.domain, &pending.rule.metric_label(), outcome);
        }
        metrics.record_policy(&request.domain, outcome);
        Ok(Self::all_with(count, code))
    }

    fn all_ok(count: usize) -> RateLimitResponse {
        Self::all_with(count, Code::Ok)
    }

    fn all_with(count: usize, code: Code) -> RateLimitResponse {
        RateLimitResponse {
            overall_code: code as i32,
            statuses: vec![
                DescriptorStatus {
                    code: code as i32,
                    ..DescriptorStatus::default()
                };
                count
            ],
            ..RateLimitResponse::default()
        }
    }

    async fn decide(
        &self,
        domain: &str,
        pending: Option<&Pending>,
    ) -> Result<DescriptorStatus, RlsError> {
        let ok = DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        };
        let Some(pending) = pending else {
            return Ok(ok);
        };
        let rule = &pending.rule;
        let limit = match &rule.enforcement {
            Enforcement::Limit(limit) => limit,
            Enforcement::Unlimited => {
                return Ok(DescriptorStatus {
                    limit_remaining: u32::MAX,
                    ..ok
                });
            }
            Enforcement::Blocked => {
                self.count(pending, 0, 0, false);
                let now = crate::store::store_now(self.limiter.store());
                return Ok(blocked(rule, now));
            }
        };
        let label = rule.metric_label();
        let check = Check::new(pending.addend)
            .limit(pending.key.as_str(), limit)
            .labelled(domain, &label);
        let verdict = self.limiter.check(&check).await.map_err(rls_error)?;
        let allowed = verdict.is_admitted();
        if !allowed && rule.counts_refused && pending.addend > 0 {
            // envoyproxy/ratelimit counts every hit, over the limit too (and a usage report
            // refused is usage all the same). Straight to the store:
            // the count changes no answer within the window, so the over-limit cache keeps its
            // denial, and a failed count is no reason to fail the request.
            let _ = self
                .limiter
                .store()
                .adjust(&check, &[Adjustment::Charge], Some(verdict.at()))
                .await;
        }
        let decision = verdict.decisions().first();
        let left = decision.map_or(0, |d| d.remaining());
        let counted_limit = if rule.classic {
            u64::from(rule.requests_per_unit)
        } else {
            decision.map_or(0, |d| d.limit())
        };
        let used = counted_limit.saturating_sub(left);
        let before = if allowed {
            used.saturating_sub(pending.addend)
        } else {
            used
        };
        self.count(pending, counted_limit, before, allowed);
        let remaining = if allowed { left } else { 0 };
        let code = if allowed || rule.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        };
        Ok(DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                name: rule.name.clone().unwrap_or_default(),
                requests_per_unit: rule.requests_per_unit,
                unit: rule.unit as i32,
            }),
            limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(prost_types::Duration {
                seconds: until_reset(rule, limit, &verdict),
                nanos: 0,
            }),
            quota: None,
        })
    }
}

impl Rls {
    /// Decides the descriptors whose counters are kept in envoyproxy/ratelimit's keys in one
    /// count, as upstream counts a request, and the others one by one, all at once.
    async fn decide_counted(
        &self,
        counting: &UpstreamCounting,
        domain: &str,
        pending: &[Option<Pending>],
    ) -> Vec<Result<DescriptorStatus, RlsError>> {
        let mut count = Count::new()
            .stop_increment_over_limit(counting.stop_increment_over_limit)
            .local_cache(counting.local_cache)
            .expiration_jitter(counting.expiration_jitter);
        for pending in pending.iter().flatten() {
            if let Some(window) = pending.window {
                count.push(Counter {
                    key: pending.key.as_str().into(),
                    window,
                    limit: u64::from(pending.rule.requests_per_unit),
                    hits: pending.addend,
                });
            }
        }
        let others = join_all(pending.iter().map(|pending| async move {
            match pending {
                Some(counted) if counted.window.is_some() => None,
                other => Some(self.decide(domain, other.as_ref()).await),
            }
        }));
        let (tallies, others) =
            futures_util::future::join(self.limiter.count(&count), others).await;
        let mut tallies = tallies.map(Vec::into_iter).map_err(rls_error);
        pending
            .iter()
            .zip(others)
            .map(
                |(pending, decided)| match (pending, decided, &mut tallies) {
                    (_, Some(decided), _) => decided,
                    (Some(pending), None, Ok(tallies)) => {
                        let tally = tallies.next().ok_or_else(|| {
                            RlsError::Unavailable(StoreError::Failed(
                                "the store answered fewer counts than asked".to_owned(),
                            ))
                        })?;
                        Ok(self.counted(domain, pending, tally))
                    }
                    (_, None, Err(error)) => Err(error.clone()),
                    (None, None, Ok(_)) => Ok(DescriptorStatus {
                        code: Code::Ok as i32,
                        ..DescriptorStatus::default()
                    }),
                },
            )
            .collect()
    }

    /// The status of a descriptor counted in envoyproxy/ratelimit's key, from its tally
    /// (over its limit once the count passes it), counted in the statistics and metrics.
    fn counted(&self, domain: &str, pending: &Pending, tally: Tally) -> DescriptorStatus {
        let rule = &pending.rule;
        let over = tally.is_over();
        let limit = tally.limit();
        // As upstream's statistics: a local-cache answer is all over the limit.
        let before = if tally.from_cache() {
            limit
        } else {
            tally.count().saturating_sub(pending.addend)
        };
        self.count(pending, limit, before, !over);
        let outcome = if over {
            MetricOutcome::Denied
        } else {
            MetricOutcome::Allowed
        };
        let metrics = self.limiter.metrics();
        metrics.record_decision(domain, &rule.metric_label(), outcome);
        metrics.record_policy(domain, outcome);
        let code = if over && !rule.shadow {
            Code::OverLimit
        } else {
            Code::Ok
        };
        DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                name: rule.name.clone().unwrap_or_default(),
                requests_per_unit: rule.requests_per_unit,
                unit: rule.unit as i32,
            }),
            limit_remaining: u32::try_from(tally.remaining()).unwrap_or(u32::MAX),
            duration_until_reset: Some(prost_types::Duration {
                seconds: i64::try_from(tally.reset_after()).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            quota: None,
        }
    }

    /// Counts a descriptor's hits in its statistics, if it has any.
    fn count(&self, pending: &Pending, limit: u64, before: u64, admitted: bool) {
        if let Some(stats) = &pending.stats {
            let counted = Counted {
                hits: pending.addend,
                limit,
                before,
                admitted,
                shadow: pending.rule.shadow,
            };
            self.stats.record(stats, counted);
        }
    }
}

/// Why the limiter could not decide, as the service reports it: a malformed check is the
/// caller's mistake, a store failure an outage.
fn rls_error(error: tollgate::Error) -> RlsError {
    match error {
        tollgate::Error::Store(StoreError::Invalid(invalid)) => {
            RlsError::InvalidArgument(invalid.to_string())
        }
        tollgate::Error::Store(error) if error.is_store_failure() => RlsError::Unavailable(error),
        other => RlsError::InvalidArgument(other.to_string()),
    }
}

/// Creates the decision counters of every limited rule of `config`, by domain and rule, so
/// that the series exist before the first hit.
fn declare(limiter: &Limiter<AnyStore>, config: &RlsConfig) {
    for (domain, root) in &config.domains {
        tree::visit_rules(root, &mut |rule| {
            if let Enforcement::Limit(_) = rule.enforcement {
                limiter
                    .metrics()
                    .declare_limit(domain, &rule.metric_label());
            }
        });
    }
}

/// A part of a statistics key: `key`, or `key_` and the value or pattern.
fn stat_part(key: &str, metric: MetricValue<'_>, value: &str) -> String {
    match metric {
        MetricValue::Value if !value.is_empty() => format!("{key}_{value}"),
        MetricValue::Pattern(pattern) => format!("{key}_{pattern}"),
        _ => key.to_owned(),
    }
}

/// The statistics key of a `detailed_metric` rule, as upstream makes it: `key_value` for
/// every entry (the pattern for entries a `share_threshold` wildcard matched); without such
/// entries, `key_` even for an empty value.
fn detailed_key(
    domain: &str,
    descriptor: &RateLimitDescriptor,
    shared: &[Option<&str>],
) -> StatKey {
    let any_shared = shared.iter().any(Option::is_some);
    let path = descriptor
        .entries
        .iter()
        .zip(shared)
        .map(|(entry, shared)| match shared {
            Some(pattern) => stat_part(&entry.key, MetricValue::Pattern(pattern), ""),
            None if any_shared => stat_part(&entry.key, MetricValue::Value, &entry.value),
            None => format!("{}_{}", entry.key, entry.value),
        })
        .collect();
    StatKey {
        domain: domain.to_owned(),
        path,
    }
}

/// The status of a rule of zero requests: over the limit (unless in shadow mode), every time,
/// with the seconds to the end of the unit's window as upstream sends them (its
/// `generateResponseDescriptorStatus`), so that Envoy's reset field is never 0.
fn blocked(rule: &Rule, now: tollgate::Micros) -> DescriptorStatus {
    let code = if rule.shadow {
        Code::Ok
    } else {
        Code::OverLimit
    };
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: rule.name.clone().unwrap_or_default(),
            requests_per_unit: 0,
            unit: rule.unit as i32,
        }),
        limit_remaining: 0,
        duration_until_reset: Some(prost_types::Duration {
            seconds: seconds_to_window_end(unit::seconds(rule.unit).unwrap_or(1), now),
            nanos: 0,
        }),
        quota: None,
    }
}

/// Whole seconds from `now` to the end of the window of `window` seconds that holds it (1 to
/// `window`, never 0), as envoyproxy/ratelimit computes a reset.
fn seconds_to_window_end(window: u64, now: tollgate::Micros) -> i64 {
    let window = window.max(1);
    let now = now / 1_000_000;
    i64::try_from(window - now % window).unwrap_or(i64::MAX)
}

/// Seconds until the counter resets: for a window, to the end of the current window in whole
/// seconds (1 to the window's length, never 0), as envoyproxy/ratelimit computes it; for the
/// other algorithms, until the limit is fully restored.
fn until_reset(rule: &Rule, limit: &Limit, verdict: &Verdict) -> i64 {
    if rule.classic {
        return seconds_to_window_end(limit.period() / 1_000_000, verdict.at());
    }
    let micros = verdict
        .decisions()
        .first()
        .map_or(0, |d| d.reset_after_micros());
    i64::try_from(micros.div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// `RateLimit-Limit`, `-Remaining`, `-Reset` of the descriptor with the least room; a descriptor
/// over its limit wins, the last one if several are.
fn headers(statuses: &[DescriptorStatus], names: &RlsHeaderNames) -> Vec<HeaderValue> {
    let mut chosen: Option<&DescriptorStatus> = None;
    for status in statuses.iter().filter(|s| s.current_limit.is_some()) {
        let over = status.code == Code::OverLimit as i32;
        let better = chosen.is_none_or(|c| {
            over || (c.code != Code::OverLimit as i32 && status.limit_remaining < c.limit_remaining)
        });
        if better {
            chosen = Some(status);
        }
    }
    let Some(status) = chosen else {
        return Vec::new();
    };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds);
    envoy_fields(
        u64::from(limit),
        u64::from(status.limit_remaining),
        u64::try_from(reset).unwrap_or(0),
    )
    .into_iter()
    .zip([&names.limit, &names.remaining, &names.reset])
    .map(|((_, value), name)| HeaderValue {
        key: name.clone(),
        value,
        raw_value: Vec::new(),
    })
    .collect()
}
