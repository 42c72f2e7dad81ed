//! Answering `ShouldRateLimit` as envoyproxy/ratelimit does, through the limiter: its guards
//! (circuit breaker, over-limit cache, leases), its metrics, and a failure mode of its own.

use std::sync::Arc;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use tollgate::{AnyStore, Check, Limiter, MAX_COST, StoreError};

use super::config::RlsConfig;
use super::matching::Pending;
use super::proto::service::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::proto::service::{RateLimitRequest, RateLimitResponse};
use super::settings::{RlsFailureMode, RlsHeaderNames, RlsLimits, RlsModes};
use super::stats::{Counted, RlsStats};
use super::status::{blocked, headers, until_reset};
use super::tree::{self, Enforcement};
use super::unit;
use super::upstream_keys::UpstreamCounting;

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

/// The rate limit service: descriptor trees by domain, swapped whole on reload.
#[derive(Debug)]
pub struct Rls {
    pub(super) limiter: Limiter<AnyStore>,
    config: ArcSwap<RlsConfig>,
    response_headers: bool,
    pub(super) failure_mode: RlsFailureMode,
    /// The nodes a limit is divided among when each decides alone (the failure mode `local`).
    local_nodes: u64,
    limits: RlsLimits,
    modes: RlsModes,
    header_names: RlsHeaderNames,
    pub(super) stats: RlsStats,
    /// Classic fixed windows are counted in envoyproxy/ratelimit's keys.
    pub(super) upstream_keys: Option<UpstreamCounting>,
    /// Set until the first configuration arrives from an xDS server.
    awaiting_config: std::sync::atomic::AtomicBool,
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
            local_nodes: 1,
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

    /// The same service, dividing each limit among `nodes` nodes when it decides on the
    /// in-process fallback (the failure mode `local`); 1, the default, divides nothing.
    pub fn with_local_nodes(mut self, nodes: u64) -> Self {
        self.local_nodes = nodes.max(1);
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
        let pending = self.pending_all(request, root)?;
        let domain = request.domain.as_str();
        let decided = match &self.upstream_keys {
            // One descriptor, as most requests carry: decided without a vector of futures.
            None if pending.len() == 1 => {
                vec![
                    self.decide(domain, pending[0].as_ref(), Deciding::Store)
                        .await,
                ]
            }
            None => {
                join_all(
                    pending
                        .iter()
                        .map(|pending| self.decide(domain, pending.as_ref(), Deciding::Store)),
                )
                .await
            }
            // Counted on the store (Redis), and failed over: boxed, as the store's futures are.
            Some(counting) => Box::pin(self.decide_counted(counting, domain, &pending)).await,
        };
        match statuses(decided) {
            Ok(statuses) => Ok(self.response(request, &pending, statuses)),
            Err(RlsError::Unavailable(error)) => {
                Box::pin(self.fail_over(request, &pending, error)).await
            }
            Err(other) => Err(other),
        }
    }

