//! The tonic service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::decide::{Rls, RlsError};
use super::proto::service::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use super::proto::service::{RateLimitRequest, RateLimitResponse};

/// Envoy's rate limit service over gRPC.
#[derive(Debug)]
pub struct RlsGrpc {
    rls: Arc<Rls>,
}

impl RlsGrpc {
    /// The gRPC server for `rls`.
    pub fn server(rls: Arc<Rls>) -> RateLimitServiceServer<RlsGrpc> {
        RateLimitServiceServer::new(RlsGrpc { rls })
    }
}

/// A failure as a gRPC status: bad requests are `INVALID_ARGUMENT`, store failures `UNAVAILABLE`.
pub fn status(error: RlsError) -> Status {
    match error {
        RlsError::InvalidArgument(message) => Status::invalid_argument(message),
        RlsError::Unavailable(error) => Status::unavailable(error.to_string()),
        RlsError::NotConfigured => Status::unavailable(RlsError::NotConfigured.to_string()),
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsGrpc {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        #[cfg(feature = "otel")]
        if crate::otel::enabled() {
            return traced(&self.rls, request).await;
        }
        self.rls
            .should_rate_limit(request.get_ref())
            .await
            .map(Response::new)
            .map_err(status)
    }
}

/// `ShouldRateLimit` in a check span, a child of the caller's trace context (gRPC metadata).
#[cfg(feature = "otel")]
async fn traced(
    rls: &Rls,
    request: Request<RateLimitRequest>,
) -> Result<Response<RateLimitResponse>, Status> {
    use tracing::Instrument;

    let parent = crate::otel::parent_of(request.metadata().as_ref());
    let entry = crate::otel::Entry::Grpc {
        service: "envoy.service.ratelimit.v3.RateLimitService",
        method: "ShouldRateLimit",
    };
    let span = crate::otel::check_span(entry, parent);
    let request = request.get_ref();
    let answer = rls
        .should_rate_limit(request)
        .instrument(span.clone())
        .await;
    if let Ok(answer) = &answer {
        crate::otel::record_rls(&span, &request.domain, answer);
    }
    let answer = answer.map(Response::new).map_err(status);
    let code = answer
        .as_ref()
        .map_or_else(Status::code, |_| tonic::Code::Ok);
    crate::otel::record_grpc_status(&span, code);
    answer
}
