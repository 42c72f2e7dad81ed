//! The Redis store against a real redis-server: the same decisions as the memory store, atomic
//! code (as a function library, or as scripts where functions are not available), TTLs,
//! escaping, recovery after FUNCTION FLUSH and SCRIPT FLUSH, typed errors, memory per key.

#![allow(clippy::disallowed_methods)] // Deadlines and timings of the run itself, not decisions.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    Step, fresh_config, never_over_admits, queued_together, replay_both, server, single_store,
    workload,
};
use proptest::test_runner::TestRunner;
use tollgate_core::{Adjustment, Algorithm, Check, Limit, Micros, Store, StoreError};
use tollgate_redis::{RedisConfig, RedisStore};

#[test]
fn redis_and_memory_decide_alike_on_random_workloads() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut runner = TestRunner::new(common::differential_config("redis_store", 200));
    runner
        .run(&workload(), |(limits, steps)| {
            runtime
                .block_on(async {
                    let redis = single_store().await;
                    replay_both(&redis, &limits, &steps, |_, expected, actual| {
                        expected == actual
                    })
                    .await
                })
                .map_err(proptest::test_runner::TestCaseError::fail)
        })
        .expect("memory and redis agree");
}

#[test]
fn redis_and_memory_agree_on_calendar_windows() {
    common::agree_on_calendar_windows("redis_calendar", single_store, |_, expected, actual| {
        expected == actual
    });
}

/// A one-item check goes to the script as one number when its key, limit and cost fit their
/// fields (a cost below 1 024) and as four otherwise: both forms decide as the memory store does,
/// admitted and denied, on every algorithm (the keys shared by two limits each).
#[tokio::test]
async fn one_item_checks_of_any_cost_decide_as_in_memory() {
    let quota = "5000/s".parse().unwrap();
    let limits: Vec<Limit> = Algorithm::ALL
        .into_iter()
        .map(|algorithm| Limit::new(format!("bulk-{algorithm}"), algorithm, quota).unwrap())
        .collect();
    let mut steps = Vec::new();
    for limit in 0..limits.len() {
        let key = limit % 3;
        for cost in [1, 1_023, 1_024, 2_900, 1, 5_001, 0, 1_000] {
            steps.push((0, Step::Check(vec![(key, limit, cost)])));
        }
        steps.push((1_000_000, Step::Check(vec![(key, limit, 4_999)])));
    }
    let redis = single_store().await;
    replay_both(&redis, &limits, &steps, |_, expected, actual| {
        expected == actual
    })
    .await
    .unwrap();
}

/// Alternating algorithms (or quotas) under one limit name used to read and reset the other's
/// state: 10 of 10 admitted on a 1/h limit.
#[tokio::test]
async fn switching_algorithm_or_quota_under_one_name_never_resets_the_count() {
    let shapes = [
        Limit::new("hourly", Algorithm::Gcra, "1/h".parse().unwrap()).unwrap(),
        Limit::new("hourly", Algorithm::FixedWindow, "1/h".parse().unwrap()).unwrap(),
        Limit::new("hourly", Algorithm::SlidingLog, "1/h".parse().unwrap()).unwrap(),
        Limit::new("hourly", Algorithm::Gcra, "1/2h".parse().unwrap()).unwrap(),
    ];
    // Each shape is its own limit and admits its own quota, once; none resets another.
    let redis = single_store().await;
    assert_eq!(admitted_alternating(&redis, &shapes).await, [1, 1, 1, 1]);
    let memory = tollgate_core::MemoryStore::new();
    assert_eq!(admitted_alternating(&memory, &shapes).await, [1, 1, 1, 1]);
}

/// Checks the limits in turn, five rounds, and counts the admissions of each.
async fn admitted_alternating(store: &impl Store, limits: &[Limit]) -> Vec<usize> {
    let mut admitted = vec![0; limits.len()];
    for _ in 0..5 {
        for (count, limit) in admitted.iter_mut().zip(limits) {
            let verdict = store
                .check(&Check::one("user:switcher", limit), None)
                .await
                .expect("the store decides");
            *count += usize::from(verdict.is_admitted());
        }
    }
    admitted
}

