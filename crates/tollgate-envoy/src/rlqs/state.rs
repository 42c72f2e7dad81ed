//! What the engine holds: the open streams, the buckets they report, and each Envoy's part of
//! a bucket, with the arithmetic that plans shares from those parts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::bucket::{BucketName, Shared, Target};
use super::clients::ClientId;
use super::engine::Outbox;
use super::share;
use crate::rls::proto::quota::rate_limit_quota_response::BucketAction;

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) streams: HashMap<u64, Stream>,
    pub(super) buckets: HashMap<String, Bucket>,
}

#[derive(Debug)]
pub(super) struct Stream {
    /// Who holds it.
    pub(super) client: ClientId,
    pub(super) domain: Option<String>,
    pub(super) outbox: Outbox,
    pub(super) buckets: HashSet<String>,
    /// Told when the service drops the stream, so that its handler ends it.
    pub(super) dropped: Arc<Notify>,
}

#[derive(Debug)]
pub(super) struct Bucket {
    pub(super) name: BucketName,
    pub(super) domain: String,
    pub(super) target: Target,
    /// The key the bucket's counters are kept under: its name, or the pattern of a wildcard
    /// whose matches share one limit.
    pub(super) counter: String,
    pub(super) envoys: HashMap<u64, Envoy>,
    /// No more units are left in this slot.
    pub(super) exhausted: bool,
    /// The demand this server reported in this slot, if it did.
    pub(super) demand_reported: bool,
    /// The demand every server reported in the last slot, as last read.
    pub(super) total_demand: u64,
}

impl Bucket {
    /// Each Envoy's share, want and demand, in stream order.
    pub(super) fn parts(&self, shared: &Shared) -> Vec<Part> {
        let mut parts: Vec<Part> = self
            .envoys
            .iter()
            .map(|(stream, envoy)| Part {
                stream: *stream,
                client: envoy.client,
                share: envoy.share,
                want: share::want(envoy.demand, shared.quota),
                demand: envoy.demand,
            })
            .collect();
        parts.sort_unstable_by_key(|part| part.stream);
        parts
    }
}

/// An Envoy's part of a bucket, as the engine plans with it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Part {
    pub(super) stream: u64,
    pub(super) client: ClientId,
    pub(super) share: u64,
    pub(super) want: u64,
    pub(super) demand: f64,
}

/// One Envoy's part of a bucket.
#[derive(Debug)]
pub(super) struct Envoy {
    /// The client whose stream it is.
    pub(super) client: ClientId,
    /// Requests per the limit's period, smoothed over reports, at most the limit.
    pub(super) demand: f64,
    /// Units assigned and counted in the current slot.
    pub(super) share: u64,
    /// When it last reported requests.
    pub(super) last_active: Instant,
    /// When it last reported at all.
    pub(super) last_report: Instant,
    /// Whether it has been sent an assignment (a share of none is then sent as a denial).
    pub(super) assigned: bool,
}

/// A message for a stream.
pub(super) type Outgoing = Vec<(u64, BucketAction)>;

/// Each Envoy's target: this server's fair part of the limit (by its demand against every
/// server's), split fairly among its clients (see [`share::by_client`]), none above its want.
pub(super) fn targets(shared: &Shared, parts: &[Part], own: u64, total: u64) -> Vec<u64> {
    let fair = share::fair(shared.quota, own, total);
    let wants: Vec<u64> = parts.iter().map(|part| part.want).collect();
    split_by_client(fair, parts, &wants)
}

/// `total` split among `parts` by [`share::by_client`], none above its cap in `caps`.
pub(super) fn split_by_client(total: u64, parts: &[Part], caps: &[u64]) -> Vec<u64> {
    let clients: Vec<ClientId> = parts.iter().map(|part| part.client).collect();
    let demands: Vec<f64> = parts.iter().map(|part| part.demand).collect();
    share::by_client(total, &clients, &demands, caps)
}

/// A server's demand as the demand counter takes it: in thousandths of the limit, at most a
/// thousand limits, so that no server's report can fill the counter (10 000 servers at the
/// cap take 10^10 of its 2^40) and every server's weighs alike however large the limit.
pub(super) fn demand_units(parts: &[Part], shared: &Shared) -> u64 {
    let sum: f64 = parts.iter().map(|part| part.demand.max(0.0)).sum();
    let thousandths = (1_000.0 * sum / shared.quota.max(1) as f64).ceil();
    (thousandths as u64).min(1_000_000)
}
