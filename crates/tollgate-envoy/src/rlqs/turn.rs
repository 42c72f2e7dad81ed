//! The turn of a slot, in three phases: under the lock, idle and reconfigured Envoys are
//! abandoned and every shared bucket's renewal is planned; without it, the renewals are
//! counted in the store; under it again, what was granted is assigned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::actions::{abandon, assignment, blanket};
use super::bucket::{Shared, Target};
use super::engine::{CONCURRENT_STORE_CALLS, Rlqs};
use super::share;
use super::state::{Bucket, Outgoing, Part, State, demand_units, targets};
use crate::rls::RlsConfig;

/// A shared bucket's renewal: each Envoy keeps its share, no larger than its target.
struct Renewal {
    key: String,
    counter: String,
    shared: Arc<Shared>,
    parts: Vec<Part>,
    keep: Vec<u64>,
    /// This server's demand, in the demand counter's units.
    own: u64,
}

impl Renewal {
    fn plan(key: &str, bucket: &Bucket, shared: &Arc<Shared>) -> Self {
        let parts = bucket.parts(shared);
        let own = demand_units(&parts, shared);
        let targets = targets(shared, &parts, own, bucket.total_demand);
        let keep: Vec<u64> = parts
            .iter()
            .zip(targets)
            .map(|(part, target)| part.share.min(target))
            .collect();
        Self {
            key: key.to_owned(),
            counter: bucket.counter.clone(),
            shared: Arc::clone(shared),
            parts,
            keep,
            own,
        }
    }
}

/// What the store answered a renewal: the units granted and when its slot ends, if it told.
type Counted = Result<(u64, Option<Instant>), ()>;

impl Rlqs {
    /// The turn of a slot (at `turn`): idle and unconfigured buckets are abandoned; every
    /// share is renewed no larger than it was, nor than its part of this server's fair part of
    /// the limit, and counted in the new slot. With `only`, just those buckets are renewed.
    /// Returns the buckets whose answers came from the slot that was ending, with its end.
    pub(super) async fn renew(
        &self,
        turn: Instant,
        only: Option<&HashSet<String>>,
    ) -> Option<(Instant, HashSet<String>)> {
        let mut outgoing: HashMap<u64, Outgoing> = HashMap::new();
        let renewals = self.plan_renewals(turn, only, &mut outgoing);
        let counted: Vec<_> =
            futures_util::stream::iter(renewals.into_iter().map(|renewal| async move {
                // At least one unit of demand, so that the answer tells when the slot ends.
                let units = renewal.keep.iter().sum();
                let counted = self
                    .count(&renewal.counter, &renewal.shared, units, renewal.own.max(1))
                    .await;
                (renewal, counted)
            }))
            .buffer_unordered(CONCURRENT_STORE_CALLS)
            .collect()
            .await;
        let mut state = self.state();
        let ending = self.assign_renewals(&mut state, turn, counted, &mut outgoing);
        self.send(&mut state, outgoing);
        // A second early answer is not retried again: those buckets wait for the next turn.
        ending.filter(|_| only.is_none())
    }

    /// The first phase, under the lock: resets each bucket's slot flags, abandons its idle
    /// Envoys (all of them if its limit changed), forgets buckets left empty, sends blanket
    /// rules again, and plans the renewal of every shared bucket.
    fn plan_renewals(
        &self,
        turn: Instant,
        only: Option<&HashSet<String>>,
        outgoing: &mut HashMap<u64, Outgoing>,
    ) -> Vec<Renewal> {
        let config = self.rls.config();
        let mut renewals = Vec::new();
        let mut state = self.state();
        let state = &mut *state;
        let mut gone = Vec::new();
        for (key, bucket) in &mut state.buckets {
            if only.is_some_and(|only| !only.contains(key)) {
                continue;
            }
            bucket.exhausted = false;
            bucket.demand_reported = false;
            for stream in self.leaving(&config, bucket, turn) {
                bucket.envoys.remove(&stream);
                outgoing
                    .entry(stream)
                    .or_default()
                    .push((stream, abandon(&bucket.name)));
                if let Some(open) = state.streams.get_mut(&stream) {
                    open.buckets.remove(key);
                }
            }
            if bucket.envoys.is_empty() {
                gone.push(key.clone());
                continue;
            }
            match &bucket.target {
                Target::Share(shared) => renewals.push(Renewal::plan(key, bucket, shared)),
                target => {
                    let strategy = blanket(target);
                    for (stream, envoy) in &mut bucket.envoys {
                        envoy.assigned = true;
                        outgoing
                            .entry(*stream)
                            .or_default()
                            .push((*stream, assignment(&bucket.name, strategy, self.ttl())));
                    }
                }
            }
        }
        for key in gone {
            state.buckets.remove(&key);
        }
        renewals
    }

