use std::sync::Arc;

use super::*;
use crate::algorithm::Algorithm;
use crate::clock::ManualClock;

fn limit(name: &str, algorithm: Algorithm, quota: &str) -> Limit {
    Limit::new(name, algorithm, quota.parse().unwrap()).unwrap()
}

fn store_at(clock: &ManualClock, max_keys: usize) -> MemoryStore {
    MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .max_keys(max_keys)
        .shards(4)
        .build()
}

#[test]
fn a_denial_by_one_limit_counts_nothing_anywhere() {
    let clock = ManualClock::new(0);
    let store = store_at(&clock, 100);
    let per_second = limit("s", Algorithm::TokenBucket, "10/s");
    let per_ip = limit("ip", Algorithm::FixedWindow, "2/m");
    let check = Check::new(1)
        .limit("user:1", &per_second)
        .limit("ip:1", &per_ip);
    assert!(store.decide(&check, 0).unwrap().is_allowed());
    assert!(store.decide(&check, 0).unwrap().is_allowed());
    let denied = store.decide(&check, 0).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.binding_index(), Some(1));
    assert_eq!(
        denied.decisions()[0].remaining(),
        8,
        "the token bucket still has 8"
    );
    assert_eq!(
        denied.decisions()[0].retry_after(),
        Some(std::time::Duration::ZERO)
    );
    let only_bucket = store
        .decide(&Check::new(8).limit("user:1", &per_second), 0)
        .unwrap();
    assert!(only_bucket.is_allowed(), "all 8 tokens are still there");
}

#[test]
fn the_same_limit_listed_twice_counts_twice() {
    let store = MemoryStore::new();
    let once = limit("x", Algorithm::FixedWindow, "3/m");
    let check = Check::new(2).limit("k", &once).limit("k", &once);
    assert!(store.decide(&check, 0).unwrap().is_denied(), "2 + 2 > 3");
    let check = Check::new(1).limit("k", &once).limit("k", &once);
    assert!(store.decide(&check, 0).unwrap().is_allowed());
    assert_eq!(
        store
            .decide(&Check::one("k", &once), 0)
            .unwrap()
            .decisions()[0]
            .remaining(),
        0
    );
}

#[test]
fn refund_and_settle_give_back_and_charge() {
    let store = MemoryStore::new();
    let window = limit("w", Algorithm::FixedWindow, "10/m");
    let check = Check::new(4).limit("k", &window);
    let verdict = store.decide(&check, 0).unwrap();
    store
        .apply(
            &check,
            &[Adjustment::Refund {
                charged_at: verdict.at(),
            }],
            0,
        )
        .unwrap();
    assert_eq!(
        store.state("k", &window),
        None,
        "a full refund leaves nothing to remember"
    );
    store.decide(&check, 0).unwrap();
    store
        .apply(&Check::new(5).limit("k", &window), &[Adjustment::Charge], 0)
        .unwrap();
    let verdict = store.decide(&Check::new(0).limit("k", &window), 0).unwrap();
    assert_eq!(verdict.decisions()[0].remaining(), 1);
}

#[test]
fn idle_keys_expire_and_are_purged() {
    let clock = ManualClock::new(0);
    let store = store_at(&clock, 100);
    let gcra = limit("g", Algorithm::Gcra, "10/s");
    for user in 0..20 {
        store
            .decide(&Check::one(format!("user:{user}"), &gcra), 0)
            .unwrap();
    }
    assert_eq!(store.stats().keys, 20);
    clock.advance(std::time::Duration::from_millis(99));
    assert_eq!(
        store.purge_expired(),
        0,
        "each key needs 100 ms to be fresh again"
    );
    clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(store.purge_expired(), 20);
    assert_eq!(store.stats().keys, 0);
}

#[test]
fn a_flood_of_unique_keys_stays_within_the_cap() {
    let clock = ManualClock::new(0);
    let store = store_at(&clock, 1_000);
    let gcra = limit("g", Algorithm::Gcra, "1/h");
    for n in 0..50_000u32 {
        let ip = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, (n >> 16) as u16, n as u16);
        store
            .decide(&Check::one(format!("ip:{ip}"), &gcra), 0)
            .unwrap();
    }
    let stats = store.stats();
    assert!(stats.keys <= 1_000, "{stats:?}");
    assert!(stats.evictions >= 49_000, "{stats:?}");
}

