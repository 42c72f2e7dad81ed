//! Decisions per second against one local Redis, with 1, 16 and 256 concurrent tasks, and
//! `redis-benchmark` running the same check code (as a script, by EVALSHA; Tollgate calls it
//! as a Redis Function) at the same concurrency in the
//! same run: once as that many connections (`-c n`), once as one connection pipelining that
//! many requests (`-P n`, closer to Tollgate's one multiplexed connection). The ratio is to
//! the faster of the two.
//!
//! Run: `cargo bench -p tollgate --bench redis_check` (each run lasts `TOLLGATE_BENCH_SECS`,
//! default 5). It starts its own redis-server. Each check is one GCRA limit on a key drawn from
//! 100 000; the client runs on one thread, as redis-benchmark does. Printed per run: decisions
//! per second, the ratio to redis-benchmark, p50/p99 latency per decision, checks per script
//! call, and Redis CPU per decision from `INFO commandstats`.

#![allow(clippy::disallowed_methods)] // The benchmark times its own run.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::store::redis::CHECK_SCRIPT;
use tollgate::{Algorithm, Check, Limit, RedisConfig, RedisStore, Store};
use tollgate_testkit::RedisServer;

const KEYS: u64 = 100_000;

struct Run {
    decisions_per_second: f64,
    p50_us: f64,
    p99_us: f64,
    checks_per_call: f64,
    redis_us_per_decision: f64,
}

/// `INFO commandstats` for the check's calls, EVALSHA and FCALL together: (calls, total
/// microseconds).
fn script_stats(server: &RedisServer) -> (f64, f64) {
    let info: String = server
        .query(redis::cmd("INFO").arg("commandstats"))
        .expect("INFO commandstats");
    let field = |line: &str, name: &str| {
        line.split([':', ','])
            .find_map(|part| part.strip_prefix(&format!("{name}=")))
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_fcall:"))
        .fold((0.0, 0.0), |(calls, usec), line| {
            (calls + field(line, "calls"), usec + field(line, "usec"))
        })
}

fn reset_stats(server: &RedisServer) {
    let _: String = server
        .query(redis::cmd("CONFIG").arg("RESETSTAT"))
        .expect("CONFIG RESETSTAT");
}

async fn tollgate_run(server: &RedisServer, tasks: usize, max_batch: usize, seconds: u64) -> Run {
    let config = RedisConfig {
        max_batch,
        timeout: Duration::from_secs(5),
        ..RedisConfig::default()
    };
    let store = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    let limit = Arc::new(
        Limit::new("rate", Algorithm::Gcra, "1000/s".parse().expect("quota")).expect("limit"),
    );
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|n| format!("user:{n}")).collect());
    // Warm up the script cache and the connection.
    store
        .check(&Check::one("warm", &limit), None)
        .await
        .expect("warm-up check");
    reset_stats(server);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let (store, limit, keys) = (store.clone(), Arc::clone(&limit), Arc::clone(&keys));
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut rng = fastrand::Rng::with_seed(task as u64);
            while Instant::now() < deadline {
                let key = &keys[rng.usize(..keys.len())];
                let sent = Instant::now();
                store
                    .check(&Check::one(key.as_str(), &limit), None)
                    .await
                    .expect("check");
                latencies.push(sent.elapsed().as_micros() as u64);
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = workers.join_next().await {
        latencies.extend(done.expect("worker"));
    }
    latencies.sort_unstable();
    let quantile = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64;
    let elapsed = started.elapsed().as_secs_f64();
    let decisions = latencies.len() as f64;
    let (calls, usec) = script_stats(server);
    Run {
        decisions_per_second: decisions / elapsed,
        p50_us: quantile(0.50),
        p99_us: quantile(0.99),
        checks_per_call: decisions / calls.max(1.0),
        redis_us_per_decision: usec / decisions.max(1.0),
    }
}