/// Checks a 3/m fixed window four times, flushing the server's code with `flush` before the
/// second, third and fourth, and refunds one: the state survives every flush.
async fn checks_across_flushes(own: &tollgate_testkit::RedisServer, flush: &[&str]) {
    let store = RedisStore::connect(&own.url(), fresh_config())
        .await
        .expect("connect");
    let limit =
        Limit::new("l", Algorithm::FixedWindow, "3/m".parse().expect("quota")).expect("limit");
    let check = Check::one("k", &limit);
    let flush = || {
        let flushed: String = own
            .query(redis::cmd(flush[0]).arg(&flush[1..]))
            .expect("flush");
        assert_eq!(flushed, "OK");
    };
    assert!(store.check(&check, None).await.expect("check").is_allowed());
    flush();
    let verdict = store.check(&check, None).await.expect("check");
    assert_eq!(
        verdict.decisions()[0].remaining(),
        1,
        "the second request counted, the state survived"
    );
    flush();
    let refund = [Adjustment::Refund {
        charged_at: verdict.at(),
    }];
    store.adjust(&check, &refund, None).await.expect("refund");
    flush();
    assert_eq!(
        store.check(&check, None).await.expect("check").decisions()[0].remaining(),
        1
    );
}

#[tokio::test]
async fn the_code_runs_as_a_function_library_reloaded_after_a_flush() {
    // A server of its own: flushing the shared one would pull the code from under other tests.
    let own = tollgate_testkit::RedisServer::start();
    checks_across_flushes(&own, &["FUNCTION", "FLUSH"]).await;
    let (fcalls, evalshas) = own.calls_by_kind();
    assert!(fcalls >= 4, "every check and refund is an FCALL: {fcalls}");
    assert_eq!(evalshas, 0, "no script was run");
    let libraries: Vec<redis::Value> = own.query(redis::cmd("FUNCTION").arg("LIST")).unwrap();
    assert_eq!(
        libraries.len(),
        1,
        "one library, loaded again after each flush"
    );
}

#[tokio::test]
async fn without_functions_the_same_code_runs_as_scripts() {
    // FCALL renamed away: as on a Redis older than 7 or a compatible server without functions.
    let own = tollgate_testkit::RedisServer::start_with(&["--rename-command", "FCALL", ""]);
    checks_across_flushes(&own, &["SCRIPT", "FLUSH"]).await;
    let (fcalls, evalshas) = own.calls_by_kind();
    assert_eq!(fcalls, 0);
    assert!(
        evalshas >= 4,
        "every check and refund ran as a script: {evalshas}"
    );
}

#[tokio::test]
async fn an_acl_user_without_functions_runs_the_code_as_scripts() {
    let own = tollgate_testkit::RedisServer::start();
    let created: String = own
        .query(redis::cmd("ACL").arg(&[
            "SETUSER",
            "limiter",
            "on",
            ">secret",
            "~*",
            "+@all",
            "-fcall",
            "-function",
        ]))
        .unwrap();
    assert_eq!(created, "OK");
    let url = own.url().replace("redis://", "redis://limiter:secret@");
    let store = RedisStore::connect(&url, fresh_config()).await.unwrap();
    assert_eq!(
        common::three_checks_of_two_per_hour(&store).await,
        [true, true, false]
    );
    assert!(own.calls_by_kind().1 >= 1, "the checks ran as scripts");
}

