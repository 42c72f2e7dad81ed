//! Descriptors counted in envoyproxy/ratelimit's own keys (`--rls-upstream-keys`): one count
//! for a request's classic fixed windows, as upstream counts them, beside the others decided
//! one by one.

use futures_util::future::join_all;
use tollgate::StoreError;
use tollgate::counter::{Count, Counter, Tally};
use tollgate::metrics::MetricOutcome;

use super::decide::{Deciding, rls_error};
use super::matching::Pending;
use super::proto::service::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::upstream_keys::UpstreamCounting;
use super::{Rls, RlsError};

impl Rls {
    /// Decides the descriptors whose counters are kept in envoyproxy/ratelimit's keys in one
    /// count, as upstream counts a request, and the others one by one, all at once.
    pub(super) async fn decide_counted(
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
                other => Some(self.decide(domain, other.as_ref(), Deciding::Store).await),
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
        let metrics = self.limiter.telemetry().metrics();
        metrics.record_decision(domain, rule.metric_label(), outcome);
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
}