/// redis-benchmark with `clients` connections of `pipeline` requests in flight each.
fn redis_benchmark_run(
    server: &RedisServer,
    (clients, pipeline): (usize, usize),
    seconds: u64,
    sha: &str,
    per_second: f64,
) -> Run {
    // Size the run to last about as long as ours.
    let requests = ((per_second * seconds as f64) as u64).max(10_000);
    reset_stats(server);
    let output = Command::new("redis-benchmark")
        .args([
            "-p",
            &server.port().to_string(),
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args([
            "-r",
            &KEYS.to_string(),
            "-P",
            &pipeline.to_string(),
            "--csv",
        ])
        .args(["EVALSHA", sha, "1", "tg:{user:__rand_int__}:rate"])
        // The limit (GCRA 1000/s), then one check of one item, key 1, limit 1, cost 1, packed
        // into one number as the store sends it: -(1 * 2^20 + 1 * 2^10 + 1).
        .args([
            "",
            "[1,6,1000,1000000,1000,1000,0,1099511627776,1,-1049601]",
        ])
        .output()
        .expect("redis-benchmark (installed with redis-server)");
    let csv = String::from_utf8_lossy(&output.stdout);
    // The row's last seven fields: rps, avg, min, p50, p95, p99, max (the test's name, first,
    // holds commas of its own).
    let mut row: Vec<f64> = csv
        .lines()
        .last()
        .unwrap_or("")
        .rsplit(',')
        .take(7)
        .filter_map(|field| field.trim_matches('"').parse().ok())
        .collect();
    row.reverse();
    assert!(
        row.len() == 7,
        "unexpected redis-benchmark output:\n{csv}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (calls, usec) = script_stats(server);
    Run {
        decisions_per_second: row[0],
        p50_us: row[3] * 1000.0,
        p99_us: row[5] * 1000.0,
        checks_per_call: 1.0,
        redis_us_per_decision: usec / calls.max(1.0),
    }
}

fn main() {
    let seconds: u64 = std::env::var("TOLLGATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let server = RedisServer::start();
    let sha: String = server
        .query(redis::cmd("SCRIPT").arg("LOAD").arg(CHECK_SCRIPT))
        .expect("SCRIPT LOAD");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("decisions per second against one local redis-server, {seconds} s per run\n");
    println!(
        "{:>5} {:<26} {:>11} {:>7} {:>8} {:>8} {:>11} {:>13}",
        "tasks",
        "client",
        "decisions/s",
        "ratio",
        "p50 us",
        "p99 us",
        "checks/call",
        "redis us/dec"
    );
    for tasks in [1, 16, 256] {
        let batched = runtime.block_on(tollgate_run(&server, tasks, 16, seconds));
        let unbatched = runtime.block_on(tollgate_run(&server, tasks, 1, seconds));
        let connections = redis_benchmark_run(
            &server,
            (tasks, 1),
            seconds,
            &sha,
            batched.decisions_per_second,
        );
        let pipelined = redis_benchmark_run(
            &server,
            (1, tasks),
            seconds,
            &sha,
            batched.decisions_per_second,
        );
        let floor = if pipelined.decisions_per_second > connections.decisions_per_second {
            &pipelined
        } else {
            &connections
        };
        let connections_name = format!("redis-benchmark -c {tasks}");
        let pipelined_name = format!("redis-benchmark -P {tasks}");
        for (name, run) in [
            (connections_name.as_str(), &connections),
            (pipelined_name.as_str(), &pipelined),
            ("tollgate, coalescing (16)", &batched),
            ("tollgate, one per call", &unbatched),
        ] {
            println!(
                "{tasks:>5} {name:<26} {:>11.0} {:>6.2}x {:>8.0} {:>8.0} {:>11.2} {:>13.2}",
                run.decisions_per_second,
                run.decisions_per_second / floor.decisions_per_second,
                run.p50_us,
                run.p99_us,
                run.checks_per_call,
                run.redis_us_per_decision
            );
        }
    }
}
