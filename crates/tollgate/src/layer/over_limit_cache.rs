//! The local over-limit cache, a store layer: once a check is denied until T, the same check is
//! denied in process until T without asking the store. A client flooding past its limit then
//! costs no store round trips, exactly when they would hurt most.
//!
//! It stays correct because an entry is only ever reused for the very same check: the same
//! keys, the same limits (name, algorithm, quota, burst and mode, so a reload or a per-request
//! override that changes a limit misses) and the same costs. A refund or charge through this
//! layer bumps a generation for each key it touches, which invalidates every entry holding
//! that key. A refund or a released concurrency slot on another node is not seen, so an entry
//! is held at most [`MAX_HOLD`] (then the store is asked again, and the denial cached anew if
//! it stands): that is the longest the cache can deny a request the store would admit. Time
//! comes from the injected clock.
//!
//! It also remembers envoyproxy/ratelimit's plain counters (see [`crate::counter`]) found over
//! their limit, for counts that ask for it (upstream's local cache): such a counter only grows
//! until its window ends, and its key names the window, so it is held until that end.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::algorithm::Adjustment;
use crate::store::{Store, StoreError};
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::{Clock, Micros, duration_to_micros};
use tollgate_core::limit::Limit;

/// Shards of the entry map, so that threads rarely meet.
const SHARDS: usize = 16;
/// Entries per shard; a full shard drops what has expired, and skips caching if still full.
const MAX_ENTRIES_PER_SHARD: usize = 4_096;
/// The longest an entry is trusted, whatever its retry time.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(1);
/// Generation slots for keys; a collision only causes a miss.
const GENERATIONS: usize = 1_024;

struct Entry {
    verdict: Verdict,
    cached_at: Micros,
    until: Micros,
    generations: u64,
}

/// A store behind an over-limit cache; see the module documentation.
pub(crate) struct OverLimitCache<S> {
    inner: S,
    enabled: AtomicBool,
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<u64, Entry>>>,
    /// Entries held across the shards: while there are none, as while nothing is denied, a
    /// check is passed on without being identified.
    entries: AtomicUsize,
    generations: Vec<AtomicU64>,
    /// Plain counters over their limit: the hash of the key, and when its window ends.
    counters: Vec<Mutex<HashMap<u64, Micros>>>,
    hits: AtomicU64,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn super::StoreObserver>,
}

impl<S> std::fmt::Debug for OverLimitCache<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OverLimitCache")
            .field("enabled", &self.enabled)
            .field("hits", &self.hits)
            .finish_non_exhaustive()
    }
}

fn hash_limit(limit: &Limit, hasher: &mut impl Hasher) {
    limit.state_id().hash(hasher);
    limit.name().hash(hasher);
}

impl<S: Store> OverLimitCache<S> {
    /// `inner` behind a cache, on (`enabled`) or off, that reads `clock` and reports its hits
    /// to `observer`.
    pub(crate) fn new(
        inner: S,
        enabled: bool,
        clock: Arc<dyn Clock>,
        observer: Arc<dyn super::StoreObserver>,
    ) -> Self {
        Self {
            inner,
            enabled: AtomicBool::new(enabled),
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            entries: AtomicUsize::new(0),
            generations: (0..GENERATIONS).map(|_| AtomicU64::new(0)).collect(),
            counters: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hits: AtomicU64::new(0),
            clock,
            observer,
        }
    }

