//! Units going back to the global store: expired ones dropped, idle accounts' units refunded by
//! a sweeper task every horizon, and everything at shutdown.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use smallvec::SmallVec;

use super::super::account::Chunk;
use super::{AccountKey, GlobalLeases};
use crate::algorithm::Adjustment;
use crate::store::Store;
use tollgate_core::check::Check;
use tollgate_core::clock::{Micros, duration_to_micros};

impl GlobalLeases {
    /// Drops expired units (stranded) and gives back the units of accounts not used for
    /// the idle time; forgets accounts that hold nothing and have been idle ten times as long.
    pub async fn sweep(&self) {
        let now = self.clock.now();
        let idle = duration_to_micros(self.tuning.idle);
        let mut back = Vec::new();
        {
            let mut accounts = self.lock();
            accounts.retain(|key, account| {
                self.counters.stranded(account.expire(now));
                let unused = now.saturating_sub(account.last_used);
                if unused > idle && account.fetching.is_none() && account.held() > 0 {
                    back.push((key.clone(), account.drain()));
                }
                account.fetching.is_some()
                    || account.held() > 0
                    || unused <= idle.saturating_mul(10)
                    || account.denied_until.is_some_and(|until| until > now)
            });
        }
        self.give_back(back).await;
    }

    /// Gives every unit this node holds back to the global store (at shutdown).
    pub async fn return_all(&self) {
        let now = self.clock.now();
        let back: Vec<_> = self
            .lock()
            .iter_mut()
            .map(|(key, account)| {
                self.counters.stranded(account.expire(now));
                (key.clone(), account.drain())
            })
            .collect();
        self.give_back(back).await;
    }

    /// Refunds chunks to the global store. A failure strands them until their window or
    /// refill restores them, so it is counted, not reported.
    async fn give_back(&self, back: Vec<(AccountKey, SmallVec<[Chunk; 2]>)>) {
        let parts: Vec<(&AccountKey, u64, Micros)> = back
            .iter()
            .flat_map(|(key, chunks)| {
                chunks
                    .iter()
                    .filter(|chunk| chunk.units > 0)
                    .map(move |chunk| (key, chunk.units, chunk.taken_at))
            })
            .collect();
        for batch in parts.chunks(tollgate_core::check::MAX_ITEMS) {
            let mut check = Check::new(0);
            let mut refunds: SmallVec<[Adjustment; 4]> = SmallVec::new();
            let mut units = 0;
            for (key, amount, taken_at) in batch {
                check.push(key.key.as_str(), &key.limit, *amount);
                refunds.push(Adjustment::Refund {
                    charged_at: *taken_at,
                });
                units += amount;
            }
            self.counters.called();
            match self.global.adjust(&check, &refunds, None).await {
                Ok(()) => self.counters.returned(units),
                Err(_) => self.counters.stranded(units),
            }
        }
    }

    /// Starts the task that sweeps every horizon, once, on the current tokio runtime (none
    /// without one: then [`sweep`](Self::sweep) is the caller's to run).
    pub(super) fn start_sweeper(self: &Arc<Self>) {
        if self.sweeper.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.sweeper.store(false, Ordering::Release);
            return;
        };
        let leases: Weak<Self> = Arc::downgrade(self);
        let every = self.tuning.horizon.max(Duration::from_millis(10));
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(leases) = leases.upgrade() else {
                    return;
                };
                leases.sweep().await;
            }
        });
    }
}
