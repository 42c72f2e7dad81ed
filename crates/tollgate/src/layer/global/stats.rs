//! What a node's leases on global limits have done, counted as they do it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Units and calls, since the node started. Every unit leased is, at any moment, spent,
/// returned, stranded or held: `leased = spent + returned + stranded + held` (units in a check
/// still being decided aside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GlobalStats {
    /// Units taken from the global store.
    pub leased: u64,
    /// Units admitted here from leases.
    pub spent: u64,
    /// Units given back to the global store unspent.
    pub returned: u64,
    /// Units that expired unspent (a window ended, the hold passed) or could not be given
    /// back: quota no node used.
    pub stranded: u64,
    /// Units held now.
    pub held: u64,
    /// (key, limit) pairs this node keeps an account of.
    pub accounts: u64,
    /// Calls to the global store: leases, refunds, returns.
    pub store_calls: u64,
    /// Checks that waited for the global store (nothing held, nothing known).
    pub checks_waited: u64,
    /// Checks denied here while a denial of the global store lasted.
    pub checks_denied_here: u64,
}

/// The running counts behind [`GlobalStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    leased: AtomicU64,
    spent: AtomicU64,
    returned: AtomicU64,
    stranded: AtomicU64,
    calls: AtomicU64,
    waited: AtomicU64,
    denied_here: AtomicU64,
}

impl Counters {
    pub(super) fn leased(&self, units: u64) {
        self.leased.fetch_add(units, Ordering::Relaxed);
    }

    pub(super) fn spent(&self, units: u64) {
        self.spent.fetch_add(units, Ordering::Relaxed);
    }

    pub(super) fn returned(&self, units: u64) {
        self.returned.fetch_add(units, Ordering::Relaxed);
    }

    pub(super) fn stranded(&self, units: u64) {
        if units > 0 {
            self.stranded.fetch_add(units, Ordering::Relaxed);
        }
    }

    pub(super) fn called(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn waited(&self) {
        self.waited.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn denied_here(&self) {
        self.denied_here.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self, held: u64, accounts: u64) -> GlobalStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        GlobalStats {
            leased: read(&self.leased),
            spent: read(&self.spent),
            returned: read(&self.returned),
            stranded: read(&self.stranded),
            held,
            accounts,
            store_calls: read(&self.calls),
            checks_waited: read(&self.waited),
            checks_denied_here: read(&self.denied_here),
        }
    }
}
