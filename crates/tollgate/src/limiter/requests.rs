//! Deciding a request against the policies: plan, ask the store, and read the verdict by what
//! each item is for.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{OptionFuture, join};

use super::Limiter;
use smallvec::SmallVec;

use crate::algorithm::Adjustment;
use crate::error::Error;
use crate::observer::{Observer, Refused};
use crate::policy::partition_of;
use crate::policy::{
    Action, Applied, Charge, ChargeSet, DecidedBy, Evaluation, FailureMode, Gate, Plan, Planned,
    Policies, Reason, Receipt, Refusal, Request, Role, Selection,
};
use crate::refusal::seconds_to_wait;
use crate::store::{Store, StoreError};
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::Micros;
use tollgate_core::clock::Stopwatch;

/// A request planned under the policies, or already decided by its gate.
pub(super) enum Planning {
    /// Decided without the store: allow and deny lists, malformed requests, no policies.
    Decided(Evaluation),
    /// The policies in force and the plan to ask the store about.
    Planned(Arc<Policies>, Plan),
}

pub(super) fn check_of(items: &[Planned]) -> Check<'_> {
    let mut check = Check::new(0);
    for item in items {
        check.push(item.key.as_str(), &item.limit, item.cost);
    }
    check
}

/// Whether any item of `role` was denied.
fn denied<'v>(
    items: &'v [Planned],
    verdict: &'v Verdict,
    role: Role,
) -> impl Iterator<Item = (&'v Planned, &'v crate::Decision)> {
    items
        .iter()
        .zip(verdict.decisions())
        .filter(move |(item, decision)| item.role == role && !decision.allowed())
}

impl<S: Store> Limiter<S> {
    /// Decides a request by the policies in force: allow and deny lists, every matching policy's
    /// limits all-or-nothing (shadow policies apart, never blocking), penalty boxes, idempotent
    /// retries, concurrency slots and soft thresholds. Without policies everything is allowed.
    ///
    /// An error means the store could not decide; what then happens is the caller's failure
    /// policy.
    pub async fn evaluate(&self, request: &Request<'_>) -> Result<Evaluation, Error> {
        self.evaluate_in(Selection::Matching, request, None).await
    }

    /// Like [`evaluate`](Self::evaluate), within `scope` (every matching policy, or one named
    /// policy), with `cost` replacing the policies' costs when given.
    pub async fn evaluate_in(
        &self,
        scope: Selection<'_>,
        request: &Request<'_>,
        cost: Option<u64>,
    ) -> Result<Evaluation, Error> {
        let watch = Stopwatch::start();
        let result = self.decide_request(scope, request, cost).await;
        if let Ok(evaluation) = &result {
            self.inner
                .observers
                .evaluated(request, evaluation, watch.elapsed());
        }
        result
    }

    pub(super) async fn decide_request(
        &self,
        scope: Selection<'_>,
        request: &Request<'_>,
        cost: Option<u64>,
    ) -> Result<Evaluation, Error> {
        let (policies, plan) = match self.planned_in(scope, request, cost)? {
            Planning::Planned(policies, plan) => (policies, plan),
            Planning::Decided(evaluation) => return Ok(evaluation),
        };
        if plan.enforced.is_empty() && plan.shadow.is_empty() {
            return Ok(Evaluation::plain(Action::Allow, plan.matched));
        }
        let enforced_check = check_of(&plan.enforced);
        let shadow_check = check_of(&plan.shadow);
        // Decided in process when the store can (the memory store, as for `check`); otherwise
        // the store's futures are boxed, so that this one does not carry their kilobytes.
        let decided_now = plan
            .shadow
            .is_empty()
            .then(|| self.inner.store.check_now(&enforced_check))
            .flatten();
        let (enforced, shadow) = match decided_now {
            Some(enforced) => (enforced, None),
            None => {
                // Shadow checks only report, so they skip a store that is resting, and its
                // guards.
                let shadow_future: OptionFuture<_> = (!plan.shadow.is_empty()
                    && !self.breaker().is_open())
                .then(|| self.store().check(&shadow_check, None))
                .into();
                Box::pin(join(
                    self.inner.store.check(&enforced_check, None),
                    shadow_future,
                ))
                .await
            }
        };
        let verdict = match enforced {
            Ok(verdict) => verdict,
            Err(error) if error.is_store_failure() => {
                let mut evaluation =
                    Box::pin(self.fail_over(&policies, &plan.enforced, &enforced_check, &error))
                        .await?;
                evaluation.matched = plan.matched;
                return Ok(evaluation);
            }
            Err(error) => return Err(error.into()),
        };
        let mut evaluation = self.interpret(&policies, &plan.enforced, &verdict);
        evaluation.matched = plan.matched;
        // A shadow policy that cannot reach its store only loses its report.
        if let Some(Ok(shadow)) = shadow {
            evaluation.shadow_denied =
                policy_names(&policies, denied(&plan.shadow, &shadow, Role::Limit));
        }
        self.note_denials(&policies, &plan.enforced, &verdict);
        // A denial from the over-limit cache is the same denial again: it is not another
        // violation, and it costs no store call.
        // Nor is a request refused by a running block: only what the limits themselves refuse
        // counts, or a client would climb the levels by knocking on a block it already serves.
        if verdict.is_replayed() {
            evaluation.decided_by = DecidedBy::Cache;
        } else if !evaluation.violated.is_empty()
            && denied(&plan.enforced, &verdict, Role::PenaltyBox)
                .next()
                .is_none()
            && let Some(block) = Box::pin(self.punish(&policies, &plan.enforced, &verdict)).await?
            && let Action::Refuse(refusal) = &mut evaluation.action
        {
            // The block this refusal earned starts now: a client that waits as told finds it over.
            refusal.retry_after = refusal.retry_after.map(|wait| wait.max(block));
        }
        Ok(evaluation)
    }