    /// The Envoys that leave `bucket` at this turn: those idle for `idle`, or all of them if
    /// the configuration no longer gives the bucket the same limit and counter.
    fn leaving(&self, config: &RlsConfig, bucket: &Bucket, turn: Instant) -> Vec<u64> {
        let current = Target::resolve(config, &bucket.domain, &bucket.name, self.tuning.period);
        let unchanged = current.as_ref().is_some_and(|(target, counter)| {
            *target == bucket.target && *counter == bucket.counter
        });
        if !unchanged {
            return bucket.envoys.keys().copied().collect();
        }
        bucket
            .envoys
            .iter()
            .filter(|(_, envoy)| turn.duration_since(envoy.last_active) >= self.tuning.idle)
            .map(|(stream, _)| *stream)
            .collect()
    }

    /// The last phase, under the lock again: splits what each renewal was granted among its
    /// Envoys by what they kept. Returns the buckets whose answers came from the slot that
    /// was ending (renewed again at its end), with the latest end they told.
    fn assign_renewals(
        &self,
        state: &mut State,
        turn: Instant,
        counted: Vec<(Renewal, Counted)>,
        outgoing: &mut HashMap<u64, Outgoing>,
    ) -> Option<(Instant, HashSet<String>)> {
        let mut early = HashSet::new();
        let mut ending = None;
        for (renewal, counted) in counted {
            let Some(bucket) = state.buckets.get_mut(&renewal.key) else {
                continue;
            };
            // Nothing could be counted: nothing is renewed, and the assignments in force run
            // out with their TTL.
            let Ok((granted, end)) = counted else {
                for part in &renewal.parts {
                    if let Some(envoy) = bucket.envoys.get_mut(&part.stream) {
                        envoy.share = 0;
                    }
                }
                continue;
            };
            match end {
                Some(end) if end < turn + self.tuning.period / 2 => {
                    early.insert(renewal.key);
                    ending = Some(ending.map_or(end, |latest: Instant| latest.max(end)));
                    continue;
                }
                Some(end) => self.set_slot_end(end),
                None => {}
            }
            bucket.demand_reported = true;
            self.hand_out(bucket, &renewal, granted, outgoing);
        }
        ending.map(|ending| (ending, early))
    }

    /// Splits `granted` among a renewal's Envoys in proportion to what they kept, and tells
    /// each its share; an Envoy not assigned yet gets its first assignment with growth.
    fn hand_out(
        &self,
        bucket: &mut Bucket,
        renewal: &Renewal,
        granted: u64,
        outgoing: &mut HashMap<u64, Outgoing>,
    ) {
        let weights: Vec<f64> = renewal.keep.iter().map(|&units| units as f64).collect();
        let shares = share::split(granted, &weights, &renewal.keep);
        for (part, share) in renewal.parts.iter().zip(shares) {
            let Some(envoy) = bucket.envoys.get_mut(&part.stream) else {
                continue;
            };
            if share == 0 && !envoy.assigned {
                // Not assigned yet: its first assignment comes with growth.
                envoy.share = 0;
                continue;
            }
            let action = self.assign(envoy, &bucket.name, &renewal.shared, share);
            outgoing
                .entry(part.stream)
                .or_default()
                .push((part.stream, action));
        }
    }
}