/// A permission the connection itself needs (here `SELECT`, for a database in the URL) is
/// reported as such when connecting.
#[tokio::test]
async fn a_connection_the_user_may_not_set_up_says_it_lacks_a_permission() {
    let own = tollgate_testkit::RedisServer::start();
    let created: String = own
        .query(redis::cmd("ACL").arg(&[
            "SETUSER", "limiter", "on", ">secret", "~*", "+@all", "-select",
        ]))
        .unwrap();
    assert_eq!(created, "OK");
    let url = format!(
        "{}/1",
        own.url().replace("redis://", "redis://limiter:secret@")
    );
    let error = RedisStore::connect(&url, fresh_config())
        .await
        .expect_err("SELECT is refused")
        .to_string();
    assert!(
        error.contains("lacks a permission") && error.contains("select"),
        "{error}"
    );
    assert!(!error.contains("secret"), "{error}");
}

/// The store speaks RESP3 where the server does (it then notices a lost connection as the
/// socket closes), and RESP2 to a server without `HELLO`, deciding alike.
#[tokio::test]
async fn resp3_where_the_server_speaks_it_else_resp2() {
    for (extra, protocol) in [
        (&[][..], "resp=3"),
        (&["--rename-command", "HELLO", ""][..], "resp=2"),
    ] {
        let own = tollgate_testkit::RedisServer::start_with(extra);
        let store = RedisStore::connect(&own.url(), fresh_config())
            .await
            .unwrap();
        assert_eq!(
            common::three_checks_of_two_per_hour(&store).await,
            [true, true, false]
        );
        let clients: String = own.query(redis::cmd("CLIENT").arg("LIST")).unwrap();
        let store_connection = common::store_connection(&clients);
        assert!(store_connection.contains(protocol), "{store_connection}");
    }
}

#[test]
fn scripts_and_memory_decide_alike_on_random_workloads() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let own = runtime.block_on(async {
        tollgate_testkit::RedisServer::start_with(&["--rename-command", "FCALL", ""])
    });
    let mut runner = TestRunner::new(common::differential_config("redis_scripts", 40));
    runner
        .run(&workload(), |(limits, steps)| {
            runtime
                .block_on(async {
                    let redis = RedisStore::connect(&own.url(), fresh_config())
                        .await
                        .expect("connect");
                    replay_both(&redis, &limits, &steps, |_, expected, actual| {
                        expected == actual
                    })
                    .await
                })
                .map_err(proptest::test_runner::TestCaseError::fail)
        })
        .expect("memory and redis scripts agree");
}

#[tokio::test]
async fn time_comes_from_the_redis_server() {
    let store = single_store().await;
    let limit = Limit::new("l", Algorithm::Gcra, "1/h".parse().unwrap()).unwrap();
    let verdict = store.check(&Check::one("k", &limit), None).await.unwrap();
    let (seconds, micros): (String, String) = server().query(&mut redis::cmd("TIME")).unwrap();
    let server_now: Micros =
        seconds.parse::<u64>().unwrap() * 1_000_000 + micros.parse::<u64>().unwrap();
    assert!(
        verdict.at() <= server_now && server_now - verdict.at() < 5_000_000,
        "{} vs {server_now}",
        verdict.at()
    );
}

#[tokio::test]
async fn every_key_expires_when_its_state_is_fresh_again() {
    let store = single_store().await;
    let cases = [
        (Algorithm::FixedWindow, "5/m", 60_000),
        (Algorithm::SlidingLog, "5/m", 60_000),
        (Algorithm::SlidingWindow, "5/m", 120_000),
        (Algorithm::TokenBucket, "5/m", 12_000),
        (Algorithm::LeakyBucket, "5/m", 12_000),
        (Algorithm::Gcra, "5/m", 12_000),
    ];
    for (algorithm, quota, ceiling_ms) in cases {
        let limit = Limit::new(algorithm.as_str(), algorithm, quota.parse().unwrap()).unwrap();
        store.check(&Check::one("ttl", &limit), None).await.unwrap();
        let ttl: i64 = server()
            .query(redis::cmd("PTTL").arg(store.key_of("ttl", &limit)))
            .unwrap();
        assert!(
            ttl > 0 && ttl <= ceiling_ms,
            "{algorithm}: PTTL {ttl} ms, expected at most {ceiling_ms}"
        );
    }
}

