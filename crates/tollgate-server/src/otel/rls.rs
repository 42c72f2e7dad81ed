//! Envoy's rate limit service over gRPC in check spans, with its domain, its overall code
//! (which stands for every descriptor's decision) and the call's status. The gRPC service is
//! wrapped here, so that the Envoy crate knows nothing of OpenTelemetry.

use std::sync::Arc;

use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::proto::service::RateLimitResponse;
use tollgate_envoy::rls::proto::service::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use tollgate_envoy::rls::{Rls, RlsGrpc};
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

/// Envoy's rate limit service over gRPC, each call in a check span once the exporter is
/// installed. The server picks it only when traces are exported (`serve::grpc_app`): when they
/// are not, its wrapping future would cost every call about 500 instructions for nothing.
#[derive(Debug)]
pub struct TracedRlsGrpc(RlsGrpc);

impl TracedRlsGrpc {
    /// The gRPC server for `rls`.
    pub fn server(rls: Arc<Rls>) -> RateLimitServiceServer<TracedRlsGrpc> {
        RateLimitServiceServer::new(Self(RlsGrpc::new(rls)))
    }
}

#[tonic::async_trait]
impl RateLimitService for TracedRlsGrpc {
    /// `ShouldRateLimit` in a check span, a child of the caller's trace context (gRPC
    /// metadata).
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        if !tollgate_http::otel::enabled() {
            return self.0.should_rate_limit(request).await;
        }
        let parent = tollgate_http::otel::parent_of(request.metadata().as_ref());
        let entry = tollgate_http::otel::Entry::Grpc {
            service: "envoy.service.ratelimit.v3.RateLimitService",
            method: "ShouldRateLimit",
        };
        let span = tollgate_http::otel::check_span(entry, parent);
        let domain = request.get_ref().domain.clone();
        let answer = self
            .0
            .should_rate_limit(request)
            .instrument(span.clone())
            .await;
        if let Ok(answer) = &answer {
            tollgate_http::otel::record_rls(&span, &domain, answer.get_ref());
        }
        let code = answer
            .as_ref()
            .map_or_else(Status::code, |_| tonic::Code::Ok);
        record_grpc_status(&span, code);
        answer
    }
}

/// Records a gRPC call's status on `span`; a server-side failure marks it as an error, named by
/// its code, as the semantic conventions for gRPC servers have it.
fn record_grpc_status(span: &tracing::Span, code: tonic::Code) {
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
