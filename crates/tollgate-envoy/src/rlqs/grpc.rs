//! The tonic service: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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

/// How long a new stream has to send its first message.
const FIRST_MESSAGE: Duration = Duration::from_secs(30);

type Assignments = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsGrpc {
    type StreamRateLimitQuotasStream = Assignments;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Assignments>, Status> {
        // The peer, as the listener saw it (the accept loop's ConnectInfo) or as tonic's own
        // transport does: its streams are one client.
        let peer = request
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0)
            .or_else(|| request.remote_addr())
            .map(|address| address.ip());
        let mut reports = request.into_inner();
        let (outbox, mut inbox) = mpsc::channel(STREAM_QUEUE);
        let (stream, dropped) = self.rlqs.open(outbox.clone(), peer)?;
        let rlqs = Arc::clone(&self.rlqs);
        tokio::spawn(async move {
            // Reports are read until Envoy ends the stream, it breaks, one is refused, or
            // the service drops the stream; then the answers end too.
            let mut first = true;
            loop {
                // A stream must say what it is for soon, or give its place back.
                let wait = if first { FIRST_MESSAGE } else { Duration::MAX };
                first = false;
                let message = tokio::select! {
                    message = tokio::time::timeout(wait, reports.next()) => match message {
                        Ok(message) => message,
                        Err(_) => {
                            let _ = outbox.try_send(Err(Status::deadline_exceeded(
                                "no usage report within 30s of opening the stream",
                            )));
                            break;
                        }
                    },
                    () = dropped.notified() => break,
                };
                let Some(Ok(message)) = message else {
                    break;
                };
                if let Err(status) = rlqs.report(stream, &message) {
                    let _ = outbox.try_send(Err(status));
                    break;
                }
            }
            rlqs.close(stream);
        });
        let assignments = futures_util::stream::poll_fn(move |context| inbox.poll_recv(context));
        Ok(Response::new(Box::pin(assignments)))
    }
}
