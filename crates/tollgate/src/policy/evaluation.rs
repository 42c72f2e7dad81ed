//! What the limiter answers for a request: the action to take, the limits to report in headers,
//! and what to give back if the request fails or completes.

use std::sync::Arc;
use std::time::Duration;

use super::model::{StatusRange, UsageConfig};
use super::plan::Role;
use crate::headers::{Answer, Fields, HeaderFamily, LimitView, QuotaUnit, decision_fields};
use crate::problem::problem_json;
pub use crate::refusal::{Reason, Refusal};
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::Micros;
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Let it through.
    Allow,
    /// Hold it this long, then let it through.
    Delay(Duration),
    /// Refuse it.
    Refuse(Refusal),
}

/// What decided a request: the store, or a failure mode standing in while it cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecidedBy {
    /// The store (or no limit applied).
    #[default]
    Store,
    /// The local over-limit cache: the store denied the same check moments ago, until later.
    Cache,
    /// The in-process fallback limiter (`on_store_error: local`).
    Local,
    /// Let through because the store could not decide (`on_store_error: allow`).
    FailOpen,
    /// Refused because the store could not decide (`on_store_error: deny`).
    FailClosed,
}

impl DecidedBy {
    /// A short name for logs, metrics and answers.
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Store => "store",
            DecidedBy::Cache => "cache",
            DecidedBy::Local => "local",
            DecidedBy::FailOpen => "fail_open",
            DecidedBy::FailClosed => "fail_closed",
        }
    }
}

/// One enforced limit's decision, as headers report it.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The policy it belongs to.
    pub policy: Arc<str>,
    /// The name shown to clients.
    pub label: Arc<str>,
    /// The limit.
    pub limit: Limit,
    /// What its quota counts.
    pub unit: QuotaUnit,
    /// Its decision.
    pub decision: Decision,
    /// The partition key reported as `pk`, when its policy says `partition_key: true`.
    pub partition: Option<Arc<[u8]>>,
}

/// Something a request took that may have to be given back.
#[derive(Debug, Clone)]
pub(crate) struct Charge {
    pub(crate) key: String,
    pub(crate) limit: Limit,
    pub(crate) cost: u64,
    pub(crate) role: Role,
    pub(crate) policy: Arc<str>,
    pub(crate) refund_on: Arc<[StatusRange]>,
    /// Where the response reports the real cost, for a policy that settles by usage.
    pub(crate) usage: Option<Arc<UsageConfig>>,
    /// The store's time of the charge (each item its own, where a store decided the items of
    /// one check by different clocks).
    pub(crate) at: Micros,
}

/// What identifies `charges` (each one's role, key and limit's state name), fed to `sink`, so
/// that a token can bind them: a receipt is given back only to the charges it was taken from.
fn identify(charges: &[Charge], mut sink: impl FnMut(&[u8])) {
    for charge in charges {
        sink(&[charge.role as u8]);
        sink(charge.key.as_bytes());
        sink(&[0]);
        sink(charge.limit.state_name().as_bytes());
        sink(&[0]);
    }
}

/// What an admitted request took, charge by charge (the cost and the store's time of each),
/// as a charge token carries it: a refund or settlement later gives back what was taken, read
/// from the receipt, never from the policies in force by then.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Receipt {
    items: Vec<(u64, Micros)>,
}

impl Receipt {
    /// A receipt of (cost, time) per charge, in the order of the request's charges.
    pub fn new(items: impl IntoIterator<Item = (u64, Micros)>) -> Self {
        Self {
            items: items.into_iter().collect(),
        }
    }

    /// (cost, time) per charge.
    pub fn items(&self) -> &[(u64, Micros)] {
        &self.items
    }

    /// What an admitted `check` took: each item's cost, at its time in `verdict`.
    pub fn of_check(check: &Check<'_>, verdict: &Verdict) -> Self {
        Self::new(
            check
                .items()
                .iter()
                .enumerate()
                .map(|(index, item)| (item.cost, verdict.item_at(index))),
        )
    }
}

/// The charges a request takes under the policies in force, as an admitted evaluation holds
/// them: what a [`Receipt`] is given back to.
#[derive(Debug, Clone, Default)]
pub struct ChargeSet {
    pub(crate) charges: Vec<Charge>,
}

impl ChargeSet {
    /// The charges of a check of limits given directly (no policy): one per item.
    pub fn of_check(check: &Check<'_>) -> Self {
        let none: Arc<str> = Arc::from("");
        let refund_on: Arc<[StatusRange]> = Arc::from([]);
        Self {
            charges: check
                .items()
                .iter()
                .map(|item| Charge {
                    key: item.key.to_string(),
                    limit: item.limit.clone(),
                    cost: item.cost,
                    role: Role::Limit,
                    policy: Arc::clone(&none),
                    refund_on: Arc::clone(&refund_on),
                    usage: None,
                    at: 0,
                })
                .collect(),
        }
    }

    /// Feeds what identifies each charge (its role, key and limit's state name) to `sink`.
    pub fn identify(&self, sink: impl FnMut(&[u8])) {
        identify(&self.charges, sink);
    }

