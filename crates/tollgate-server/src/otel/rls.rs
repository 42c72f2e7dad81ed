//! The rate limit service's attributes (over gRPC and `/json`): its domain, and its overall
//! code, which stands for every descriptor's decision.

use crate::rls::proto::service::RateLimitResponse;
use crate::rls::proto::service::rate_limit_response::Code;

/// Records `domain` and the decision of `answer` on `span`.
pub fn record_rls(span: &tracing::Span, domain: &str, answer: &RateLimitResponse) {
    span.record("tollgate.domain", domain);
    if answer.overall_code == Code::OverLimit as i32 {
        span.record("tollgate.decision", "refused")
            .record("tollgate.reason", "over_limit");
    } else {
        span.record("tollgate.decision", "allowed");
    }
}
