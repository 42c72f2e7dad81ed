//! Envoy's rate limit requests, as protobuf (gRPC) and as JSON (`/json`): decoded or refused,
//! and decided or refused as invalid, never a panic.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use tollgate::{AnyStore, Limiter, MemoryStore};
use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::{Rls, RlsConfig, RlsError};

const CONFIG: &str = "
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: path
    value: /login*
    descriptors:
      - key: remote_address
        rate_limit: { unit: minute, requests_per_unit: 5, algorithm: gcra }
  - key: tenant
    rate_limit: { unlimited: true }
    descriptors:
      - key: plan
        shadow_mode: true
        rate_limit: { period: 30s, requests_per_unit: 3 }
";

fn rls() -> &'static (tokio::runtime::Runtime, Rls) {
    static RLS: OnceLock<(tokio::runtime::Runtime, Rls)> = OnceLock::new();
    RLS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let config = RlsConfig::from_documents(&[("fuzz.yaml", CONFIG)]).expect("valid");
        let limiter = Limiter::new(AnyStore::Memory(MemoryStore::new()));
        (runtime, Rls::new(limiter, config, true))
    })
}

fn decide(request: &RateLimitRequest) {
    let (runtime, rls) = rls();
    match runtime.block_on(rls.should_rate_limit(request)) {
        Ok(response) => assert_eq!(response.statuses.len(), request.descriptors.len()),
        Err(RlsError::InvalidArgument(message)) => assert!(!message.is_empty()),
        Err(other) => panic!("the memory store failed: {other}"),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = RateLimitRequest::decode(data) {
        decide(&request);
    }
    if let Ok(request) = tollgate_envoy::rls::json::parse_request(data) {
        decide(&request);
    }
});
