//! The one entry point: a store, shared by every clone.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::algorithm::Adjustment;
use crate::check::{Check, Verdict};
use crate::error::Error;
use crate::limit::Limit;
use crate::store::{MemoryStore, Store};

/// Decides checks against a store. Cheap to clone: every clone shares the same store, so one
/// limiter per process enforces one set of limits however many handlers hold it.
pub struct Limiter<S = MemoryStore> {
    store: Arc<S>,
}

impl<S> Clone for Limiter<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
        }
    }
}

impl Limiter<MemoryStore> {
    /// A limiter on a new in-process store with the system clock.
    pub fn memory() -> Self {
        Self::new(MemoryStore::new())
    }
}

impl<S: Store> Limiter<S> {
    /// A limiter on `store`.
    pub fn new(store: S) -> Self {
        Self {
            store: Arc::new(store),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Decides a check all-or-nothing.
    pub async fn check(&self, check: &Check<'_>) -> Result<Verdict, Error> {
        Ok(self.store.check(check, None).await?)
    }

    /// Decides one limit on one key at a cost of 1.
    pub async fn check_one(&self, key: &str, limit: &Limit) -> Result<Verdict, Error> {
        self.check(&Check::one(key, limit)).await
    }

    /// Gives back what an admitted `check` took, for a request that failed upstream. `verdict`
    /// is the check's verdict; its time says which charge to give back and how much of it still
    /// counts: nothing once its window has rolled over, and for the rate algorithms the charge
    /// less what the bucket has refilled since (all of it when refunded at once). A denied check
    /// took nothing, and its refund does nothing.
    pub async fn refund(&self, check: &Check<'_>, verdict: &Verdict) -> Result<(), Error> {
        if verdict.is_denied() {
            return Ok(());
        }
        let refund = Adjustment::Refund {
            charged_at: verdict.at(),
        };
        let refunds: SmallVec<[Adjustment; 4]> = check.items().iter().map(|_| refund).collect();
        self.adjust(check, &refunds).await
    }

    /// Settles an admitted `check` once its real cost is known: each item is charged the
    /// difference when `actual` is above what it took, or refunded it when below. The charge is
    /// unconditional (the work is done), so a limit can go into debt and delay later requests.
    pub async fn settle(
        &self,
        check: &Check<'_>,
        verdict: &Verdict,
        actual: u64,
    ) -> Result<(), Error> {
        if verdict.is_denied() {
            return Ok(());
        }
        let mut changes = Check::new(0);
        let mut adjustments: SmallVec<[Adjustment; 4]> = SmallVec::new();
        let refund = Adjustment::Refund {
            charged_at: verdict.at(),
        };
        for item in check.items() {
            if actual > item.cost {
                changes.push(item.key.as_ref(), item.limit, actual - item.cost);
                adjustments.push(Adjustment::Charge);
            } else if actual < item.cost {
                changes.push(item.key.as_ref(), item.limit, item.cost - actual);
                adjustments.push(refund);
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        self.adjust(&changes, &adjustments).await
    }

    async fn adjust(&self, check: &Check<'_>, adjustments: &[Adjustment]) -> Result<(), Error> {
        Ok(self.store.adjust(check, adjustments, None).await?)
    }
}
