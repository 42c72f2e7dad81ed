//! The in-process store, Tollgate's embedded default.
//!
//! State lives in a fixed number of shards, each a mutex around a map, so threads working on
//! different keys rarely meet and no lock is global. A check touching several shards locks them
//! in ascending order, which rules out deadlock, and commits only if every item is admitted.
//!
//! The number of keys is capped. A new key arriving at a full shard evicts, among a few sampled
//! entries, the one whose state would become fresh soonest, so a flood of unique keys (rotating
//! IPv6 addresses, say) costs a bounded amount of memory and forgets as little as possible.
//! Entries whose state is as good as fresh expire and are removed as they are met.

mod shard;

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use siphasher::sip128::{Hasher128, SipHasher13};
use smallvec::SmallVec;

use self::shard::Shard;
use super::{Store, StoreError};
use crate::algorithm::{self, Adjustment, State};
use crate::check::{Check, Item, Verdict};
use crate::clock::{Clock, Micros, SystemClock};
use crate::decision::Decision;
use crate::limit::Limit;

/// Keys held at most by default.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// Shards by default.
pub const DEFAULT_SHARDS: usize = 64;

/// Keeps each shard's mutex on its own cache lines so that two threads on two shards do not
/// slow each other down.
#[repr(align(128))]
struct Padded<T>(T);

/// The in-process store.
pub struct MemoryStore {
    shards: Box<[Padded<Mutex<Shard>>]>,
    hash_keys: (u64, u64),
    clock: Arc<dyn Clock>,
    evictions: AtomicU64,
}

/// Builds a [`MemoryStore`].
pub struct MemoryStoreBuilder {
    max_keys: usize,
    shards: usize,
    clock: Arc<dyn Clock>,
}

/// What a memory store holds, for metrics and capacity planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// (key, limit) pairs held.
    pub keys: usize,
    /// Live entries evicted to make room since the store was built.
    pub evictions: u64,
    /// Heap bytes held by the maps and the states they own (an estimate from capacities).
    pub heap_bytes: usize,
}

impl MemoryStats {
    /// Heap bytes per key held (zero when empty).
    pub fn bytes_per_key(&self) -> usize {
        self.heap_bytes.checked_div(self.keys).unwrap_or(0)
    }
}

impl MemoryStoreBuilder {
    /// The most (key, limit) pairs held at once; at least the shard count. Default 1 000 000.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// How many shards (rounded up to a power of two). Default 64.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Builds the store.
    pub fn build(self) -> MemoryStore {
        let shards = self
            .shards
            .clamp(1, self.max_keys.max(1))
            .next_power_of_two();
        let per_shard = self.max_keys.max(1).div_ceil(shards);
        let hash_keys = random_keys();
        let shards = (0..shards)
            .map(|index| {
                Padded(Mutex::new(Shard::new(
                    per_shard,
                    hash_keys.0 ^ index as u64,
                )))
            })
            .collect();
        MemoryStore {
            shards,
            hash_keys,
            clock: self.clock,
            evictions: AtomicU64::new(0),
        }
    }
}

