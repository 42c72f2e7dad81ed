//! What the Redis store's tests share: checks queued together, a cluster's slots, random limits
//! and workloads replayed through the memory store and a Redis store alike. What `tollgate`'s
//! tests use too is in `shared.rs`; random limits come from `tollgate-core`'s tests.

#![allow(clippy::disallowed_methods)] // Deadlines and timings of the run itself, not decisions.
#![allow(dead_code, unreachable_pub)]

#[path = "../../../tollgate-core/tests/common/mod.rs"]
mod limits;
mod shared;

pub use shared::*;

use limits::limit_of;
use proptest::prelude::*;
use tollgate_core::{
    Adjustment, Algorithm, CalendarSpec, Check, Limit, MemoryStore, Micros, Store, StoreError,
    Verdict,
};
use tollgate_redis::RedisStore;
use tollgate_testkit::RedisCluster;

/// Decides `checks` at `at`, every one queued before the store's batcher takes any: a check
/// enters the queue when first polled, and on a test's one thread the batcher cannot run
/// until all of them have been, however busy the machine is.
pub async fn queued_together(
    store: &RedisStore,
    checks: &[Check<'_>],
    at: Micros,
) -> Vec<Result<Verdict, StoreError>> {
    let mut pending: Vec<_> = checks
        .iter()
        .map(|check| Box::pin(store.check(check, Some(at))))
        .collect();
    std::future::poll_fn(|context| {
        for check in &mut pending {
            assert!(
                check.as_mut().poll(context).is_pending(),
                "answered at once"
            );
        }
        std::task::Poll::Ready(())
    })
    .await;
    futures_util::future::join_all(pending).await
}

/// Two identities whose states under `limit` lie in different slots of one master.
pub fn two_slots_of_one_master(
    cluster: &RedisCluster,
    store: &RedisStore,
    limit: &Limit,
) -> (String, String) {
    let first = "user:0".to_owned();
    let slot = cluster.slot_of(&store.key_of(&first, limit));
    let master = cluster.master_of(slot).port();
    let second = (1..)
        .map(|n| format!("user:{n}"))
        .find(|identity| {
            let other = cluster.slot_of(&store.key_of(identity, limit));
            other != slot && cluster.master_of(other).port() == master
        })
        .expect("another slot of the same master");
    (first, second)
}

/// Waits until the store has read the cluster's slot map (it does on its first call, in the
/// background): until checks of two slots of one master go out as one call.
pub async fn slot_map_read(cluster: &RedisCluster, store: &RedisStore) {
    let probe = Limit::new(
        "probe",
        Algorithm::FixedWindow,
        "1000000/h".parse().expect("a quota"),
    )
    .expect("a limit");
    let (first, second) = two_slots_of_one_master(cluster, store, &probe);
    let checks = [Check::one(&first, &probe), Check::one(&second, &probe)];
    for _ in 0..500 {
        let before = store.stats().calls;
        for verdict in queued_together(store, &checks, 1_700_000_000_000_000).await {
            verdict.expect("a probe's answer");
        }
        if store.stats().calls - before == 1 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the store never put checks of two slots of one master into one call");
}

/// A random limit of any algorithm and mode.
pub fn any_limit(name: &'static str) -> impl Strategy<Value = Limit> {
    let period = prop_oneof![
        Just(1_000_000u64),
        Just(7_000_000),
        Just(60_000_000),
        1_000u64..5_000_000
    ];
    // Debt bounds: the default (usage charged in full), none, or a few units; and windows that
    // carry their debt or forget it when they end.
    let debt = prop_oneof![2 => Just(None), 1 => Just(Some(0)), 1 => (1u64..30).prop_map(Some)];
    (
        0usize..6,
        1u64..12,
        period,
        1u64..15,
        0u64..15,
        (debt, any::<bool>()),
    )
        .prop_map(
            move |(which, count, period, burst, delay, (debt, expires))| {
                let limit = limit_of(name, which, count, period, burst, delay);
                with_debt(&limit, debt, expires)
            },
        )
}

/// `limit` with a debt bound of `units` (the default for `None`), its windows forgetting their
/// debt when they end if `expires`.
pub fn with_debt(limit: &Limit, units: Option<u64>, expires: bool) -> Limit {
    let mut builder = Limit::builder(limit.name().to_owned(), limit.algorithm(), limit.quota())
        .debt_expires_with_window(expires);
    if let Some(units) = units {
        builder = builder.max_debt(units);
    }
    if let Some(burst) = limit.burst() {
        builder = builder.burst(burst);
    }
    if limit.algorithm() == Algorithm::LeakyBucket {
        builder = builder.mode(limit.mode());
    }
    builder.build().expect("valid limit")
}

/// One step of a workload over three limits and three keys.
#[derive(Debug, Clone)]
pub enum Step {
    /// A check of (key, limit, cost) triples, as indices.
    Check(Vec<Item>),
    /// Refund the `n`-th most recent admitted check.
    Refund(usize),
    /// Charge (key, limit) unconditionally.
    Charge(usize, usize, u64),
}

/// Steps over three keys and three limits: checks of 1 to 3 items (mostly cost 1), refunds of
/// an earlier check, and charges of `charge` units.
fn steps(charge: impl Strategy<Value = u64>) -> impl Strategy<Value = Step> {
    let item = (
        0usize..3,
        0usize..3,
        prop_oneof![5 => Just(1u64), 1 => 0u64..6],
    );
    prop_oneof![
        8 => prop::collection::vec(item, 1..4).prop_map(Step::Check),
        1 => (0usize..4).prop_map(Step::Refund),
        1 => (0usize..3, 0usize..3, charge).prop_map(|(k, l, c)| Step::Charge(k, l, c)),
    ]
}

pub fn workload() -> impl Strategy<Value = (Vec<Limit>, Vec<(Micros, Step)>)> {
    let limits =
        (any_limit("a"), any_limit("b"), any_limit("c")).prop_map(|(a, b, c)| vec![a, b, c]);
    let step = steps(prop_oneof![3 => 1u64..8, 1 => 8u64..120]);
    let gap = prop_oneof![3 => Just(0u64), 4 => 0u64..300_000, 1 => 0u64..20_000_000];
    (limits, prop::collection::vec((gap, step), 1..60))
}

/// An item of a workload's check, as (key, limit, cost) indices.
pub type Item = (usize, usize, u64);

/// Whether Redis's verdict agrees with memory's for a check of these items.
pub type Agrees = fn(&[Item], &Verdict, &Verdict) -> bool;

fn build<'l>(items: &[Item], limits: &'l [Limit]) -> Check<'l> {
    let mut check = Check::new(1);
    for &(key, limit, cost) in items {
        check.push(KEYS[key], &limits[limit], cost);
    }
    check
}

