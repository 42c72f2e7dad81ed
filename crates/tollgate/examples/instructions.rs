//! Runs `CHECKS` checks of one contender on one key and one thread, for `scripts/instructions`
//! to count their instructions under callgrind: `instructions <contender> <checks>`.
//!
//! Contenders: each algorithm on the memory store (`MemoryStore::decide`, one limit, a manual
//! clock advanced one microsecond per check so the clock is not measured), governor's keyed
//! limiter on the same workload (`governor`), and a GCRA check through a `Limiter` on the
//! memory store, with the limit regional (`limiter`) or global, spent from leases on a global
//! memory store (`limiter-global`): the cost of the global tier. Instruction counts repeat exactly from run to
//! run whatever else the machine does, so small changes show.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use std::sync::Arc;

use tollgate::layer::LeaseTuning;
use tollgate::{
    Algorithm, AnyStore, Check, Clock, Limit, Limiter, ManualClock, MemoryStore, Scope,
};

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

/// GCRA checks through a limiter on one runtime thread, the limit in `scope`. Each check yields
/// once, so that background lease fetches run as they would on a server.
fn limiter(scope: Scope, checks: u64) {
    let quota = "10000/10ms".parse().expect("a quota");
    let limit = Limit::builder("per-user", Algorithm::Gcra, quota)
        .scope(scope)
        .build()
        .expect("a limit");
    let clock = ManualClock::new(1_700_000_000_000_000);
    let memory = || {
        MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build()
    };
    let limiter = Limiter::builder(memory())
        .clock(Arc::new(clock.clone()))
        .global(AnyStore::Memory(memory()), LeaseTuning::default())
        .build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        for _ in 0..checks {
            clock.advance_micros(1);
            let verdict = limiter.check_one("user:42", &limit).await;
            std::hint::black_box(verdict.expect("a decision"));
            tokio::task::yield_now().await;
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(contender), Some(checks)) = (args.next(), args.next()) else {
        eprintln!(
            "usage: instructions <governor|limiter|limiter-global|{}> <checks>",
            names()
        );
        std::process::exit(2);
    };
    let Ok(checks) = checks.parse::<u64>() else {
        eprintln!("instructions: checks must be a number, got {checks:?}");
        std::process::exit(2);
    };
    match contender.as_str() {
        "governor" => return governor(checks),
        "limiter" => return limiter(Scope::Region, checks),
        "limiter-global" => return limiter(Scope::Global, checks),
        _ => {}
    }
    match contender.parse::<Algorithm>() {
        Ok(algorithm) => tollgate(algorithm, checks),
        Err(_) => {
            eprintln!(
                "instructions: unknown contender {contender:?} (expected governor, limiter, limiter-global or one of {})",
                names()
            );
            std::process::exit(2);
        }
    }
}

fn names() -> String {
    Algorithm::ALL.map(Algorithm::as_str).join(", ")
}
