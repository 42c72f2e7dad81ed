//! What the service answers when the store cannot decide: an error for Envoy's own
//! `failure_mode_deny`, or the failure modes policies have (`allow`, `deny`, `local`), counted
//! in the metrics under the domain and each matched rule.

use futures_util::future::join_all;
use tollgate::StoreError;
use tollgate::metrics::MetricOutcome;
use tollgate::policy::FailureMode;

use super::decide::{Deciding, statuses};
use super::matching::Pending;
use super::proto::service::rate_limit_response::{Code, DescriptorStatus};
use super::proto::service::{RateLimitRequest, RateLimitResponse};
use super::settings::RlsFailureMode;
use super::{Rls, RlsError};

impl Rls {
    /// The answer by the failure mode when the store could not decide.
    pub(super) async fn fail_over(
        &self,
        request: &RateLimitRequest,
        pending: &[Option<Pending>],
        error: StoreError,
    ) -> Result<RateLimitResponse, RlsError> {
        let (outcome, code) = match self.failure_mode {
            RlsFailureMode::Error => return Err(RlsError::Unavailable(error)),
            RlsFailureMode::Decide(FailureMode::Allow) => (MetricOutcome::FailedOpen, Code::Ok),
            RlsFailureMode::Decide(FailureMode::Deny) => {
                (MetricOutcome::FailedClosed, Code::OverLimit)
            }
            RlsFailureMode::Decide(FailureMode::Local) => {
                return self.decide_locally(request, pending).await;
            }
        };
        self.count_fail_over(request, pending, outcome);
        Ok(Self::all_with(request.descriptors.len(), code))
    }

    /// Decides every descriptor again on the limiter's in-process fallback, each limit divided
    /// among the nodes that decide alone, and answers from those statuses as from the store's.
    async fn decide_locally(
        &self,
        request: &RateLimitRequest,
        pending: &[Option<Pending>],
    ) -> Result<RateLimitResponse, RlsError> {
        let domain = request.domain.as_str();
        let decided = join_all(
            pending
                .iter()
                .map(|pending| self.decide(domain, pending.as_ref(), Deciding::Locally)),
        )
        .await;
        let statuses = statuses(decided)?;
        self.count_fail_over(request, pending, MetricOutcome::LocalFallback);
        Ok(self.response(request, pending, statuses))
    }

    fn count_fail_over(
        &self,
        request: &RateLimitRequest,
        pending: &[Option<Pending>],
        outcome: MetricOutcome,
    ) {
        let metrics = self.limiter.telemetry().metrics();
        for pending in pending.iter().flatten() {
            metrics.record_decision(&request.domain, pending.rule.metric_label(), outcome);
        }
        metrics.record_policy(&request.domain, outcome);
    }

    pub(super) fn all_ok(count: usize) -> RateLimitResponse {
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
}