/// A random fixed window counting by a calendar: days, weeks, months from a billing day or
/// years from a date, in zones with 1-hour, 30-minute or no daylight saving.
pub fn calendar_limit(name: &'static str) -> impl Strategy<Value = Limit> {
    let zone = prop_oneof![
        Just("Europe/Berlin"),
        Just("America/New_York"),
        Just("Australia/Lord_Howe"),
        Just("Asia/Kathmandu"),
        Just("UTC"),
    ];
    (
        zone,
        0usize..4,
        1u64..=31,
        1u64..12,
        (0u64..30, any::<bool>()),
    )
        .prop_map(move |(zone, unit, anchor, count, (debt, expires))| {
            let spec = CalendarSpec::new(zone).expect("a known zone");
            let (spec, period) = match unit {
                0 => (spec, "day"),
                1 => (spec.first_day("sunday").expect("a weekday"), "week"),
                2 => (spec.anchor_day(anchor).expect("a day"), "month"),
                _ => (spec.anchor_date("02-29").expect("a date"), "year"),
            };
            let quota = format!("{count}/{period}").parse().expect("a quota");
            Limit::builder(name, Algorithm::FixedWindow, quota)
                .calendar(Some(spec))
                .max_debt(debt)
                .debt_expires_with_window(expires)
                .build()
                .expect("a valid limit")
        })
}

/// A workload over three calendar limits from two hours before a change of daylight saving
/// time in Europe (and days before February 29th, 2028), with gaps of up to three days.
pub fn calendar_workload() -> impl Strategy<Value = (Micros, Vec<Limit>, Vec<(Micros, Step)>)> {
    let limits = (
        calendar_limit("a"),
        calendar_limit("b"),
        calendar_limit("c"),
    )
        .prop_map(|(a, b, c)| vec![a, b, c]);
    let start = prop_oneof![Just(1_792_872_000_000_000u64), Just(1_835_294_400_000_000)];
    let step = steps(1u64..40);
    let gap = prop_oneof![
        3 => Just(0u64),
        3 => 0u64..3_600_000_000,
        1 => 0u64..259_200_000_000,
    ];
    (start, limits, prop::collection::vec((gap, step), 1..60))
}

/// Replays random calendar workloads (see [`calendar_workload`]) on a fresh store from `store`
/// and on the memory store, and requires every step to agree by `agrees`.
pub fn agree_on_calendar_windows<F, Fut>(name: &str, store: F, agrees: Agrees)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = RedisStore>,
{
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut runner = proptest::test_runner::TestRunner::new(differential_config(name, 100));
    runner
        .run(&calendar_workload(), |(start, limits, steps)| {
            runtime
                .block_on(async {
                    let redis = store().await;
                    replay_both_from(start, &redis, &limits, &steps, agrees).await
                })
                .map_err(proptest::test_runner::TestCaseError::fail)
        })
        .expect("memory and redis agree on calendar windows");
}

