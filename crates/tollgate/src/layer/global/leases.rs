//! The node's leases on global limits: units taken from the global store in advance, sized by
//! the node's demand, fetched again in the background before they run out, and given back
//! when the node stops using them.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::sync::Notify;

use super::account::{Account, Seen, Sizing, Spent};
use super::stats::{Counters, GlobalStats};
use crate::algorithm::{Adjustment, Algorithm};
use crate::check::{Check, Item};
use crate::clock::{Clock, Micros, duration_to_micros};
use crate::decision::Decision;
use crate::layer::{BreakerConfig, CircuitBreaker, StoreObserver};
use crate::limit::Limit;
use crate::store::{AnyStore, Store, StoreError};

/// The most (key, limit) accounts a node keeps; idle ones make room for new ones.
pub const MAX_ACCOUNTS: usize = 100_000;

/// The longest a check waits for another's fetch of the lease it needs before it asks itself.
const WAIT_FOR_LANDING: Duration = Duration::from_secs(1);

/// How leases on global limits are sized and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTuning {
    /// A lease holds about this long of the node's own demand (at least four round trips to
    /// the global store). Default 200 ms; the sweeper runs this often.
    pub horizon: Duration,
    /// The most one lease takes, in percent of the limit's capacity. Default 10.
    pub max_share_percent: u8,
    /// Units not spent for this long go back to the global store. Default 1 s.
    pub idle: Duration,
    /// How long the units of a rate or sliding-window limit stay spendable (a fixed window's
    /// stay until its window ends). Default 1 s.
    pub hold: Duration,
}

impl Default for LeaseTuning {
    fn default() -> Self {
        Self {
            horizon: Duration::from_millis(200),
            max_share_percent: 10,
            idle: Duration::from_secs(1),
            hold: Duration::from_secs(1),
        }
    }
}

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

