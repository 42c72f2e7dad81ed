//! The one entry point: policies, a store behind its guards (see [`crate::layer`]), and the
//! observers that watch decisions, shared by every clone.

mod admin;
mod counting;
mod denial_log;
mod denials;
mod look;
mod overrides;
mod penalty;
mod requests;
mod settings;
mod telemetry;
mod usage;

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use smallvec::SmallVec;

use crate::algorithm::Adjustment;
use crate::error::Error;
use crate::layer::{GlobalLeases, Guards, LeaseTuning, guard};
#[cfg(feature = "metrics")]
use crate::metrics::Metrics;
use crate::observer::{Observer, Observers, StoreObserver};
use crate::policy::Policies;
use crate::store::{AnyStore, MemoryStore, Store, StoreError};
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::{Clock, Micros, Stopwatch, SystemClock};
use tollgate_core::limit::Limit;

pub use admin::Admin;
use denials::Denials;
pub use denials::KeyLogging;
pub use overrides::Overrides;
pub use settings::Settings;
pub use telemetry::Telemetry;

/// Decides checks against a store, and requests against policies. Cheap to clone: every clone
/// shares the same store and policies, so one limiter per process enforces one set of limits
/// however many handlers hold it.
pub struct Limiter<S = MemoryStore> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    /// The store behind the guards: every decision goes this way.
    store: Guards<S>,
    /// Decides for policies whose failure mode is `local` while the store cannot.
    local: MemoryStore,
    /// The clock the guards read, and plain counters take their window from.
    clock: Arc<dyn Clock>,
    /// Where plain counters of one-second windows go, when not to `store`.
    per_second: ArcSwapOption<AnyStore>,
    #[cfg(feature = "metrics")]
    metrics: Arc<Metrics>,
    denials: Arc<Denials>,
    /// Everything that watches decisions: the metrics, the denials, and the caller's own.
    observers: Observers,
    policies: ArcSwapOption<Policies>,
    /// Exceptions to the policies for single identities.
    overrides: crate::overrides::OverrideState,
}

impl<S> std::fmt::Debug for Limiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("store", &self.inner.store)
            .field("policies", &self.inner.policies.load().is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Clone for Limiter<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl Limiter<MemoryStore> {
    /// A limiter on a new in-process store with the system clock.
    pub fn memory() -> Self {
        Self::new(MemoryStore::new())
    }
}

/// Builds a [`Limiter`] with a clock or observers of its own.
pub struct LimiterBuilder<S> {
    store: S,
    clock: Option<Arc<dyn Clock>>,
    observers: Observers,
    global: Option<(Arc<AnyStore>, LeaseTuning)>,
}

impl<S> std::fmt::Debug for LimiterBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("observers", &self.observers)
            .finish_non_exhaustive()
    }
}

impl<S: Store> LimiterBuilder<S> {
    /// The clock the guards (breaker, over-limit cache, leases) read. Default: the store's own
    /// clock when it keeps one in process (the memory store), else the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Leases the limits of scope global from `store`, a store every region shares, sized and
    /// kept as `tuning` says (the global tier: docs/architecture.md).
    pub fn global(mut self, store: impl Into<Arc<AnyStore>>, tuning: LeaseTuning) -> Self {
        self.global = Some((store.into(), tuning));
        self
    }

    /// Adds an observer of decisions, called after the limiter's own metrics (with the
    /// `metrics` feature).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers.push(observer);
        self
    }

    /// The limiter.
    pub fn build(self) -> Limiter<S> {
        let clock = self.clock.unwrap_or_else(|| {
            self.store
                .own_clock()
                .cloned()
                .unwrap_or_else(|| Arc::new(SystemClock::new()))
        });
        let denials = Arc::new(Denials::new());
        let mut observers = Observers::new();
        #[cfg(feature = "metrics")]
        let metrics = Arc::new(Metrics::new());
        #[cfg(feature = "metrics")]
        observers.push(Arc::clone(&metrics) as Arc<dyn Observer>);
        observers.push(Arc::clone(&denials) as Arc<dyn Observer>);
        observers.extend(self.observers);
        let global = self
            .global
            .map(|(store, tuning)| Arc::new(GlobalLeases::new(store, Arc::clone(&clock), tuning)));
        let store = guard(
            self.store,
            global,
            Arc::clone(&clock),
            Arc::new(observers.clone()) as Arc<dyn StoreObserver>,
        );
        Limiter {
            inner: Arc::new(Inner {
                store,
                local: MemoryStore::builder().clock(Arc::clone(&clock)).build(),
                clock,
                per_second: ArcSwapOption::empty(),
                #[cfg(feature = "metrics")]
                metrics,
                denials,
                observers,
                policies: ArcSwapOption::empty(),
                overrides: crate::overrides::OverrideState::default(),
            }),
        }
    }
}

