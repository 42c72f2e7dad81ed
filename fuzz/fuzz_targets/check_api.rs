//! `POST /v1/check` and `/v1/refund` with any body: an answer, 2xx or 4xx, never a panic or
//! a 5xx (the memory store cannot fail, so a 5xx would be the server's own fault).

#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use tollgate::secret::Secret;
use tollgate::{AnyStore, Limiter, MemoryStore};
use tollgate_envoy::rls::{Rls, RlsConfig};
use tollgate_http::api::{AppState, Charges, Shared, router};
use tollgate_http::health::{Readiness, Stopping};
use tollgate_http::store_health::StoreHealth;
use tower::ServiceExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn state() -> &'static AppState {
    static STATE: OnceLock<AppState> = OnceLock::new();
    STATE.get_or_init(|| {
        let policies = tollgate_server::policies::load(None).expect("the built-in policies");
        let limiter = Limiter::with_policies(AnyStore::Memory(MemoryStore::new()), policies);
        let rls = Arc::new(Rls::new(limiter.clone(), RlsConfig::default(), false));
        let charges = Charges::new(Secret::random(), Duration::from_secs(3_600))
            .expect("a valid refund window");
        AppState::new(Shared {
            limiter,
            rls,
            quotas: None,
            charges: Arc::new(charges),
            readiness: Readiness {
                stopping: Stopping::default(),
                store: StoreHealth::default(),
                needs_store: false,
                rls_domains: None,
            },
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let (path, body) = match data.split_first() {
        Some((selector, rest)) if selector % 2 == 1 => ("/v1/refund", rest),
        Some((_, rest)) => ("/v1/check", rest),
        None => ("/v1/check", data),
    };
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a request");
    let response = runtime()
        .block_on(router(state().clone()).oneshot(request))
        .expect("infallible");
    assert!(
        response.status().as_u16() < 500,
        "{path} answered {} to {:?}",
        response.status(),
        String::from_utf8_lossy(body)
    );
});
