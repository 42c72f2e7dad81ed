//! Health as envoyproxy/ratelimit's deployments probe it: the standard gRPC health service
//! (`grpc.health.v1.Health`) with the service name `ratelimit`, and `GET /healthcheck` on the
//! HTTP listener. Both say serving until the process is asked to stop, then not serving while
//! requests under way finish, so that load balancers move away first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::HealthReporter;

/// The name envoyproxy/ratelimit registers, which its users' probes ask for.
pub const SERVICE_NAME: &str = "ratelimit";

/// Whether the process is stopping.
#[derive(Debug, Default, Clone)]
pub struct Stopping(Arc<AtomicBool>);

impl Stopping {
    /// Whether a stop was asked for.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The gRPC health service, serving `""` and `ratelimit`, and the flag `/healthcheck` reads;
/// both turn to not serving when `stop` resolves.
pub async fn service(
    stop: impl Future<Output = ()> + Send + 'static,
) -> (HealthServer<impl Health>, Stopping) {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    let stopping = Stopping::default();
    let flag = stopping.clone();
    tokio::spawn(async move {
        stop.await;
        flag.set();
        not_serving(&reporter).await;
    });
    (service, stopping)
}

async fn not_serving(reporter: &HealthReporter) {
    for name in ["", SERVICE_NAME] {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
}
