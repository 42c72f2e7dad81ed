//! What an operator does by hand (`limiter.admin()`): look at a key's state under a policy
//! without counting, reset it, lift its penalty.

use super::Limiter;
use crate::error::Error;
use crate::policy::{Evaluation, Planned, Policies, Request, Role, Selection};
use crate::store::Store;
use tollgate_core::check::Check;

/// A limiter's operator tools: see [`Limiter::admin`].
#[derive(Debug)]
pub struct Admin<'l, S> {
    limiter: &'l Limiter<S>,
}

impl<S: Store> Limiter<S> {
    /// What an operator does by hand to one key: inspect, reset, lift a penalty.
    pub fn admin(&self) -> Admin<'_, S> {
        Admin { limiter: self }
    }
}

impl<S: Store> Admin<'_, S> {
    /// The state of the request's key under `policy`, as [`Limiter::look_in`] reads it.
    pub async fn inspect(&self, policy: &str, request: &Request<'_>) -> Result<Evaluation, Error> {
        self.limiter
            .look_in(Selection::Policy(policy), request)
            .await
    }

    /// The policies and the items `policy` plans for `request`.
    fn planned(
        &self,
        policy: &str,
        request: &Request<'_>,
    ) -> Result<(std::sync::Arc<Policies>, Vec<Planned>), Error> {
        let policies = self
            .limiter
            .policies()
            .ok_or_else(|| Error::UnknownPolicy(policy.to_owned()))?;
        let plan = self
            .limiter
            .plan(&policies, Selection::Policy(policy), request)
            .ok_or_else(|| Error::UnknownPolicy(policy.to_owned()))?;
        let items = plan.enforced.into_iter().chain(plan.shadow).collect();
        Ok((policies, items))
    }

    /// Forgets the state of the request's key under `policy`'s limits (and concurrency slots),
    /// as if it had never been seen; returns how many states were forgotten.
    pub async fn reset_key(&self, policy: &str, request: &Request<'_>) -> Result<usize, Error> {
        let (_, items) = self.planned(policy, request)?;
        let mut check = Check::new(0);
        for item in items
            .iter()
            .filter(|item| matches!(item.role, Role::Limit | Role::Concurrency))
        {
            check.push(item.key.as_str(), &item.limit, 0);
        }
        self.forget(&check).await?;
        Ok(check.items().len())
    }

    /// Lifts the request's key out of `policy`'s penalty box and forgets its violations and
    /// strikes, so escalation starts again from the first block. `false` when the policy has
    /// no penalty.
    pub async fn lift_penalty(&self, policy: &str, request: &Request<'_>) -> Result<bool, Error> {
        let (policies, items) = self.planned(policy, request)?;
        let Some(item) = items.iter().find(|item| item.role == Role::PenaltyBox) else {
            return Ok(false);
        };
        let Some(penalty) = &policies.policies[item.policy].penalty else {
            return Ok(false);
        };
        let levels: Vec<String> = (0..=penalty.blocks.len())
            .map(|level| super::penalty::strike_key(&item.key, level as u64))
            .collect();
        let mut check = Check::new(0)
            .limit(item.key.as_str(), &penalty.block_box)
            .limit(item.key.as_str(), &penalty.strikes);
        for level in &levels {
            check.push(level.as_str(), &penalty.violations, 0);
        }
        self.forget(&check).await?;
        Ok(true)
    }

    /// Forgets `check`'s states in the store and whatever the over-limit cache holds for them.
    async fn forget(&self, check: &Check<'_>) -> Result<(), Error> {
        if check.is_empty() {
            return Ok(());
        }
        Ok(self.limiter.inner.store.forget(check).await?)
    }
}