impl<S: Store> Limiter<S> {
    /// A limiter on `store`, without policies.
    pub fn new(store: S) -> Self {
        Self::builder(store).build()
    }

    /// A builder for a limiter on `store` with a clock or observers of its own.
    pub fn builder(store: S) -> LimiterBuilder<S> {
        LimiterBuilder {
            store,
            clock: None,
            observers: Observers::new(),
            global: None,
        }
    }

    /// The leases on the global store, when the limiter has one.
    pub fn global(&self) -> Option<&Arc<GlobalLeases>> {
        self.inner.store.inner().leases()
    }

    /// A limiter on `store` that decides requests by `policies`.
    pub fn with_policies(store: S, policies: Policies) -> Self {
        let limiter = Self::new(store);
        limiter.settings().set_policies(policies);
        limiter
    }

    /// The policies in force, if any.
    pub fn policies(&self) -> Option<Arc<Policies>> {
        self.inner.policies.load_full()
    }

    /// What kind of store decides (`memory`, `redis`, ...), for health answers and logs.
    pub fn store_kind(&self) -> &'static str {
        self.store().kind()
    }

    /// The store itself, under the guards: for operator tools, never for decisions, which go
    /// through the guards ([`check`](Self::check), [`charge`](Self::charge), ...).
    pub fn store(&self) -> &S {
        self.breaker().inner()
    }

    fn breaker(&self) -> &crate::layer::CircuitBreaker<S> {
        self.cache().inner()
    }

    fn cache(&self) -> &crate::layer::OverLimitCache<crate::layer::CircuitBreaker<S>> {
        self.inner.store.inner().inner()
    }

    /// Gives every lease this node holds back to the store (at shutdown, say), so that no
    /// quota stays stranded here: the regional store's and the global store's.
    pub async fn return_leases(&self) {
        self.inner.store.return_leases().await;
        if let Some(global) = self.global() {
            global.settled().await;
            global.return_all().await;
        }
    }

    /// Refunds or charges through the guarded store (which forgets the over-limit cache's
    /// entries for the keys involved).
    async fn store_adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
    ) -> Result<(), StoreError> {
        self.inner.store.adjust(check, adjustments, None).await
    }

    /// Decides a check all-or-nothing.
    pub async fn check(&self, check: &Check<'_>) -> Result<Verdict, Error> {
        let watch = Stopwatch::start();
        let verdict = match self.inner.store.check_now(check) {
            Some(decided) => decided?,
            None => self.inner.store.check(check, None).await?,
        };
        self.inner
            .observers
            .checked(check, &verdict, watch.elapsed());
        Ok(verdict)
    }

    /// Decides a check as [`check`](Self::check) does, without waiting, when the store can
    /// (the memory store can, but for leased and global limits); `None` when the check must
    /// wait for its store. A caller that keeps [`check`](Self::check)'s future for that case
    /// alone (boxed, say) keeps its own future small: the store's takes kilobytes.
    pub fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, Error>> {
        let watch = Stopwatch::start();
        let verdict = match self.inner.store.check_now(check)? {
            Ok(verdict) => verdict,
            Err(error) => return Some(Err(error.into())),
        };
        self.inner
            .observers
            .checked(check, &verdict, watch.elapsed());
        Some(Ok(verdict))
    }

    /// Decides one limit on one key at a cost of 1.
    pub async fn check_one(&self, key: &str, limit: &Limit) -> Result<Verdict, Error> {
        self.check(&Check::one(key, limit)).await
    }

    /// Decides `check` as the failure mode `local` does while the store cannot: on this
    /// process's fallback store, each limit divided among `nodes` nodes that decide alone
    /// ([`Limit::divided`]). What it counts stays local: it is never merged into the store.
    pub async fn check_local(&self, check: &Check<'_>, nodes: u64) -> Result<Verdict, Error> {
        let shares: SmallVec<[Limit; 4]> = check
            .items()
            .iter()
            .map(|item| item.limit.divided(nodes))
            .collect();
        let mut local = Check::new(0);
        for (item, share) in check.items().iter().zip(&shares) {
            local.push(item.key.as_ref(), share, item.cost);
        }
        Ok(self.inner.local.check(&local, None).await?)
    }

    /// Gives back what an admitted `check` took, for a request that failed upstream. `verdict`
    /// is the check's verdict; its time says which charge to give back and how much of it still
    /// counts: nothing once its window has rolled over, and for the rate algorithms the charge
    /// less what the bucket has refilled since (all of it when refunded at once). A denied check
    /// took nothing, and its refund does nothing.
    pub async fn refund(&self, check: &Check<'_>, verdict: &Verdict) -> Result<(), Error> {
        if verdict.is_denied() {
            return Ok(());
        }
        let times: SmallVec<[Micros; 4]> = (0..check.items().len())
            .map(|index| verdict.item_at(index))
            .collect();
        self.refund_each(check, &times).await
    }

    /// Gives back what `check` took, each item admitted at its time in `charged_at` (a
    /// verdict's [`item_at`](Verdict::item_at); one time for every item when given one), for
    /// callers that kept the times but not the verdict.
    pub async fn refund_each(&self, check: &Check<'_>, charged_at: &[Micros]) -> Result<(), Error> {
        one_time_or_each(check, charged_at)?;
        let refunds: SmallVec<[Adjustment; 4]> = (0..check.items().len())
            .map(|index| Adjustment::Refund {
                charged_at: time_of(charged_at, index),
            })
            .collect();
        self.adjust(check, &refunds).await
    }

    /// Settles an admitted `check` once its real cost is known: each item is charged the
    /// difference when `actual` is above what it took, or refunded it when below. The charge is
    /// unconditional (the work is done), so a limit can go into debt and delay later requests.
    pub async fn settle(
        &self,
        check: &Check<'_>,
        verdict: &Verdict,
        actual: u64,
    ) -> Result<(), Error> {
        if verdict.is_denied() {
            return Ok(());
        }
        let times: SmallVec<[Micros; 4]> = (0..check.items().len())
            .map(|index| verdict.item_at(index))
            .collect();
        self.settle_each(check, &times, actual).await
    }

    /// Settles `check`, each item admitted at its time in `charged_at` (one time for every
    /// item when given one), at its real cost `actual`, for callers that kept the times but
    /// not the verdict.
    pub async fn settle_each(
        &self,
        check: &Check<'_>,
        charged_at: &[Micros],
        actual: u64,
    ) -> Result<(), Error> {
        one_time_or_each(check, charged_at)?;
        let mut settlement = Settlement::default();
        for (index, item) in check.items().iter().enumerate() {
            let at = time_of(charged_at, index);
            settlement.push(item.key.as_ref(), item.limit, item.cost, actual, at);
        }
        if settlement.changes.is_empty() {
            return Ok(());
        }
        self.adjust(&settlement.changes, &settlement.adjustments)
            .await
    }

    /// Charges `check`'s costs whatever its limits say, at `at` (the time of the refusal it
    /// follows): a hit counted though it was refused, as envoyproxy/ratelimit counts them, or
    /// usage reported after the fact. Through the guards like every decision; a charge makes
    /// no room, so a denial the over-limit cache remembers stays.
    pub async fn charge(&self, check: &Check<'_>, at: Micros) -> Result<(), Error> {
        let charge = [Adjustment::Charge];
        Ok(self.inner.store.adjust(check, &charge, Some(at)).await?)
    }

    /// The time the guards read: the in-process store's clock, else the system clock (a Redis
    /// store decides by the Redis server's own).
    pub fn now(&self) -> Micros {
        self.inner.clock.now()
    }

    async fn adjust(&self, check: &Check<'_>, adjustments: &[Adjustment]) -> Result<(), Error> {
        Ok(self.store_adjust(check, adjustments).await?)
    }
}