#[tokio::test]
async fn hostile_keys_stay_in_their_own_slot_and_state() {
    let store = single_store().await;
    let limit = Limit::new("l", Algorithm::FixedWindow, "1/m".parse().unwrap()).unwrap();
    let keys = [
        "a}b",
        "{a}",
        "a%7Db",
        "#x",
        "}",
        "k".repeat(1_024).leak() as &str,
        "ключ 🔑",
    ];
    for key in keys {
        let verdict = store.check(&Check::one(key, &limit), None).await.unwrap();
        assert!(
            verdict.is_allowed(),
            "{key:?} shared state with another key"
        );
    }
    let long = store.key_of(&"k".repeat(1_024), &limit);
    assert!(long.len() < 100, "{long}");
    let stored: Vec<String> = server()
        .query(redis::cmd("KEYS").arg(format!("{}*", store.config().prefix)))
        .unwrap();
    assert_eq!(stored.len(), keys.len());
}

/// The budget for one key of the compact algorithms, key name included. The name carries the
/// limit's shape (`per-user|g100/m`) so that no limit of another algorithm or quota reads the
/// state, which puts a key like this one in the next allocation class.
const MAX_BYTES_PER_KEY: i64 = 112;

#[tokio::test]
async fn memory_per_key_is_small() {
    let mut report = Vec::new();
    let mut too_big = Vec::new();
    for algorithm in Algorithm::ALL {
        let limit = Limit::new("per-user", algorithm, "100/m".parse().unwrap()).unwrap();
        let store = RedisStore::connect(
            &server().url(),
            RedisConfig {
                prefix: "tg:".into(),
                ..fresh_config()
            },
        )
        .await
        .unwrap();
        let key = store.key_of("user:1234567", &limit);
        server().query::<i64>(redis::cmd("DEL").arg(&key)).unwrap();
        store
            .check(&Check::one("user:1234567", &limit), None)
            .await
            .unwrap();
        let bytes: i64 = server()
            .query(
                redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&key)
                    .arg("SAMPLES")
                    .arg(0),
            )
            .unwrap();
        report.push(format!("{algorithm}: {bytes} bytes ({key})"));
        if matches!(
            algorithm,
            Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::Gcra
        ) && bytes > MAX_BYTES_PER_KEY
        {
            too_big.push(algorithm);
        }
    }
    println!(
        "MEMORY USAGE per key after one request:\n{}",
        report.join("\n")
    );
    assert!(
        too_big.is_empty(),
        "over {MAX_BYTES_PER_KEY} bytes per key: {too_big:?}\n{}",
        report.join("\n")
    );
}

