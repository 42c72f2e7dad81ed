//! The one entry point: a store and, optionally, policies, shared by every clone.

mod admin;
mod breaker;
mod denial_log;
mod deny_cache;
mod evaluate;
mod lease;
mod penalty;

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use smallvec::SmallVec;

use crate::algorithm::Adjustment;
use crate::check::{Check, Verdict};
use crate::error::Error;
use crate::limit::Limit;
use crate::metrics::Metrics;
use crate::policy::Policies;
use crate::secret::Secret;
use crate::store::{MemoryStore, Store, StoreError};
use crate::top_keys::{TopKey, TopKeys};

pub use breaker::BreakerConfig;
use breaker::{Breaker, Call};
use denial_log::DenialLog;
use deny_cache::DenyCache;
use lease::{Leases, Unspent};

/// Decides checks against a store, and requests against policies. Cheap to clone: every clone
/// shares the same store and policies, so one limiter per process enforces one set of limits
/// however many handlers hold it.
pub struct Limiter<S = MemoryStore> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    store: S,
    /// Decides for policies whose failure mode is `local` while the store cannot.
    local: MemoryStore,
    breaker: Breaker,
    deny_cache: DenyCache,
    leases: Leases,
    metrics: Metrics,
    /// The keys most often refused, and the routes most often asked for.
    denied_keys: TopKeys,
    hot_routes: TopKeys,
    key_logging: std::sync::atomic::AtomicU8,
    /// Keys the hashed key logging with, so that pseudonyms cannot be guessed back.
    key_log_secret: std::sync::RwLock<Secret>,
    denial_log: DenialLog,
    policies: ArcSwapOption<Policies>,
}

/// How refused keys appear in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyLogging {
    /// As they are.
    Plain,
    /// As the first 16 hex digits of their HMAC-SHA-256 under a secret (random per process
    /// unless set with `Limiter::set_key_log_secret`): the same key always looks the same in
    /// one process's logs, and without the secret no key can be found from its pseudonym, not
    /// even by hashing every IPv4 address.
    #[default]
    Hashed,
    /// Not at all.
    Omitted,
}

/// How many keys and routes the top lists track.
const TOP_CAPACITY: usize = 200;

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Store,
    /// The over-limit cache: a denial the store gave for the same check moments ago.
    Cache,
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

impl<S: Store> Limiter<S> {
    /// A limiter on `store`, without policies.
    pub fn new(store: S) -> Self {
        // In process, the store is as quick as a cache would be.
        let cache = store.kind() != "memory";
        Self {
            inner: Arc::new(Inner {
                store,
                local: MemoryStore::new(),
                breaker: Breaker::new(BreakerConfig::default()),
                deny_cache: DenyCache::new(cache),
                leases: Leases::default(),
                metrics: Metrics::new(),
                denied_keys: TopKeys::new(TOP_CAPACITY),
                hot_routes: TopKeys::new(TOP_CAPACITY),
                key_logging: std::sync::atomic::AtomicU8::new(KeyLogging::Hashed as u8),
                key_log_secret: std::sync::RwLock::new(Secret::random()),
                denial_log: DenialLog::new(),
                policies: ArcSwapOption::empty(),
            }),
        }
    }

    /// A limiter on `store` that decides requests by `policies`.
    pub fn with_policies(store: S, policies: Policies) -> Self {
        let limiter = Self::new(store);
        limiter.set_policies(policies);
        limiter
    }

    /// Replaces the policies; checks already under way finish with the old ones. The
    /// policies' `redis.breaker` and `redis.deny_cache` settings take effect too.
    pub fn set_policies(&self, policies: Policies) {
        let options = &policies.config().redis;
        self.set_breaker(options.breaker);
        self.set_deny_cache(options.deny_cache && self.inner.store.kind() != "memory");
        self.inner.policies.store(Some(Arc::new(policies)));
    }

