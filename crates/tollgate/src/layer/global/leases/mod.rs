//! The node's leases on global limits: units taken from the global store in advance, sized by
//! the node's demand, fetched again in the background before they run out, and given back
//! when the node stops using them. Here: the accounts and what a check gets from them; how a
//! lease is sized in `sizing`, fetched in `fetch` and given back in `returning`.

mod fetch;
mod returning;
mod sizing;
mod tuning;

use sizing::window_ending;
pub use tuning::LeaseTuning;

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::sync::Notify;

use super::account::{Account, Spent};
use super::stats::{Counters, GlobalStats};
use crate::algorithm::Adjustment;
use crate::layer::{BreakerConfig, CircuitBreaker, StoreObserver};
use crate::store::{AnyStore, Store, StoreError};
use tollgate_core::check::{Check, Item};
use tollgate_core::clock::{Clock, Micros};
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

/// The most (key, limit) accounts a node keeps; idle ones make room for new ones.
pub(crate) const MAX_ACCOUNTS: usize = 100_000;

/// The longest a check waits for another's fetch of the lease it needs before it asks itself.
const WAIT_FOR_LANDING: Duration = Duration::from_secs(1);

/// A (key, limit) pair, told apart by the key and the limit's state: limits of one state share
/// their units in the store, and so their account here. Hashing the state's digest rather than
/// the whole limit keeps a check's lookup cheap.
#[derive(Debug, Clone)]
struct AccountKey {
    key: String,
    limit: Limit,
}

impl PartialEq for AccountKey {
    fn eq(&self, other: &Self) -> bool {
        self.limit.state_id() == other.limit.state_id()
            && self.key == other.key
            && self.limit.state_name() == other.limit.state_name()
    }
}

impl Eq for AccountKey {}

impl std::hash::Hash for AccountKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.limit.state_id().hash(state);
        self.key.hash(state);
    }
}

/// A global store call's observer that records nothing: the leases count their own calls.
struct Unobserved;

impl StoreObserver for Unobserved {}

/// What a global item of a check got from this node's leases.
pub(super) enum Local {
    /// Admitted from held units (which go back if the check is denied after all).
    Spent(Decision, Spent),
    /// Denied here: the global store denied lately.
    Denied(Decision),
    /// Nothing held, nothing known: the global store must be asked now.
    Ask,
}

/// The leases of one node on the global store.
pub struct GlobalLeases {
    global: CircuitBreaker<Arc<AnyStore>>,
    accounts: Mutex<HashMap<AccountKey, Account>>,
    clock: Arc<dyn Clock>,
    tuning: LeaseTuning,
    counters: Counters,
    /// The latest round trip to the global store, smoothed, in microseconds.
    round_trip: AtomicU64,
    /// Background fetches under way.
    in_flight: AtomicUsize,
    /// The id of the last chunk leased.
    chunks: AtomicU64,
    /// Wakes checks waiting for a lease, and [`settled`](Self::settled).
    landed: Notify,
    sweeper: AtomicBool,
}

impl std::fmt::Debug for GlobalLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalLeases")
            .field("global", &self.global.kind())
            .field("tuning", &self.tuning)
            .finish_non_exhaustive()
    }
}

impl GlobalLeases {
    /// Leases on `global` (a store, or one shared with other limiters), timed by `clock`. The
    /// global store gets a circuit breaker of its own.
    pub fn new(
        global: impl Into<Arc<AnyStore>>,
        clock: Arc<dyn Clock>,
        tuning: LeaseTuning,
    ) -> Self {
        Self {
            global: CircuitBreaker::new(
                global.into(),
                BreakerConfig::default(),
                Arc::clone(&clock),
                Arc::new(Unobserved),
            ),
            accounts: Mutex::new(HashMap::new()),
            clock,
            tuning,
            counters: Counters::default(),
            round_trip: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            chunks: AtomicU64::new(0),
            landed: Notify::new(),
            sweeper: AtomicBool::new(false),
        }
    }

    /// This node's time, by the clock the leases are timed by.
    pub(super) fn now(&self) -> Micros {
        self.clock.now()
    }

    /// The global store.
    pub fn store(&self) -> &AnyStore {
        self.global.inner()
    }

