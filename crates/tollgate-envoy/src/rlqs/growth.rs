//! Growth within a slot: shares grow from what the slot has left, and before the turn every
//! server's reported demand is read, so that the turn renews each share within its fair part.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;

use super::bucket::{Shared, Target};
use super::engine::{CONCURRENT_STORE_CALLS, Rlqs};
use super::state::{Outgoing, Part, demand_units, split_by_client, targets};

/// What a growth pass got for a bucket.
struct Growth {
    granted: u64,
    exhausted: bool,
    total_demand: u64,
    /// What each Envoy lacked, in part order.
    deficits: Vec<u64>,
}

impl Rlqs {
    /// Grows shares from what the slot has left: on the slot's first pass, toward each
    /// Envoy's part of this server's fair part of the limit (by the demand every server
    /// reported), after that toward its want from whatever is left.
    pub(super) async fn grow(&self, first: bool) {
        let work: Vec<_> = {
            let state = self.state();
            state
                .buckets
                .iter()
                .filter_map(|(key, bucket)| {
                    let Target::Share(shared) = &bucket.target else {
                        return None;
                    };
                    if bucket.exhausted {
                        return None;
                    }
                    let parts = bucket.parts(shared);
                    if parts.iter().all(|part| part.share >= part.want) {
                        return None;
                    }
                    Some((
                        key.clone(),
                        bucket.counter.clone(),
                        Arc::clone(shared),
                        parts,
                        bucket.demand_reported,
                    ))
                })
                .collect()
        };
        let grown: Vec<_> = futures_util::stream::iter(work.into_iter().map(
            |(key, counter, shared, parts, reported)| async move {
                let growth = self.more(&counter, &shared, &parts, reported, first).await;
                (key, shared, parts, growth)
            },
        ))
        .buffer_unordered(CONCURRENT_STORE_CALLS)
        .collect()
        .await;
        let mut outgoing: HashMap<u64, Outgoing> = HashMap::new();
        let mut state = self.state();
        for (key, shared, parts, growth) in grown {
            let Some(bucket) = state.buckets.get_mut(&key) else {
                continue;
            };
            let Ok(growth) = growth else {
                continue;
            };
            bucket.demand_reported = true;
            bucket.exhausted = growth.exhausted;
            bucket.total_demand = growth.total_demand;
            let extra = split_by_client(growth.granted, &parts, &growth.deficits);
            for (part, extra) in parts.iter().zip(extra) {
                if extra == 0 {
                    continue;
                }
                let Some(envoy) = bucket.envoys.get_mut(&part.stream) else {
                    // Gone since: its part stays counted to the end of the slot.
                    continue;
                };
                let action = self.assign(envoy, &bucket.name, &shared, part.share + extra);
                outgoing
                    .entry(part.stream)
                    .or_default()
                    .push((part.stream, action));
            }
        }
        self.send(&mut state, outgoing);
    }

    /// Reads, for every shared bucket, the demand every server reported in the slot, so that
    /// the turn renews each share within its fair part of the limit.
    pub(super) async fn survey(&self) {
        let work: Vec<_> = {
            let state = self.state();
            state
                .buckets
                .iter()
                .filter_map(|(key, bucket)| match &bucket.target {
                    Target::Share(shared) => Some((
                        key.clone(),
                        bucket.counter.clone(),
                        Arc::clone(shared),
                        (!bucket.demand_reported)
                            .then(|| demand_units(&bucket.parts(shared), shared)),
                    )),
                    _ => None,
                })
                .collect()
        };
        let read: Vec<_> = futures_util::stream::iter(work.into_iter().map(
            |(key, counter, shared, unreported)| async move {
                let peek = self
                    .charge(&counter, &shared, 0, unreported.unwrap_or(0))
                    .await;
                (key, peek)
            },
        ))
        .buffer_unordered(CONCURRENT_STORE_CALLS)
        .collect()
        .await;
        let mut state = self.state();
        for (key, peek) in read {
            let (Some(bucket), Ok((verdict, end))) = (state.buckets.get_mut(&key), peek) else {
                continue;
            };
            if self.answered_by_a_later_slot(end) {
                continue;
            }
            if let [_, demands] = verdict.decisions() {
                bucket.total_demand = demands.limit().saturating_sub(demands.remaining());
                bucket.demand_reported = true;
            }
        }
    }

    /// How much more a bucket's Envoys on this server get, and what the store said.
    async fn more(
        &self,
        key: &str,
        shared: &Shared,
        parts: &[Part],
        reported: bool,
        first: bool,
    ) -> Result<Growth, ()> {
        let own = demand_units(parts, shared);
        // What every server reported, and what the slot has left.
        let (peek, end) = self
            .charge(key, shared, 0, if reported { 0 } else { own })
            .await?;
        if self.answered_by_a_later_slot(end) {
            return Err(());
        }
        let [shares, demands] = peek.decisions() else {
            return Err(());
        };
        let total_demand = demands.limit().saturating_sub(demands.remaining());
        let deficits: Vec<u64> = if first {
            targets(shared, parts, own, total_demand)
                .into_iter()
                .zip(parts)
                .map(|(target, part)| target.saturating_sub(part.share))
                .collect()
        } else {
            parts
                .iter()
                .map(|part| part.want.saturating_sub(part.share))
                .collect()
        };
        let ask = deficits.iter().sum::<u64>().min(shares.remaining());
        let granted = if ask == 0 {
            0
        } else {
            let (granted, end) = self.count(key, shared, ask, 0).await?;
            if self.answered_by_a_later_slot(end) {
                return Err(());
            }
            granted
        };
        Ok(Growth {
            granted,
            exhausted: shares.remaining() == 0 || granted < ask,
            total_demand,
            deficits,
        })
    }
}