    /// The policies in force and the request's plan under `scope` (with `cost` replacing the
    /// policies' costs when given), or the evaluation its gate already decides (allow and deny
    /// lists, malformed paths, a body without a length).
    pub(super) fn planned_in(
        &self,
        scope: Selection<'_>,
        request: &Request<'_>,
        cost: Option<u64>,
    ) -> Result<Planning, Error> {
        let Some(policies) = self.policies() else {
            return Ok(Planning::Decided(Evaluation::plain(
                Action::Allow,
                Vec::new(),
            )));
        };
        let Some(mut plan) = self.plan(&policies, scope, request) else {
            return Err(Error::UnknownPolicy(scope_name(scope)));
        };
        if let Some(cost) = cost {
            plan.override_cost(cost);
        }
        let refusal = |reason, detail: String| Refusal {
            reason,
            retry_after: None,
            detail,
        };
        let refused = match plan.gate {
            Gate::Bypass => {
                return Ok(Planning::Decided(Evaluation::plain(
                    Action::Allow,
                    plan.matched,
                )));
            }
            Gate::Refuse(status) => refusal(
                Reason::DenyListed {
                    as_over_limit: status == 429,
                },
                "the client is on the deny list".to_owned(),
            ),
            Gate::AmbiguousPath(ambiguous) => refusal(Reason::BadRequest, ambiguous.to_string()),
            Gate::NoClientAddress(index) => {
                let name = policies.policies[index].name.to_string();
                return Err(Error::NoClientAddress(name));
            }
            Gate::LengthRequired => refusal(
                Reason::LengthRequired,
                "a policy counts this request's body bytes: send it with a Content-Length"
                    .to_owned(),
            ),
            Gate::Proceed => return Ok(Planning::Planned(policies, plan)),
        };
        Ok(Planning::Decided(Evaluation::plain(
            Action::Refuse(refused),
            plan.matched,
        )))
    }

    /// Tells the observers of each limit that refused.
    fn note_denials(&self, policies: &Policies, items: &[Planned], verdict: &Verdict) {
        if verdict.is_admitted() {
            return;
        }
        for (item, decision) in items.iter().zip(verdict.decisions()) {
            if decision.allowed() || item.role == Role::Idempotency {
                continue;
            }
            self.inner.observers.refused(&Refused {
                policy: &policies.policies[item.policy].name,
                label: &item.label,
                limit: &item.limit,
                key: &item.key,
                decision,
                at: verdict.at(),
            });
        }
    }

