//! Shares counted in the store: one call charges a bucket's share and demand counters, and its
//! answer tells when the store's slot ends.

use std::sync::atomic::Ordering;

use tokio::time::Instant;
use tollgate::{Check, Verdict};

use super::bucket::Shared;
use super::engine::Rlqs;

/// What metrics and observers call the quota service's share counts (by the rule's state name
/// as the limit).
const SHARES: &str = "rate_limit_quota_shares";

impl Rlqs {
    /// Counts `units` of shares in the current slot, or what is left of them, with this
    /// server's `demand` (unless `demand` is zero). Returns the units granted and when the
    /// store's slot ends, if its answer told.
    pub(super) async fn count(
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
    pub(super) async fn charge(
        &self,
        key: &str,
        shared: &Shared,
        units: u64,
        demand: u64,
    ) -> Result<(Verdict, Option<Instant>), ()> {
        // Exact: what is left is read from a denial, which a remembered one would not tell.
        let check = Check::new(0)
            .limit_with_cost(key, &shared.shares, units)
            .limit_with_cost(key, &shared.demand, demand)
            .labelled(SHARES, &shared.rule)
            .exact();
        self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        match self.limiter.check(&check).await {
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
    pub(super) fn answered_by_a_later_slot(&self, end: Option<Instant>) -> bool {
        end.is_some_and(|end| end > self.slot_end() + self.tuning.period / 2)
    }
}
