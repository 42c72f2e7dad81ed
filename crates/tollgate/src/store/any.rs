//! A store chosen at run time: the memory store or a Redis store (single node or cluster).

use super::{MemoryStore, Store, StoreError};
use crate::algorithm::Adjustment;
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::Micros;

/// Any of the stores, for programs that pick one from configuration.
#[derive(Debug)]
pub enum AnyStore {
    /// In process.
    Memory(MemoryStore),
    /// A Redis or a Redis Cluster.
    #[cfg(feature = "redis")]
    Redis(super::RedisStore),
}

impl Store for AnyStore {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        match self {
            AnyStore::Memory(store) => store.check(check, at).await,
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.check(check, at).await,
        }
    }

    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        match self {
            AnyStore::Memory(store) => store.check_now(check),
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.check_now(check),
        }
    }

    async fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.adjust(check, adjustments, at).await,
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.adjust(check, adjustments, at).await,
        }
    }

    async fn forget(&self, check: &Check<'_>) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.forget(check).await,
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.forget(check).await,
        }
    }

    async fn counters(
        &self,
        ops: &[crate::counter::CounterOp<'_>],
    ) -> Result<Vec<u64>, StoreError> {
        match self {
            AnyStore::Memory(store) => store.counters(ops).await,
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.counters(ops).await,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(store) => store.kind(),
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.kind(),
        }
    }

    fn own_clock(&self) -> Option<&std::sync::Arc<dyn tollgate_core::clock::Clock>> {
        match self {
            AnyStore::Memory(store) => store.own_clock(),
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.own_clock(),
        }
    }

    fn held_keys(&self) -> Option<tollgate_core::store::HeldKeys> {
        match self {
            AnyStore::Memory(store) => store.held_keys(),
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => store.held_keys(),
        }
    }
}
