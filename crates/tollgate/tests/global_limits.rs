//! Global limits across regions: each region's limiter has a store of its own and leases
//! global limits from one global store. Here every store is in process on one manual clock,
//! and background fetches are awaited (`settled`), so every outcome is decided by the clock
//! and the order of checks alone.

use std::sync::Arc;
use std::time::Duration;

use tollgate::LeaseTuning;
use tollgate::{
    Algorithm, AnyStore, Check, Limit, Limiter, ManualClock, MemoryStore, Quota, Scope, Store,
};

const START: u64 = 1_800_000_000_000_000;

fn limit(name: &str, algorithm: Algorithm, quota: &str, scope: Scope) -> Limit {
    let quota: Quota = quota.parse().expect("a quota");
    Limit::builder(name, algorithm, quota)
        .scope(scope)
        .build()
        .expect("a limit")
}

fn memory(clock: &ManualClock) -> MemoryStore {
    MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build()
}

/// `n` regions on one global store, all on `clock`.
fn regions(n: usize, clock: &ManualClock) -> (Arc<AnyStore>, Vec<Limiter>) {
    let global = Arc::new(AnyStore::Memory(memory(clock)));
    let limiters = (0..n)
        .map(|_| {
            Limiter::builder(memory(clock))
                .clock(Arc::new(clock.clone()))
                .global(Arc::clone(&global), LeaseTuning::default())
                .build()
        })
        .collect();
    (global, limiters)
}

async fn settle(limiters: &[Limiter]) {
    for limiter in limiters {
        limiter.global().expect("a global tier").settled().await;
    }
}

/// What the global store has left of `limit` for `key`, looked at without counting.
async fn left(global: &AnyStore, key: &str, limit: &Limit) -> u64 {
    let verdict = global
        .check(&Check::new(0).limit(key, limit), None)
        .await
        .expect("the global store answers");
    verdict.decisions()[0].remaining()
}

