//! The one entry point: a store, shared by every clone.

use std::sync::Arc;

use crate::algorithm::Adjustment;
use crate::check::{Check, Verdict};
use crate::error::Error;
use crate::limit::Limit;
use crate::store::{MemoryStore, Store, StoreError};

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
        check.validate()?;
        Ok(self.store.check(check, None).await?)
    }

    /// Decides one limit on one key at a cost of 1.
    pub async fn check_one(&self, key: &str, limit: &Limit) -> Result<Verdict, Error> {
        self.check(&Check::one(key, limit)).await
    }

    /// Gives back what an admitted `check` took, for a request that failed upstream. Never
    /// gives back beyond a full quota.
    pub async fn refund(&self, check: &Check<'_>) -> Result<(), Error> {
        self.adjust(check, Adjustment::Refund).await
    }

    /// Settles an admitted `check` once its real cost is known: each item is charged the
    /// difference when `actual` is above what it took, or refunded it when below. The charge is
    /// unconditional (the work is done), so a limit can go into debt and delay later requests.
    pub async fn settle(&self, check: &Check<'_>, actual: u64) -> Result<(), Error> {
        let mut charges = Check::new(0);
        let mut refunds = Check::new(0);
        for item in check.items() {
            if actual > item.cost {
                charges.push(item.key.as_ref(), item.limit, actual - item.cost);
            } else if actual < item.cost {
                refunds.push(item.key.as_ref(), item.limit, item.cost - actual);
            }
        }
        if !charges.is_empty() {
            self.adjust(&charges, Adjustment::Charge).await?;
        }
        if !refunds.is_empty() {
            self.adjust(&refunds, Adjustment::Refund).await?;
        }
        Ok(())
    }

    async fn adjust(&self, check: &Check<'_>, adjustment: Adjustment) -> Result<(), Error> {
        check.validate()?;
        self.store
            .adjust(check, adjustment, None)
            .await
            .map_err(|error: StoreError| error.into())
    }
}