    /// Answers by the policies' failure modes when the store cannot decide: the strictest
    /// among the matching policies wins (`deny`, then `local`, then `allow`).
    async fn fail_over(
        &self,
        policies: &Policies,
        items: &[Planned],
        check: &Check<'_>,
        error: &StoreError,
    ) -> Result<Evaluation, Error> {
        let mode = items
            .iter()
            .map(|item| policies.policies[item.policy].on_store_error)
            .max_by_key(|mode| match mode {
                FailureMode::Allow => 0,
                FailureMode::Local => 1,
                FailureMode::Deny => 2,
            })
            .unwrap_or_default();
        Ok(match mode {
            FailureMode::Allow => {
                let mut evaluation = Evaluation::plain(Action::Allow, Vec::new());
                evaluation.decided_by = DecidedBy::FailOpen;
                evaluation
            }
            FailureMode::Deny => {
                let refusal = Refusal {
                    reason: Reason::Unavailable,
                    retry_after: Some(self.breaker().cooldown()),
                    detail: format!("the rate limiter cannot decide ({error}) and fails closed"),
                };
                let mut evaluation = Evaluation::plain(Action::Refuse(refusal), Vec::new());
                evaluation.decided_by = DecidedBy::FailClosed;
                evaluation
            }
            FailureMode::Local => {
                // Each node decides alone, so each takes its share of a divided limit.
                let shares: Vec<Planned> = items
                    .iter()
                    .map(|item| Planned {
                        limit: item
                            .limit
                            .divided(policies.policies[item.policy].local_nodes),
                        ..item.clone()
                    })
                    .collect();
                let local_check = check_of(&shares);
                debug_assert_eq!(local_check.items().len(), check.items().len());
                let verdict = self.inner.local.check(&local_check, None).await?;
                let mut evaluation = self.interpret(policies, &shares, &verdict);
                evaluation.decided_by = DecidedBy::Local;
                evaluation
            }
        })
    }

    pub(super) fn interpret(
        &self,
        policies: &Policies,
        items: &[Planned],
        verdict: &Verdict,
    ) -> Evaluation {
        let applied: Vec<Applied> = items
            .iter()
            .zip(verdict.decisions())
            .filter(|(item, _)| matches!(item.role, Role::Limit | Role::Concurrency))
            .map(|(item, decision)| Applied {
                policy: Arc::clone(&policies.policies[item.policy].name),
                label: Arc::clone(&item.label),
                limit: item.limit.clone(),
                unit: item.unit,
                decision: *decision,
                partition: policies.policies[item.policy]
                    .partition_key
                    .then(|| partition_of(&item.key)),
            })
            .collect();
        let binding = Verdict::from_decisions(verdict.at(), applied.iter().map(|a| a.decision))
            .binding_index();
        let mut evaluation = Evaluation::plain(Action::Allow, Vec::new());
        evaluation.at = verdict.at();
        evaluation.binding = binding;
        let boxed = denied(items, verdict, Role::PenaltyBox).next();
        let retried = denied(items, verdict, Role::Idempotency).next().is_some();
        let refusals: Vec<(&Planned, &crate::Decision)> = denied(items, verdict, Role::Limit)
            .chain(denied(items, verdict, Role::Concurrency))
            .chain(denied(items, verdict, Role::IdempotencyKeys))
            .collect();
        evaluation.idempotent = items
            .iter()
            .find(|item| item.role == Role::Idempotency)
            .map(|item| crate::policy::Idempotent {
                key: item.key.clone(),
                replay: retried,
            });
        evaluation.action = if let Some((item, decision)) = boxed {
            evaluation.violated = vec![Arc::clone(&policies.policies[item.policy].name)];
            // Never sooner than the limits would admit: a client that obeys a block must not
            // come back to a limit that still refuses, and be punished for it.
            let limits_wait = refusals
                .iter()
                .filter_map(|(_, decision)| decision.retry_after())
                .max();
            Action::Refuse(Refusal {
                reason: Reason::Blocked,
                retry_after: decision.retry_after().max(limits_wait),
                detail: format!(
                    "blocked by policy {:?} after repeated violations",
                    &*policies.policies[item.policy].name
                ),
            })
        } else if retried {
            // The record of this request denies: a replay of a request that was admitted and
            // paid for. Nothing was counted for it, and it is answered as the first was.
            Action::Allow
        } else if !refusals.is_empty() {
            evaluation.violated = policy_names(policies, refusals.iter().copied());
            // The binding denial, by the one rule a verdict has for it.
            let retry_after =
                Verdict::from_decisions(verdict.at(), refusals.iter().map(|(_, d)| **d))
                    .retry_after();
            Action::Refuse(Refusal {
                reason: Reason::OverLimit,
                retry_after,
                detail: refusal_detail(&refusals, retry_after),
            })
        } else {
            let (delay, near_limit) = admitted_delay(policies, items, verdict);
            evaluation.near_limit = near_limit;
            if delay.is_zero() {
                Action::Allow
            } else {
                Action::Delay(delay)
            }
        };
        evaluation.applied = applied;
        if verdict.is_admitted() {
            evaluation.charges = charges(policies, items, |index| verdict.item_at(index));
        }
        evaluation
    }

