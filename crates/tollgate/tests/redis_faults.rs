//! The Redis store while the network to a real redis-server misbehaves: 50 ms each way, a
//! stall, connection resets, a partition and its healing, made by a `FaultyLink` between the
//! store and the server. Under each: no algorithm admits past its quota, no check waits
//! past the store's timeout (plus a generous margin for a loaded machine), the circuit breaker
//! opens and closes as the README says, and the store decides again once the network is back.

#![allow(clippy::disallowed_methods)] // Deadlines and timings of the run itself, not decisions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::policy::DecidedBy;
use tollgate::{
    Algorithm, BreakerConfig, Check, Limit, Limiter, Micros, Policies, RedisConfig, RedisStore,
    Request, Store, StoreError,
};
use tollgate_testkit::{FaultyLink, RedisServer};

/// The store's timeout in most tests, as in `store_failures.rs`.
const TIMEOUT: Duration = Duration::from_millis(200);
/// The store's timeout where a test counts failures or answers rather than waits: room for a
/// round trip on a loaded machine, and for 50 ms each way.
const ROOMY: Duration = Duration::from_secs(1);
/// How far past its timeout a check may answer before it counts as hung: generous, so that a
/// loaded machine never fails a test; a hang is unbounded, and still caught.
const MARGIN: Duration = Duration::from_secs(2);
/// How long the store may take to decide again once the network is back.
const RECOVERY: Duration = Duration::from_secs(30);
/// The quota of every limit, per hour.
const QUOTA: u64 = 8;
/// One explicit time for every check of the over-admission runs: no window rolls over and no
/// bucket refills during a run, so exactly `QUOTA` may be admitted, whatever the machine's pace.
const AT: Micros = 1_700_000_000_000_000;
/// The breaker of the breaker tests: opens after 3 consecutive failures, rests 300 ms.
const BREAKER: BreakerConfig = BreakerConfig {
    failures: 3,
    cooldown: Duration::from_millis(300),
};

const POLICIES: &str = "
policies:
  - name: open
    match: { path_prefix: /open }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 100000/h }]
    on_store_error: allow
  - name: closed
    match: { path_prefix: /closed }
    key: [global]
    limits: [{ algorithm: fixed_window, quota: 100000/h }]
    on_store_error: deny
";

/// A real redis-server and a faulty link in front of it.
struct Rig {
    _redis: RedisServer,
    link: FaultyLink,
    /// The URL stores connect to: the link's.
    url: String,
}

impl Rig {
    fn new() -> Self {
        let redis = RedisServer::start();
        let link = FaultyLink::in_front_of(&redis);
        let url = link.url();
        Self {
            _redis: redis,
            link,
            url,
        }
    }

    /// Stores speak RESP2 (`?protocol=resp2`, as to a server without `HELLO`), on which the
    /// connection learns that its socket closed only from the next command sent on it.
    fn resp2() -> Self {
        let mut rig = Self::new();
        rig.url.push_str("?protocol=resp2");
        rig
    }

    fn config(timeout: Duration) -> RedisConfig {
        RedisConfig {
            timeout,
            connect_timeout: TIMEOUT,
            ..RedisConfig::default()
        }
    }

    /// A store connected through the link.
    async fn store(&self, timeout: Duration) -> RedisStore {
        RedisStore::connect(&self.url, Self::config(timeout))
            .await
            .expect("connects through the link")
    }

    /// A limiter with the policies above and [`BREAKER`], on a store through the link.
    async fn limiter(&self, timeout: Duration) -> Limiter<RedisStore> {
        let policies = Policies::from_yaml("faults.yaml", POLICIES).expect("valid policies");
        let limiter = Limiter::with_policies(self.store(timeout).await, policies);
        limiter.settings().set_breaker(BREAKER);
        limiter
    }
}

/// One limit of each algorithm, `QUOTA` an hour (a burst of `QUOTA` for the rate ones).
fn every_algorithm() -> Arc<Vec<Limit>> {
    let quota = format!("{QUOTA}/h").parse().expect("a quota");
    let limits = Algorithm::ALL
        .iter()
        .map(|&algorithm| {
            let mut builder = Limit::builder(algorithm.as_str(), algorithm, quota);
            if algorithm.is_rate() {
                builder = builder.burst(QUOTA);
            }
            builder.build().expect("a limit")
        })
        .collect();
    Arc::new(limits)
}

