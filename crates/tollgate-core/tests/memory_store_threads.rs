//! Many threads hammering the same keys with the real clock never get more than the quota.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use tollgate_core::{Algorithm, Check, Clock, Limit, MemoryStore, SystemClock};

const THREADS: usize = 8;
const ATTEMPTS_PER_THREAD: usize = 20_000;

#[test]
fn threads_sharing_keys_never_exceed_the_quota() {
    // Hour-long quotas: however fast the threads run, nothing refills during the test, so the
    // quota is exactly what may be admitted (plus the rate algorithms' one-interval refill).
    let limits: Vec<Limit> = Algorithm::ALL
        .iter()
        .map(|&algorithm| {
            Limit::new(algorithm.as_str(), algorithm, "500/h".parse().unwrap()).unwrap()
        })
        .collect();
    let store = Arc::new(MemoryStore::new());
    let clock = SystemClock::new();
    let started = clock.now();
    let admitted: Arc<Vec<AtomicU64>> =
        Arc::new(limits.iter().map(|_| AtomicU64::new(0)).collect());
    // The all-or-nothing pair: per-user and per-tenant on two keys, always checked together.
    let pair_user = Limit::new("pair-user", Algorithm::Gcra, "300/h".parse().unwrap()).unwrap();
    let pair_tenant = Limit::new(
        "pair-tenant",
        Algorithm::FixedWindow,
        "200/h".parse().unwrap(),
    )
    .unwrap();
    let pair_admitted = Arc::new(AtomicU64::new(0));
    thread::scope(|scope| {
        for thread_index in 0..THREADS {
            let (store, admitted, limits) = (&store, &admitted, &limits);
            let (pair_user, pair_tenant, pair_admitted) =
                (&pair_user, &pair_tenant, &pair_admitted);
            scope.spawn(move || {
                let clock = SystemClock::new();
                for attempt in 0..ATTEMPTS_PER_THREAD {
                    let which = (attempt + thread_index) % limits.len();
                    let verdict = store
                        .decide(&Check::one("shared", &limits[which]), clock.now())
                        .unwrap();
                    if verdict.is_admitted() {
                        admitted[which].fetch_add(1, Ordering::Relaxed);
                    }
                    let pair = Check::new(1)
                        .limit("user:1", pair_user)
                        .limit("tenant:1", pair_tenant);
                    if store.decide(&pair, clock.now()).unwrap().is_admitted() {
                        pair_admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let elapsed = clock.now() - started;
    for (limit, count) in limits.iter().zip(admitted.iter()) {
        let count = count.load(Ordering::Relaxed);
        let refill = if limit.algorithm().is_rate() {
            elapsed.div_ceil(limit.interval())
        } else {
            0
        };
        assert!(count <= 500 + refill, "{limit}: {count} admitted");
        assert!(
            count >= 500,
            "{limit}: only {count} admitted, the quota was never reached"
        );
    }
    // The pair is bound by the tenant's 200; the user's 300 must show exactly those 200 taken.
    assert_eq!(pair_admitted.load(Ordering::Relaxed), 200);
    let user_left = store
        .decide(&Check::new(0).limit("user:1", &pair_user), clock.now())
        .unwrap()
        .decisions()[0]
        .remaining();
    let refilled = elapsed.div_ceil(pair_user.interval());
    assert!(
        (100..=100 + refilled).contains(&user_left),
        "user has {user_left} left"
    );
}