    /// Gives back what an admitted request took when its response has a status its policies
    /// refund on (an upstream failure, say): its limits and its idempotency record, so that a
    /// retry is charged again.
    pub async fn refund_for_status(
        &self,
        evaluation: &Evaluation,
        status: u16,
    ) -> Result<(), Error> {
        let refunded: Vec<&Arc<str>> = evaluation
            .charges
            .iter()
            .filter(|charge| charge.refunds_on(status))
            .map(|c| &c.policy)
            .collect();
        self.give_back(evaluation, |charge| {
            matches!(
                charge.role,
                Role::Limit | Role::Idempotency | Role::IdempotencyKeys
            ) && refunded.contains(&&charge.policy)
        })
        .await
    }

    /// The charges `request` takes under the policies in force (within `scope`, at `cost`
    /// when given), as an admitted evaluation of it holds them: for callers that keep no state
    /// between a check and its refund (the check API), to give a [`Receipt`] back to. Plans
    /// only: nothing is asked of the store.
    pub fn charges_for(
        &self,
        scope: Selection<'_>,
        request: &Request<'_>,
        cost: Option<u64>,
    ) -> Result<ChargeSet, Error> {
        let Some(policies) = self.policies() else {
            return Ok(ChargeSet::default());
        };
        let Some(mut plan) = self.plan(&policies, scope, request) else {
            return Err(Error::UnknownPolicy(scope_name(scope)));
        };
        if let Some(cost) = cost {
            plan.override_cost(cost);
        }
        if plan.gate != Gate::Proceed {
            return Ok(ChargeSet::default());
        }
        Ok(ChargeSet {
            charges: charges(&policies, &plan.enforced, |_| 0),
        })
    }

    /// Gives back what `receipt` says was taken from `set`'s limits and idempotency records
    /// (so that a retry is charged again), each at its own cost and time.
    pub async fn refund_charges(&self, set: &ChargeSet, receipt: &Receipt) -> Result<(), Error> {
        self.give_back_receipt(set, receipt, None, |role| {
            matches!(
                role,
                Role::Limit | Role::Idempotency | Role::IdempotencyKeys
            )
        })
        .await
    }

    /// Settles what `receipt` says was taken from `set`'s limits at the real cost `actual`:
    /// the difference is charged or refunded, as [`Limiter::settle`] does.
    pub async fn settle_charges(
        &self,
        set: &ChargeSet,
        receipt: &Receipt,
        actual: u64,
    ) -> Result<(), Error> {
        self.give_back_receipt(set, receipt, Some(actual), |role| role == Role::Limit)
            .await
    }

    /// Releases the concurrency slots `receipt` says were taken from `set`.
    pub async fn release_charges(&self, set: &ChargeSet, receipt: &Receipt) -> Result<(), Error> {
        self.give_back_receipt(set, receipt, None, |role| role == Role::Concurrency)
            .await
    }

    /// Refunds (`actual` of `None`) or settles the charges of `set` whose role `which` takes,
    /// each at the cost and time `receipt` gives it.
    async fn give_back_receipt(
        &self,
        set: &ChargeSet,
        receipt: &Receipt,
        actual: Option<u64>,
        which: impl Fn(Role) -> bool,
    ) -> Result<(), Error> {
        if set.charges.len() != receipt.items().len() {
            return Err(Error::ChargesChanged {
                charged: receipt.items().len(),
                now: set.charges.len(),
            });
        }
        let mut check = Check::new(0);
        let mut times: SmallVec<[Micros; 4]> = SmallVec::new();
        for (charge, &(cost, at)) in set.charges.iter().zip(receipt.items()) {
            if which(charge.role) && cost > 0 {
                check.push(charge.key.as_str(), &charge.limit, cost);
                times.push(at);
            }
        }
        if check.is_empty() {
            return Ok(());
        }
        match actual {
            None => self.refund_each(&check, &times).await,
            Some(actual) => self.settle_each(&check, &times, actual).await,
        }
    }

