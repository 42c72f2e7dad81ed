//! Lease mode, a store layer for very hot keys on a shared store: a limit built with
//! [`lease(n)`](crate::LimitBuilder::lease) is charged `n` units at a time in the store, and
//! this node spends them locally, one request at a time, without a store call. Every unit a node
//! admits was first taken from the store, so all nodes together never admit more than the
//! limit. The cost is quota stranded on idle nodes: units leased but not yet spent are unavailable
//! to other nodes until they are spent, or given back when the lease is older than [`HOLD`]
//! (at the next check of that key) or by [`Leasing::return_leases`]. A lease given back after
//! the rate algorithms have refilled for a while returns less than was left (a refund never
//! hands out room that was not there), so leases suit window limits and short holds best.
//! Checks without leased limits pass straight through. Time comes from the injected clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smallvec::SmallVec;

use crate::algorithm::Adjustment;
use crate::store::{Store, StoreError};
use tollgate_core::check::{Check, Item, Verdict};
use tollgate_core::clock::{Clock, Micros, duration_to_micros};
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

/// How long a lease is spent from before its rest goes back to the store.
pub(crate) const HOLD: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LeaseKey {
    key: String,
    limit: Limit,
}

/// Units of one (key, limit) taken from the store and not spent yet.
#[derive(Debug, Clone)]
struct Lease {
    left: u64,
    /// The store's time of the lease, for giving back what is left.
    taken_at: Micros,
    /// This node's clock when the lease was taken, for its age.
    taken: Micros,
    /// The store's decision when the lease was taken, for reporting.
    decision: Decision,
}

/// What is left of a lease, to give back to the store.
#[derive(Debug, Clone)]
struct Unspent {
    key: String,
    limit: Limit,
    units: u64,
    taken_at: Micros,
}

/// What each item of a check got from a held lease: its decision and the store time it
/// stands for.
type Local = SmallVec<[Option<(Decision, Micros)>; 4]>;

/// A store whose leased limits are spent from leases held by this node.
pub(crate) struct Leasing<S> {
    inner: S,
    held: Mutex<HashMap<LeaseKey, Lease>>,
    clock: Arc<dyn Clock>,
}

