//! One shard of the memory store: a map from hashed (key, limit) to state, bounded in size.

use std::hash::{BuildHasherDefault, Hasher};

use indexmap::IndexMap;

use crate::algorithm::State;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::limit::Limit;

/// How many entries eviction looks at to choose one: the least recently used of 16 random
/// entries is among the oldest 6% with odds of 1 - 0.94^16 (63%), and a key used within the
/// last tenth of the store's turnover is taken with odds below 10^-15.
const EVICTION_SAMPLES: usize = 16;

/// The bit of [`Slot::used`] that marks a pinned state.
const PINNED: Micros = 1 << 63;

/// What a shard keeps per (key, limit).
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) state: State,
    /// After this instant the state is as good as fresh and may be dropped.
    pub(super) expires_at: Micros,
    /// When the state was last used, with [`PINNED`] set for a limit whose state is evicted
    /// only when nothing else can be (see `Limit::pinned`).
    used: Micros,
}

impl Slot {
    fn new(state: State, expires_at: Micros, now: Micros, pinned: bool) -> Self {
        Self {
            state,
            expires_at,
            used: now | if pinned { PINNED } else { 0 },
        }
    }

    /// Marks the state used at `now`, keeping its pin.
    fn touch(&mut self, now: Micros) {
        self.used = now | (self.used & PINNED);
    }

    /// The order eviction takes entries in: the expired first, then unpinned before pinned,
    /// then the least recently used.
    fn eviction_rank(&self, now: Micros) -> (bool, Micros) {
        (self.expires_at > now, self.used)
    }
}

/// Map keys are already uniformly random SipHash values; hashing them again is waste.
#[derive(Default)]
pub(super) struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

pub(super) struct Shard {
    pub(super) slots: IndexMap<u64, Slot, BuildHasherDefault<PrehashedHasher>>,
    capacity: usize,
    rng: fastrand::Rng,
    /// Live entries evicted to make room, counted under the shard's lock.
    pub(super) evictions: u64,
}

impl Shard {
    pub(super) fn new(capacity: usize, seed: u64) -> Self {
        Self {
            slots: IndexMap::default(),
            capacity,
            rng: fastrand::Rng::with_seed(seed),
            evictions: 0,
        }
    }

    /// The most entries the shard holds.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn get(&self, slot: u64) -> Option<&State> {
        self.slots.get(&slot).map(|slot| &slot.state)
    }

    /// Decides one (key, limit) in place: the hot path of single-limit checks, one lookup and
    /// no copies.
    pub(super) fn decide_one(
        &mut self,
        slot: u64,
        limit: &Limit,
        cost: u64,
        now: Micros,
    ) -> Decision {
        let Some((index, _, entry)) = self.slots.get_full_mut(&slot) else {
            return self.decide_new(slot, limit, cost, now);
        };
        let decision = entry.state.step(limit, now, cost);
        let reset_after = decision.reset_after_micros();
        if reset_after == 0 {
            self.slots.swap_remove_index(index);
        } else {
            entry.expires_at = now + reset_after;
            entry.touch(now);
        }
        decision
    }

    /// [`Shard::decide_one`] for a (key, limit) the shard does not hold.
    #[cold]
    fn decide_new(&mut self, slot: u64, limit: &Limit, cost: u64, now: Micros) -> Decision {
        let mut state = State::fresh(limit, now);
        let decision = state.step(limit, now, cost);
        if decision.allowed() && cost > 0 {
            let expires_at = now + decision.reset_after_micros();
            self.put(slot, state, expires_at, now, limit.pinned());
        }
        decision
    }

    /// Reads a plain counter, or raises it by `add`'s hits and makes it expire at `add`'s
    /// time. Kept as a fixed window's count, so that counters share the shard's bound and
    /// eviction with every other state.
    pub(super) fn counter(&mut self, slot: u64, add: Option<(u64, Micros)>, now: Micros) -> u64 {
        let current = match self.slots.get(&slot) {
            Some(Slot {
                state: State::FixedWindow(window),
                expires_at,
                ..
            }) if *expires_at > now => window.count,
            _ => 0,
        };
        let Some((hits, expires_at)) = add else {
            return current;
        };
        let count = current.saturating_add(hits);
        let state = State::FixedWindow(crate::algorithm::fixed_window::State { start: 0, count });
        self.put(slot, state, expires_at, now, false);
        count
    }

    /// Moves a state out for the length of a check, leaving a placeholder that only the lock
    /// holder can see and that [`Shard::put`] replaces.
    pub(super) fn take(&mut self, slot: u64) -> Option<State> {
        let placeholder = State::Gcra(crate::algorithm::gcra::State { tat: 0 });
        self.slots
            .get_mut(&slot)
            .map(|slot| std::mem::replace(&mut slot.state, placeholder))
    }

    /// Stores a state used at `now`, evicting an entry to make room if the shard is full.
    pub(super) fn put(
        &mut self,
        slot: u64,
        state: State,
        expires_at: Micros,
        now: Micros,
        pinned: bool,
    ) {
        if expires_at <= now {
            self.slots.swap_remove(&slot);
            return;
        }
        if let Some(existing) = self.slots.get_mut(&slot) {
            existing.state = state;
            existing.expires_at = expires_at;
            existing.touch(now);
            return;
        }
        self.expire_sample(now);
        if self.slots.len() >= self.capacity && self.evict_one(now) {
            self.evictions += 1;
        }
        self.slots
            .insert(slot, Slot::new(state, expires_at, now, pinned));
    }

    /// Removes a random entry if it has expired, so idle keys leave even without eviction.
    fn expire_sample(&mut self, now: Micros) {
        if self.slots.is_empty() {
            return;
        }
        let index = self.rng.usize(..self.slots.len());
        if self.slots[index].expires_at <= now {
            self.slots.swap_remove_index(index);
        }
    }

    /// Evicts, among sampled entries, an expired one, else the least recently used unpinned
    /// one, else the least recently used: a flood of new keys pushes out the flood's own older
    /// keys and idle ones, never a key in use nor, while anything else is held, a pinned one.
    /// Returns whether the entry was still live.
    fn evict_one(&mut self, now: Micros) -> bool {
        let len = self.slots.len();
        let victim = (0..EVICTION_SAMPLES.min(len))
            .map(|_| self.rng.usize(..len))
            .min_by_key(|&index| self.slots[index].eviction_rank(now));
        victim.is_some_and(|index| {
            let live = self.slots[index].expires_at > now;
            self.slots.swap_remove_index(index);
            live
        })
    }

    pub(super) fn purge_expired(&mut self, now: Micros) -> usize {
        let before = self.slots.len();
        self.slots.retain(|_, slot| slot.expires_at > now);
        before - self.slots.len()
    }

    /// Heap bytes held by the map and the states it owns.
    pub(super) fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u64, u64, Slot)>();
        let index = std::mem::size_of::<usize>() + 1;
        let table = self.slots.capacity() * (entry + index);
        let logs: usize = self
            .slots
            .values()
            .map(|slot| match &slot.state {
                State::SlidingLog(log) => {
                    std::mem::size_of_val(&**log)
                        + log.entries.capacity() * std::mem::size_of::<(u64, u64)>()
                }
                _ => 0,
            })
            .sum();
        table + logs
    }
}
