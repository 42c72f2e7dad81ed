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
    /// The service for `rls`, for a server that wraps it (the binary traces each call).
    pub fn new(rls: Arc<Rls>) -> Self {
        Self { rls }
    }

    /// The gRPC server for `rls`.
    pub fn server(rls: Arc<Rls>) -> RateLimitServiceServer<RlsGrpc> {
        RateLimitServiceServer::new(Self::new(rls))
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
        self.rls
            .should_rate_limit(request.get_ref())
            .await
            .map(Response::new)
            .map_err(status)
    }
}
