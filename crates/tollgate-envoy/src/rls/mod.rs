//! Envoy's rate limit service (RLS v3): a drop-in for envoyproxy/ratelimit behind Envoy or
//! Istio, answering `ShouldRateLimit` over gRPC and its `/json` HTTP form for the YAML
//! configuration format its users already have.

mod config;
mod counted;
mod decide;
mod fail_over;
mod grpc;
pub mod json;
mod keys;
mod matching;
mod metadata;
mod parse;
pub mod proto;
mod settings;
mod stats;
mod status;
mod tree;
pub mod unary;
mod unit;
mod upstream_keys;
pub mod xds;

pub use config::{MAX_DEPTH, MAX_FILES, RlsConfig};
pub use decide::{Rls, RlsError};
pub use grpc::{RlsGrpc, status};
pub(crate) use keys::escape;
pub use settings::{RlsFailureMode, RlsHeaderNames, RlsLimits, RlsModes};
pub use stats::{RlsStats, RlsStatsFlags};
pub(crate) use tree::{Enforcement, Rule, find};
pub use upstream_keys::{PerSecondStore, UpstreamCounting, UpstreamKeys};
