//! Runs `CHECKS` checks of one contender on one key and one thread, for `scripts/instructions`
//! to count their instructions under callgrind: `instructions <contender> <checks>`.
//!
//! Contenders: each algorithm on the memory store (`MemoryStore::decide`, one limit, a manual
//! clock advanced one microsecond per check so the clock is not measured), governor's keyed
//! limiter on the same workload (`governor`), and a GCRA check through a `Limiter` on the
//! memory store, with the limit regional (`limiter`) or global, spent from leases on a global
//! memory store (`limiter-global`): the cost of the global tier. `door` is `check_one` as the
//! README uses it: a limiter with the default layers and metrics, a regional limit, no global
//! tier, and each check's future polled to its end without a runtime (the memory store never
//! waits). Instruction counts repeat exactly from run to run whatever else the machine does, so
//! small changes show.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use std::sync::Arc;

use tollgate::LeaseTuning;
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

/// GCRA checks through `Limiter::check_one` on a memory store, as the README shows it: the
/// default layers and metrics, a regional limit, and no runtime.
fn door(checks: u64) {
    let quota = "10000/10ms".parse().expect("a quota");
    let limit = Limit::new("per-user", Algorithm::Gcra, quota).expect("a limit");
    let clock = ManualClock::new(1_700_000_000_000_000);
    let limiter = Limiter::new(
        MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build(),
    );
    for _ in 0..checks {
        clock.advance_micros(1);
        let verdict = poll_to_end(limiter.check_one("user:42", &limit));
        std::hint::black_box(verdict.expect("a decision"));
    }
}

/// Polls `future` until it is ready, for futures that never wait on anything.
fn poll_to_end<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(contender), Some(checks)) = (args.next(), args.next()) else {
        eprintln!(
            "usage: instructions <governor|door|limiter|limiter-global|{}> <checks>",
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
        "door" => return door(checks),
        "limiter" => return limiter(Scope::Region, checks),
        "limiter-global" => return limiter(Scope::Global, checks),
        _ => {}
    }
    match contender.parse::<Algorithm>() {
        Ok(algorithm) => tollgate(algorithm, checks),
        Err(_) => {
            eprintln!(
                "instructions: unknown contender {contender:?} (expected governor, door, limiter, limiter-global or one of {})",
                names()
            );
            std::process::exit(2);
        }
    }
}

fn names() -> String {
    Algorithm::ALL.map(Algorithm::as_str).join(", ")
}