/// A store whose runtime has ended, its batcher with it, fails its checks saying so (not that
/// its queue is full, which would send an operator after load).
#[test]
fn a_store_whose_runtime_ended_says_its_batcher_stopped() {
    let limit = Limit::new("l", Algorithm::Gcra, "10/s".parse().unwrap()).unwrap();
    let check = Check::one("k", &limit);
    let first = tokio::runtime::Runtime::new().expect("a runtime");
    let store = first.block_on(single_store());
    let decided = first.block_on(store.check(&check, None));
    assert!(decided.is_ok_and(|verdict| verdict.is_admitted()));
    drop(first);
    let second = tokio::runtime::Runtime::new().expect("a runtime");
    let error = second
        .block_on(store.check(&check, None))
        .expect_err("no batcher to decide it");
    assert!(
        matches!(&error, StoreError::Failed(message) if message.contains("batcher stopped")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_a_typed_error() {
    // A port held by a socket that never listens: a connection is refused, and no other
    // process can take the port while the test runs (a port merely freed could be).
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = held.local_addr().unwrap().port();
    let config = RedisConfig {
        connect_timeout: Duration::from_millis(300),
        ..fresh_config()
    };
    let error = match RedisStore::connect(&format!("redis://127.0.0.1:{port}"), config).await {
        Ok(_) => panic!("connected to a closed port"),
        Err(error) => error,
    };
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    let bad = RedisStore::connect(
        "redis://127.0.0.1:6379",
        RedisConfig {
            prefix: "a{b".into(),
            ..fresh_config()
        },
    )
    .await;
    assert!(bad.is_err_and(|e| e.to_string().contains("may not contain")));
}

#[tokio::test]
async fn a_store_opened_while_redis_is_down_connects_by_itself_when_it_comes_up() {
    let port = tollgate_testkit::free_port();
    let url = format!("redis://app:pa55word@127.0.0.1:{port}");
    let store = RedisStore::open(&url, fresh_config()).expect("a URL that parses");
    store.first_attempt().await;
    assert!(!store.is_connected());
    let reason = store.connection_error().expect("the attempt failed");
    assert!(matches!(reason, StoreError::Unavailable(_)), "{reason:?}");
    let limit = Limit::new("l", Algorithm::FixedWindow, "10/s".parse().unwrap()).unwrap();
    let error = store
        .check(&Check::one("k", &limit), None)
        .await
        .expect_err("no Redis yet");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "not connected to Redis at redis://app:***@127.0.0.1:{port} yet"
        )),
        "{message}"
    );
    assert!(!message.contains("pa55word"), "{message}");
    let cluster =
        RedisStore::open_cluster(&[url.as_str()], fresh_config()).expect("URLs that parse");
    cluster.first_attempt().await;
    assert!(!cluster.is_connected());
    let reason = cluster.connection_error().expect("the attempt failed");
    assert!(!reason.to_string().contains("pa55word"), "{reason}");
    let error = cluster
        .check(&Check::one("k", &limit), None)
        .await
        .expect_err("no cluster");
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(!error.to_string().contains("pa55word"), "{error}");
    drop(cluster);

    let redis = tollgate_testkit::RedisServer::start_on(port, &[]);
    redis
        .query::<()>(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("app")
                .arg("on")
                .arg(">pa55word")
                .arg("~*")
                .arg("+@all"),
        )
        .expect("the user is made");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !store.is_connected() {
        assert!(std::time::Instant::now() < deadline, "never connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.connection_error().is_none());
    let verdict = store.check(&Check::one("k", &limit), None).await.unwrap();
    assert_eq!(verdict.decisions()[0].remaining(), 9);
    let held: i64 = redis
        .query(redis::cmd("EXISTS").arg(store.key_of("k", &limit)))
        .unwrap();
    assert_eq!(held, 1, "counted in Redis");
    assert!(
        RedisStore::open("redis://127.0.0.1:notaport", fresh_config()).is_err(),
        "a URL that does not parse is an error at once"
    );
}

/// How long a check waits for the stopped Redis below.
const STALLED_TIMEOUT: Duration = Duration::from_millis(200);

/// A store that has checked once on a Redis now stopped (`SIGSTOP`): it holds what it
/// receives and answers nothing until continued.
async fn store_on_a_stopped_redis() -> (tollgate_testkit::RedisServer, RedisStore, Limit) {
    let stalled = tollgate_testkit::RedisServer::start();
    let config = RedisConfig {
        timeout: STALLED_TIMEOUT,
        ..fresh_config()
    };
    let store = RedisStore::connect(&stalled.url(), config)
        .await
        .expect("the store connects");
    let quota = "10/s".parse().expect("a quota");
    let limit = Limit::new("l", Algorithm::Gcra, quota).expect("a limit");
    assert!(store.check(&Check::one("k", &limit), None).await.is_ok());
    stalled.signal("STOP");
    (stalled, store, limit)
}

#[tokio::test]
async fn a_stalled_server_is_a_timeout_not_a_hang() {
    let (mut stalled, store, limit) = store_on_a_stopped_redis().await;
    let error = store
        .check(&Check::one("k", &limit), None)
        .await
        .unwrap_err();
    stalled.signal("CONT");
    assert_eq!(error, StoreError::Timeout(STALLED_TIMEOUT));
    stalled.kill();
}

#[tokio::test]
async fn checks_queued_behind_stalled_calls_time_out_without_being_sent() {
    let (mut stalled, store, limit) = store_on_a_stopped_redis().await;
    let sent_before = store.stats().checks;
    // Tokio's clock stands still from here: every check below gets the same deadline, and the
    // clock moves only when nothing can run, straight to that deadline.
    tokio::time::pause();
    let mut waiting = Vec::new();
    for n in 0..6 {
        let store = store.clone();
        let limit = limit.clone();
        waiting.push(tokio::spawn(async move {
            store
                .check(&Check::one(format!("k{n}"), &limit), None)
                .await
        }));
        // The check reaches the batcher, and the batcher sends what it may, before the next
        // one comes: the first checks fill every round, the rest wait in the queue.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }
    for check in waiting {
        let answer = check.await.expect("the check ends");
        assert_eq!(answer.unwrap_err(), StoreError::Timeout(STALLED_TIMEOUT));
    }
    // The rounds' calls ended at the deadline the queued checks share: those were answered
    // with their timeout, and Redis was never asked to decide (and count) them.
    assert_eq!(
        store.stats().checks - sent_before,
        2,
        "only the two rounds' checks were sent"
    );
    tokio::time::resume();
    stalled.signal("CONT");
    // Redis first works through the calls it held; the store answers again after them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.check(&Check::one("k", &limit), None).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "never answered again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stalled.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_their_own_connections_never_over_admit_one_key() {
    const STORES: usize = 4;
    const TASKS_PER_STORE: usize = 16;
    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.is_exact()) {
        let limit = Arc::new(Limit::new("shared", algorithm, "150/h".parse().unwrap()).unwrap());
        let prefix = fresh_config().prefix;
        let mut stores = Vec::new();
        for _ in 0..STORES {
            let config = RedisConfig {
                prefix: prefix.clone(),
                ..fresh_config()
            };
            stores.push(RedisStore::connect(&server().url(), config).await.unwrap());
        }
        never_over_admits(&stores, limit, 150, TASKS_PER_STORE, 25).await;
    }
}

// One thread, on purpose: see `queued_together`.
#[tokio::test(flavor = "current_thread")]
async fn concurrent_checks_are_coalesced_and_still_exact() {
    let store = single_store().await;
    let window = Limit::new("w", Algorithm::FixedWindow, "100/h".parse().unwrap()).unwrap();
    // Every check at the same explicit instant: whatever the order, exactly 100 fit.
    let now = 1_700_000_000_000_000;
    let checks: Vec<Check<'_>> = (0..400)
        .map(|n| Check::one(if n % 2 == 0 { "even" } else { "odd" }, &window))
        .collect();
    // Queued before the batcher can take any, they must go out together.
    let verdicts = queued_together(&store, &checks, now).await;
    let admitted = verdicts
        .into_iter()
        .filter(|verdict| verdict.as_ref().unwrap().is_admitted())
        .count();
    assert_eq!(admitted, 200, "100 per key");
    let stats = store.stats();
    assert_eq!(stats.checks, 400);
    assert_eq!(
        stats.calls,
        400 / RedisConfig::default().max_batch as u64,
        "queued checks go out in full batches: {stats:?}"
    );
}

#[tokio::test]
async fn a_lost_connection_is_recovered_after_a_restart() {
    let mut server = tollgate_testkit::RedisServer::start();
    let config = RedisConfig {
        timeout: Duration::from_millis(500),
        ..fresh_config()
    };
    let store = RedisStore::connect(&server.url(), config).await.unwrap();
    let limit = Limit::new("l", Algorithm::Gcra, "10/s".parse().unwrap()).unwrap();
    assert!(store.check(&Check::one("k", &limit), None).await.is_ok());
    server.restart(&[]);
    // The first checks may meet the dead connection; the store must come back by itself, with
    // its scripts reloaded into the new server.
    let mut recovered = false;
    for _ in 0..50 {
        if store.check(&Check::one("k", &limit), None).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(recovered, "the store never reconnected");
}
