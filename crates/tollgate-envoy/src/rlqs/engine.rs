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

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tollgate::{AnyStore, Limiter, Micros};
use tonic::Status;

use super::bucket::Target;
use super::state::State;
use super::stats::{QuotaStats, StatCounters};
use super::tuning::QuotaTuning;
use crate::rls::Rls;
use crate::rls::proto::quota::RateLimitQuotaResponse;

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
pub(super) const CONCURRENT_STORE_CALLS: usize = 64;

/// What a stream's messages are sent on.
pub(crate) type Outbox = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// The rate limit quota service.
#[derive(Debug)]
pub struct Rlqs {
    pub(super) limiter: Limiter<AnyStore>,
    pub(super) rls: Arc<Rls>,
    pub(super) tuning: QuotaTuning,
    state: Mutex<State>,
    /// When the store's current slot ends, as last told by a store answer.
    slot_end: Mutex<Instant>,
    pub(super) wake: Notify,
    pub(super) next_stream: AtomicU64,
    pub(super) counters: StatCounters,
}

impl Rlqs {
    /// A service assigning the limits of `rls`'s configuration from `limiter`'s store.
    pub fn new(
        limiter: Limiter<AnyStore>,
        rls: Arc<Rls>,
        tuning: QuotaTuning,
    ) -> Result<Self, String> {
        tuning.validate()?;
        let slot_end = next_boundary(limiter.now(), tuning.period);
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

    pub(super) fn slot_end(&self) -> Instant {
        *self
            .slot_end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn set_slot_end(&self, end: Instant) {
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
}

/// The next boundary of `period` after `now`: where the store's slots turn (the first store
/// answer sets it right if the clocks disagree).
fn next_boundary(now: Micros, period: Duration) -> Instant {
    let period = u64::try_from(period.as_micros()).unwrap_or(u64::MAX).max(1);
    Instant::now() + Duration::from_micros(period - now % period)
}
