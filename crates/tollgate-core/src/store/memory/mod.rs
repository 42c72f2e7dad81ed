//! The in-process store, Tollgate's embedded default.
//!
//! State lives in a fixed number of shards, each a mutex around a map, so threads working on
//! different keys rarely meet and no lock is global. A check touching several shards locks them
//! in ascending order, which rules out deadlock, and commits only if every item is admitted.
//!
//! The number of keys is capped. A new key arriving at a full shard evicts, among sampled
//! entries, an expired one, else the least recently used (pinned states, such as refund claims,
//! last), so a flood of unique keys (rotating IPv6 addresses, say) costs a bounded amount of
//! memory and pushes out its own older keys and idle ones, never the state of a client in use.
//! Entries whose state is as good as fresh expire and are removed as they are met.

mod shard;
mod siphash;

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use self::shard::Shard;
use self::siphash::SipKey;
use super::{Store, StoreError};
use crate::algorithm::{Adjustment, State};
use crate::check::{Check, Item, Verdict};
use crate::clock::{Clock, Micros, SystemClock};
use crate::counter::CounterOp;
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
    hash_key: SipKey,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MemoryStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStoreBuilder")
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
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
        // The bound spread over the shards so that they hold exactly `max_keys` together.
        let max_keys = self.max_keys.max(1);
        let (per_shard, extra) = (max_keys / shards, max_keys % shards);
        let hash_key = SipKey::random();
        let shards = (0..shards)
            .map(|index| {
                let capacity = (per_shard + usize::from(index < extra)).max(1);
                Padded(Mutex::new(Shard::new(capacity, index as u64)))
            })
            .collect();
        MemoryStore {
            shards,
            hash_key,
            clock: self.clock,
        }
    }
}

/// Locks a shard. The lock does not poison: a panic while holding a shard cannot leave a
/// half-written state (writes are single assignments), so the shard stays sound.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock()
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

/// One distinct (key, limit) of a check while its shards are locked.
struct Work<'c> {
    slot: u64,
    limit: &'c Limit,
    cost: u64,
    state: Option<State>,
    existed: bool,
}

impl Work<'_> {
    fn admits(&self, now: Micros) -> bool {
        self.state
            .as_ref()
            .is_some_and(|state| state.admits(self.limit, now, self.cost))
    }
}

