//! Runs `CHECKS` checks of one contender on one key and one thread, for `scripts/instructions`
//! to count their instructions under callgrind: `instructions <contender> <checks>`.
//!
//! Contenders: each algorithm on the memory store (`MemoryStore::decide`, one limit, a manual
//! clock advanced one microsecond per check so the clock is not measured) and governor's keyed
//! limiter on the same workload (`governor`). Instruction counts repeat exactly from run to
//! run whatever else the machine does, so small changes show.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use tollgate::{Algorithm, Check, Clock, Limit, ManualClock, MemoryStore};

fn tollgate(algorithm: Algorithm, checks: u64) {
    // One per microsecond: mostly admitted, as the clock moves one microsecond a check. (The
    // sliding log keeps at most 10 000 entries.)
    let quota = "10000/10ms".parse().expect("a quota");
    let limit = Limit::new("per-user", algorithm, quota).expect("a limit");
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::builder()
        .clock(std::sync::Arc::new(clock.clone()))
        .build();
    let key = String::from("user:42");
    for _ in 0..checks {
        clock.advance_micros(1);
        let verdict = store.decide(&Check::one(key.as_str(), &limit), clock.now());
        std::hint::black_box(verdict.expect("a valid check"));
    }
}

fn governor(checks: u64) {
    let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000).expect("non-zero"));
    let clock = FakeRelativeClock::default();
    let limiter: governor::RateLimiter<
        String,
        DefaultKeyedStateStore<String>,
        FakeRelativeClock,
        NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
    > = governor::RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock.clone());
    let key = String::from("user:42");
    for _ in 0..checks {
        clock.advance(Duration::from_micros(1));
        std::hint::black_box(limiter.check_key(&key).is_ok());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(contender), Some(checks)) = (args.next(), args.next()) else {
        eprintln!("usage: instructions <governor|{}> <checks>", names());
        std::process::exit(2);
    };
    let Ok(checks) = checks.parse::<u64>() else {
        eprintln!("instructions: checks must be a number, got {checks:?}");
        std::process::exit(2);
    };
    if contender == "governor" {
        governor(checks);
        return;
    }
    match contender.parse::<Algorithm>() {
        Ok(algorithm) => tollgate(algorithm, checks),
        Err(_) => {
            eprintln!(
                "instructions: unknown contender {contender:?} (expected governor or one of {})",
                names()
            );
            std::process::exit(2);
        }
    }
}

fn names() -> String {
    Algorithm::ALL.map(Algorithm::as_str).join(", ")
}