    /// What the leases have taken, spent, given back and stranded so far.
    pub fn stats(&self) -> GlobalStats {
        let (held, accounts) = {
            let accounts = self.lock();
            (accounts.values().map(Account::held).sum(), accounts.len())
        };
        self.counters.snapshot(held, accounts as u64)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<AccountKey, Account>> {
        self.accounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no lease is being fetched in the background.
    pub async fn settled(&self) {
        loop {
            let mut landed = pin!(self.landed.notified());
            landed.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            landed.await;
        }
    }

    /// Decides what held units can of a global item, at `now`; `fetch` collects the leases to
    /// fetch in the background.
    pub(super) fn local(
        &self,
        item: &Item<'_>,
        now: Micros,
        fetch: &mut SmallVec<[(String, Limit, u64); 2]>,
    ) -> Result<Local, StoreError> {
        let mut accounts = self.lock();
        let lookup = AccountKey {
            key: item.key.to_string(),
            limit: item.limit.clone(),
        };
        if accounts.len() >= MAX_ACCOUNTS && !accounts.contains_key(&lookup) {
            accounts.retain(|_, account| account.held() > 0 || account.fetching.is_some());
            if accounts.len() >= MAX_ACCOUNTS {
                return Err(StoreError::Failed(format!(
                    "global leases: {MAX_ACCOUNTS} keys hold units on this node; no room for another"
                )));
            }
        }
        let account = accounts.entry(lookup).or_default();
        self.counters.stranded(account.expire(now));
        account.demand.observe(item.cost, now);
        if let Some(spent) = account.spend(item.cost) {
            account.last_used = now;
            if self.wants_more(account, item.limit, now) {
                account.fetching = Some(now);
                let units = self.size(account, item.limit, 0, now);
                fetch.push((item.key.to_string(), item.limit.clone(), units));
            }
            return Ok(Local::Spent(account.admitted(now), spent));
        }
        if account.denied_until.is_some_and(|until| now < until) {
            self.counters.denied_here();
            return Ok(Local::Denied(account.denied(now, 0)));
        }
        account.denied_until = None;
        if account.unreachable || (account.fetching.is_none() && !self.busy(account, now)) {
            // The global store failed last time (the check learns whether it still does, and
            // follows its failure mode if so), or the key is quiet enough that its check may
            // wait for a lease without holding up others.
            return Ok(Local::Ask);
        }
        // A lease is on its way, or the key is busy: waiting would hold the check (every
        // check of a busy key) for a round trip to the global store. Fetch in the background
        // (unless a busy key's fixed window ends within the round trip: that lease would land
        // in the old window) and deny until it lands; a denial never admits beyond the quota.
        let round_trip = self.round_trip.load(Ordering::Relaxed);
        if account.fetching.is_none() && !window_ending(account, item.limit, now, round_trip) {
            account.fetching = Some(now);
            let units = self.size(account, item.limit, item.cost, now);
            fetch.push((item.key.to_string(), item.limit.clone(), units));
        }
        self.counters.denied_here();
        let landing = account
            .fetching
            .map(|sent| sent.saturating_add(round_trip))
            .filter(|&landing| landing > now)
            .map_or(round_trip, |landing| landing - now);
        Ok(Local::Denied(account.denied(now, landing)))
    }

    /// Counts units admitted from leases, once the whole check is admitted.
    pub(super) fn admitted(&self, units: u64) {
        self.counters.spent(units);
    }

    /// Puts back units of a check that was denied after all.
    pub(super) fn put_back(&self, item: &Item<'_>, spent: &Spent) {
        let now = self.clock.now();
        let lookup = AccountKey {
            key: item.key.to_string(),
            limit: item.limit.clone(),
        };
        let mut accounts = self.lock();
        let lost = match accounts.get_mut(&lookup) {
            Some(account) => account.put_back(spent, now),
            None => spent.iter().map(|part| part.units).sum(),
        };
        self.counters.stranded(lost);
    }

    /// Asks the global store for a lease for a check that found nothing held here (waiting
    /// for a fetch already under way first), and spends the check's cost from it.
    pub(super) async fn ask(self: &Arc<Self>, item: &Item<'_>) -> Result<Local, StoreError> {
        self.start_sweeper();
        self.counters.waited();
        let lookup = AccountKey {
            key: item.key.to_string(),
            limit: item.limit.clone(),
        };
        // Checks that find a fetch under way wait for it (a few times, as each landing may
        // be spent by others first) rather than all ask at once; a check whose own lease was
        // spent by others first asks again, a few times.
        let (mut waits, mut fetches) = (0, 0);
        loop {
            let mut landed = pin!(self.landed.notified());
            let units = {
                let now = self.clock.now();
                let mut accounts = self.lock();
                let account = accounts.entry(lookup.clone()).or_default();
                self.counters.stranded(account.expire(now));
                if let Some(spent) = account.spend(item.cost) {
                    account.last_used = now;
                    return Ok(Local::Spent(account.admitted(now), spent));
                }
                if account.denied_until.is_some_and(|until| now < until) || fetches == 3 {
                    self.counters.denied_here();
                    let refresh = self.round_trip.load(Ordering::Relaxed);
                    return Ok(Local::Denied(account.denied(now, refresh)));
                }
                if account.fetching.is_some() && waits < 3 {
                    landed.as_mut().enable();
                    None
                } else {
                    account.fetching = Some(now);
                    Some(self.size(account, item.limit, item.cost, now))
                }
            };
            let Some(units) = units else {
                // Bounded: a landing elsewhere may wake it, and a fetch that never lands must
                // not hold the check.
                let _ = tokio::time::timeout(WAIT_FOR_LANDING, landed).await;
                waits += 1;
                continue;
            };
            let decision = self
                .fetch_detached(&lookup.key, item.limit, units, item.cost)
                .await?;
            if !decision.allowed() {
                return Ok(Local::Denied(decision));
            }
            fetches += 1;
        }
    }

    /// Decides a check's global items at the global store itself, each at its cost (for
    /// checks at an explicit time, which leases cannot answer).
    pub(super) async fn direct(
        &self,
        check: &Check<'_>,
        at: Option<Micros>,
    ) -> Result<tollgate_core::check::Verdict, StoreError> {
        self.counters.called();
        self.global.check(check, at).await
    }

    /// Refunds, charges or forgets global items at the global store.
    pub(super) async fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        self.counters.called();
        self.global.adjust(check, adjustments, at).await
    }

    /// Forgets global items at the global store, and what this node holds of them.
    pub(super) async fn forget(&self, check: &Check<'_>) -> Result<(), StoreError> {
        {
            let mut accounts = self.lock();
            for item in check.items() {
                let removed = accounts.remove(&AccountKey {
                    key: item.key.to_string(),
                    limit: item.limit.clone(),
                });
                // Forgotten in the global store too: its units are back there.
                self.counters
                    .returned(removed.map_or(0, |account| account.held()));
            }
        }
        self.counters.called();
        self.global.forget(check).await
    }
}