    /// Gives back everything an admitted request took, for a request that never went ahead
    /// (cancelled while delayed, or refused after all).
    pub async fn cancel(&self, evaluation: &Evaluation) -> Result<(), Error> {
        self.give_back(evaluation, |_| true).await
    }

    /// Releases the concurrency slots a request holds, when its response completes or its
    /// connection drops.
    pub async fn release(&self, evaluation: &Evaluation) -> Result<(), Error> {
        self.give_back(evaluation, |charge| charge.role == Role::Concurrency)
            .await
    }

    async fn give_back(
        &self,
        evaluation: &Evaluation,
        which: impl Fn(&Charge) -> bool,
    ) -> Result<(), Error> {
        let mut check = Check::new(0);
        let mut times: SmallVec<[Micros; 4]> = SmallVec::new();
        for charge in evaluation.charges.iter().filter(|c| which(c)) {
            check.push(charge.key.as_str(), &charge.limit, charge.cost);
            times.push(charge.at);
        }
        if check.is_empty() {
            return Ok(());
        }
        // What the fallback limiter took, it gives back.
        if evaluation.decided_by == DecidedBy::Local {
            let refunds: SmallVec<[Adjustment; 4]> = times
                .iter()
                .map(|&charged_at| Adjustment::Refund { charged_at })
                .collect();
            return Ok(self.inner.local.adjust(&check, &refunds, None).await?);
        }
        self.refund_each(&check, &times).await
    }
}

/// How long an admitted request waits: its limits' queueing delay, or a soft limit's tarpit
/// when it is past the soft threshold (which also marks it near the limit).
fn admitted_delay(policies: &Policies, items: &[Planned], verdict: &Verdict) -> (Duration, bool) {
    let mut delay = verdict.delay();
    let mut near_limit = false;
    for (item, decision) in items.iter().zip(verdict.decisions()) {
        let Some(soft) = policies.policies[item.policy].soft_limit.as_ref() else {
            continue;
        };
        if item.role != Role::Limit || decision.limit() == 0 {
            continue;
        }
        let used = 1.0 - decision.remaining() as f64 / decision.limit() as f64;
        if used >= soft.at {
            near_limit = true;
            delay = delay.max(soft.tarpit.unwrap_or_default());
        }
    }
    (delay, near_limit)
}

/// What an admitted request took, to give back on a refund, a cancel or its completion; item
/// `i` was charged at `at(i)`.
fn charges(policies: &Policies, items: &[Planned], at: impl Fn(usize) -> Micros) -> Vec<Charge> {
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.cost > 0)
        .map(|(index, item)| Charge {
            at: at(index),
            key: item.key.clone(),
            limit: item.limit.clone(),
            cost: item.cost,
            role: item.role,
            policy: Arc::clone(&policies.policies[item.policy].name),
            refund_on: Arc::clone(&policies.policies[item.policy].refund_on),
            usage: policies.policies[item.policy].usage.clone(),
        })
        .collect()
}

fn scope_name(scope: Selection<'_>) -> String {
    match scope {
        Selection::Matching => String::new(),
        Selection::Policy(name) => name.to_owned(),
    }
}

fn policy_names<'p>(
    policies: &Policies,
    items: impl Iterator<Item = (&'p Planned, &'p crate::Decision)>,
) -> Vec<Arc<str>> {
    let mut names: Vec<Arc<str>> = Vec::new();
    for (item, _) in items {
        let name = &policies.policies[item.policy].name;
        if !names.contains(name) {
            names.push(Arc::clone(name));
        }
    }
    names
}

fn refusal_detail(
    refusals: &[(&Planned, &crate::Decision)],
    retry_after: Option<Duration>,
) -> String {
    let limits: Vec<String> = refusals
        .iter()
        .map(|(item, _)| format!("{} ({})", item.label, item.limit.quota()))
        .collect();
    match retry_after {
        Some(wait) => format!(
            "quota exceeded: {}; retry in {} s",
            limits.join(", "),
            seconds_to_wait(wait)
        ),
        None => format!(
            "quota exceeded: {}; this request costs more than the limit ever admits",
            limits.join(", ")
        ),
    }
}
