//! Envoy's rate limit quota service (RLQS, `envoy.service.rate_limit_quota.v3`): Envoy groups
//! requests into buckets, reports each bucket's usage on one stream, and enforces locally the
//! quota the service assigns it. Buckets are matched through the same descriptor files as the
//! rate limit service; a limit is split among the Envoys reporting its bucket by their demand,
//! and every share is counted in the store first (see [`engine`]).

mod actions;
mod bucket;
mod clients;
mod counting;
pub mod engine;
mod growth;
mod grpc;
mod share;
mod state;
mod stats;
mod streams;
mod tuning;
mod turn;

pub use engine::{MAX_REPORTS_PER_MESSAGE, Rlqs};
pub use grpc::RlqsGrpc;
pub use stats::QuotaStats;
pub use tuning::{QuotaFlags, QuotaTuning};

/// A bucket id of `pairs`, as Envoy's `bucket_id_builder` makes them (for clients and tests).
pub fn bucket_id(pairs: &[(&str, &str)]) -> crate::rls::proto::quota::BucketId {
    crate::rls::proto::quota::BucketId {
        bucket: pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
    }
}