/// A key flood used to evict the states that would be fresh soonest: a client's spent limit,
/// and a refund claim, went first, so a spent limit forgot itself and a refunded charge could
/// be refunded again.
#[test]
fn a_flood_evicts_its_own_older_keys_not_a_spent_limit_in_use_nor_a_claim() {
    let clock = ManualClock::new(0);
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .max_keys(256)
        .shards(1)
        .build();
    let login = limit("login", Algorithm::SlidingLog, "5/m");
    let claim = Limit::builder("~claim", Algorithm::Gcra, "1/h".parse().unwrap())
        .pinned(true)
        .build()
        .unwrap();
    let flood = limit("flood", Algorithm::Gcra, "1/d");
    let spend = |at: Micros| {
        store
            .decide(&Check::one("ip:attacker", &login), at)
            .unwrap()
    };
    for _ in 0..5 {
        assert!(spend(0).is_admitted());
    }
    assert!(
        store
            .decide(&Check::one("charge|a1", &claim), 0)
            .unwrap()
            .is_admitted()
    );
    for n in 0..20_000u64 {
        let at = 1_000 + n * 1_000;
        store
            .decide(&Check::one(format!("new:{n}"), &flood), at)
            .unwrap();
        // In use: tried again well within the store's turnover (256 keys).
        if n % 10 == 0 {
            assert!(!spend(at).is_admitted(), "the spent limit holds at key {n}");
        }
    }
    assert!(store.stats().evictions > 19_000);
    assert!(
        !store
            .decide(&Check::one("charge|a1", &claim), 20_000_000)
            .unwrap()
            .is_admitted(),
        "the claim is still held"
    );
}

#[test]
fn limits_with_the_same_name_on_different_keys_are_independent() {
    let store = MemoryStore::new();
    let one = limit("one", Algorithm::FixedWindow, "1/m");
    assert!(
        store
            .decide(&Check::one("a", &one), 0)
            .unwrap()
            .is_allowed()
    );
    assert!(
        store
            .decide(&Check::one("b", &one), 0)
            .unwrap()
            .is_allowed()
    );
    assert!(store.decide(&Check::one("a", &one), 0).unwrap().is_denied());
    assert!(store.reset("a", &one));
    assert!(
        store
            .decide(&Check::one("a", &one), 0)
            .unwrap()
            .is_allowed()
    );
}

/// Charges one request at `charged_at`, fills the limit with `fill` at `filled_at`, refunds the
/// first request at `refunded_at`, and requires that the refund freed nothing still counted.
fn a_stale_refund_frees_nothing(
    limit: &Limit,
    charged_at: Micros,
    fill: u64,
    filled_at: Micros,
    refunded_at: Micros,
) {
    let store = MemoryStore::new();
    let check = Check::one("k", limit);
    let charged = store.decide(&check, charged_at).unwrap();
    store
        .decide(&Check::new(fill).limit("k", limit), filled_at)
        .unwrap();
    let refund = [Adjustment::Refund {
        charged_at: charged.at(),
    }];
    store.apply(&check, &refund, refunded_at).unwrap();
    assert!(
        store
            .decide(&check, refunded_at.max(filled_at))
            .unwrap()
            .is_denied(),
        "{limit:?}: the refund gave back room that was not its own"
    );
}

#[test]
fn a_refund_after_the_window_rolled_over_gives_nothing_back() {
    // The next window starts full; the refund of a charge from the last one must not add room.
    let window = limit("w", Algorithm::FixedWindow, "2/s");
    a_stale_refund_frees_nothing(&window, 900_000, 2, 1_000_000, 1_100_000);
}

#[test]
fn a_late_refund_gives_back_only_what_has_not_drained() {
    // 100 ms later that request's water has drained; ten new requests fill the bucket.
    let bucket = limit("b", Algorithm::LeakyBucket, "10/s");
    a_stale_refund_frees_nothing(&bucket, 0, 10, 100_000, 100_000);
}

#[test]
fn adjustments_must_match_the_items() {
    let store = MemoryStore::new();
    let window = limit("w", Algorithm::FixedWindow, "10/m");
    let error = store.apply(&Check::one("k", &window), &[], 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "0 adjustments were given for a check of 1 items"
    );
}

/// Runs a store future that never waits (the memory store's never do).
fn now_or_never<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => unreachable!("the memory store does not wait"),
    }
}

#[test]
fn plain_counters_count_and_expire_as_redis_keys_do() {
    use crate::counter::{CounterAdd, CounterOp};
    let clock = ManualClock::new(1_000_000_000);
    let store = store_at(&clock, 100);
    let add = |hits| CounterOp {
        key: "domain_key_value_1200",
        add: Some(CounterAdd { hits, ttl: 60 }),
    };
    let read = CounterOp {
        key: "domain_key_value_1200",
        add: None,
    };
    let counters = |ops: &[CounterOp<'_>]| now_or_never(store.counters(ops)).unwrap();
    assert_eq!(counters(&[read]), [0], "a counter nobody raised reads 0");
    assert_eq!(counters(&[add(3), add(0), read]), [3, 3, 3]);
    assert_eq!(
        store.held_keys().unwrap().held,
        1,
        "kept with the other states"
    );
    clock.advance(std::time::Duration::from_secs(59));
    assert_eq!(counters(&[add(2)]), [5], "each raise renews its life");
    clock.advance(std::time::Duration::from_secs(59));
    assert_eq!(counters(&[read]), [5]);
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(counters(&[read]), [0], "expired");
    // A counter and a limit's state on the same key stay apart.
    let window = limit("domain_key_value_1200", Algorithm::FixedWindow, "1/m");
    let check = Check::one("domain_key_value_1200", &window);
    assert!(store.decide(&check, clock.now()).unwrap().is_allowed());
    assert_eq!(counters(&[read]), [0]);
}