/// Refuses times that are neither one for every item nor one per item.
fn one_time_or_each(check: &Check<'_>, times: &[Micros]) -> Result<(), Error> {
    let items = check.items().len();
    if times.len() == 1 || times.len() == items {
        return Ok(());
    }
    Err(tollgate_core::check::CheckError::AdjustmentCount {
        items,
        adjustments: times.len(),
    }
    .into())
}

/// Item `index`'s time among `times`: its own, or the one time given for every item.
fn time_of(times: &[Micros], index: usize) -> Micros {
    match times {
        [one] => *one,
        times => times.get(index).copied().unwrap_or_default(),
    }
}

/// The adjustments that settle charges at their real cost.
struct Settlement<'c> {
    changes: Check<'c>,
    adjustments: SmallVec<[Adjustment; 4]>,
}

impl Default for Settlement<'_> {
    fn default() -> Self {
        Self {
            changes: Check::new(0),
            adjustments: SmallVec::new(),
        }
    }
}

impl<'c> Settlement<'c> {
    /// Settles a charge of `cost` on `key`, taken at `charged_at`, at `actual`: the
    /// difference charged when above, refunded when below.
    fn push(
        &mut self,
        key: &'c str,
        limit: &'c Limit,
        cost: u64,
        actual: u64,
        charged_at: tollgate_core::clock::Micros,
    ) {
        if actual > cost {
            self.changes.push(key, limit, actual - cost);
            self.adjustments.push(Adjustment::Charge);
        } else if actual < cost {
            self.changes.push(key, limit, cost - actual);
            self.adjustments.push(Adjustment::Refund { charged_at });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Algorithm, ManualClock};

    fn limiter() -> (Limiter, ManualClock) {
        let clock = ManualClock::new(1_700_000_000_000_000);
        let store = MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build();
        (Limiter::new(store), clock)
    }

    /// A check decided at once counts as one decided by `check`, on the same state, and one
    /// that must wait for its store (a leased limit's) is left to `check`.
    #[tokio::test]
    async fn a_check_decided_at_once_is_a_check_like_any_other() {
        let (limiter, _) = limiter();
        let limit = Limit::new("w", Algorithm::FixedWindow, "2/m".parse().unwrap()).unwrap();
        let check = Check::one("k", &limit);
        let first = limiter.check_now(&check).expect("decided at once").unwrap();
        assert!(first.is_allowed());
        assert!(limiter.check(&check).await.unwrap().is_allowed());
        let third = limiter.check_now(&check).expect("decided at once").unwrap();
        assert!(third.is_denied());
        #[cfg(feature = "metrics")]
        {
            let counted = limiter.telemetry().metrics().summary().decisions;
            assert_eq!(counted[""]["allowed"], 2);
            assert_eq!(counted[""]["denied"], 1);
        }
        let leased = Limit::builder("l", Algorithm::FixedWindow, "100/m".parse().unwrap())
            .lease(10)
            .build()
            .unwrap();
        assert!(limiter.check_now(&Check::one("k", &leased)).is_none());
    }

    #[tokio::test]
    async fn a_prompt_refund_gives_everything_back() {
        let (limiter, _) = limiter();
        let limit = Limit::new("t", Algorithm::TokenBucket, "3/s".parse().unwrap()).unwrap();
        let check = Check::new(3).limit("k", &limit);
        let verdict = limiter.check(&check).await.unwrap();
        assert!(verdict.is_allowed());
        limiter.refund(&check, &verdict).await.unwrap();
        assert!(limiter.check(&check).await.unwrap().is_allowed());
    }

    #[tokio::test]
    async fn refunding_a_denied_check_changes_nothing() {
        let (limiter, _) = limiter();
        let limit = Limit::new("w", Algorithm::FixedWindow, "1/m".parse().unwrap()).unwrap();
        let check = Check::one("k", &limit);
        limiter.check(&check).await.unwrap();
        let denied = limiter.check(&check).await.unwrap();
        assert!(denied.is_denied());
        limiter.refund(&check, &denied).await.unwrap();
        assert!(
            limiter.check(&check).await.unwrap().is_denied(),
            "the one admitted request still counts"
        );
    }

    #[tokio::test]
    async fn settle_charges_debt_and_refunds_overestimates() {
        let (limiter, clock) = limiter();
        let tokens = Limit::new("llm-tokens", Algorithm::Gcra, "1000/m".parse().unwrap()).unwrap();
        // Reserve an estimate of 100 tokens; the call used 1 500.
        let check = Check::new(100).limit("tenant:acme", &tokens);
        let verdict = limiter.check(&check).await.unwrap();
        limiter.settle(&check, &verdict, 1_500).await.unwrap();
        let look = limiter
            .check(&Check::new(1).limit("tenant:acme", &tokens))
            .await
            .unwrap();
        // 1 500 of 1 000 per minute taken: in debt, the next token is 30 s away.
        assert_eq!(look.retry_after(), Some(Duration::from_millis(30_060)));
        clock.advance(Duration::from_secs(90));
        // Reserve 500, use 200: 300 come back at once.
        let check = Check::new(500).limit("tenant:acme", &tokens);
        let verdict = limiter.check(&check).await.unwrap();
        assert!(verdict.is_allowed());
        limiter.settle(&check, &verdict, 200).await.unwrap();
        let left = limiter
            .check(&Check::new(0).limit("tenant:acme", &tokens))
            .await
            .unwrap();
        assert_eq!(left.decisions()[0].remaining(), 800);
    }
}