/// Whether a fixed window ends, as this node reckons it from `account`'s last answer, within
/// the next round trip: a lease asked for now would land in the old window, to expire at once.
fn window_ending(account: &Account, limit: &Limit, now: Micros, round_trip: Micros) -> bool {
    if limit.algorithm() != Algorithm::FixedWindow {
        return false;
    }
    account.seen.is_some_and(|seen| {
        let ends = seen
            .received
            .saturating_add(seen.decision.reset_after_micros());
        now < ends && ends - now <= round_trip
    })
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

    /// How long a lease should last: the horizon, and at least four round trips (round trips
    /// under load vary, and a lease should outlast the next one's fetch).
    fn span(&self) -> Micros {
        duration_to_micros(self.tuning.horizon).max(4 * self.round_trip.load(Ordering::Relaxed))
    }

    /// The size of the next lease for `account` on `limit`.
    fn size(&self, account: &Account, limit: &Limit, cost: u64, now: Micros) -> u64 {
        let span = self.span();
        let window_left = (limit.algorithm() == Algorithm::FixedWindow)
            .then(|| {
                account.seen.and_then(|seen| {
                    let ends = seen
                        .received
                        .saturating_add(seen.decision.reset_after_micros());
                    (ends > now).then(|| ends - now)
                })
            })
            .flatten();
        // What the global store said was left still holds if it is recent, and for a fixed
        // window, if its window has not ended.
        let recent = account.seen.filter(|seen| {
            now.saturating_sub(seen.received) < span
                && (limit.algorithm() != Algorithm::FixedWindow || window_left.is_some())
        });
        Sizing {
            cost,
            rate: account.demand.rate(now),
            span,
            most: (limit.capacity() * u64::from(self.tuning.max_share_percent) / 100).max(1),
            remaining: recent.map(|seen| seen.decision.remaining()),
            window_left,
        }
        .units()
    }

    /// Whether `account`, having spent, should fetch its next lease now: what it holds lasts
    /// less than three round trips at its rate (round trips vary), and it is used often enough to
    /// spend another lease before that expires.
    fn wants_more(&self, account: &Account, limit: &Limit, now: Micros) -> bool {
        let rate = account.demand.rate(now);
        let hold = self.tuning.hold.as_secs_f64();
        let round_trip = self.round_trip.load(Ordering::Relaxed);
        account.fetching.is_none()
            && rate * hold >= 2.0
            && (self.lasting(account, limit, now, round_trip) as f64)
                < (rate * round_trip as f64 / 1e6 * 3.0).ceil() + 1.0
    }

    /// What `account` holds that a lease asked for now would not outlast: units expiring
    /// within three round trips do not count, so a lease is renewed before its hold runs out.
    /// A fixed window's units all expire as its window ends, as a lease asked for now would.
    fn lasting(&self, account: &Account, limit: &Limit, now: Micros, round_trip: Micros) -> u64 {
        if limit.algorithm() == Algorithm::FixedWindow {
            account.held()
        } else {
            account.held_at(now.saturating_add(3 * round_trip))
        }
    }

    /// Whether checks of `account` come often enough that several would wait through one
    /// round trip to the global store; a quieter key's check, with no lease on its way, may as
    /// well ask and wait rather than be denied while one is fetched.
    fn busy(&self, account: &Account, now: Micros) -> bool {
        let round_trip = self.round_trip.load(Ordering::Relaxed) as f64 / 1e6;
        account.demand.rate(now) * round_trip >= 2.0
    }

    /// Until when units leased at `sent` may be spent: a fixed window's until its window
    /// ends (measured from before the request, so never past the end), others' for the hold.
    fn valid_until(&self, limit: &Limit, decision: &Decision, sent: Micros) -> Micros {
        if limit.algorithm() == Algorithm::FixedWindow {
            sent.saturating_add(decision.reset_after_micros())
        } else {
            sent.saturating_add(duration_to_micros(self.tuning.hold))
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

    /// Fetches the leases `fetch` lists in the background (not at all when there is no tokio
    /// runtime to spawn on: checks then ask when they run out).
    pub(super) fn fetch_in_background(
        self: &Arc<Self>,
        fetch: SmallVec<[(String, Limit, u64); 2]>,
    ) {
        self.start_sweeper();
        for (key, limit, units) in fetch {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                let mut accounts = self.lock();
                if let Some(account) = accounts.get_mut(&AccountKey { key, limit }) {
                    account.fetching = None;
                }
                continue;
            };
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            let leases = Arc::clone(self);
            runtime.spawn(async move {
                let _ = leases.fetch(&key, &limit, units, 1).await;
                leases.in_flight.fetch_sub(1, Ordering::AcqRel);
                leases.landed.notify_waiters();
            });
        }
    }

    /// Fetches a lease as a task of its own where there is a runtime, so that it lands (and
    /// its account stops fetching) even if the check waiting for it is cancelled.
    async fn fetch_detached(
        self: &Arc<Self>,
        key: &str,
        limit: &Limit,
        units: u64,
        need: u64,
    ) -> Result<Decision, StoreError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let fetched = self.fetch(key, limit, units, need).await;
            self.landed.notify_waiters();
            return fetched;
        };
        let (leases, key, limit) = (Arc::clone(self), key.to_owned(), limit.clone());
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        runtime
            .spawn(async move {
                let fetched = leases.fetch(&key, &limit, units, need).await;
                leases.in_flight.fetch_sub(1, Ordering::AcqRel);
                leases.landed.notify_waiters();
                fetched
            })
            .await
            .map_err(|error| StoreError::Failed(format!("fetching a global lease: {error}")))?
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

    /// Takes a lease of `units` (or, when the global store has less left but at least `need`,
    /// what it has) and keeps it. Returns the global store's last decision.
    async fn fetch(
        &self,
        key: &str,
        limit: &Limit,
        units: u64,
        need: u64,
    ) -> Result<Decision, StoreError> {
        let sent = self.clock.now();
        let mut asked = units;
        let mut answer = self.call(key, limit, asked).await;
        if let Ok((decision, _)) = &answer {
            let left = decision.remaining();
            // Only what the asker can use: a check too costly for what is left takes nothing.
            if !decision.allowed() && left >= need.max(1) && left < asked {
                asked = left;
                answer = self.call(key, limit, asked).await;
            }
        }
        let received = self.clock.now();
        let sample = received.saturating_sub(sent);
        let previous = self.round_trip.load(Ordering::Relaxed);
        let smoothed = if previous == 0 {
            sample
        } else {
            (previous * 3 + sample) / 4
        };
        self.round_trip.store(smoothed, Ordering::Relaxed);
        let mut accounts = self.lock();
        let account = accounts
            .entry(AccountKey {
                key: key.to_owned(),
                limit: limit.clone(),
            })
            .or_default();
        account.fetching = None;
        account.unreachable = answer.is_err();
        let (decision, at) = answer?;
        account.seen = Some(Seen { decision, received });
        if !decision.allowed() {
            account.denied_until = decision
                .retry_after_micros()
                .map(|retry| sent.saturating_add(retry));
            return Ok(decision);
        }
        self.counters.leased(asked);
        account.denied_until = None;
        let id = self.chunks.fetch_add(1, Ordering::Relaxed) + 1;
        account.add(id, asked, self.valid_until(limit, &decision, sent), at);
        account.last_used = received;
        Ok(decision)
    }

    /// One call to the global store for `units` of (key, limit): its decision and time.
    async fn call(
        &self,
        key: &str,
        limit: &Limit,
        units: u64,
    ) -> Result<(Decision, Micros), StoreError> {
        self.counters.called();
        let mut check = Check::new(0);
        check.push(key, limit, units);
        let verdict = self.global.check(&check, None).await?;
        let decision = verdict.decisions().first().copied().ok_or_else(|| {
            StoreError::Failed("the global store answered without a decision".to_owned())
        })?;
        Ok((decision, verdict.at()))
    }

    /// Decides a check's global items at the global store itself, each at its cost (for
    /// checks at an explicit time, which leases cannot answer).
    pub(super) async fn direct(
        &self,
        check: &Check<'_>,
        at: Option<Micros>,
    ) -> Result<crate::check::Verdict, StoreError> {
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
    async fn give_back(&self, back: Vec<(AccountKey, SmallVec<[super::account::Chunk; 2]>)>) {
        let parts: Vec<(&AccountKey, u64, Micros)> = back
            .iter()
            .flat_map(|(key, chunks)| {
                chunks
                    .iter()
                    .filter(|chunk| chunk.units > 0)
                    .map(move |chunk| (key, chunk.units, chunk.taken_at))
            })
            .collect();
        for batch in parts.chunks(crate::check::MAX_ITEMS) {
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
    fn start_sweeper(self: &Arc<Self>) {
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