#[tokio::test(start_paused = true)]
async fn uneven_regions_never_admit_more_than_the_global_quota_and_use_nearly_all_of_it() {
    let clock = ManualClock::new(START - START % 60_000_000);
    let (_, regions) = regions(3, &clock);
    let quota = 60_000u64;
    let tenant = limit("tenant", Algorithm::FixedWindow, "60000/m", Scope::Global);
    // 70%, 20% and 10% of 3 000 checks a second: three times the quota over each minute.
    let shares = [70usize, 20, 10];
    for window in 0..2 {
        let mut admitted = [0u64; 3];
        for _tick in 0..1_800 {
            for (index, region) in regions.iter().enumerate() {
                for _ in 0..shares[index] {
                    let verdict = region.check_one("tenant:acme", &tenant).await.unwrap();
                    admitted[index] += u64::from(verdict.is_admitted());
                }
            }
            settle(&regions).await;
            clock.advance(Duration::from_micros(33_333));
        }
        let total: u64 = admitted.iter().sum();
        assert!(
            total <= quota,
            "window {window}: {admitted:?} admitted, over {quota}"
        );
        assert!(
            total * 100 >= quota * 95,
            "window {window}: only {total} of {quota} admitted ({admitted:?})"
        );
        assert!(admitted.iter().all(|&n| n > 0), "{admitted:?}");
        clock.set(START - START % 60_000_000 + (window + 1) * 60_000_000);
    }
    for region in &regions {
        let stats = region.global().unwrap().stats();
        assert_eq!(
            stats.leased,
            stats.spent + stats.returned + stats.stranded + stats.held,
            "every leased unit is spent, returned, stranded or held: {stats:?}"
        );
        assert!(
            stats.store_calls * 50 < stats.spent,
            "global store calls under 2% of admissions: {stats:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_regional_denial_leaves_the_global_units_with_the_node() {
    let clock = ManualClock::new(START);
    let (global, regions) = regions(1, &clock);
    let region = &regions[0];
    let user = limit("user", Algorithm::FixedWindow, "2/h", Scope::Region);
    let tenant = limit("tenant", Algorithm::FixedWindow, "10/h", Scope::Global);
    let mut admitted = 0;
    for _ in 0..5 {
        let check = Check::new(1)
            .limit("user:1", &user)
            .limit("tenant:acme", &tenant);
        let verdict = region.check(&check).await.unwrap();
        admitted += u64::from(verdict.is_admitted());
        settle(&regions).await;
    }
    assert_eq!(admitted, 2, "the regional limit binds");
    region.return_leases().await;
    assert_eq!(
        left(&global, "tenant:acme", &tenant).await,
        8,
        "only the two admitted checks took global units"
    );
    let stats = region.global().unwrap().stats();
    assert_eq!((stats.spent, stats.held), (2, 0), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_global_denial_charges_nothing_regionally() {
    let clock = ManualClock::new(START);
    let (_, regions) = regions(1, &clock);
    let region = &regions[0];
    let user = limit("user", Algorithm::FixedWindow, "5/h", Scope::Region);
    let tenant = limit("tenant", Algorithm::FixedWindow, "2/h", Scope::Global);
    let mut admitted = 0;
    for _ in 0..4 {
        let check = Check::new(1)
            .limit("user:1", &user)
            .limit("tenant:acme", &tenant);
        let verdict = region.check(&check).await.unwrap();
        if !verdict.is_admitted() {
            assert!(!verdict.decisions()[1].allowed(), "the global limit denies");
            assert_eq!(
                verdict.decisions()[0].remaining(),
                3,
                "the user's count, unchanged"
            );
        }
        admitted += u64::from(verdict.is_admitted());
        settle(&regions).await;
    }
    assert_eq!(admitted, 2, "the global limit binds");
    let regional = region
        .store()
        .check(&Check::new(0).limit("user:1", &user), None)
        .await
        .unwrap();
    assert_eq!(
        regional.decisions()[0].remaining(),
        3,
        "two checks counted, not four"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_node_gives_its_units_back() {
    let clock = ManualClock::new(START);
    let (global, regions) = regions(2, &clock);
    let tenant = limit("tenant", Algorithm::FixedWindow, "1000/h", Scope::Global);
    // A busy minute on the first region: its leases grow with its rate.
    for _ in 0..600 {
        regions[0].check_one("tenant:acme", &tenant).await.unwrap();
        settle(&regions).await;
        clock.advance(Duration::from_millis(5));
    }
    let busy = regions[0].global().unwrap().stats();
    assert!(busy.held > 0, "a busy node holds units ahead: {busy:?}");
    assert_eq!(
        left(&global, "tenant:acme", &tenant).await,
        1000 - 600 - busy.held
    );
    // Then it goes quiet; past the idle time the sweep gives the units back.
    clock.advance(Duration::from_secs(2));
    regions[0].global().unwrap().sweep().await;
    let idle = regions[0].global().unwrap().stats();
    assert_eq!(idle.held, 0, "{idle:?}");
    assert_eq!(idle.returned, busy.held, "{idle:?}");
    assert_eq!(left(&global, "tenant:acme", &tenant).await, 400);
    // The other region can have all of it.
    let mut admitted = 0;
    for _ in 0..500 {
        admitted += u64::from(
            regions[1]
                .check_one("tenant:acme", &tenant)
                .await
                .unwrap()
                .is_admitted(),
        );
        settle(&regions).await;
    }
    assert_eq!(admitted, 400);
}

#[tokio::test(start_paused = true)]
async fn a_check_too_costly_for_what_is_left_takes_nothing() {
    let clock = ManualClock::new(START);
    let (global, regions) = regions(1, &clock);
    let region = &regions[0];
    let tenant = limit("tenant", Algorithm::FixedWindow, "100/h", Scope::Global);
    let spend = |cost| Check::new(cost).limit("tenant:acme", &tenant);
    assert!(region.check(&spend(50)).await.unwrap().is_admitted());
    region.return_leases().await;
    assert_eq!(left(&global, "tenant:acme", &tenant).await, 50);
    for cost in [60, 500] {
        assert!(!region.check(&spend(cost)).await.unwrap().is_admitted());
        region.return_leases().await;
        assert_eq!(
            left(&global, "tenant:acme", &tenant).await,
            50,
            "a denied check of {cost} leased nothing"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_global_limit_without_a_global_store_is_an_error_that_says_so() {
    let limiter = Limiter::new(MemoryStore::new());
    let tenant = limit("tenant", Algorithm::Gcra, "10/s", Scope::Global);
    let error = limiter
        .check_one("tenant:acme", &tenant)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("no global store"), "{error}");
    assert!(error.contains("\"tenant\""), "{error}");
}

#[test]
fn a_global_limit_takes_no_fixed_lease() {
    let quota: Quota = "10/s".parse().unwrap();
    let error = Limit::builder("tenant", Algorithm::Gcra, quota)
        .scope(Scope::Global)
        .lease(5)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("global"), "{error}");
}

/// A calendar quota shared by every region: never more than the quota in one local day, and
/// a fresh quota once the day ends in the calendar's time zone, not at a multiple of 24 hours
/// since the epoch. Units leased in one day are never spent in the next.
#[tokio::test(start_paused = true)]
async fn a_global_calendar_quota_renews_at_local_midnight_and_never_runs_over() {
    // 09:00 in Berlin: local midnight is 15 hours away.
    let clock = ManualClock::new(START);
    let (global, regions) = regions(2, &clock);
    let daily = Limit::builder("daily", Algorithm::FixedWindow, "20/d".parse().unwrap())
        .scope(Scope::Global)
        .calendar(Some(tollgate::CalendarSpec::new("Europe/Berlin").unwrap()))
        .build()
        .expect("a limit");
    let check = Check::one("tenant:acme", &daily);
    let spend = async |steps: usize| {
        let mut admitted = 0;
        for step in 0..steps {
            let region = &regions[step % 2];
            admitted += u64::from(region.check(&check).await.unwrap().is_admitted());
            settle(&regions).await;
        }
        admitted
    };
    let first = spend(60).await;
    assert!(first <= 20, "{first} admitted in one day");
    assert!(first >= 18, "{first} admitted: the quota is used");
    // One second before local midnight: still the same day.
    clock.advance(Duration::from_secs(15 * 3600 - 1));
    assert_eq!(spend(10).await, 0, "the same local day");
    clock.advance(Duration::from_secs(1));
    let second = spend(60).await;
    assert!(second <= 20, "{second} admitted in the next day");
    assert!(
        second >= 18,
        "{second} admitted: the new day's quota is used"
    );
    for region in &regions {
        region.return_leases().await;
    }
    let left = left(&global, "tenant:acme", &daily).await;
    assert_eq!(
        left + second,
        20,
        "the global store counted exactly what was spent"
    );
}
