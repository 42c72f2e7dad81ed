//! What a limiter holds of the overrides: its backend, and the table compiled against its
//! policies, swapped whole when either changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;

use super::model::{StoredOverride, stored_of};
use super::table::OverrideTable;
use super::{MemoryOverrideBackend, OverrideBackend, OverrideSnapshot};
use crate::policy::{Plan, Policies};
use tollgate_core::clock::Micros;

/// A limiter's overrides.
#[derive(Debug)]
pub(crate) struct OverrideState {
    backend: RwLock<Arc<dyn OverrideBackend>>,
    table: ArcSwap<OverrideTable>,
    /// Whether the table applies to anything: read on every plan, so that a limiter without
    /// overrides pays one load for them.
    active: AtomicBool,
}

impl Default for OverrideState {
    fn default() -> Self {
        Self {
            backend: RwLock::new(Arc::new(MemoryOverrideBackend::new())),
            table: ArcSwap::default(),
            active: AtomicBool::new(false),
        }
    }
}

impl OverrideState {
    pub(crate) fn backend(&self) -> Arc<dyn OverrideBackend> {
        Arc::clone(&self.backend.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Keeps overrides in `backend` from now on; the table is read from it at the next
    /// refresh.
    pub(crate) fn attach(&self, backend: Arc<dyn OverrideBackend>) {
        *self.backend.write().unwrap_or_else(|e| e.into_inner()) = backend;
        self.install(None, Arc::default(), 0);
    }

    /// The table in force.
    pub(crate) fn table(&self) -> Arc<OverrideTable> {
        self.table.load_full()
    }

    /// Compiles `stored` at `version` against `policies` and puts it in force; returns the
    /// overrides that fit no policy, with why.
    pub(crate) fn install(
        &self,
        policies: Option<&Policies>,
        stored: Arc<Vec<StoredOverride>>,
        version: u64,
    ) -> Vec<(String, String)> {
        let (table, unfit) = OverrideTable::compile(policies, stored, version);
        self.active.store(!table.is_empty(), Ordering::Release);
        self.table.store(Arc::new(table));
        unfit
    }

    /// Reads `snapshot`'s records; an unreadable one is left out and named.
    pub(crate) fn read(
        snapshot: &OverrideSnapshot,
    ) -> (Vec<StoredOverride>, Vec<(String, String)>) {
        let mut stored = Vec::with_capacity(snapshot.records.len());
        let mut unreadable = Vec::new();
        for record in &snapshot.records {
            match stored_of(&record.body, record.version) {
                Ok(one) => stored.push(one),
                Err(why) => unreadable.push((record.id.clone(), why)),
            }
        }
        stored.sort_by_key(|one| one.item.target());
        (stored, unreadable)
    }

    /// Applies the overrides in force to `plan` at `now`, if any are.
    pub(crate) fn apply(&self, policies: &Policies, plan: &mut Plan, now: impl Fn() -> Micros) {
        if self.active.load(Ordering::Acquire) {
            self.table.load().apply(policies, plan, now);
        }
    }
}
