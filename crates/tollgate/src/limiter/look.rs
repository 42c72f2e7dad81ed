//! Reading state without counting: what a customer has used of each limit, what an operator
//! inspects. A look charges nothing, takes no concurrency slot and no idempotency record,
//! earns no penalty, moves no metric, logs no refusal, and goes to the store itself rather
//! than the over-limit cache, whose answer is a denial, not a state.

use super::Limiter;
use super::requests::{Planning, check_of};
use crate::error::Error;
use crate::policy::{Evaluation, Request, Role, Selection};
use crate::store::Store;
use tollgate_core::check::{Check, Verdict};

impl<S: Store> Limiter<S> {
    /// The state of the request's keys under the policies `scope` names: each limit's
    /// decision for a request of cost 0, and a refusal if a penalty box holds the client.
    pub async fn look_in(
        &self,
        scope: Selection<'_>,
        request: &Request<'_>,
    ) -> Result<Evaluation, Error> {
        let (policies, mut plan) = match self.planned_in(scope, request, Some(0))? {
            Planning::Planned(policies, plan) => (policies, plan),
            Planning::Decided(evaluation) => return Ok(evaluation),
        };
        plan.enforced.retain(|item| {
            matches!(
                item.role,
                Role::Limit | Role::Concurrency | Role::PenaltyBox
            )
        });
        let check = check_of(&plan.enforced);
        let verdict = self.store().check(&check, None).await?;
        let mut evaluation = self.interpret(&policies, &plan.enforced, &verdict);
        evaluation.matched = plan.matched;
        Ok(evaluation)
    }

    /// The state of `check`'s limits, each for a cost of 0, whatever costs `check` carries.
    pub async fn look(&self, check: &Check<'_>) -> Result<Verdict, Error> {
        let mut look = Check::new(0);
        for item in check.items() {
            look.push(item.key.as_ref(), item.limit, 0);
        }
        Ok(self.store().check(&look, None).await?)
    }
}
