//! The tonic service: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use super::engine::{Rlqs, STREAM_QUEUE};
use crate::rls::proto::quota::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use crate::rls::proto::quota::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};

/// Envoy's rate limit quota service over gRPC.
#[derive(Debug)]
pub struct RlqsGrpc {
    rlqs: Arc<Rlqs>,
}

impl RlqsGrpc {
    /// The gRPC server for `rlqs`.
    pub fn server(rlqs: Arc<Rlqs>) -> RateLimitQuotaServiceServer<RlqsGrpc> {
        RateLimitQuotaServiceServer::new(RlqsGrpc { rlqs })
    }
}

type Assignments = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsGrpc {
    type StreamRateLimitQuotasStream = Assignments;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Assignments>, Status> {
        let mut reports = request.into_inner();
        let (outbox, mut inbox) = mpsc::channel(STREAM_QUEUE);
        let stream = self.rlqs.open(outbox.clone())?;
        let rlqs = Arc::clone(&self.rlqs);
        tokio::spawn(async move {
            // Reports are read until Envoy ends the stream, it breaks, or one is refused.
            while let Some(message) = reports.next().await {
                let Ok(message) = message else {
                    break;
                };
                if let Err(status) = rlqs.report(stream, &message) {
                    let _ = outbox.send(Err(status)).await;
                    break;
                }
            }
            rlqs.close(stream);
        });
        let assignments = futures_util::stream::poll_fn(move |context| inbox.poll_recv(context));
        Ok(Response::new(Box::pin(assignments)))
    }
}