impl<S> std::fmt::Debug for Leasing<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.lock().map_or(0, |held| held.len());
        f.debug_struct("Leasing")
            .field("held", &held)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Leasing<S> {
    /// `inner`, with leased limits spent from leases, aged by `clock`.
    pub(crate) fn new(inner: S, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            held: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// The store the leases are taken from.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, Lease>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives every lease this node holds back to the store (at shutdown, say), so that no
    /// quota stays stranded here.
    pub(crate) async fn return_leases(&self) {
        let unspent: Vec<Unspent> = self
            .lock()
            .drain()
            .map(|(key, lease)| Unspent {
                key: key.key,
                limit: key.limit,
                units: lease.left,
                taken_at: lease.taken_at,
            })
            .collect();
        self.give_back(unspent).await;
    }

    /// Spends `cost` of the lease of (key, limit) if one is held, fresh and large enough. A
    /// lease too old or too small is taken out, its rest into `unspent`.
    fn spend(
        &self,
        item: &Item<'_>,
        now: Micros,
        unspent: &mut Vec<Unspent>,
    ) -> Option<(Decision, Micros)> {
        let lookup = LeaseKey {
            key: item.key.to_string(),
            limit: item.limit.clone(),
        };
        let mut held = self.lock();
        let lease = held.get_mut(&lookup)?;
        let elapsed = now.saturating_sub(lease.taken);
        if elapsed < duration_to_micros(HOLD) && lease.left >= item.cost {
            lease.left -= item.cost;
            let seen = lease.decision;
            let decision = Decision::new(
                true,
                seen.limit(),
                seen.remaining().saturating_add(lease.left),
                seen.reset_after_micros().saturating_sub(elapsed),
                Some(0),
                0,
            );
            return Some((decision, lease.taken_at.saturating_add(elapsed)));
        }
        if let Some(lease) = held.remove(&lookup) {
            unspent.push(Unspent {
                key: lookup.key,
                limit: lookup.limit,
                units: lease.left,
                taken_at: lease.taken_at,
            });
        }
        None
    }

    /// Puts back what a check spent from leases but did not use (it was denied).
    fn unspend(&self, items: &[Item<'_>], local: &Local) {
        let mut held = self.lock();
        for (item, spent) in items.iter().zip(local) {
            if spent.is_none() {
                continue;
            }
            let lookup = LeaseKey {
                key: item.key.to_string(),
                limit: item.limit.clone(),
            };
            if let Some(lease) = held.get_mut(&lookup) {
                lease.left = lease.left.saturating_add(item.cost);
            }
        }
    }

    /// Records a lease of `units` just taken from the store by `item`, whose cost went to the
    /// request that took it. A lease already held for the same (key, limit) (a race between
    /// two requests) is returned for giving back.
    fn hold(
        &self,
        item: &Item<'_>,
        units: u64,
        decision: Decision,
        taken_at: Micros,
        now: Micros,
    ) -> Option<Unspent> {
        let lease = Lease {
            left: units.saturating_sub(item.cost),
            taken_at,
            taken: now,
            decision,
        };
        let key = LeaseKey {
            key: item.key.to_string(),
            limit: item.limit.clone(),
        };
        let replaced = self.lock().insert(key.clone(), lease)?;
        Some(Unspent {
            key: key.key,
            limit: key.limit,
            units: replaced.left,
            taken_at: replaced.taken_at,
        })
    }

    /// Gives the unspent units of leases back to the store. A failure only strands them until
    /// their window or refill restores them, so it is nobody's error.
    async fn give_back(&self, unspent: Vec<Unspent>) {
        let unspent: Vec<Unspent> = unspent.into_iter().filter(|u| u.units > 0).collect();
        if unspent.is_empty() {
            return;
        }
        let mut check = Check::new(0);
        let mut refunds: SmallVec<[Adjustment; 4]> = SmallVec::new();
        for lease in &unspent {
            check.push(lease.key.as_str(), &lease.limit, lease.units);
            refunds.push(Adjustment::Refund {
                charged_at: lease.taken_at,
            });
        }
        let _ = self.inner.adjust(&check, &refunds, None).await;
    }

    /// A check with leased limits: items a held lease covers are decided here; the rest go to
    /// the store, taking a new lease where one is due (or just the request's cost when a whole
    /// lease no longer fits). Units spent locally are put back when the check is denied.
    async fn leased_check(&self, check: &Check<'_>) -> Result<Verdict, StoreError> {
        let now = self.clock.now();
        let items = check.items();
        let mut unspent = Vec::new();
        let mut local: Local = items
            .iter()
            .map(|item| {
                item.limit
                    .lease()
                    .and_then(|_| self.spend(item, now, &mut unspent))
            })
            .collect();
        self.give_back(unspent).await;
        let pending: SmallVec<[usize; 4]> =
            (0..items.len()).filter(|&i| local[i].is_none()).collect();
        if pending.is_empty() {
            let at = local.iter().flatten().map(|(_, at)| *at).max().unwrap_or(0);
            return Ok(Verdict::from_decisions(
                at,
                local.iter().flatten().map(|(decision, _)| *decision),
            ));
        }
        let request = |whole_leases: bool| {
            let mut asked = Check::new(0);
            for &i in &pending {
                let item = &items[i];
                let cost = match item.limit.lease() {
                    Some(units) if whole_leases => units.max(item.cost),
                    _ => item.cost,
                };
                asked.push(item.key.as_ref(), item.limit, cost);
            }
            asked
        };
        let mut leasing = true;
        let mut answer = self.inner.check(&request(true), None).await;
        if matches!(&answer, Ok(verdict) if verdict.is_denied()) {
            // A whole lease no longer fits: ask for this request alone.
            leasing = false;
            answer = self.inner.check(&request(false), None).await;
        }
        let verdict = match answer {
            Ok(verdict) => verdict,
            Err(error) => {
                self.unspend(items, &local);
                return Err(error);
            }
        };
        if verdict.is_denied() {
            self.unspend(items, &local);
        } else if leasing {
            let mut replaced = Vec::new();
            for (&i, decision) in pending.iter().zip(verdict.decisions()) {
                let item = &items[i];
                if let Some(units) = item.limit.lease() {
                    let taken = units.max(item.cost);
                    replaced.extend(self.hold(item, taken, *decision, verdict.at(), now));
                }
            }
            self.give_back(replaced).await;
        }
        for (&i, decision) in pending.iter().zip(verdict.decisions()) {
            local[i] = Some((*decision, verdict.at()));
        }
        let combined = Verdict::from_decisions(
            verdict.at(),
            local.iter().flatten().map(|(decision, _)| *decision),
        );
        Ok(if verdict.is_replayed() {
            combined.replayed()
        } else {
            combined
        })
    }
}

/// Whether any limit of `check` is leased.
fn is_leased(check: &Check<'_>) -> bool {
    check
        .items()
        .iter()
        .any(|item| item.limit.lease().is_some())
}

impl<S: Store> Store for Leasing<S> {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        if is_leased(check) && at.is_none() {
            return self.leased_check(check).await;
        }
        self.inner.check(check, at).await
    }

    /// Only a check without leased limits: a lease may have to be taken or given back.
    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        if is_leased(check) {
            return None;
        }
        self.inner.check_now(check)
    }

    pass_to_inner!(counters);

    pass_to_inner!(writes);

    pass_to_inner!(describe);
}
