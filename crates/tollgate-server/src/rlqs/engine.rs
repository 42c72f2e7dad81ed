//! The assignment engine: Envoys subscribe to buckets by reporting their usage; for each bucket
//! that shares a limit, the limit is split among the Envoys reporting it, weighted by their
//! demand, and every share is counted in the store before it is assigned, so that several
//! servers on one store never assign more than the limit together.
//!
//! Time runs in slots of `period`, the windows of the store's share counters (so every server
//! on one store sees the same slots, on the store's clock). At each turn of a slot every share
//! is renewed, no larger than it was, and counted in the new slot; an assignment lives until
//! the end of its slot and `overlap` more, so that Envoy holds one while the next is on its way.
//! A share grows, and a new Envoy gets its first, only once `2 x overlap` of the slot has
//! passed: by then every assignment of the last slot has expired, so the new slot's counter
//! holds every share that can still be in force. Hence the sum of the shares in force at any
//! moment is within the limit, as long as an assignment reaches Envoy within `overlap`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tollgate::{AnyStore, Check, Limiter, Micros, Store, Verdict};
use tonic::Status;

use super::bucket::{BucketName, Shared, Target};
use super::share;
use super::stats::{QuotaStats, StatCounters};
use super::tuning::QuotaTuning;
use crate::rls::Rls;
use crate::rls::proto::quota::RateLimitQuotaResponse;
use crate::rls::proto::quota::rate_limit_quota_response::BucketAction;
use crate::rls::proto::quota::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use crate::rls::proto::types::RateLimitStrategy;
use crate::rls::proto::types::rate_limit_strategy::{BlanketRule, Strategy};

/// The most usage reports one message may carry.
pub const MAX_REPORTS_PER_MESSAGE: usize = 1_000;
/// Messages queued for one stream; a stream that falls further behind is closed.
pub(crate) const STREAM_QUEUE: usize = 64;
/// How long after the estimated end of a slot its turn is taken, lest it be taken early where
/// a store's clock runs a little behind another's.
const TURN_MARGIN: Duration = Duration::from_millis(50);
/// How often a slot's shares are grown when nothing wakes the engine earlier.
const GROWTH_TICK: Duration = Duration::from_millis(100);
/// How long a growth pass woken by a subscription waits for others to come with it.
const GROWTH_GATHER: Duration = Duration::from_millis(20);
/// Store calls under way at once in a pass.
const CONCURRENT_STORE_CALLS: usize = 64;

/// What a stream's messages are sent on.
pub(crate) type Outbox = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// The rate limit quota service.
#[derive(Debug)]
pub struct Rlqs {
    limiter: Limiter<AnyStore>,
    pub(super) rls: Arc<Rls>,
    pub(super) tuning: QuotaTuning,
    state: Mutex<State>,
    /// When the store's current slot ends, as last told by a store answer.
    slot_end: Mutex<Instant>,
    pub(super) wake: Notify,
    pub(super) next_stream: AtomicU64,
    pub(super) counters: StatCounters,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) streams: HashMap<u64, Stream>,
    pub(super) buckets: HashMap<String, Bucket>,
}