/// What the checks of a run got, per limit.
#[derive(Debug, Default, Clone)]
struct Tally {
    admitted: Vec<u64>,
    denied: Vec<u64>,
    failed: Vec<u64>,
    /// The longest any check took, failed or not.
    slowest: Duration,
    /// The shortest an answered check took.
    fastest_answer: Option<Duration>,
}

impl Tally {
    fn new(limits: usize) -> Self {
        Self {
            admitted: vec![0; limits],
            denied: vec![0; limits],
            failed: vec![0; limits],
            ..Self::default()
        }
    }

    fn add(&mut self, other: &Tally) {
        for (index, _) in other.admitted.iter().enumerate() {
            self.admitted[index] += other.admitted[index];
            self.denied[index] += other.denied[index];
            self.failed[index] += other.failed[index];
        }
        self.slowest = self.slowest.max(other.slowest);
        self.fastest_answer = match (self.fastest_answer, other.fastest_answer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    fn failures(&self) -> u64 {
        self.failed.iter().sum()
    }
}

/// `per_limit` checks on each limit, all at once, each on `key` at [`AT`] and each required to
/// answer within `timeout` + [`MARGIN`]. `answered` counts answers as they come.
fn spawn_burst(
    store: &RedisStore,
    limits: &Arc<Vec<Limit>>,
    key: &'static str,
    per_limit: usize,
    timeout: Duration,
    answered: &Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Tally> {
    let tally = Arc::new(Mutex::new(Tally::new(limits.len())));
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..limits.len() {
        for _ in 0..per_limit {
            let (store, limits) = (store.clone(), Arc::clone(limits));
            let (tally, answered) = (Arc::clone(&tally), Arc::clone(answered));
            tasks.spawn(async move {
                let check = Check::one(key, &limits[index]);
                let started = Instant::now();
                let answer = tokio::time::timeout(timeout + MARGIN, store.check(&check, Some(AT)))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("a check hung past {:?}", timeout + MARGIN);
                    });
                let took = started.elapsed();
                answered.fetch_add(1, Ordering::Relaxed);
                let mut tally = tally.lock().expect("the tally");
                tally.slowest = tally.slowest.max(took);
                match answer {
                    Ok(verdict) => {
                        tally.fastest_answer = Some(
                            tally
                                .fastest_answer
                                .map_or(took, |fastest| fastest.min(took)),
                        );
                        if verdict.is_admitted() {
                            tally.admitted[index] += 1;
                        } else {
                            tally.denied[index] += 1;
                        }
                    }
                    Err(
                        StoreError::Timeout(_) | StoreError::Unavailable(_) | StoreError::Failed(_),
                    ) => tally.failed[index] += 1,
                    Err(other) => panic!("{other}"),
                }
            });
        }
    }
    tokio::spawn(async move {
        while let Some(done) = tasks.join_next().await {
            done.expect("no check panicked");
        }
        tally.lock().expect("the tally").clone()
    })
}

async fn burst(
    store: &RedisStore,
    limits: &Arc<Vec<Limit>>,
    key: &'static str,
    per_limit: usize,
    timeout: Duration,
) -> Tally {
    let answered = Arc::new(AtomicU64::new(0));
    spawn_burst(store, limits, key, per_limit, timeout, &answered)
        .await
        .expect("the burst ends")
}

/// Polls until a check on a fresh key is decided by the store: how long that took.
async fn until_the_store_decides(store: &RedisStore, limits: &Arc<Vec<Limit>>) -> Duration {
    let started = Instant::now();
    loop {
        let check = Check::one("probe", &limits[0]);
        let answer = tokio::time::timeout(TIMEOUT + MARGIN, store.check(&check, Some(AT)))
            .await
            .expect("a probe answers within the timeout");
        if answer.is_ok() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < RECOVERY,
            "the store did not decide again within {RECOVERY:?}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A network fault, put in place and taken away.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Latency,
    Stall,
    Reset,
    Partition,
}

impl Fault {
    /// Puts the fault in place; for a reset, resets the connections now open.
    fn strike(self, link: &FaultyLink) {
        match self {
            Fault::Latency => link.set_latency(Duration::from_millis(50)),
            Fault::Stall => link.stall(),
            Fault::Reset => link.reset_all(),
            Fault::Partition => link.partition(),
        }
    }

    fn clear(self, link: &FaultyLink) {
        match self {
            Fault::Latency => link.set_latency(Duration::ZERO),
            Fault::Stall => link.resume(),
            Fault::Reset => {}
            Fault::Partition => link.heal(),
        }
    }
}

/// Checks on every algorithm before, across and after `fault`: a first burst answered before
/// it, a second under way when it strikes, a third sent while it holds (and a reset strikes
/// again under it), a fourth of more than the quota once the store decides again. Nothing is
/// admitted past the quota, no check waits past the timeout and the margin, and the store's
/// count carries on after the fault.
async fn through(fault: Fault) {
    let rig = Rig::new();
    let store = rig.store(TIMEOUT).await;
    let limits = every_algorithm();
    let key = "user:1";
    let mut total = burst(&store, &limits, key, 2, TIMEOUT).await;

    let answered = Arc::new(AtomicU64::new(0));
    let struck_mid_way = spawn_burst(&store, &limits, key, 3, TIMEOUT, &answered);
    let started = Instant::now();
    while answered.load(Ordering::Relaxed) == 0 && started.elapsed() < RECOVERY {
        tokio::task::yield_now().await;
    }
    fault.strike(&rig.link);
    let sent_under = spawn_burst(&store, &limits, key, 3, TIMEOUT, &answered);
    fault.strike(&rig.link);
    let sent_under = sent_under.await.expect("the burst ends");
    total.add(&struck_mid_way.await.expect("the burst ends"));
    total.add(&sent_under);
    if matches!(fault, Fault::Stall | Fault::Partition) {
        assert_eq!(
            sent_under.fastest_answer, None,
            "{fault:?}: a check sent under the fault was answered: {sent_under:?}"
        );
    }

    fault.clear(&rig.link);
    let recovered = until_the_store_decides(&store, &limits).await;
    let after = burst(&store, &limits, key, QUOTA as usize + 2, TIMEOUT).await;
    total.add(&after);
    println!(
        "{fault:?}: admitted {:?}, denied {:?}, failed {:?}, slowest check {:?}; \
         the store decided again {recovered:?} after the fault ended",
        total.admitted, total.denied, total.failed, total.slowest
    );

    for (index, limit) in limits.iter().enumerate() {
        assert!(
            total.admitted[index] <= QUOTA,
            "{fault:?}: {} admitted {} of a quota of {QUOTA}",
            limit.algorithm(),
            total.admitted[index]
        );
        if after.failed[index] == 0 {
            // More checks than the quota, all answered: the store still counts what it admitted.
            assert!(
                after.denied[index] >= 2,
                "{fault:?}: {} denied only {} after the fault",
                limit.algorithm(),
                after.denied[index]
            );
        }
    }
    assert!(
        after.fastest_answer.is_some(),
        "{fault:?}: the store answered no check after the fault: {after:?}"
    );
    assert!(
        total.slowest <= TIMEOUT + MARGIN,
        "{fault:?}: a check took {:?}",
        total.slowest
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_algorithm_admits_past_its_quota_through_50ms_each_way() {
    through(Fault::Latency).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_algorithm_admits_past_its_quota_through_a_stall() {
    through(Fault::Stall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_algorithm_admits_past_its_quota_through_connection_resets() {
    through(Fault::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_algorithm_admits_past_its_quota_through_a_partition_and_its_healing() {
    through(Fault::Partition).await;
}

/// With 50 ms each way and a timeout that leaves room for it, every check is answered by the
/// store, no sooner than the round trip, and exactly the quota is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_50ms_each_way_within_the_timeout_the_store_decides_every_check() {
    let timeout = ROOMY;
    let rig = Rig::new();
    let store = rig.store(timeout).await;
    let limits = every_algorithm();
    rig.link.set_latency(Duration::from_millis(50));
    let tally = burst(&store, &limits, "user:1", QUOTA as usize + 4, timeout).await;
    println!("50 ms each way: {tally:?}");
    assert!(tally.slowest <= timeout + MARGIN, "{tally:?}");
    let fastest = tally.fastest_answer.expect("answers");
    assert!(
        fastest >= Duration::from_millis(100),
        "an answer came back in {fastest:?}, faster than the round trip"
    );
    for (index, limit) in limits.iter().enumerate() {
        assert!(
            tally.admitted[index] <= QUOTA,
            "{}: {tally:?}",
            limit.algorithm()
        );
        if tally.failed[index] == 0 {
            assert_eq!(tally.admitted[index], QUOTA, "{}", limit.algorithm());
        }
    }

    // Sequential requests through the limiter: each answered by the store, the breaker shut.
    let limiter = rig.limiter(timeout).await;
    for _ in 0..10 {
        let (decided_by, took) = decide(&limiter, "/closed", timeout).await;
        assert_eq!(decided_by, DecidedBy::Store);
        assert!(took >= Duration::from_millis(100), "{took:?}");
    }
    assert_eq!(limiter.telemetry().breaker_openings(), 0);
}

/// Evaluates a request, within the timeout and the margin: what decided it and how long it took.
async fn decide(
    limiter: &Limiter<RedisStore>,
    path: &str,
    timeout: Duration,
) -> (DecidedBy, Duration) {
    let started = Instant::now();
    let evaluation = tokio::time::timeout(
        timeout + MARGIN,
        limiter.evaluate(&Request::new("GET", path)),
    )
    .await
    .unwrap_or_else(|_| panic!("a request waited past {:?}", timeout + MARGIN))
    .expect("an answer, not an error");
    (evaluation.decided_by, started.elapsed())
}

/// Three requests that each wait out the timeout open the breaker; while it rests no request
/// reaches the store; after `clear` it probes, and the store decides again. Returns how long
/// after `clear` the first request was decided by the store.
async fn breaker_through(
    rig: &Rig,
    strike: impl Fn(&FaultyLink),
    clear: impl Fn(&FaultyLink),
) -> Duration {
    let limiter = rig.limiter(TIMEOUT).await;
    // The first call loads the function library: give a loaded machine a few tries.
    let started = Instant::now();
    while decide(&limiter, "/open", TIMEOUT).await.0 != DecidedBy::Store {
        assert!(started.elapsed() < RECOVERY, "the store never decided");
    }
    let calls_before = limiter.store().stats().calls;

    strike(&rig.link);
    for _ in 0..BREAKER.failures {
        let (decided_by, took) = decide(&limiter, "/open", TIMEOUT).await;
        assert_eq!(decided_by, DecidedBy::FailOpen);
        assert!(took >= TIMEOUT, "failed in {took:?}, before the timeout");
    }
    assert!(limiter.telemetry().store_resting(), "the breaker opened");
    assert_eq!(limiter.telemetry().breaker_openings(), 1);
    let calls_failing = limiter.store().stats().calls;
    assert!(
        (1..=u64::from(BREAKER.failures)).contains(&(calls_failing - calls_before)),
        "{} calls for {} failed requests",
        calls_failing - calls_before,
        BREAKER.failures
    );
    let (decided_by, _) = decide(&limiter, "/closed", TIMEOUT).await;
    assert_eq!(decided_by, DecidedBy::FailClosed);
    assert_eq!(
        limiter.store().stats().calls,
        calls_failing,
        "a resting store is not called"
    );

    clear(&rig.link);
    let cleared = Instant::now();
    loop {
        let (decided_by, _) = decide(&limiter, "/open", TIMEOUT).await;
        if decided_by == DecidedBy::Store {
            break;
        }
        assert_eq!(decided_by, DecidedBy::FailOpen);
        assert!(
            cleared.elapsed() < RECOVERY,
            "the store was never used again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let recovered = cleared.elapsed();
    assert!(!limiter.telemetry().store_resting(), "the breaker closed");
    assert_eq!(
        decide(&limiter, "/closed", TIMEOUT).await.0,
        DecidedBy::Store
    );
    recovered
}

#[tokio::test]
async fn a_stall_opens_the_breaker_and_after_resume_the_store_decides_again() {
    let rig = Rig::new();
    let recovered = breaker_through(&rig, FaultyLink::stall, FaultyLink::resume).await;
    println!(
        "resume -> first store decision: {recovered:?} (breaker: {} failures, {:?} cool-down)",
        BREAKER.failures, BREAKER.cooldown
    );
}

#[tokio::test]
async fn a_partition_opens_the_breaker_and_after_heal_the_store_decides_again() {
    let rig = Rig::new();
    let accepted = rig.link.accepted();
    let recovered = breaker_through(&rig, FaultyLink::partition, FaultyLink::heal).await;
    assert!(
        rig.link.accepted() > accepted,
        "the connection the partition held was reset, and the store reconnected"
    );
    println!(
        "heal -> first store decision: {recovered:?} (breaker: {} failures, {:?} cool-down)",
        BREAKER.failures, BREAKER.cooldown
    );
}

#[tokio::test]
async fn latency_past_the_timeout_opens_the_breaker_and_it_closes_when_the_link_is_quick() {
    let rig = Rig::new();
    let recovered = breaker_through(
        &rig,
        |link| link.set_latency(Duration::from_millis(300)),
        |link| link.set_latency(Duration::ZERO),
    )
    .await;
    println!("latency off -> first store decision: {recovered:?}");
}

/// A reset costs the request that meets it (one sent at once races the reconnection, and any
/// caught in flight fail); the store reconnects at once, so isolated resets never add up to the
/// consecutive failures that open the breaker.
#[tokio::test]
async fn isolated_resets_never_open_the_breaker() {
    let rig = Rig::new();
    let limiter = rig.limiter(ROOMY).await;
    assert_eq!(decide(&limiter, "/closed", ROOMY).await.0, DecidedBy::Store);
    let accepted = rig.link.accepted();
    let mut failed = Vec::new();
    for _ in 0..5 {
        rig.link.reset_all();
        let mut failures = 0;
        loop {
            let (decided_by, _) = decide(&limiter, "/closed", ROOMY).await;
            if decided_by == DecidedBy::Store {
                break;
            }
            assert_eq!(decided_by, DecidedBy::FailClosed);
            failures += 1;
            assert!(
                failures < BREAKER.failures,
                "{failures} failures after one reset"
            );
        }
        failed.push(failures);
    }
    println!("failed requests after each reset: {failed:?}");
    assert_eq!(limiter.telemetry().breaker_openings(), 0);
    assert!(rig.link.accepted() > accepted, "the store reconnected");
}

/// A store opened while the network is partitioned answers (with typed errors, within its
/// timeout) and connects by itself once the partition heals.
#[tokio::test]
async fn a_store_opened_during_a_partition_connects_after_heal() {
    let rig = Rig::new();
    rig.link.partition();
    let store = RedisStore::open(&rig.link.url(), Rig::config(TIMEOUT)).expect("a valid url");
    let limits = every_algorithm();
    let tally = burst(&store, &limits, "user:1", 1, TIMEOUT).await;
    assert_eq!(tally.failures(), limits.len() as u64, "{tally:?}");
    store.first_attempt().await;
    assert!(!store.is_connected());
    rig.link.heal();
    let recovered = until_the_store_decides(&store, &limits).await;
    assert!(store.is_connected());
    println!("heal -> first store decision, store opened during the partition: {recovered:?}");
}

/// Over RESP3 (the default where the server speaks it) a connection lost while idle is replaced
/// as soon as its socket closes, so the next request finds a new one (over RESP2 that request
/// would fail and set off the reconnection).
#[tokio::test]
async fn a_connection_reset_while_idle_costs_no_request() {
    let rig = Rig::new();
    let limiter = rig.limiter(ROOMY).await;
    assert_eq!(decide(&limiter, "/closed", ROOMY).await.0, DecidedBy::Store);
    for _ in 0..5 {
        let accepted = rig.link.accepted();
        rig.link.reset_all();
        let started = Instant::now();
        while rig.link.accepted() == accepted {
            assert!(started.elapsed() < RECOVERY, "the store never reconnected");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(decide(&limiter, "/closed", ROOMY).await.0, DecidedBy::Store);
    }
    assert_eq!(limiter.telemetry().breaker_openings(), 0);
}

/// Over RESP2 the breaker's first probe after the heal usually meets the reset connection and
/// fails, so the store decides again one cool-down later than over RESP3.
#[tokio::test]
async fn over_resp2_a_partition_opens_the_breaker_and_after_heal_the_store_decides_again() {
    let rig = Rig::resp2();
    let recovered = breaker_through(&rig, FaultyLink::partition, FaultyLink::heal).await;
    println!(
        "heal -> first store decision over RESP2: {recovered:?} (breaker: {} failures, {:?} cool-down)",
        BREAKER.failures, BREAKER.cooldown
    );
}
