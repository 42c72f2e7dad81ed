//! Envoy's rate limit services on the Tollgate library: the rate limit service ([`rls`]: gRPC,
//! its `/json` form, envoyproxy/ratelimit's configuration files or xDS) and the rate limit
//! quota service ([`rlqs`]). They decide through a [`tollgate::Limiter`] and know nothing of
//! the server that listens for them; the `tollgate` binary connects the stores and serves them.
//!
//! ```
//! use tollgate::{AnyStore, Limiter, MemoryStore};
//! use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
//! use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
//! use tollgate_envoy::rls::proto::service::RateLimitRequest;
//! use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
//! use tollgate_envoy::rls::{Rls, RlsConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let yaml = "domain: edge
//! descriptors:
//!   - key: remote_address
//!     rate_limit: { unit: minute, requests_per_unit: 1 }
//! ";
//! let config = RlsConfig::from_documents(&[("edge.yaml", yaml)])?;
//! let limiter = Limiter::new(AnyStore::Memory(MemoryStore::new()));
//! let rls = Rls::new(limiter, config, false);
//! let request = RateLimitRequest {
//!     domain: "edge".to_owned(),
//!     descriptors: vec![RateLimitDescriptor {
//!         entries: vec![Entry { key: "remote_address".to_owned(), value: "10.0.0.1".to_owned() }],
//!         limit: None,
//!         hits_addend: None,
//!     }],
//!     hits_addend: 0,
//! };
//! assert_eq!(rls.should_rate_limit(&request).await?.overall_code, Code::Ok as i32);
//! assert_eq!(rls.should_rate_limit(&request).await?.overall_code, Code::OverLimit as i32);
//! # Ok(())
//! # }
//! ```

pub mod rlqs;
pub mod rls;