    /// The answer to `request` from its descriptors' statuses.
    pub(super) fn response(
        &self,
        request: &RateLimitRequest,
        pending: &[Option<Pending>],
        statuses: Vec<DescriptorStatus>,
    ) -> RateLimitResponse {
        let over = self.over_overall(pending, &statuses);
        let dynamic_metadata = self
            .modes
            .dynamic_metadata
            .then(|| passed_metadata(request, pending, &statuses));
        let response_headers_to_add = if self.response_headers {
            headers(&statuses, &self.header_names)
        } else {
            Vec::new()
        };
        RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..RateLimitResponse::default()
        }
    }

    /// Decides one descriptor on the store, or, while the store cannot, on the limiter's
    /// in-process fallback.
    pub(super) async fn decide(
        &self,
        domain: &str,
        pending: Option<&Pending>,
        deciding: Deciding,
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
                let now = self.limiter.now();
                return Ok(blocked(rule, now));
            }
        };
        let label = rule.metric_label();
        let check = Check::new(pending.addend)
            .limit(pending.key.as_str(), limit)
            .labelled(domain, label);
        // Decided at once where the store can (the memory store); the store's and the local
        // fallback's futures take kilobytes, so they are boxed rather than carried in this one,
        // which each descriptor of a request allocates.
        let verdict = match deciding {
            Deciding::Store => match self.limiter.check_now(&check) {
                Some(decided) => decided,
                None => Box::pin(self.limiter.check(&check)).await,
            },
            Deciding::Locally => Box::pin(self.limiter.check_local(&check, self.local_nodes)).await,
        }
        .map_err(rls_error)?;
        let allowed = verdict.is_admitted();
        if !allowed && rule.counts_refused && pending.addend > 0 && deciding == Deciding::Store {
            // envoyproxy/ratelimit counts every hit, over the limit too (and a usage report
            // refused is usage all the same). The count changes no answer within the window,
            // and a failed count is no reason to fail the request.
            let _ = Box::pin(self.limiter.charge(&check, verdict.at())).await;
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
    /// Counts a descriptor's hits in its statistics, if it has any.
    pub(super) fn count(&self, pending: &Pending, limit: u64, before: u64, admitted: bool) {
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

/// Where a descriptor is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deciding {
    /// On the store, through the limiter's guards.
    Store,
    /// On the limiter's in-process fallback, the limits divided among the nodes (the failure
    /// mode `local`).
    Locally,
}

/// The statuses of a request's descriptors, in order, or why there are none: a store that
/// could not decide, or a check refused as malformed, named by its descriptor.
pub(super) fn statuses(
    decided: Vec<Result<DescriptorStatus, RlsError>>,
) -> Result<Vec<DescriptorStatus>, RlsError> {
    decided
        .into_iter()
        .enumerate()
        .map(|(index, status)| {
            status.map_err(|error| match error {
                // A check the store refuses as malformed (a counter key over the size cap, say)
                // is the caller's mistake, not an outage: Envoy must not apply its failure mode.
                RlsError::InvalidArgument(message) => {
                    RlsError::InvalidArgument(format!("descriptors[{index}]: {message}"))
                }
                other => other,
            })
        })
        .collect()
}

/// Why the limiter could not decide, as the service reports it: a malformed check is the
/// caller's mistake, a store failure an outage.
pub(super) fn rls_error(error: tollgate::Error) -> RlsError {
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
                    .telemetry()
                    .metrics()
                    .declare_limit(domain, rule.metric_label());
            }
        });
    }
}

/// The dynamic metadata of a response: the metadata of every matched rule whose descriptor
/// was not over its limit, merged, as envoyproxy/ratelimit passes it on.
fn passed_metadata(
    request: &RateLimitRequest,
    pending: &[Option<Pending>],
    statuses: &[DescriptorStatus],
) -> prost_types::Struct {
    let mut passed = prost_types::Struct::default();
    for (pending, status) in pending.iter().zip(statuses) {
        if let Some(metadata) = pending.as_ref().and_then(|p| p.rule.metadata.as_ref())
            && status.code != Code::OverLimit as i32
        {
            super::metadata::merge(&mut passed, metadata);
        }
    }
    super::metadata::dynamic(request, passed)
}

/// The store's futures take kilobytes; a request's own future, and each descriptor's (which
/// a request of several allocates), must not carry them.
#[cfg(test)]
mod future_sizes {
    use super::{Deciding, Pending, RateLimitRequest, Rls};

    fn size_of_output<T, R>(_call: impl FnOnce(T) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    #[test]
    fn a_request_and_its_descriptors_keep_their_futures_small() {
        let request = size_of_output(|(rls, request): (&Rls, &RateLimitRequest)| {
            rls.should_rate_limit(request)
        });
        let descriptor = size_of_output(|(rls, pending): (&Rls, Option<&Pending>)| {
            rls.decide("domain", pending, Deciding::Store)
        });
        assert!(
            request <= 1024,
            "should_rate_limit's future takes {request} bytes"
        );
        assert!(
            descriptor <= 1024,
            "decide's future takes {descriptor} bytes"
        );
    }
}
