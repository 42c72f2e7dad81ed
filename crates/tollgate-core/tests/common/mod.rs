//! Random limits for the property tests: the algorithms' own here, and the differential tests
//! of the Redis store, which include this file (`crates/tollgate-redis/tests/common/mod.rs`).

#![allow(unreachable_pub)]

use tollgate_core::{Algorithm, LeakyMode, Limit, Quota};

/// The limit of algorithm number `which` with `count` per `period` microseconds, `burst` for
/// the rate algorithms, and a queueing leaky bucket when `delay` is not 0.
pub fn limit_of(
    name: &'static str,
    which: usize,
    count: u64,
    period: u64,
    burst: u64,
    delay: u64,
) -> Limit {
    let algorithm = Algorithm::ALL[which];
    let quota = Quota::from_micros(count, period).expect("valid quota");
    let mut builder = Limit::builder(name, algorithm, quota);
    if algorithm.is_rate() {
        builder = builder.burst(burst);
    }
    if algorithm == Algorithm::LeakyBucket && delay > 0 {
        builder = builder.mode(LeakyMode::Queue {
            delay_after: delay.min(burst),
        });
    }
    builder.build().expect("valid limit")
}