/// Two random words from the standard library's per-process random hash keys, so that nobody
/// outside can craft keys that collide.
fn random_keys() -> (u64, u64) {
    let state = std::collections::hash_map::RandomState::new();
    let mut first = state.build_hasher();
    first.write_u8(1);
    let mut second = state.build_hasher();
    second.write_u8(2);
    (first.finish(), second.finish())
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding a shard cannot leave a half-written state (writes are single
    // assignments), so a poisoned shard is still sound.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shards a check touches, locked in ascending order.
struct Locked<'s> {
    guards: SmallVec<[(usize, MutexGuard<'s, Shard>); 4]>,
}

impl<'s> Locked<'s> {
    fn shard(&mut self, index: usize) -> &mut Shard {
        let position = self
            .guards
            .iter()
            .position(|(locked, _)| *locked == index)
            .unwrap_or(0);
        &mut self.guards[position].1
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store with the defaults: the system clock, 1 000 000 keys at most, 64 shards.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            max_keys: DEFAULT_MAX_KEYS,
            shards: DEFAULT_SHARDS,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn slot_of(&self, key: &str, limit: &Limit) -> u128 {
        let mut hasher = SipHasher13::new_with_keys(self.hash_keys.0, self.hash_keys.1);
        hasher.write(key.as_bytes());
        // 0xFF never occurs in UTF-8, so (key, name) pairs cannot run into each other.
        hasher.write_u8(0xFF);
        hasher.write(limit.name().as_bytes());
        hasher.finish128().as_u128()
    }

    fn shard_of(&self, slot: u128) -> usize {
        (slot >> 64) as usize & (self.shards.len() - 1)
    }

    fn lock_for(&self, slots: &[u128]) -> Locked<'_> {
        let mut indices: SmallVec<[usize; 4]> =
            slots.iter().map(|&slot| self.shard_of(slot)).collect();
        indices.sort_unstable();
        indices.dedup();
        Locked {
            guards: indices
                .into_iter()
                .map(|index| (index, lock(&self.shards[index].0)))
                .collect(),
        }
    }

    fn slots_of(&self, items: &[Item<'_>]) -> SmallVec<[u128; 4]> {
        items
            .iter()
            .map(|item| self.slot_of(&item.key, item.limit))
            .collect()
    }

    /// Decides a check at `now`, synchronously. This is what [`Store::check`] runs.
    pub fn decide(&self, check: &Check<'_>, now: Micros) -> Result<Verdict, StoreError> {
        check.validate()?;
        let items = check.items();
        let slots = self.slots_of(items);
        let mut locked = self.lock_for(&slots);
        let mut steps: SmallVec<[(Decision, State); 4]> = SmallVec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            // A (key, limit) listed twice sees what the earlier listing would leave behind.
            let earlier = (0..index)
                .rev()
                .find(|&before| slots[before] == slots[index]);
            let shard = locked.shard(self.shard_of(slots[index]));
            let stored = match earlier {
                Some(before) => Some(&steps[before].1),
                None => shard.get(slots[index]),
            };
            steps.push(algorithm::step(stored, item.limit, now, item.cost));
        }
        let admitted = steps.iter().all(|(decision, _)| decision.allowed);
        if admitted {
            let mut evicted = 0;
            for ((item, slot), (decision, state)) in items.iter().zip(&slots).zip(steps.iter()) {
                if item.cost > 0 {
                    let expires_at = now + decision.reset_after.as_micros() as u64;
                    let shard = locked.shard(self.shard_of(*slot));
                    evicted += u64::from(shard.put(*slot, state.clone(), expires_at, now));
                }
            }
            if evicted > 0 {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
            }
            return Ok(Verdict::from_decisions(
                steps.into_iter().map(|(decision, _)| decision),
            ));
        }
        let decisions = items
            .iter()
            .zip(&slots)
            .zip(steps)
            .map(|((item, slot), (decision, _))| {
                if decision.allowed {
                    let shard = locked.shard(self.shard_of(*slot));
                    algorithm::peek(shard.get(*slot), item.limit, now, item.cost)
                } else {
                    decision
                }
            });
        let decisions: SmallVec<[Decision; 4]> = decisions.collect();
        Ok(Verdict::from_decisions(decisions))
    }

    /// Refunds or charges every item of `check` by its cost at `now`, synchronously.
    pub fn apply(
        &self,
        check: &Check<'_>,
        adjustment: Adjustment,
        now: Micros,
    ) -> Result<(), StoreError> {
        check.validate()?;
        let items = check.items();
        let slots = self.slots_of(items);
        let mut locked = self.lock_for(&slots);
        for (item, &slot) in items.iter().zip(&slots) {
            let shard = locked.shard(self.shard_of(slot));
            let (state, reset_after) =
                algorithm::adjust(shard.get(slot), item.limit, now, adjustment, item.cost);
            if shard.put(slot, state, now + reset_after, now) {
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// The stored state of `key` under `limit`, if any (it may be stale: states are brought
    /// forward only when used).
    pub fn state(&self, key: &str, limit: &Limit) -> Option<State> {
        let slot = self.slot_of(key, limit);
        lock(&self.shards[self.shard_of(slot)].0).get(slot).cloned()
    }

    /// Forgets `key` under `limit`, as if it had never been used; returns whether it was held.
    pub fn reset(&self, key: &str, limit: &Limit) -> bool {
        let slot = self.slot_of(key, limit);
        lock(&self.shards[self.shard_of(slot)].0)
            .slots
            .swap_remove(&slot)
            .is_some()
    }

    /// Drops every entry whose state is as good as fresh; returns how many.
    pub fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        self.shards
            .iter()
            .map(|shard| lock(&shard.0).purge_expired(now))
            .sum()
    }

    /// What the store holds.
    pub fn stats(&self) -> MemoryStats {
        let (keys, heap_bytes) = self.shards.iter().fold((0, 0), |(keys, bytes), shard| {
            let shard = lock(&shard.0);
            (keys + shard.slots.len(), bytes + shard.heap_bytes())
        });
        MemoryStats {
            keys,
            evictions: self.evictions.load(Ordering::Relaxed),
            heap_bytes,
        }
    }
}

impl Store for MemoryStore {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        self.decide(check, at.unwrap_or_else(|| self.clock.now()))
    }

    async fn adjust(
        &self,
        check: &Check<'_>,
        adjustment: Adjustment,
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        self.apply(check, adjustment, at.unwrap_or_else(|| self.clock.now()))
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests;
