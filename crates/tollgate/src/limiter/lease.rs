//! Lease mode, for very hot keys on a shared store: a limit built with
//! [`lease(n)`](crate::LimitBuilder::lease) is charged `n` units at a time in the store, and
//! this node spends them locally, one request at a time, without a store call. Every unit a node
//! admits was first taken from the store, so all nodes together never admit more than the
//! limit. The cost is quota stranded on idle nodes: units leased but not yet spent are unavailable
//! to other nodes until they are spent, or given back when the lease is older than [`HOLD`]
//! (at the next check of that key) or by [`Limiter::return_leases`](super::Limiter::return_leases).
//! A lease given back after the rate algorithms have refilled for a while returns less than
//! was left (a refund never hands out room that was not there), so leases suit window limits and
//! short holds best.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::check::Item;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::limit::Limit;

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
    taken: Instant,
    /// The store's decision when the lease was taken, for reporting.
    decision: Decision,
}

/// What is left of a lease, to give back to the store.
#[derive(Debug, Clone)]
pub(crate) struct Unspent {
    pub(crate) key: String,
    pub(crate) limit: Limit,
    pub(crate) units: u64,
    pub(crate) taken_at: Micros,
}

/// This node's leases.
#[derive(Default)]
pub(crate) struct Leases {
    held: Mutex<HashMap<LeaseKey, Lease>>,
}

impl Leases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, Lease>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spends `cost` of the lease of (key, limit) if one is held, fresh and large enough: the
    /// decision to report and the store time it stands for. A lease too old or too small is
    /// taken out, its rest into `unspent`.
    pub(crate) fn spend(
        &self,
        key: &str,
        limit: &Limit,
        cost: u64,
        now: Instant,
        unspent: &mut Vec<Unspent>,
    ) -> Option<(Decision, Micros)> {
        let lookup = LeaseKey {
            key: key.to_owned(),
            limit: limit.clone(),
        };
        let mut held = self.lock();
        let lease = held.get_mut(&lookup)?;
        let elapsed = now.saturating_duration_since(lease.taken);
        if elapsed < HOLD && lease.left >= cost {
            lease.left -= cost;
            let micros = Micros::try_from(elapsed.as_micros()).unwrap_or(Micros::MAX);
            let seen = lease.decision;
            let decision = Decision::new(
                true,
                seen.limit(),
                seen.remaining().saturating_add(lease.left),
                seen.reset_after_micros().saturating_sub(micros),
                Some(0),
                0,
            );
            return Some((decision, lease.taken_at.saturating_add(micros)));
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

    /// Puts `cost` back into a lease a check spent from but did not use (it was denied).
    pub(crate) fn unspend(&self, key: &str, limit: &Limit, cost: u64) {
        let lookup = LeaseKey {
            key: key.to_owned(),
            limit: limit.clone(),
        };
        if let Some(lease) = self.lock().get_mut(&lookup) {
            lease.left = lease.left.saturating_add(cost);
        }
    }

    /// Records a lease of `units` just taken from the store by `item`, whose cost went to the
    /// request that took it. A lease already held for the same (key, limit) (a race between
    /// two requests) is returned for giving back.
    pub(crate) fn hold(
        &self,
        item: &Item<'_>,
        units: u64,
        decision: Decision,
        taken_at: Micros,
        now: Instant,
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

    /// Takes every lease out, for giving back.
    pub(crate) fn drain(&self) -> Vec<Unspent> {
        self.lock()
            .drain()
            .map(|(key, lease)| Unspent {
                key: key.key,
                limit: key.limit,
                units: lease.left,
                taken_at: lease.taken_at,
            })
            .collect()
    }
}