    /// The policies in force, if any.
    pub fn policies(&self) -> Option<Arc<Policies>> {
        self.inner.policies.load_full()
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// Sets when the store's circuit breaker opens and for how long (default: after 5
    /// consecutive failures, for 1 s).
    pub fn set_breaker(&self, config: BreakerConfig) {
        self.inner.breaker.configure(config);
    }

    /// Whether the circuit breaker is open: the store failed repeatedly and is not being called.
    pub fn store_resting(&self) -> bool {
        self.inner.breaker.is_open()
    }

    /// How many times the circuit breaker has opened.
    pub fn breaker_openings(&self) -> u64 {
        self.inner.breaker.times_opened()
    }

    /// Turns the local over-limit cache on or off (on by default for stores outside the
    /// process): while a check is denied until T, the same check is denied until T without
    /// asking the store.
    pub fn set_deny_cache(&self, enabled: bool) {
        self.inner.deny_cache.set_enabled(enabled);
    }

    /// Checks denied by the over-limit cache without asking the store.
    pub fn deny_cache_hits(&self) -> u64 {
        self.inner.deny_cache.hits()
    }

    /// The `n` keys most often refused (policy keys such as `ip:203.0.113.7`), from a bounded
    /// summary.
    pub fn top_denied_keys(&self, n: usize) -> Vec<TopKey> {
        self.inner.denied_keys.top(n)
    }

    /// The `n` routes (or paths) most often asked for.
    pub fn top_routes(&self, n: usize) -> Vec<TopKey> {
        self.inner.hot_routes.top(n)
    }

    /// Sets how refused keys appear in logs (hashed by default).
    pub fn set_key_logging(&self, logging: KeyLogging) {
        self.inner
            .key_logging
            .store(logging as u8, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the secret hashed key logging uses, so that several processes given the same secret
    /// show a key under the same pseudonym (by default each process has a random one).
    pub fn set_key_log_secret(&self, secret: Secret) {
        *self
            .inner
            .key_log_secret
            .write()
            .unwrap_or_else(|e| e.into_inner()) = secret;
    }

    fn key_for_logs(&self, key: &str) -> String {
        match self
            .inner
            .key_logging
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            x if x == KeyLogging::Plain as u8 => key.to_owned(),
            x if x == KeyLogging::Omitted as u8 => String::new(),
            _ => self
                .inner
                .key_log_secret
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .digest_hex(&[b"log key", key.as_bytes()], 8),
        }
    }

    /// The limiter's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The metrics in Prometheus' text format, with the gauges read now.
    pub fn metrics_text(&self) -> String {
        self.inner
            .metrics
            .set_gauges(self.store_resting(), self.inner.store.held_keys());
        self.inner.metrics.encode()
    }

    /// Asks the over-limit cache, then the store (through leases for leased limits).
    async fn store_check(&self, check: &Check<'_>) -> Result<(Verdict, Source), StoreError> {
        let now = std::time::Instant::now();
        if let Some(verdict) = self.inner.deny_cache.lookup(check, now) {
            self.inner.metrics.record_cache_hit();
            return Ok((verdict, Source::Cache));
        }
        let verdict = if check
            .items()
            .iter()
            .any(|item| item.limit.lease().is_some())
        {
            self.leased_check(check, now).await?
        } else {
            self.breaker_check(check).await?
        };
        self.inner
            .deny_cache
            .remember(check, &verdict, std::time::Instant::now());
        Ok((verdict, Source::Store))
    }

    /// Asks the store through the circuit breaker: while the breaker is open the store is not
    /// called and the answer is [`StoreError::CircuitOpen`] at once.
    async fn breaker_check(&self, check: &Check<'_>) -> Result<Verdict, StoreError> {
        let started = std::time::Instant::now();
        let call = self.inner.breaker.call(started);
        if call == Call::Skip {
            self.inner
                .metrics
                .record_store_error(&StoreError::CircuitOpen);
            return Err(StoreError::CircuitOpen);
        }
        let result = self.inner.store.check(check, None).await;
        let ended = std::time::Instant::now();
        self.inner.metrics.observe_store(ended - started);
        if let Err(error) = &result {
            self.inner.metrics.record_store_error(error);
        }
        let healthy = !matches!(&result, Err(error) if error.is_store_failure());
        self.inner.breaker.record(call, healthy, ended);
        result
    }

    /// A check with leased limits: items a held lease covers are decided here; the rest go to
    /// the store, taking a new lease where one is due (or just the request's cost when a whole
    /// lease no longer fits). Units spent locally are put back when the check is denied.
    async fn leased_check(
        &self,
        check: &Check<'_>,
        now: std::time::Instant,
    ) -> Result<Verdict, StoreError> {
        let items = check.items();
        let leases = &self.inner.leases;
        let mut unspent = Vec::new();
        let mut local: SmallVec<[Option<(crate::Decision, crate::clock::Micros)>; 4]> = items
            .iter()
            .map(|item| {
                item.limit
                    .lease()
                    .and_then(|_| leases.spend(&item.key, item.limit, item.cost, now, &mut unspent))
            })
            .collect();
        self.give_back_unspent(unspent).await;
        let pending: SmallVec<[usize; 4]> =
            (0..items.len()).filter(|&i| local[i].is_none()).collect();
        let put_back = |local: &[Option<(crate::Decision, crate::clock::Micros)>]| {
            for (item, spent) in items.iter().zip(local) {
                if spent.is_some() {
                    leases.unspend(&item.key, item.limit, item.cost);
                }
            }
        };
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
        let mut answer = self.breaker_check(&request(true)).await;
        if matches!(&answer, Ok(verdict) if verdict.is_denied()) {
            // A whole lease no longer fits: ask for this request alone.
            leasing = false;
            answer = self.breaker_check(&request(false)).await;
        }
        let verdict = match answer {
            Ok(verdict) => verdict,
            Err(error) => {
                put_back(&local);
                return Err(error);
            }
        };
        if verdict.is_denied() {
            put_back(&local);
        } else if leasing {
            let mut replaced = Vec::new();
            for (&i, decision) in pending.iter().zip(verdict.decisions()) {
                let item = &items[i];
                if let Some(units) = item.limit.lease() {
                    let taken = units.max(item.cost);
                    replaced.extend(leases.hold(item, taken, *decision, verdict.at(), now));
                }
            }
            self.give_back_unspent(replaced).await;
        }
        for (&i, decision) in pending.iter().zip(verdict.decisions()) {
            local[i] = Some((*decision, verdict.at()));
        }
        Ok(Verdict::from_decisions(
            verdict.at(),
            local.iter().flatten().map(|(decision, _)| *decision),
        ))
    }

    /// Gives the unspent units of leases back to the store. A failure only strands them until
    /// their window or refill restores them, so it is not the caller's error.
    async fn give_back_unspent(&self, unspent: Vec<Unspent>) {
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
        let _ = self.store_adjust(&check, &refunds).await;
    }

    /// Gives every lease this node holds back to the store (at shutdown, say), so that no
    /// quota stays stranded here.
    pub async fn return_leases(&self) {
        let unspent = self.inner.leases.drain();
        self.give_back_unspent(unspent).await;
    }

    /// Refunds or charges through the store, invalidating what the over-limit cache holds for
    /// the keys involved.
    async fn store_adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
    ) -> Result<(), StoreError> {
        self.inner.deny_cache.forget_keys(check);
        self.inner.store.adjust(check, adjustments, None).await
    }

    /// Decides a check all-or-nothing.
    pub async fn check(&self, check: &Check<'_>) -> Result<Verdict, Error> {
        let started = std::time::Instant::now();
        let verdict = self.store_check(check).await?.0;
        let metrics = &self.inner.metrics;
        metrics.observe_check(started.elapsed());
        // Checks name their limits themselves (the check API takes them from clients), so
        // they are counted without labels of their own.
        let outcome = match verdict.outcome() {
            crate::Outcome::Allow => crate::metrics::MetricOutcome::Allowed,
            crate::Outcome::Delay(_) => crate::metrics::MetricOutcome::Delayed,
            crate::Outcome::Deny { retry_after } => {
                if let Some(retry_after) = retry_after {
                    metrics.observe_retry_after(retry_after);
                }
                crate::metrics::MetricOutcome::Denied
            }
        };
        metrics.record_decision("", "", outcome);
        metrics.record_policy("", outcome);
        Ok(verdict)
    }

    /// Decides one limit on one key at a cost of 1.
    pub async fn check_one(&self, key: &str, limit: &Limit) -> Result<Verdict, Error> {
        self.check(&Check::one(key, limit)).await
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
        self.refund_at(check, verdict.at()).await
    }

    /// Gives back what `check` took when it was admitted at `charged_at` (a verdict's
    /// [`at`](Verdict::at)), for callers that kept the time but not the verdict.
    pub async fn refund_at(
        &self,
        check: &Check<'_>,
        charged_at: crate::clock::Micros,
    ) -> Result<(), Error> {
        let refund = Adjustment::Refund { charged_at };
        let refunds: SmallVec<[Adjustment; 4]> = check.items().iter().map(|_| refund).collect();
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
        let mut changes = Check::new(0);
        let mut adjustments: SmallVec<[Adjustment; 4]> = SmallVec::new();
        let refund = Adjustment::Refund {
            charged_at: verdict.at(),
        };
        for item in check.items() {
            if actual > item.cost {
                changes.push(item.key.as_ref(), item.limit, actual - item.cost);
                adjustments.push(Adjustment::Charge);
            } else if actual < item.cost {
                changes.push(item.key.as_ref(), item.limit, item.cost - actual);
                adjustments.push(refund);
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        self.adjust(&changes, &adjustments).await
    }

    async fn adjust(&self, check: &Check<'_>, adjustments: &[Adjustment]) -> Result<(), Error> {
        Ok(self.store_adjust(check, adjustments).await?)
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
