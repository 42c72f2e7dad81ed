//! Usage above the estimate is charged in full, as debt paid off at the quota's rate, up to the
//! limit's `max_debt`: a request that used 800 times an hourly quota holds its key back for about
//! 800 hours, not one. On the memory store and on Redis alike, for every algorithm.

mod common;

use std::time::Duration;

use tollgate::{Algorithm, Check, Limit, Limiter, Micros, Store};

const HOUR: u64 = 3_600;

fn hourly(algorithm: Algorithm) -> Limit {
    Limit::new("per-hour", algorithm, "10/h".parse().expect("a quota")).expect("a limit")
}

/// Charges one unit, settles it at 8 000 (800 quotas), and returns how long until one more
/// unit is admitted, as the next check says.
async fn wait_after_settling<S: Store>(limiter: &Limiter<S>, limit: &Limit, key: &str) -> Duration {
    let check = Check::one(key, limit);
    let verdict = limiter.check(&check).await.expect("a verdict");
    assert!(verdict.is_admitted());
    limiter
        .settle(&check, &verdict, 8_000)
        .await
        .expect("settled");
    let next = limiter.check(&check).await.expect("a verdict");
    assert!(!next.is_admitted(), "{limit}: the debt holds the key back");
    next.retry_after().expect("admitted some day")
}

fn assert_about_800_hours(limit: &Limit, wait: Duration) {
    let hours = wait.as_secs() / HOUR;
    assert!(
        (790..=801).contains(&hours),
        "{limit}: 8 000 used of 10/h waits about 800 h, waited {hours} h"
    );
}

#[tokio::test]
async fn usage_of_800_quotas_holds_the_key_back_800_periods_on_the_memory_store() {
    let limiter = Limiter::memory();
    for algorithm in Algorithm::ALL {
        let limit = hourly(algorithm);
        let wait = wait_after_settling(&limiter, &limit, algorithm.as_str()).await;
        assert_about_800_hours(&limit, wait);
    }
}

#[tokio::test]
async fn usage_of_800_quotas_holds_the_key_back_800_periods_on_redis() {
    let limiter = Limiter::new(common::single_store().await);
    for algorithm in Algorithm::ALL {
        let limit = hourly(algorithm);
        let key = format!("debt:{}:{}", algorithm.as_str(), std::process::id());
        let wait = wait_after_settling(&limiter, &limit, &key).await;
        assert_about_800_hours(&limit, wait);
    }
}

#[tokio::test]
async fn max_debt_bounds_what_is_owed() {
    let limiter = Limiter::memory();
    for algorithm in Algorithm::ALL {
        let limit = Limit::builder("per-hour", algorithm, "10/h".parse().expect("a quota"))
            .max_debt(20)
            .build()
            .expect("a limit");
        let wait = wait_after_settling(&limiter, &limit, algorithm.as_str()).await;
        assert!(
            wait <= Duration::from_secs(4 * HOUR),
            "{limit}: 20 units owed beyond the capacity pay off within 3 h of the quota's rate \
             (and a window's rounding), waited {wait:?}"
        );
    }
}

#[test]
fn the_bound_keeps_a_state_within_what_lua_counts_exactly() {
    let daily =
        Limit::new("d", Algorithm::FixedWindow, "1/d".parse().expect("a quota")).expect("a limit");
    let span: Micros = (1 + daily.max_debt()) * daily.period();
    assert!(span <= 1 << 51, "{span}");
    assert!(daily.max_debt() > 20_000, "{}", daily.max_debt());
}