    /// The store behind the cache.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    /// Turns the cache on or off; off forgets everything it held.
    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Release);
        if !enabled {
            for shard in &self.shards {
                let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
                self.entries.fetch_sub(shard.len(), Ordering::Relaxed);
                shard.clear();
            }
        }
    }

    /// Checks it denied without asking the store.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The keyed hash of a key, which both names it in a check's identity and picks its
    /// generation slot, so that a key is hashed once.
    fn key_hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn generation(&self, key_hash: u64) -> &AtomicU64 {
        &self.generations[(key_hash % GENERATIONS as u64) as usize]
    }

    /// The check's identity, and the sum of its keys' generations.
    fn identify(&self, check: &Check<'_>) -> (u64, u64) {
        let mut hasher = self.hasher.build_hasher();
        let mut generations = 0u64;
        for item in check.items() {
            let key_hash = self.key_hash(&item.key);
            key_hash.hash(&mut hasher);
            hash_limit(item.limit, &mut hasher);
            item.cost.hash(&mut hasher);
            generations =
                generations.wrapping_add(self.generation(key_hash).load(Ordering::Acquire));
        }
        (hasher.finish(), generations)
    }

    fn shard(&self, id: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.shards[(id as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cached denial of this check, aged to `now`, if one still holds.
    fn lookup(&self, check: &Check<'_>, now: Micros) -> Option<Verdict> {
        if !self.enabled.load(Ordering::Acquire) || self.entries.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let (id, generations) = self.identify(check);
        let mut shard = self.shard(id);
        let entry = shard.get(&id)?;
        if now >= entry.until || entry.generations != generations {
            shard.remove(&id);
            self.entries.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let verdict = entry
            .verdict
            .aged(Duration::from_micros(now.saturating_sub(entry.cached_at)));
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(verdict.replayed())
    }

    /// Remembers a denied verdict until a request of the same check could be admitted.
    fn remember(&self, check: &Check<'_>, verdict: &Verdict, now: Micros) {
        if !self.enabled.load(Ordering::Acquire) || !verdict.is_denied() {
            return;
        }
        // A cost that never fits has no retry time: nothing to wait out, nothing cached.
        let Some(wait) = verdict.retry_after().filter(|wait| *wait > Duration::ZERO) else {
            return;
        };
        let (id, generations) = self.identify(check);
        let mut shard = self.shard(id);
        if shard.len() >= MAX_ENTRIES_PER_SHARD {
            let held = shard.len();
            shard.retain(|_, entry| entry.until > now);
            self.entries
                .fetch_sub(held - shard.len(), Ordering::Relaxed);
            if shard.len() >= MAX_ENTRIES_PER_SHARD {
                return;
            }
        }
        let entry = Entry {
            verdict: verdict.clone(),
            cached_at: now,
            until: now.saturating_add(duration_to_micros(wait.min(MAX_HOLD))),
            generations,
        };
        if shard.insert(id, entry).is_none() {
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counter_shard(&self, id: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Micros>> {
        self.counters[(id as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the plain counter under `key` (a key naming its window) was found over its
    /// limit and its window has not ended at `now`; such an answer counts as a hit.
    pub(crate) fn counter_over(&self, key: &str, now: Micros) -> bool {
        let id = self.hasher.hash_one(key);
        let mut shard = self.counter_shard(id);
        match shard.get(&id) {
            Some(&until) if now < until => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                self.observer.cache_hit();
                true
            }
            Some(_) => {
                shard.remove(&id);
                false
            }
            None => false,
        }
    }

    /// Remembers that the plain counter under `key` is over its limit until `until`, when its
    /// window ends.
    pub(crate) fn remember_counter(&self, key: &str, until: Micros, now: Micros) {
        let id = self.hasher.hash_one(key);
        let mut shard = self.counter_shard(id);
        if shard.len() >= MAX_ENTRIES_PER_SHARD {
            shard.retain(|_, end| *end > now);
            if shard.len() >= MAX_ENTRIES_PER_SHARD {
                return;
            }
        }
        shard.insert(id, until);
    }

    /// Invalidates every entry holding one of `check`'s keys (after a refund or a charge).
    fn forget_keys(&self, check: &Check<'_>) {
        for item in check.items() {
            self.generation(self.key_hash(&item.key))
                .fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl<S: Store> Store for OverLimitCache<S> {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        // A check at an explicit time is a replay or a test: the cache, on the clock, stays out.
        // The clock is read only when the cache could use the time.
        // An exact check is the store's to answer, and its denial is not remembered either.
        let cached = at.is_none() && !check.is_exact();
        if cached
            && self.enabled.load(Ordering::Acquire)
            && let Some(verdict) = self.lookup(check, self.clock.now())
        {
            self.observer.cache_hit();
            return Ok(verdict);
        }
        let verdict = self.inner.check(check, at).await?;
        if cached && verdict.is_denied() {
            self.remember(check, &verdict, self.clock.now());
        }
        Ok(verdict)
    }

    /// Only while the cache is off (as it is for the memory store), when `check` passes
    /// straight through: an off cache remembers nothing.
    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        if self.enabled.load(Ordering::Acquire) {
            return None;
        }
        self.inner.check_now(check)
    }

    async fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        // A refund may make room that a remembered denial would hide; a charge makes none.
        if adjustments
            .iter()
            .any(|adjustment| matches!(adjustment, Adjustment::Refund { .. }))
        {
            self.forget_keys(check);
        }
        self.inner.adjust(check, adjustments, at).await
    }

    async fn forget(&self, check: &Check<'_>) -> Result<(), StoreError> {
        self.forget_keys(check);
        self.inner.forget(check).await
    }

    pass_to_inner!(counters);

    pass_to_inner!(describe);
}
