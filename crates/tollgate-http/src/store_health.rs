//! The store's health as a periodic probe sees it, traffic or not: `tollgate_store_up`, a WARN
//! when the store is lost (once per outage, with the cause and what decides meanwhile) and an
//! INFO when it is back (with the outage's length). The probe goes straight to the store, past
//! the circuit breaker, so that it tells the store's state rather than the breaker's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tollgate::policy::FailureMode;
use tollgate::store::StoreError;
use tollgate::{AnyStore, Limiter, Store};

/// Whether the store answered its last probe, and why not when it did not.
#[derive(Debug, Clone, Default)]
pub struct StoreHealth {
    up: Arc<AtomicBool>,
    error: Arc<std::sync::Mutex<Option<String>>>,
}

impl StoreHealth {
    /// Whether the store answered its last probe.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// What the last probe failed with, if it failed.
    pub fn error(&self) -> Option<String> {
        self.error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, error: Option<String>) {
        self.up.store(error.is_none(), Ordering::Relaxed);
        *self
            .error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = error;
    }
}

/// Probes `limiter`'s store every `every` until the process ends; `rls_mode` says what the
/// Envoy rate limit service answers meanwhile, when this process serves one.
pub fn watch(limiter: &Limiter<AnyStore>, every: Duration, rls_mode: Option<&str>) -> StoreHealth {
    // Not up until a probe says so: a pod is not ready before it has reached its store.
    let health = StoreHealth::default();
    health.set(Some("not probed yet".to_owned()));
    let watched = health.clone();
    let limiter = limiter.clone();
    let rls_mode = rls_mode.map(str::to_owned);
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // When the outage under way began.
        let mut lost: Option<tokio::time::Instant> = None;
        loop {
            interval.tick().await;
            let probed = tokio::time::timeout(every.max(Duration::from_secs(1)), async {
                probe(limiter.store()).await
            })
            .await;
            let error = match probed {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some("the probe timed out".to_owned()),
            };
            limiter.telemetry().metrics().set_store_up(error.is_none());
            watched.set(error.clone());
            match (error, lost) {
                (Some(error), None) => {
                    lost = Some(tokio::time::Instant::now());
                    tracing::warn!(
                        store = limiter.store().kind(),
                        "the store is lost ({error}); until it answers again {}",
                        meanwhile(&limiter, rls_mode.as_deref())
                    );
                }
                (None, Some(since)) => {
                    lost = None;
                    let outage = since.elapsed();
                    tracing::info!(
                        store = limiter.store().kind(),
                        outage_ms = outage.as_millis() as u64,
                        "the store answers again after an outage of {outage:.1?}"
                    );
                }
                _ => {}
            }
        }
    });
    health
}

/// What decides while the store cannot: each policy's failure mode, and the Envoy rate limit
/// service's.
fn meanwhile(limiter: &Limiter<AnyStore>, rls_mode: Option<&str>) -> String {
    let mut by_mode: Vec<(&str, Vec<String>)> = vec![
        ("fail closed (503)", Vec::new()),
        ("decide by local limits", Vec::new()),
        ("fail open", Vec::new()),
    ];
    if let Some(policies) = limiter.policies() {
        for (name, mode) in policies.failure_modes() {
            let slot = match mode {
                FailureMode::Deny => 0,
                FailureMode::Local => 1,
                FailureMode::Allow => 2,
            };
            by_mode[slot].1.push(name.to_owned());
        }
    }
    let mut parts: Vec<String> = by_mode
        .into_iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(mode, names)| format!("policies {} {mode}", names.join(", ")))
        .collect();
    if let Some(mode) = rls_mode {
        parts.push(format!("the Envoy rate limit service answers {mode}"));
    }
    if parts.is_empty() {
        return "checks of limits given directly fail with 503".to_owned();
    }
    parts.join("; ")
}

/// The limit of the probe that `/readyz` and start-up check with, at no cost: it runs what
/// every check runs (the code, `TIME`, reading the state) without changing any.
fn probe_limit() -> tollgate::Limit {
    let quota = tollgate::Quota::per_second(1).expect("1/s is a valid quota");
    tollgate::Limit::new("tollgate:readyz", tollgate::Algorithm::FixedWindow, quota)
        .expect("a fixed window of 1/s is a valid limit")
}

/// The probe on `store`: a check of the probe limit (start-up and the periodic probe).
pub async fn probe(store: &impl Store) -> Result<(), StoreError> {
    let limit = probe_limit();
    store
        .check(&tollgate::Check::new(0).limit("readyz", &limit), None)
        .await
        .map(|_| ())
}
