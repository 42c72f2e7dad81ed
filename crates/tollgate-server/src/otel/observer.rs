//! Fills in the check span's attributes from what the limiter reports as it decides: the
//! limiter calls its observers inline, within the frontend's span, so every frontend gets the
//! same attributes without passing the evaluation back out.

use std::time::Duration;

use tollgate::observer::Observer;
use tollgate::observer::StoreObserver;
use tollgate::policy::{Action, Evaluation, Request};
use tollgate::store::StoreError;
use tollgate::{Outcome, Verdict};

/// Records policies, decision and store time on the current span (a no-op outside one).
#[derive(Debug, Default)]
pub struct SpanObserver;

impl StoreObserver for SpanObserver {
    fn store_called(&self, took: Duration, _error: Option<&StoreError>) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        tracing::Span::current().record("tollgate.store.duration_us", micros);
    }
}

impl Observer for SpanObserver {
    fn checked(&self, _check: &tollgate::Check<'_>, verdict: &Verdict, _took: Duration) {
        let span = tracing::Span::current();
        match verdict.outcome() {
            Outcome::Allow => span.record("tollgate.decision", "allowed"),
            Outcome::Delay(_) => span.record("tollgate.decision", "delayed"),
            Outcome::Deny { .. } => span
                .record("tollgate.decision", "refused")
                .record("tollgate.reason", "over_limit"),
        };
    }

    fn evaluated(&self, _request: &Request<'_>, evaluation: &Evaluation, _took: Duration) {
        let span = tracing::Span::current();
        if span.is_disabled() {
            return;
        }
        if !evaluation.matched.is_empty() {
            span.record("tollgate.policy", evaluation.matched.join(",").as_str());
        }
        span.record("tollgate.decided_by", evaluation.decided_by.as_str());
        match &evaluation.action {
            Action::Allow => span.record("tollgate.decision", "allowed"),
            Action::Delay(_) => span.record("tollgate.decision", "delayed"),
            Action::Refuse(refusal) => span
                .record("tollgate.decision", "refused")
                .record("tollgate.reason", refusal.reason.as_str()),
        };
    }
}
