//! The global tier on its own, where a limiter does not reach: a check at an explicit time.

use std::sync::Arc;

use tollgate_core::algorithm::Algorithm;
use tollgate_core::check::Check;
use tollgate_core::clock::{Clock, ManualClock, Micros};
use tollgate_core::limit::Limit;
use tollgate_core::quota::Quota;
use tollgate_core::scope::Scope;

use super::{GlobalLeases, GlobalTier, LeaseTuning};
use crate::store::{AnyStore, MemoryStore, Store};

const START: Micros = 1_800_000_000_000_000;

fn limit(name: &str, quota: &str, scope: Scope) -> Limit {
    let quota: Quota = quota.parse().expect("a quota");
    Limit::builder(name, Algorithm::FixedWindow, quota)
        .scope(scope)
        .build()
        .expect("a limit")
}

fn memory(clock: &ManualClock) -> MemoryStore {
    MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build()
}

/// What the global store has left of `limit` for `key`, looked at without counting.
async fn left(global: &AnyStore, key: &str, limit: &Limit) -> u64 {
    let check = Check::new(0).limit(key, limit);
    let verdict = global.check(&check, None).await.expect("an answer");
    verdict.decisions()[0].remaining()
}

#[tokio::test(start_paused = true)]
async fn a_check_at_an_explicit_time_is_decided_by_the_global_store_all_or_nothing() {
    let clock = ManualClock::new(START);
    let global = Arc::new(AnyStore::Memory(memory(&clock)));
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let leases = Arc::new(GlobalLeases::new(
        Arc::clone(&global),
        shared,
        LeaseTuning::default(),
    ));
    let store = GlobalTier::new(memory(&clock), Some(Arc::clone(&leases)));
    let user = limit("user", "1/h", Scope::Region);
    let tenant = limit("tenant", "5/h", Scope::Global);
    let check = Check::new(1)
        .limit("user:1", &user)
        .limit("tenant:acme", &tenant);
    let admitted = store.check(&check, Some(START)).await.unwrap();
    assert!(admitted.is_admitted());
    assert_eq!(
        left(&global, "tenant:acme", &tenant).await,
        4,
        "charged at the global store"
    );
    let denied = store.check(&check, Some(START)).await.unwrap();
    assert!(!denied.is_admitted(), "the regional limit binds");
    assert_eq!(
        left(&global, "tenant:acme", &tenant).await,
        4,
        "the regional denial refunded the global charge"
    );
    assert_eq!(leases.stats().leased, 0, "no lease at an explicit time");
}
