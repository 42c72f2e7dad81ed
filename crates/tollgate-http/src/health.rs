//! Health as envoyproxy/ratelimit's deployments probe it: the standard gRPC health service
//! (`grpc.health.v1.Health`) with the service name `ratelimit`, and `GET /healthcheck` on the
//! HTTP listener. Both say serving until the process is asked to stop, then not serving while
//! requests under way finish, so that load balancers move away first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::HealthReporter;

/// Whether the process is ready for traffic.
#[derive(Debug, Clone)]
pub struct Readiness {
    /// Set once the process is asked to stop.
    pub stopping: Stopping,
    /// The store's probe.
    pub store: crate::store_health::StoreHealth,
    /// Whether readiness also asks for the store to answer its probe (otherwise a process
    /// that serves is ready, deciding by the policies' failure modes while the store is down).
    pub needs_store: bool,
    /// The rate limit service, when readiness waits for it to have a domain.
    pub rls_domains: Option<std::sync::Arc<tollgate_envoy::rls::Rls>>,
}

impl Readiness {
    /// Why the process is not ready, if it is not.
    pub fn problem(&self) -> Option<String> {
        if self.stopping.is_set() {
            return Some("the process is stopping".to_owned());
        }
        if self.needs_store && !self.store.is_up() {
            let error = self.store.error().unwrap_or_default();
            return Some(format!("the store does not answer: {error}"));
        }
        if let Some(rls) = &self.rls_domains
            && rls.config().domains().next().is_none()
        {
            return Some("the rate limit service has no domain loaded yet".to_owned());
        }
        None
    }
}

/// Keeps the gRPC health service's statuses in step with `readiness`, looked at every
/// `every`, until the process ends.
pub fn follow(reporter: HealthReporter, readiness: Readiness, every: std::time::Duration) {
    tokio::spawn(async move {
        let mut serving = true;
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let ready = readiness.problem().is_none();
            if ready != serving {
                serving = ready;
                let status = if ready {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                for name in ["", SERVICE_NAME] {
                    reporter.set_service_status(name, status).await;
                }
            }
        }
    });
}

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

    /// A flag set when `stop` resolves (for a process without the gRPC health service).
    pub fn on(stop: impl Future<Output = ()> + Send + 'static) -> Self {
        let stopping = Self::default();
        let flag = stopping.clone();
        tokio::spawn(async move {
            stop.await;
            flag.set();
        });
        stopping
    }
}

/// The gRPC health service, serving `""` and `ratelimit`, the flag `/healthcheck` reads, and
/// the reporter that sets its statuses; both turn to not serving when `stop` resolves.
pub async fn service(
    stop: impl Future<Output = ()> + Send + 'static,
) -> (HealthServer<impl Health>, Stopping, HealthReporter) {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    let stopping = Stopping::default();
    let flag = stopping.clone();
    let stopped = reporter.clone();
    tokio::spawn(async move {
        stop.await;
        flag.set();
        not_serving(&stopped).await;
    });
    (service, stopping, reporter)
}

async fn not_serving(reporter: &HealthReporter) {
    for name in ["", SERVICE_NAME] {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
}
