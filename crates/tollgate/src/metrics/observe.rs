//! The metrics as an observer of the limiter and its store: what each decision and store call
//! counts.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tollgate_core::check::{Check, Verdict};

use super::{MetricOutcome, Metrics};
use crate::observer::Observer;
use crate::observer::StoreObserver;
use crate::policy::{Action, DecidedBy, Evaluation, Request};
use crate::store::StoreError;

impl StoreObserver for Metrics {
    fn store_called(&self, took: Duration, error: Option<&StoreError>) {
        self.observe_store(took);
        if let Some(error) = error {
            self.record_store_error(error);
        }
    }

    fn store_skipped(&self) {
        self.record_store_error(&StoreError::CircuitOpen);
    }

    fn cache_hit(&self) {
        self.record_cache_hit();
    }
}

impl Observer for Metrics {
    /// Checks name their limits themselves (the check API takes them from clients), so they
    /// are counted without labels of their own, unless the check is labelled from
    /// configuration (Envoy's domain and rule).
    fn checked(&self, check: &Check<'_>, verdict: &Verdict, took: Duration) {
        self.observe_check(took);
        let outcome = match verdict.outcome() {
            crate::Outcome::Allow => MetricOutcome::Allowed,
            crate::Outcome::Delay(_) => MetricOutcome::Delayed,
            crate::Outcome::Deny { retry_after } => {
                if let Some(retry_after) = retry_after {
                    self.observe_retry_after(retry_after);
                }
                MetricOutcome::Denied
            }
        };
        match check.labels() {
            Some((policy, limit)) => {
                self.record_decision(policy, limit, outcome);
                self.record_policy(policy, outcome);
            }
            // Limits given directly, the embedded door: both counts without a label to look at.
            None => {
                self.unlabelled_decisions(outcome).inc();
                self.unlabelled_requests[outcome as usize].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// For an admitted request every limit that applied, for a refused one the limits (or
    /// policies) that refused it.
    fn evaluated(&self, _request: &Request<'_>, evaluation: &Evaluation, took: Duration) {
        self.observe_check(took);
        self.record_evaluation(evaluation);
    }
}

impl Metrics {
    fn record_evaluation(&self, evaluation: &Evaluation) {
        let per_policy = |outcome: MetricOutcome, policies: &[std::sync::Arc<str>]| {
            for policy in policies {
                self.record_decision(policy, "", outcome);
                self.record_policy(policy, outcome);
            }
        };
        per_policy(MetricOutcome::ShadowDenied, &evaluation.shadow_denied);
        if let Action::Refuse(refusal) = &evaluation.action
            && let Some(retry_after) = refusal.retry_after
        {
            self.observe_retry_after(retry_after);
        }
        match evaluation.decided_by {
            DecidedBy::FailOpen => per_policy(MetricOutcome::FailedOpen, &evaluation.matched),
            DecidedBy::FailClosed => per_policy(MetricOutcome::FailedClosed, &evaluation.matched),
            DecidedBy::Store | DecidedBy::Cache | DecidedBy::Local => {
                self.record_decided(evaluation, per_policy);
            }
        }
    }

    fn record_decided(
        &self,
        evaluation: &Evaluation,
        per_policy: impl Fn(MetricOutcome, &[std::sync::Arc<str>]),
    ) {
        let local = evaluation.decided_by == DecidedBy::Local;
        let admitted = evaluation.is_admitted();
        let mut refused_by_a_limit = false;
        for applied in &evaluation.applied {
            let outcome = match (local, admitted, &evaluation.action) {
                (true, _, _) => MetricOutcome::LocalFallback,
                (false, true, Action::Delay(_)) => MetricOutcome::Delayed,
                (false, true, _) => MetricOutcome::Allowed,
                (false, false, _) if !applied.decision.allowed() => {
                    refused_by_a_limit = true;
                    MetricOutcome::Denied
                }
                (false, false, _) => continue,
            };
            self.record_decision(&applied.policy, &applied.label, outcome);
        }
        if !admitted && !refused_by_a_limit && !local {
            // Refused before any limit (penalty box, waiting room): counted per policy.
            per_policy(MetricOutcome::Denied, &evaluation.violated);
            return;
        }
        // The summary counts requests: once for each policy that applied limits.
        let request_outcome = match (local, admitted, &evaluation.action) {
            (true, _, _) => MetricOutcome::LocalFallback,
            (false, true, Action::Delay(_)) => MetricOutcome::Delayed,
            (false, true, _) => MetricOutcome::Allowed,
            (false, false, _) => MetricOutcome::Denied,
        };
        let mut counted: Vec<&str> = Vec::new();
        for applied in &evaluation.applied {
            let policy: &str = &applied.policy;
            let refused_here = evaluation.violated.iter().any(|v| &**v == policy);
            if counted.contains(&policy) || (!admitted && !refused_here) {
                continue;
            }
            counted.push(policy);
            self.record_policy(policy, request_outcome);
        }
    }
}
