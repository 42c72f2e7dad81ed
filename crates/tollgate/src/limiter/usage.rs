//! Settling what an admitted request was charged at what its response said it used.

use super::{Limiter, Settlement};
use crate::error::Error;
use crate::policy::{DecidedBy, Evaluation, Role};
use crate::store::Store;
use crate::usage::Usage;

impl<S: Store> Limiter<S> {
    /// Settles the limits of each policy in `usage` at the figure its response reported: the
    /// estimate charged up front is topped up, unconditionally (the work is done), or the
    /// difference refunded. Policies without a figure keep their estimate.
    pub async fn settle_usage(&self, evaluation: &Evaluation, usage: &Usage) -> Result<(), Error> {
        let mut settlement = Settlement::default();
        // Each policy's usage is counted once, however many limits it settles.
        let mut counted: Vec<&str> = Vec::new();
        for charge in evaluation.charges.iter().filter(|c| c.role == Role::Limit) {
            if let Some(actual) = usage.of(&charge.policy) {
                if !counted.contains(&charge.policy.as_ref()) {
                    counted.push(&charge.policy);
                    #[cfg(feature = "metrics")]
                    self.inner.metrics.record_usage(&charge.policy, actual);
                }
                settlement.push(
                    &charge.key,
                    &charge.limit,
                    charge.cost,
                    actual,
                    evaluation.at,
                );
            }
        }
        if settlement.changes.is_empty() {
            return Ok(());
        }
        // What the fallback limiter took, it settles.
        if evaluation.decided_by == DecidedBy::Local {
            return Ok(self
                .inner
                .local
                .adjust(&settlement.changes, &settlement.adjustments, None)
                .await?);
        }
        self.adjust(&settlement.changes, &settlement.adjustments)
            .await
    }
}