/// A check's distinct pairs with their shards locked; `positions[i]` is item `i`'s pair.
struct Gathered<'s, 'c> {
    locked: Locked<'s>,
    work: SmallVec<[Work<'c>; 4]>,
    positions: SmallVec<[usize; 4]>,
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

    /// The keyed 64-bit SipHash-1-3 of a key. Keys come from outside, so the hash is keyed
    /// with random keys that never leave the process: aiming one key at another's state means
    /// guessing among 2^64 values, and accidental collisions among a million keys have a chance
    /// of about 3 in 10^8.
    #[inline]
    fn key_hash(&self, key: &str) -> u64 {
        self.hash_key.hash(key.as_bytes())
    }

    /// The slot of (key, limit): the key's hash and the limit's id through a bijective mixer
    /// (the SplitMix64 finaliser), so that one key under two limits never shares a slot and a
    /// key is hashed once however many limits it is checked against.
    fn slot_of(key_hash: u64, limit: &Limit) -> u64 {
        Self::mix(key_hash ^ limit.state_id())
    }

    /// The slot of a plain counter (see [`crate::counter`]): its key's hash mixed as a
    /// limit's would be, with an id of its own.
    fn counter_slot(key_hash: u64) -> u64 {
        /// "counters" in ASCII.
        const COUNTERS: u64 = 0x636f_756e_7465_7273;
        Self::mix(key_hash ^ COUNTERS)
    }

    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn shard_of(&self, slot: u64) -> usize {
        (slot >> 48) as usize & (self.shards.len() - 1)
    }

    fn lock_for(&self, slots: &[u64]) -> Locked<'_> {
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

    /// Gathers a check's items by (key, limit), summing the costs of a pair listed twice, and
    /// takes their states out of the locked shards, brought forward to `now`.
    fn gather<'c>(&self, items: &[Item<'c>], now: Micros) -> Gathered<'_, 'c> {
        let mut work: SmallVec<[Work<'c>; 4]> = SmallVec::new();
        let mut positions: SmallVec<[usize; 4]> = SmallVec::with_capacity(items.len());
        let mut hashed: SmallVec<[(&str, u64); 4]> = SmallVec::new();
        for item in items {
            let key_hash = match hashed.iter().find(|(key, _)| *key == item.key) {
                Some(&(_, hash)) => hash,
                None => {
                    let hash = self.key_hash(&item.key);
                    hashed.push((&item.key, hash));
                    hash
                }
            };
            let slot = Self::slot_of(key_hash, item.limit);
            let position = match work.iter().position(|w| w.slot == slot) {
                Some(position) => {
                    work[position].cost = work[position].cost.saturating_add(item.cost);
                    position
                }
                None => {
                    work.push(Work {
                        slot,
                        limit: item.limit,
                        cost: item.cost,
                        state: None,
                        existed: false,
                    });
                    work.len() - 1
                }
            };
            positions.push(position);
        }
        let slots: SmallVec<[u64; 4]> = work.iter().map(|w| w.slot).collect();
        let mut locked = self.lock_for(&slots);
        for w in &mut work {
            let stored = locked.shard(self.shard_of(w.slot)).take(w.slot);
            w.existed = stored.is_some();
            w.state = Some(State::current(stored, w.limit, now));
        }
        Gathered {
            locked,
            work,
            positions,
        }
    }

    /// Puts states back after a check or an adjustment. States that are as good as fresh
    /// leave; new keys are added only when `admitted` and something was counted.
    fn put_back(&self, gathered: &mut Gathered<'_, '_>, admitted: bool, now: Micros) {
        for w in &mut gathered.work {
            let Some(state) = w.state.take() else {
                continue;
            };
            if w.existed || (admitted && w.cost > 0) {
                let expires_at = now + state.reset_after(w.limit, now);
                let shard = gathered.locked.shard(self.shard_of(w.slot));
                shard.put(w.slot, state, expires_at, now, w.limit.pinned());
            }
        }
    }

    /// Decides a check at `now`, synchronously. This is what [`Store::check`] runs.
    ///
    /// A (key, limit) pair listed more than once is decided once, for the sum of its costs, and
    /// that decision is reported at each of its positions.
    pub fn decide(&self, check: &Check<'_>, now: Micros) -> Result<Verdict, StoreError> {
        check.validate()?;
        if let [item] = check.items() {
            let slot = Self::slot_of(self.key_hash(&item.key), item.limit);
            let decision = lock(&self.shards[self.shard_of(slot)].0)
                .decide_one(slot, item.limit, item.cost, now);
            return Ok(Verdict::single(now, decision));
        }
        Ok(self.decide_many(check.items(), now))
    }

    /// [`MemoryStore::decide`] for a validated check of any number of items.
    #[inline(never)]
    fn decide_many(&self, items: &[Item<'_>], now: Micros) -> Verdict {
        let mut gathered = self.gather(items, now);
        let admitted = gathered.work.iter().all(|w| w.admits(now));
        let decisions: SmallVec<[Decision; 2]> = gathered
            .work
            .iter_mut()
            .map(|w| {
                let (limit, cost) = (w.limit, w.cost);
                let state = w.state.as_mut().expect("gathered states are present");
                let allowed = admitted || state.admits(limit, now, cost);
                if admitted {
                    state.consume(limit, now, cost);
                }
                state.describe(limit, now, cost, allowed)
            })
            .collect();
        self.put_back(&mut gathered, admitted, now);
        Verdict::from_decisions(
            now,
            gathered
                .positions
                .iter()
                .map(|&position| decisions[position]),
        )
    }

    /// Refunds or charges each item of `check` by its cost at `now`, as `adjustments` (one per
    /// item) says, synchronously.
    pub fn apply(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        now: Micros,
    ) -> Result<(), StoreError> {
        check.validate_adjustments(adjustments)?;
        let mut gathered = self.gather(check.items(), now);
        let mut charged = false;
        for (w, position) in gathered.work.iter_mut().zip(0..) {
            let adjustment = Check::gathered_adjustment(&gathered.positions, position, adjustments);
            charged |= adjustment == Adjustment::Charge;
            if let Some(state) = w.state.as_mut() {
                state.adjust(w.limit, now, adjustment, w.cost);
            }
        }
        self.put_back(&mut gathered, charged, now);
        Ok(())
    }

    /// The stored state of `key` under `limit`, if any (it may be stale: states are brought
    /// forward only when used).
    pub fn state(&self, key: &str, limit: &Limit) -> Option<State> {
        let slot = Self::slot_of(self.key_hash(key), limit);
        lock(&self.shards[self.shard_of(slot)].0).get(slot).cloned()
    }

    /// Forgets `key` under `limit`, as if it had never been used; returns whether it was held.
    pub fn reset(&self, key: &str, limit: &Limit) -> bool {
        let slot = Self::slot_of(self.key_hash(key), limit);
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
        let mut stats = MemoryStats {
            keys: 0,
            evictions: 0,
            heap_bytes: 0,
        };
        for shard in &self.shards {
            let shard = lock(&shard.0);
            stats.keys += shard.slots.len();
            stats.evictions += shard.evictions;
            stats.heap_bytes += shard.heap_bytes();
        }
        stats
    }
}

impl Store for MemoryStore {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        self.decide(check, at.unwrap_or_else(|| self.clock.now()))
    }

    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        Some(self.decide(check, self.clock.now()))
    }

    async fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        self.apply(check, adjustments, at.unwrap_or_else(|| self.clock.now()))
    }

    async fn forget(&self, check: &Check<'_>) -> Result<(), StoreError> {
        check.validate()?;
        for item in check.items() {
            self.reset(&item.key, item.limit);
        }
        Ok(())
    }

    async fn counters(&self, ops: &[CounterOp<'_>]) -> Result<Vec<u64>, StoreError> {
        let now = self.clock.now();
        Ok(ops
            .iter()
            .map(|op| {
                let slot = Self::counter_slot(self.key_hash(op.key));
                let add = op.add.map(|add| {
                    let ttl = add.ttl.saturating_mul(crate::clock::MICROS_PER_SECOND);
                    (add.hits, now.saturating_add(ttl))
                });
                lock(&self.shards[self.shard_of(slot)].0).counter(slot, add, now)
            })
            .collect())
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn held_keys(&self) -> Option<super::HeldKeys> {
        let mut held = super::HeldKeys {
            held: 0,
            max: 0,
            evictions: 0,
        };
        for shard in &self.shards {
            let shard = lock(&shard.0);
            held.held += shard.slots.len() as u64;
            held.max += shard.capacity() as u64;
            held.evictions += shard.evictions;
        }
        Some(held)
    }

    fn own_clock(&self) -> Option<&Arc<dyn Clock>> {
        Some(&self.clock)
    }
}

#[cfg(test)]
mod tests;