    /// How many charges.
    pub fn len(&self) -> usize {
        self.charges.len()
    }

    /// Whether the request takes nothing.
    pub fn is_empty(&self) -> bool {
        self.charges.is_empty()
    }
}

impl Charge {
    /// Whether a response with `status` gives this charge back: a limit's charge, by its
    /// policy's `refund_on` ranges.
    pub(crate) fn refunds_on(&self, status: u16) -> bool {
        self.role == Role::Limit
            && self
                .refund_on
                .iter()
                .any(|(low, high)| (*low..=*high).contains(&status))
    }
}

/// The limiter's answer for one request.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// What to do.
    pub action: Action,
    /// Enforced limits and their decisions, for headers.
    pub applied: Vec<Applied>,
    /// The most restrictive of `applied`.
    pub binding: Option<usize>,
    /// Policies whose limits refused the request.
    pub violated: Vec<Arc<str>>,
    /// Shadow policies that would have refused it.
    pub shadow_denied: Vec<Arc<str>>,
    /// Policies that matched.
    pub matched: Vec<Arc<str>>,
    /// Whether a soft threshold was crossed.
    pub near_limit: bool,
    /// The store's time of the decision.
    pub at: Micros,
    /// What decided it.
    pub decided_by: DecidedBy,
    /// The idempotency record of a request that carried a key (and its body's digest), when
    /// it was admitted.
    pub idempotent: Option<Idempotent>,
    pub(crate) charges: Vec<Charge>,
}

/// An admitted request's idempotency record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotent {
    /// What the record is kept under: the policy's key and the request's fingerprint (its
    /// idempotency key, method, path and body digest), for a frontend that keeps the first
    /// answer to replay.
    pub key: String,
    /// A request just like it was admitted before: it was not charged, and what it gets is the
    /// first request's answer, never a fresh pass to the upstream.
    pub replay: bool,
}

impl Evaluation {
    /// An evaluation that applies nothing.
    pub(crate) fn plain(action: Action, matched: Vec<Arc<str>>) -> Self {
        Self {
            action,
            applied: Vec::new(),
            binding: None,
            violated: Vec::new(),
            shadow_denied: Vec::new(),
            matched,
            near_limit: false,
            at: 0,
            decided_by: DecidedBy::Store,
            idempotent: None,
            charges: Vec::new(),
        }
    }

    /// Whether the request may proceed (possibly after a delay).
    pub fn is_admitted(&self) -> bool {
        !matches!(self.action, Action::Refuse(_))
    }

    /// The applied limits as header views.
    pub fn views(&self) -> Vec<LimitView<'_>> {
        self.applied
            .iter()
            .map(|applied| LimitView {
                label: &applied.label,
                limit: &applied.limit,
                unit: applied.unit,
                decision: applied.decision,
                partition: applied.partition.as_deref(),
            })
            .collect()
    }

    /// Every response header field for this evaluation: the rate-limit families, and for a
    /// refusal `Retry-After` and `Cache-Control: no-store`; a near-limit request is marked.
    pub fn header_fields(&self, families: &[HeaderFamily]) -> Fields {
        let answer = match &self.action {
            Action::Refuse(refusal) => Answer::Refused {
                retry_after: refusal.retry_after,
            },
            Action::Allow | Action::Delay(_) => Answer::Admitted {
                near_limit: self.near_limit,
            },
        };
        decision_fields(families, &self.views(), self.binding, self.at, answer)
    }

    /// The `application/problem+json` body of a refusal.
    pub fn problem_body(&self) -> Option<String> {
        let Action::Refuse(refusal) = &self.action else {
            return None;
        };
        let violated: Vec<&str> = self.violated.iter().map(|name| &**name).collect();
        Some(problem_json(refusal, &violated))
    }

    /// What the request took, charge by charge, for a token that gives it back later.
    pub fn receipt(&self) -> Receipt {
        Receipt::new(self.charges.iter().map(|charge| (charge.cost, charge.at)))
    }

    /// Feeds what identifies each charge (its role, key and limit's state name) to `sink`,
    /// as [`ChargeSet::identify`] does for the same request planned again.
    pub fn identify_charges(&self, sink: impl FnMut(&[u8])) {
        identify(&self.charges, sink);
    }

    /// Whether the request took anything from its limits, which a refund could give back.
    pub fn took_from_limits(&self) -> bool {
        self.charges.iter().any(|charge| {
            matches!(
                charge.role,
                Role::Limit | Role::Idempotency | Role::IdempotencyKeys
            )
        })
    }

    /// Whether a response with `status` gives the request's cost back.
    pub fn refunds_on(&self, status: u16) -> bool {
        self.charges.iter().any(|charge| charge.refunds_on(status))
    }

    /// Whether the request holds concurrency slots to release when it completes.
    pub fn holds_slots(&self) -> bool {
        self.charges
            .iter()
            .any(|charge| charge.role == Role::Concurrency)
    }
}
