//! The rate limit service's attributes (over gRPC and `/json`): its domain, its overall code,
//! which stands for every descriptor's decision, and over gRPC the call's status.

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

/// Records a gRPC call's status on `span`; a server-side failure marks it as an error, named by
/// its code, as the semantic conventions for gRPC servers have it.
pub fn record_grpc_status(span: &tracing::Span, code: tonic::Code) {
    span.record("rpc.grpc.status_code", code as i64);
    let server_failure = matches!(
        code,
        tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unimplemented
            | tonic::Code::Internal
            | tonic::Code::Unavailable
            | tonic::Code::DataLoss
    );
    if server_failure {
        span.record("error.type", format!("{code:?}").as_str());
        span.record("otel.status_code", "error");
    }
}
