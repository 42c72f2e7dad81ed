//! Escalating penalties, kept in the store as ordinary limits so every node shares them:
//!
//! - the *box* is a GCRA limit of one per millisecond with a burst as long as the longest block;
//!   a block charges it that burst plus the block's length, and a check looks at it without
//!   counting, so it denies exactly until the block is over;
//! - *violations* is a sliding log of `after` per `within`, counted per strike level, so each
//!   level needs fresh violations;
//! - *strikes* is a sliding log of one entry per block over the decay period: how many blocks
//!   there were lately picks the next block's length, and a quiet period lets it fall back.

use std::time::Duration;

use super::Limiter;
use crate::algorithm::Adjustment;
use crate::error::Error;
use crate::policy::{Penalty, Planned, Policies, Role};
use crate::store::Store;
use tollgate_core::check::{Check, Verdict};

/// The key a key's violations are counted under at one strike level.
pub(super) fn strike_key(key: &str, level: u64) -> String {
    format!("{key}|strike:{level}")
}

impl<S: Store> Limiter<S> {
    /// Counts a violation for every policy whose own limits denied, and blocks the keys that
    /// have now earned it. Returns the longest block placed, if any.
    pub(super) async fn punish(
        &self,
        policies: &Policies,
        items: &[Planned],
        verdict: &Verdict,
    ) -> Result<Option<Duration>, Error> {
        let mut longest: Option<Duration> = None;
        let mut punished: Vec<(usize, &str)> = Vec::new();
        for (item, decision) in items.iter().zip(verdict.decisions()) {
            if item.role != Role::Limit
                || decision.allowed()
                || punished.contains(&(item.policy, item.key.as_str()))
            {
                continue;
            }
            punished.push((item.policy, &item.key));
            if let Some(penalty) = &policies.policies[item.policy].penalty
                && let Some(block) = self.escalate(penalty, &item.key).await?
            {
                longest = longest.max(Some(block));
            }
        }
        Ok(longest)
    }

    /// Counts one violation of `key`; blocks it, and returns for how long, when that violation
    /// completes a level.
    async fn escalate(&self, penalty: &Penalty, key: &str) -> Result<Option<Duration>, Error> {
        // The store itself: penalty state needs no guard, and must not be cached.
        let store = self.store();
        let strikes = store
            .check(&Check::new(0).limit(key, &penalty.strikes), None)
            .await?;
        let used = strikes.decisions().first().map_or(0, |d| {
            penalty.strikes.capacity().saturating_sub(d.remaining())
        });
        let level_key = strike_key(key, used);
        let violation = store
            .check(&Check::one(level_key.as_str(), &penalty.violations), None)
            .await?;
        let reached = violation
            .decisions()
            .first()
            .is_some_and(|d| d.allowed() && d.remaining() == 0);
        if !reached {
            return Ok(None);
        }
        let level = usize::try_from(used)
            .unwrap_or(usize::MAX)
            .min(penalty.blocks.len() - 1);
        let block = penalty.blocks[level];
        let block_ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX);
        let units = penalty.block_box.capacity().saturating_add(block_ms);
        store
            .adjust(
                &Check::new(units).limit(key, &penalty.block_box),
                &[Adjustment::Charge],
                None,
            )
            .await?;
        store
            .adjust(
                &Check::one(key, &penalty.strikes),
                &[Adjustment::Charge],
                None,
            )
            .await?;
        Ok(Some(block))
    }
}
