//! Nanoseconds per check on the memory store, for each algorithm, against governor's keyed
//! limiter on the same workload in the same run.
//!
//! Workloads: 1 key and 100 000 keys (round robin), on 1 and 2 threads. Time comes from a manual
//! clock advanced by one microsecond per check on both sides, so the clock is not measured and
//! the quota (one per microsecond per key) is mostly admitted.
//!
//! Run: `cargo bench -p tollgate --bench memory_check`. After criterion's own report it prints a
//! table of ns/check and the ratio to governor.

#![allow(clippy::disallowed_methods)] // The benchmark times its own run.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use tollgate::{Algorithm, Check, Clock, Limit, ManualClock, MemoryStore};

const KEY_COUNTS: [usize; 2] = [1, 100_000];
const THREADS: [usize; 2] = [1, 2];

/// (workload, contender) -> (total time, total checks), gathered across criterion's samples.
static TOTALS: Mutex<BTreeMap<(String, String), (Duration, u64)>> = Mutex::new(BTreeMap::new());

fn record(workload: &str, contender: &str, elapsed: Duration, checks: u64) {
    let mut totals = TOTALS.lock().expect("totals");
    let entry = totals
        .entry((workload.to_owned(), contender.to_owned()))
        .or_default();
    entry.0 += elapsed;
    entry.1 += checks;
}

/// Runs `checks` calls of `one` spread over `threads` threads; returns the wall time.
fn spread(threads: usize, checks: u64, one: impl Fn(usize, u64) + Sync) -> Duration {
    let per_thread = checks.div_ceil(threads as u64);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let one = &one;
            scope.spawn(move || {
                for n in 0..per_thread {
                    one(thread, n);
                }
            });
        }
    });
    started.elapsed()
}

fn limit(algorithm: Algorithm) -> Limit {
    // One per microsecond; the sliding log holds at most 10 000 entries, so 10 000 per 10 ms.
    let quota = "10000/10ms".parse().expect("valid quota");
    Limit::new(algorithm.as_str(), algorithm, quota).expect("valid limit")
}

fn bench(c: &mut Criterion) {
    for keys in KEY_COUNTS {
        let names: Arc<Vec<String>> = Arc::new((0..keys).map(|n| format!("user:{n}")).collect());
        for threads in THREADS {
            let workload = format!("{keys}-keys/{threads}-threads");
            let mut group = c.benchmark_group(format!("memory/{workload}"));
            group.throughput(Throughput::Elements(1));
            for algorithm in Algorithm::ALL {
                let limit = limit(algorithm);
                let clock = ManualClock::new(1_700_000_000_000_000);
                let store = MemoryStore::builder()
                    .clock(Arc::new(clock.clone()))
                    .build();
                group.bench_function(algorithm.as_str(), |b| {
                    b.iter_custom(|iters| {
                        let elapsed = spread(threads, iters, |thread, n| {
                            let key = &names[(n as usize * threads + thread) % keys];
                            clock.advance_micros(1);
                            let verdict =
                                store.decide(&Check::one(key.as_str(), &limit), clock.now());
                            std::hint::black_box(verdict.expect("valid check"));
                        });
                        record(&workload, algorithm.as_str(), elapsed, iters);
                        elapsed
                    })
                });
            }
            let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000).expect("non-zero"));
            let clock = FakeRelativeClock::default();
            let governor: governor::RateLimiter<
                String,
                DefaultKeyedStateStore<String>,
                FakeRelativeClock,
                NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
            > = governor::RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock.clone());
            group.bench_function("governor", |b| {
                b.iter_custom(|iters| {
                    let elapsed = spread(threads, iters, |thread, n| {
                        let key = &names[(n as usize * threads + thread) % keys];
                        clock.advance(Duration::from_micros(1));
                        std::hint::black_box(governor.check_key(key).is_ok());
                    });
                    record(&workload, "governor", elapsed, iters);
                    elapsed
                })
            });
            group.finish();
        }
    }
}

fn print_ratios() {
    let totals = TOTALS.lock().expect("totals");
    let ns = |workload: &str, contender: &str| {
        totals
            .get(&(workload.to_owned(), contender.to_owned()))
            .map(|(elapsed, checks)| elapsed.as_nanos() as f64 / (*checks).max(1) as f64)
    };
    println!("\nns per check (mean over all samples), and the ratio to governor's keyed check:");
    println!(
        "{:<22} {:<15} {:>9} {:>10} {:>7}",
        "workload", "algorithm", "ns/check", "governor", "ratio"
    );
    let workloads: Vec<String> = totals
        .keys()
        .map(|(w, _)| w.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for workload in workloads {
        let Some(baseline) = ns(&workload, "governor") else {
            continue;
        };
        for algorithm in Algorithm::ALL {
            if let Some(ours) = ns(&workload, algorithm.as_str()) {
                println!(
                    "{workload:<22} {:<15} {ours:>9.1} {baseline:>10.1} {:>6.2}x",
                    algorithm.as_str(),
                    ours / baseline
                );
            }
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    print_ratios();
}