/// Replays a workload through the memory store and a Redis store with the same explicit times;
/// `agrees(items, memory's verdict, redis's verdict)` says whether each pair of verdicts matches.
pub async fn replay_both(
    redis: &RedisStore,
    limits: &[Limit],
    steps: &[(Micros, Step)],
    agrees: Agrees,
) -> Result<(), String> {
    replay_both_from(1_700_000_000_000_000, redis, limits, steps, agrees).await
}

/// [`replay_both`] from the instant `start`.
pub async fn replay_both_from(
    start: Micros,
    redis: &RedisStore,
    limits: &[Limit],
    steps: &[(Micros, Step)],
    agrees: Agrees,
) -> Result<(), String> {
    let memory = MemoryStore::new();
    let mut now: Micros = start;
    let mut admitted: Vec<(Vec<Item>, Verdict)> = Vec::new();
    for (gap, step) in steps {
        now += gap;
        match step {
            Step::Check(items) => {
                let check = build(items, limits);
                let expected = memory.decide(&check, now).map_err(|e| e.to_string())?;
                let actual = redis
                    .check(&check, Some(now))
                    .await
                    .map_err(|e| e.to_string())?;
                if !agrees(items, &expected, &actual) {
                    return Err(format!(
                        "at {now}: {items:?}\nmemory: {expected:?}\nredis:  {actual:?}"
                    ));
                }
                if actual.is_admitted() {
                    admitted.push((items.clone(), actual));
                }
            }
            Step::Refund(back) => {
                let Some((items, verdict)) = admitted.iter().rev().nth(*back) else {
                    continue;
                };
                let check = build(items, limits);
                let refunds = vec![
                    Adjustment::Refund {
                        charged_at: verdict.at()
                    };
                    items.len()
                ];
                memory
                    .apply(&check, &refunds, now)
                    .map_err(|e| e.to_string())?;
                redis
                    .adjust(&check, &refunds, Some(now))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Step::Charge(key, limit, cost) => {
                let check = Check::new(*cost).limit(KEYS[*key], &limits[*limit]);
                memory
                    .apply(&check, &[Adjustment::Charge], now)
                    .map_err(|e| e.to_string())?;
                redis
                    .adjust(&check, &[Adjustment::Charge], Some(now))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// Hammers one key under `limit` from `tasks_per_store` tasks on each of `stores` (separate
/// connections, as separate nodes would have), `checks_per_task` checks each, and requires that
/// no more than the limit allows got through: `quota`, plus what a rate algorithm refilled
/// meanwhile, plus one more window for a fixed window that crossed its boundary; and no fewer
/// than `quota`.
pub async fn never_over_admits(
    stores: &[RedisStore],
    limit: std::sync::Arc<Limit>,
    quota: u64,
    tasks_per_store: usize,
    checks_per_task: usize,
) {
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for store in stores {
        for _ in 0..tasks_per_store {
            let (store, limit) = (store.clone(), std::sync::Arc::clone(&limit));
            tasks.spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..checks_per_task {
                    let verdict = store.check(&Check::one("hot", &limit), None).await;
                    if verdict.expect("an answer").is_admitted() {
                        admitted += 1;
                    }
                }
                admitted
            });
        }
    }
    let mut total = 0;
    while let Some(admitted) = tasks.join_next().await {
        total += admitted.expect("the task ends");
    }
    let elapsed = started.elapsed().as_micros() as u64;
    let algorithm = limit.algorithm();
    let refill = if algorithm.is_rate() {
        elapsed.div_ceil(limit.interval())
    } else {
        0
    };
    let windows = if algorithm == Algorithm::FixedWindow {
        2
    } else {
        1
    };
    assert!(
        total <= windows * quota + refill,
        "{algorithm}: {total} admitted"
    );
    assert!(total >= quota, "{algorithm}: only {total} admitted");
}

/// What three checks of one key on a 2/h GCRA limit were told: admitted or not. A store that
/// decides exactly answers `[true, true, false]`.
pub async fn three_checks_of_two_per_hour(store: &RedisStore) -> Vec<bool> {
    let limit = Limit::new("l", Algorithm::Gcra, "2/h".parse().expect("a quota")).expect("a limit");
    let check = Check::one("k", &limit);
    let mut admitted = Vec::new();
    for _ in 0..3 {
        let verdict = store.check(&check, None).await.expect("decided");
        admitted.push(verdict.is_allowed());
    }
    admitted
}

/// The `CLIENT LIST` line of the store's connection: the one whose last command was FCALL.
pub fn store_connection(clients: &str) -> &str {
    clients
        .lines()
        .find(|line| line.contains("cmd=fcall"))
        .unwrap_or_else(|| panic!("no store connection in {clients}"))
}