#[derive(Debug)]
pub(super) struct Stream {
    /// Who holds it.
    pub(super) client: super::clients::ClientId,
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
    fn parts(&self, shared: &Shared) -> Vec<Part> {
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
struct Part {
    stream: u64,
    client: super::clients::ClientId,
    share: u64,
    want: u64,
    demand: f64,
}

/// What a growth pass got for a bucket.
struct Growth {
    granted: u64,
    exhausted: bool,
    total_demand: u64,
    /// What each Envoy lacked, in part order.
    deficits: Vec<u64>,
}

/// Each Envoy's target: this server's fair part of the limit (by its demand against every
/// server's), split fairly among its clients (see [`share::by_client`]), none above its want.
fn targets(shared: &Shared, parts: &[Part], own: u64, total: u64) -> Vec<u64> {
    let fair = share::fair(shared.quota, own, total);
    let wants: Vec<u64> = parts.iter().map(|part| part.want).collect();
    split_by_client(fair, parts, &wants)
}

/// `total` split among `parts` by [`share::by_client`], none above its cap in `caps`.
fn split_by_client(total: u64, parts: &[Part], caps: &[u64]) -> Vec<u64> {
    let clients: Vec<super::clients::ClientId> = parts.iter().map(|part| part.client).collect();
    let demands: Vec<f64> = parts.iter().map(|part| part.demand).collect();
    share::by_client(total, &clients, &demands, caps)
}

/// One Envoy's part of a bucket.
#[derive(Debug)]
pub(super) struct Envoy {
    /// The client whose stream it is.
    pub(super) client: super::clients::ClientId,
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

impl Rlqs {
    /// A service assigning the limits of `rls`'s configuration from `limiter`'s store.
    pub fn new(
        limiter: Limiter<AnyStore>,
        rls: Arc<Rls>,
        tuning: QuotaTuning,
    ) -> Result<Self, String> {
        tuning.validate()?;
        let slot_end = next_boundary(crate::store::store_now(limiter.store()), tuning.period);
        Ok(Self {
            limiter,
            rls,
            tuning,
            state: Mutex::default(),
            slot_end: Mutex::new(slot_end),
            wake: Notify::new(),
            next_stream: AtomicU64::new(1),
            counters: StatCounters::default(),
        })
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; carry on with it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An assignment's time to live: to the end of the slot and the overlap, in whole seconds
    /// rounded down, since Envoy reads no more of it (it drops the fraction).
    pub(super) fn ttl(&self) -> Duration {
        let ttl = self.slot_end().saturating_duration_since(Instant::now()) + self.tuning.overlap;
        Duration::from_secs(ttl.as_secs())
    }

    fn slot_end(&self) -> Instant {
        *self
            .slot_end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_slot_end(&self, end: Instant) {
        *self
            .slot_end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = end;
    }

    /// What the service holds and has done.
    pub fn stats(&self) -> QuotaStats {
        let state = self.state();
        let mut stats = self.counters.snapshot();
        stats.streams = state.streams.len() as u64;
        stats.buckets = state.buckets.len() as u64;
        for bucket in state.buckets.values() {
            stats.envoys += bucket.envoys.len() as u64;
            if let Target::Share(shared) = &bucket.target {
                let assigned: u64 = bucket.envoys.values().map(|e| e.share).sum();
                let demand: f64 = bucket.envoys.values().map(|e| e.demand).sum();
                stats.assigned_ratio_sum += assigned as f64 / shared.quota.max(1) as f64;
                stats.demand_ratio_sum += demand / shared.quota.max(1) as f64;
                stats.shared_buckets += 1;
            }
        }
        stats
    }

    /// Assigns quota until the task is dropped: a turn at every slot, growth in between.
    ///
    /// It starts in the slot under way, as if it had just turned: whatever other servers
    /// assigned in the last slot has run out once the hold-off has passed.
    pub async fn run(self: Arc<Self>) {
        let mut turn = self.slot_end().checked_sub(self.tuning.period);
        loop {
            if let Some(turn) = turn {
                tokio::time::sleep_until(turn + self.tuning.overlap * 2).await;
            }
            // Growth stops an overlap before the end, lest a count land in the next slot.
            let mut first = true;
            while let Some(stop) = self.slot_end().checked_sub(self.tuning.overlap)
                && Instant::now() < stop
            {
                self.grow(first).await;
                first = false;
                let next = (Instant::now() + GROWTH_TICK).min(stop);
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = self.wake.notified() => {
                        // Subscriptions in a burst are served by one pass.
                        tokio::time::sleep(GROWTH_GATHER).await;
                    }
                }
            }
            self.survey().await;
            let end = self.slot_end();
            tokio::time::sleep_until(end + TURN_MARGIN).await;
            let now = Instant::now();
            // The slot this turn starts, until the store's answers tell it more exactly.
            let mut next = end + self.tuning.period;
            while next <= now {
                next += self.tuning.period;
            }
            self.set_slot_end(next);
            if let Some((retry, early)) = self.renew(now, None).await {
                // Some buckets' answers came from the slot that was ending (their store's
                // clock is behind): those are renewed once more, at its end.
                tokio::time::sleep_until(retry + TURN_MARGIN).await;
                let _ = self.renew(now, Some(&early)).await;
            }
            turn = Some(now);
        }
    }

    /// The turn of a slot (at `turn`): idle and unconfigured buckets are abandoned; every
    /// share is renewed no larger than it was, nor than its part of this server's fair part of
    /// the limit, and counted in the new slot. With `only`, just those buckets are renewed.
    /// Returns the buckets whose answers came from the slot that was ending, with its end.
    async fn renew(
        &self,
        turn: Instant,
        only: Option<&HashSet<String>>,
    ) -> Option<(Instant, HashSet<String>)> {
        let config = self.rls.config();
        let mut outgoing: HashMap<u64, Outgoing> = HashMap::new();
        let mut work = Vec::new();
        {
            let mut state = self.state();
            let state = &mut *state;
            let mut gone = Vec::new();
            for (key, bucket) in &mut state.buckets {
                if only.is_some_and(|only| !only.contains(key)) {
                    continue;
                }
                bucket.exhausted = false;
                bucket.demand_reported = false;
                let current =
                    Target::resolve(&config, &bucket.domain, &bucket.name, self.tuning.period);
                let unchanged = current.as_ref().is_some_and(|(target, counter)| {
                    *target == bucket.target && *counter == bucket.counter
                });
                let abandoned: Vec<u64> = if unchanged {
                    bucket
                        .envoys
                        .iter()
                        .filter(|(_, envoy)| {
                            turn.duration_since(envoy.last_active) >= self.tuning.idle
                        })
                        .map(|(stream, _)| *stream)
                        .collect()
                } else {
                    bucket.envoys.keys().copied().collect()
                };
                for stream in abandoned {
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
                    Target::Share(shared) => {
                        let parts = bucket.parts(shared);
                        let own = demand_units(&parts, shared);
                        let targets = targets(shared, &parts, own, bucket.total_demand);
                        let keep: Vec<u64> = parts
                            .iter()
                            .zip(targets)
                            .map(|(part, target)| part.share.min(target))
                            .collect();
                        let counter = bucket.counter.clone();
                        work.push((key.clone(), counter, Arc::clone(shared), parts, keep, own));
                    }
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
        }
        let renewed: Vec<_> = futures_util::stream::iter(work.into_iter().map(
            |(key, counter, shared, parts, keep, own)| async move {
                // At least one unit of demand, so that the answer tells when the slot ends.
                let units = keep.iter().sum();
                let counted = self.count(&counter, &shared, units, own.max(1)).await;
                (key, shared, parts, keep, counted)
            },
        ))
        .buffer_unordered(CONCURRENT_STORE_CALLS)
        .collect()
        .await;
        let mut early = HashSet::new();
        let mut ending = None;
        let mut state = self.state();
        for (key, shared, parts, keep, counted) in renewed {
            let Some(bucket) = state.buckets.get_mut(&key) else {
                continue;
            };
            // Nothing could be counted: nothing is renewed, and the assignments in force run
            // out with their TTL.
            let Ok((granted, end)) = counted else {
                for part in &parts {
                    if let Some(envoy) = bucket.envoys.get_mut(&part.stream) {
                        envoy.share = 0;
                    }
                }
                continue;
            };
            match end {
                Some(end) if end < turn + self.tuning.period / 2 => {
                    early.insert(key);
                    ending = Some(ending.map_or(end, |latest: Instant| latest.max(end)));
                    continue;
                }
                Some(end) => self.set_slot_end(end),
                None => {}
            }
            bucket.demand_reported = true;
            let weights: Vec<f64> = keep.iter().map(|&units| units as f64).collect();
            let shares = share::split(granted, &weights, &keep);
            for (part, share) in parts.iter().zip(shares) {
                let Some(envoy) = bucket.envoys.get_mut(&part.stream) else {
                    continue;
                };
                if share == 0 && !envoy.assigned {
                    // Not assigned yet: its first assignment comes with growth.
                    envoy.share = 0;
                    continue;
                }
                let action = self.assign(envoy, &bucket.name, &shared, share);
                outgoing
                    .entry(part.stream)
                    .or_default()
                    .push((part.stream, action));
            }
        }
        self.send(&mut state, outgoing);
        // A second early answer is not retried again: those buckets wait for the next turn.
        ending
            .filter(|_| only.is_none())
            .map(|ending| (ending, early))
    }

    /// Grows shares from what the slot has left: on the slot's first pass, toward each
    /// Envoy's part of this server's fair part of the limit (by the demand every server
    /// reported), after that toward its want from whatever is left.
    async fn grow(&self, first: bool) {
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
    async fn survey(&self) {
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

    /// Gives `envoy` a share of `share` units: the action that tells it.
    fn assign(
        &self,
        envoy: &mut Envoy,
        name: &BucketName,
        shared: &Shared,
        share: u64,
    ) -> BucketAction {
        envoy.share = share;
        envoy.assigned = true;
        assignment(name, strategy_of(shared, share), self.ttl())
    }

    /// Counts `units` of shares in the current slot, or what is left of them, with this
    /// server's `demand` (unless `demand` is zero). Returns the units granted and when the
    /// store's slot ends, if its answer told.
    async fn count(
        &self,
        key: &str,
        shared: &Shared,
        units: u64,
        demand: u64,
    ) -> Result<(u64, Option<Instant>), ()> {
        let (verdict, end) = self.charge(key, shared, units, demand).await?;
        if verdict.is_admitted() {
            return Ok((units, end));
        }
        // Others took part of the slot: take what is left of it.
        let rest = verdict.decisions()[0].remaining().min(units);
        let (verdict, end) = self.charge(key, shared, rest, demand).await?;
        Ok((if verdict.is_admitted() { rest } else { 0 }, end))
    }

    /// One store call: `units` on the share counter and `demand` on the demand counter. With
    /// the answer comes when the slot ends, if a counter holds anything: a counter resets at
    /// the end of the slot, and reckoned from when the answer arrived, the end is never taken
    /// early.
    async fn charge(
        &self,
        key: &str,
        shared: &Shared,
        units: u64,
        demand: u64,
    ) -> Result<(Verdict, Option<Instant>), ()> {
        let check = Check::new(0)
            .limit_with_cost(key, &shared.shares, units)
            .limit_with_cost(key, &shared.demand, demand);
        self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        match self.limiter.store().check(&check, None).await {
            Ok(verdict) => {
                let end = verdict
                    .decisions()
                    .iter()
                    .map(|decision| decision.reset_after())
                    .find(|left| !left.is_zero())
                    .map(|left| Instant::now() + left);
                Ok((verdict, end))
            }
            Err(error) => {
                self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "the quota service could not count shares in the store");
                Err(())
            }
        }
    }

    /// Whether a growth answer came from a later slot than the one under way: what it
    /// counted is wasted rather than assigned, and the turn comes as planned.
    fn answered_by_a_later_slot(&self, end: Option<Instant>) -> bool {
        end.is_some_and(|end| end > self.slot_end() + self.tuning.period / 2)
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

    /// Sends each stream its actions in one message. A stream whose queue is full no longer
    /// reads what it is assigned: it is dropped (its shares go at the next turn).
    fn send(&self, state: &mut State, outgoing: HashMap<u64, Outgoing>) {
        let mut stuck = Vec::new();
        for (stream, actions) in outgoing {
            let Some(open) = state.streams.get(&stream) else {
                continue;
            };
            let (mut assigned, mut abandoned) = (0, 0);
            for (_, action) in &actions {
                match action.bucket_action {
                    Some(Action::AbandonAction(_)) => abandoned += 1,
                    _ => assigned += 1,
                }
            }
            let message = RateLimitQuotaResponse {
                bucket_action: actions.into_iter().map(|(_, action)| action).collect(),
            };
            if open.outbox.try_send(Ok(message)).is_err() {
                stuck.push(stream);
                continue;
            }
            self.counters
                .assignments
                .fetch_add(assigned, Ordering::Relaxed);
            self.counters
                .abandoned
                .fetch_add(abandoned, Ordering::Relaxed);
        }
        for stream in stuck {
            self.counters
                .streams_dropped
                .fetch_add(1, Ordering::Relaxed);
            super::streams::drop_stream(state, stream);
        }
    }
}

/// The next boundary of `period` after `now`: where the store's slots turn (the first store
/// answer sets it right if the clocks disagree).
fn next_boundary(now: Micros, period: Duration) -> Instant {
    let period = u64::try_from(period.as_micros()).unwrap_or(u64::MAX).max(1);
    Instant::now() + Duration::from_micros(period - now % period)
}

/// A server's demand as the demand counter takes it: in thousandths of the limit, at most a
/// thousand limits, so that no server's report can fill the counter (10 000 servers at the
/// cap take 10^10 of its 2^40) and every server's weighs alike however large the limit.
fn demand_units(parts: &[Part], shared: &Shared) -> u64 {
    let sum: f64 = parts.iter().map(|part| part.demand.max(0.0)).sum();
    let thousandths = (1_000.0 * sum / shared.quota.max(1) as f64).ceil();
    (thousandths as u64).min(1_000_000)
}

pub(super) fn blanket(target: &Target) -> Strategy {
    let rule = match target {
        Target::DenyAll => BlanketRule::DenyAll,
        _ => BlanketRule::AllowAll,
    };
    Strategy::BlanketRule(rule as i32)
}

/// A share as Envoy enforces it: a token bucket, or every request denied for a share of none.
fn strategy_of(shared: &Shared, share: u64) -> Strategy {
    if share == 0 {
        return Strategy::BlanketRule(BlanketRule::DenyAll as i32);
    }
    Strategy::TokenBucket(share::token_bucket(share, shared.period))
}

pub(super) fn assignment(name: &BucketName, strategy: Strategy, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(name.id.clone()),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: prost_types::Duration::try_from(ttl).ok(),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

pub(super) fn abandon(name: &BucketName) -> BucketAction {
    BucketAction {
        bucket_id: Some(name.id.clone()),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}
