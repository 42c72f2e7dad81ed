//! The rate limit quota service over real gRPC streams, from clients generated from Envoy's
//! protos. Simulated Envoys report their usage every second on tokio's paused clock (the
//! memory store follows the same clock), over an in-process transport, so that what each
//! Envoy is assigned, and when, does not depend on the machine.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tollgate::{AnyStore, Clock, Limiter, MemoryStore, Micros};
use tollgate_envoy::rlqs::{QuotaTuning, Rlqs, RlqsGrpc};
use tollgate_envoy::rls::proto::quota::rate_limit_quota_response::BucketAction;
use tollgate_envoy::rls::proto::quota::rate_limit_quota_response::bucket_action::BucketAction as Action;
use tollgate_envoy::rls::proto::quota::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use tollgate_envoy::rls::proto::quota::rate_limit_quota_usage_reports::BucketQuotaUsage;
use tollgate_envoy::rls::proto::quota::{BucketId, RateLimitQuotaUsageReports};
use tollgate_envoy::rls::proto::types::rate_limit_strategy::{BlanketRule, Strategy};
use tollgate_envoy::rls::{Rls, RlsConfig};
use tonic::transport::{Channel, Endpoint, Server};

mod support;

/// One domain: 600 requests a minute per tenant, a free route, and everything else denied.
const CONFIG: &str = include_str!("../../../examples/rls/quota.yaml");

/// The tenant limit, in requests a second.
const LIMIT_PER_SECOND: f64 = 10.0;

/// Time as tokio's (paused) clock tells it, from a whole slot on the Unix clock.
struct TokioClock {
    base: Micros,
    start: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Micros {
        self.base + self.start.elapsed().as_micros() as u64
    }
}

fn config() -> RlsConfig {
    RlsConfig::from_documents(&[("examples/rls/quota.yaml", CONFIG)])
        .expect("a valid configuration")
}

/// A quota service on `store`, assigning from now on.
fn quota_service(store: AnyStore, tuning: QuotaTuning) -> Arc<Rlqs> {
    quota_server(&Limiter::new(store), tuning)
}

/// A quota service on `limiter`'s store, beside any other on the same store: another server.
fn quota_server(limiter: &Limiter<AnyStore>, tuning: QuotaTuning) -> Arc<Rlqs> {
    let limiter = limiter.clone();
    let rls = Arc::new(Rls::new(limiter.clone(), config(), false));
    let rlqs = Arc::new(Rlqs::new(limiter, rls, tuning).expect("a valid tuning"));
    tokio::spawn(Arc::clone(&rlqs).run());
    rlqs
}

/// The memory store on the paused clock.
fn paused_store() -> AnyStore {
    let clock = TokioClock {
        base: 1_800_000_000_000_000,
        start: Instant::now(),
    };
    AnyStore::Memory(MemoryStore::builder().clock(Arc::new(clock)).build())
}

/// One end of an in-process pipe that says which peer it comes from, as a socket would.
struct PeerPipe {
    pipe: tokio::io::DuplexStream,
    peer: Option<SocketAddr>,
}

impl tokio::io::AsyncRead for PeerPipe {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.pipe).poll_read(context, buffer)
    }
}

impl tokio::io::AsyncWrite for PeerPipe {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.pipe).poll_write(context, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.pipe).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.pipe).poll_shutdown(context)
    }
}

impl tonic::transport::server::Connected for PeerPipe {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: self.peer,
        }
    }
}

/// A gRPC server for `rlqs` reached through in-process pipes: every connection is a new pipe.
struct InProcess {
    connections: mpsc::UnboundedSender<PeerPipe>,
}

impl InProcess {
    fn serve(rlqs: Arc<Rlqs>) -> Self {
        let (connections, mut accepted) = mpsc::unbounded_channel();
        let incoming = futures_util::stream::poll_fn(move |context| {
            accepted
                .poll_recv(context)
                .map(|pipe| pipe.map(Ok::<_, std::io::Error>))
        });
        tokio::spawn(
            Server::builder()
                .add_service(RlqsGrpc::server(rlqs))
                .serve_with_incoming(incoming),
        );
        Self { connections }
    }

    async fn channel(&self) -> Channel {
        self.channel_from(None).await
    }

    /// A channel whose connections come from `peer` (none: each stream a client of its own).
    async fn channel_from(&self, peer: Option<SocketAddr>) -> Channel {
        let connections = self.connections.clone();
        Endpoint::from_static("http://in-process")
            .connect_with_connector(tower::service_fn(move |_| {
                let (client, server) = tokio::io::duplex(1 << 16);
                let accepted = connections.send(PeerPipe { pipe: server, peer });
                async move {
                    accepted.map_err(|_| std::io::Error::other("the server stopped"))?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(client))
                }
            }))
            .await
            .expect("connected in process")
    }
}

/// What an Envoy received: an action for a bucket, or the status its stream ended with.
#[derive(Debug, Clone)]
enum Received {
    Action(BucketAction),
    Ended(tonic::Status),
}

/// Everything the Envoys received, in order, with when and which Envoy.
type Log = Arc<Mutex<Vec<(Instant, usize, Received)>>>;

/// A simulated Envoy: one stream, its reports sent by hand.
struct Envoy {
    index: usize,
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    sent_domain: bool,
}

impl Envoy {
    async fn connect(channel: Channel, index: usize, log: &Log) -> Self {
        let (reports, outbound) = mpsc::channel(16);
        let mut outbound = outbound;
        let outbound = futures_util::stream::poll_fn(move |context| outbound.poll_recv(context));
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let log = Arc::clone(log);
        tokio::spawn(async move {
            let mut inbound = match client.stream_rate_limit_quotas(outbound).await {
                Ok(response) => response.into_inner(),
                Err(status) => {
                    log.lock().expect("the log").push((
                        Instant::now(),
                        index,
                        Received::Ended(status),
                    ));
                    return;
                }
            };
            loop {
                let received = match inbound.message().await {
                    Ok(Some(message)) => message
                        .bucket_action
                        .into_iter()
                        .map(Received::Action)
                        .collect(),
                    Ok(None) => break,
                    Err(status) => vec![Received::Ended(status)],
                };
                let now = Instant::now();
                let mut log = log.lock().expect("the log");
                let ended = received.iter().any(|r| matches!(r, Received::Ended(_)));
                log.extend(received.into_iter().map(|r| (now, index, r)));
                if ended {
                    break;
                }
            }
        });
        Self {
            index,
            reports,
            sent_domain: false,
        }
    }

    /// Reports one second of usage for each bucket.
    async fn report(&mut self, usage: &[(BucketId, u64, u64)]) {
        let domain = if self.sent_domain { "" } else { "envoy" };
        self.sent_domain = true;
        let message = RateLimitQuotaUsageReports {
            domain: domain.to_owned(),
            bucket_quota_usages: usage
                .iter()
                .map(|(id, allowed, denied)| BucketQuotaUsage {
                    bucket_id: Some(id.clone()),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                    num_requests_allowed: *allowed,
                    num_requests_denied: *denied,
                })
                .collect(),
        };
        // A stream the server ended takes no more reports; the log says why.
        let _ = self.reports.send(message).await;
    }
}

fn bucket(pairs: &[(&str, &str)]) -> BucketId {
    tollgate_envoy::rlqs::bucket_id(pairs)
}

/// What an assignment lets through, in requests a second (a blanket denial none, an allowance
/// everything).
fn rate(action: &BucketAction) -> Option<(f64, Duration)> {
    let Some(Action::QuotaAssignmentAction(assignment)) = &action.bucket_action else {
        return None;
    };
    let ttl = assignment
        .assignment_time_to_live
        .and_then(|d| Duration::try_from(d).ok())
        .expect("every assignment has a TTL");
    let strategy = assignment
        .rate_limit_strategy
        .as_ref()
        .and_then(|s| s.strategy)
        .expect("every assignment has a strategy");
    let rate = match strategy {
        Strategy::TokenBucket(bucket) => {
            let tokens = f64::from(bucket.tokens_per_fill.expect("tokens per fill"));
            let seconds = bucket.fill_interval.expect("a fill interval").seconds;
            assert!(seconds >= 1, "Envoy reads whole seconds: {bucket:?}");
            assert!(bucket.max_tokens >= 1, "{bucket:?}");
            tokens / seconds as f64
        }
        Strategy::BlanketRule(rule) if rule == BlanketRule::DenyAll as i32 => 0.0,
        Strategy::BlanketRule(_) => f64::INFINITY,
        Strategy::RequestsPerTimeUnit(_) => panic!("Envoy does not enforce requests_per_time_unit"),
    };
    Some((rate, ttl))
}

/// The assignments in force, as Envoy holds them: from when each arrives until its TTL ends,
/// another replaces it, or the bucket is abandoned. Returns, for `id`, the largest sum of the
/// rates in force at once, and each Envoy's last rate.
fn in_force(log: &[(Instant, usize, Received)], id: &BucketId) -> (f64, BTreeMap<usize, f64>) {
    let mut intervals = Vec::new();
    let mut current: HashMap<usize, (Instant, f64, Instant)> = HashMap::new();
    for (at, envoy, received) in log {
        let Received::Action(action) = received else {
            continue;
        };
        if action.bucket_id.as_ref() != Some(id) {
            continue;
        }
        if let Some((from, rate, until)) = current.remove(envoy) {
            intervals.push((from, (*at).min(until), rate));
        }
        if let Some((rate, ttl)) = rate(action) {
            current.insert(*envoy, (*at, rate, *at + ttl));
        }
    }
    let last: BTreeMap<usize, f64> = current.iter().map(|(e, (_, r, _))| (*e, *r)).collect();
    intervals.extend(
        current
            .into_values()
            .map(|(from, rate, until)| (from, until, rate)),
    );
    let mut events: Vec<(Instant, f64)> = intervals
        .iter()
        .filter(|(from, until, _)| until > from)
        .flat_map(|(from, until, rate)| [(*from, *rate), (*until, -rate)])
        .collect();
    // At one instant, what ends goes before what starts.
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let (mut sum, mut most) = (0.0_f64, 0.0_f64);
    for (_, change) in events {
        sum += change;
        most = most.max(sum);
    }
    (most, last)
}

/// Each Envoy's max-min fair part of the limit on its demand, in requests a second: demands
/// under an even part are met, the others share the rest evenly (each Envoy is a client of its
/// own here).
fn fair_parts(demands: &[u64]) -> Vec<f64> {
    let mut parts = vec![0.0; demands.len()];
    let mut open: Vec<usize> = (0..demands.len()).collect();
    let mut left = LIMIT_PER_SECOND;
    while !open.is_empty() {
        let even = left / open.len() as f64;
        let (met, rest): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| (demands[i] as f64) <= even);
        if met.is_empty() {
            for i in rest {
                parts[i] = even;
            }
            break;
        }
        for i in met {
            parts[i] = demands[i] as f64;
            left -= demands[i] as f64;
        }
        open = rest;
    }
    parts
}

/// Each server's Envoys' part of the limit by their demand, in requests a second: across
/// servers, the limit is split by the demand each reports.
fn demand_parts(demands: &[u64]) -> Vec<f64> {
    let total: u64 = demands.iter().sum();
    demands
        .iter()
        .map(|demand| LIMIT_PER_SECOND * *demand as f64 / total as f64)
        .collect()
}

/// How long after `from` every Envoy's assignment for `id` came within 5% of its target and
/// stayed there to the end of the log.
fn settled_after(
    log: &[(Instant, usize, Received)],
    id: &BucketId,
    from: Instant,
    targets: &[f64],
) -> Option<Duration> {
    let mut rates: HashMap<usize, f64> = HashMap::new();
    let mut since = None;
    for (at, envoy, received) in log {
        let Received::Action(action) = received else {
            continue;
        };
        if action.bucket_id.as_ref() != Some(id) {
            continue;
        }
        if let Some((rate, _)) = rate(action) {
            rates.insert(*envoy, rate);
        }
        if *at < from {
            continue;
        }
        let settled = targets.iter().enumerate().all(|(envoy, target)| {
            rates
                .get(&envoy)
                .is_some_and(|rate| within(*rate, *target, 0.05))
        });
        since = match (settled, since) {
            (true, None) => Some(*at),
            (true, kept) => kept,
            (false, _) => None,
        };
    }
    since.map(|since| since.duration_since(from))
}

/// Offers each Envoy its demand for a second, allowed up to what it was last assigned.
async fn one_second(envoys: &mut [Envoy], demands: &[u64], id: &BucketId, log: &Log) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, last) = in_force(&log.lock().expect("the log"), id);
    for (envoy, demand) in envoys.iter_mut().zip(demands) {
        let allowed = match last.get(&envoy.index) {
            Some(rate) if rate.is_finite() => (*demand).min(*rate as u64),
            _ => *demand,
        };
        envoy
            .report(&[(id.clone(), allowed, demand - allowed)])
            .await;
    }
}

fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual - expected).abs() <= expected * tolerance + 0.05
}

#[tokio::test(start_paused = true)]
async fn assignments_follow_demand_and_never_add_up_to_more_than_the_limit() {
    let rlqs = quota_service(paused_store(), QuotaTuning::default());
    let server = InProcess::serve(Arc::clone(&rlqs));
    let log: Log = Arc::default();
    let mut envoys = Vec::new();
    for index in 0..3 {
        envoys.push(Envoy::connect(server.channel().await, index, &log).await);
    }
    let tenant = bucket(&[("tenant", "acme")]);
    // 16 requests a second against 10: the 1 is met, the 10 and the 5 get 4.5 each (max-min
    // fair: claiming more than others gains nothing).
    let demands = [10, 5, 1];
    let started = Instant::now();
    for _ in 0..20 {
        one_second(&mut envoys, &demands, &tenant, &log).await;
    }
    let targets = fair_parts(&demands);
    let settled = settled_after(&log.lock().expect("the log"), &tenant, started, &targets)
        .expect("the shares settle");
    eprintln!(
        "from the first report: shares within 5% of the fair parts after {:.1} s",
        settled.as_secs_f64()
    );
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(
        most <= LIMIT_PER_SECOND + 1e-9,
        "assignments in force at once added up to {most} a second"
    );
    for (envoy, expected) in fair_parts(&demands).into_iter().enumerate() {
        assert!(
            within(last[&envoy], expected, 0.05),
            "Envoy {envoy} is assigned {} a second, its fair part is {expected}: {last:?}",
            last[&envoy]
        );
    }
    // Demand turns around: the busiest becomes the quietest.
    let demands = [1, 5, 10];
    let turned = Instant::now();
    for _ in 0..20 {
        one_second(&mut envoys, &demands, &tenant, &log).await;
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9, "{most} a second at once");
    let targets = fair_parts(&demands);
    let settled = settled_after(&log.lock().expect("the log"), &tenant, turned, &targets)
        .expect("the shares settle");
    eprintln!(
        "demand turned around: shares within 5% of the new fair parts after {:.1} s \
         ({:.1} slots); the assignments in force never added up to more than {most} of {} a second",
        settled.as_secs_f64(),
        settled.as_secs_f64() / QuotaTuning::default().period.as_secs_f64(),
        LIMIT_PER_SECOND
    );
    for (envoy, expected) in fair_parts(&demands).into_iter().enumerate() {
        assert!(
            within(last[&envoy], expected, 0.05),
            "after the turn, Envoy {envoy} has {} a second, expected {expected}: {last:?}",
            last[&envoy]
        );
    }
    let stats = rlqs.stats();
    assert_eq!((stats.streams, stats.buckets, stats.envoys), (3, 1, 3));
    assert!(
        stats.assigned_ratio_sum > 0.95 && stats.assigned_ratio_sum <= 1.0,
        "{stats:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn demand_under_the_limit_is_met_with_headroom() {
    let rlqs = quota_service(paused_store(), QuotaTuning::default());
    let server = InProcess::serve(rlqs);
    let log: Log = Arc::default();
    let mut envoys = vec![
        Envoy::connect(server.channel().await, 0, &log).await,
        Envoy::connect(server.channel().await, 1, &log).await,
    ];
    let tenant = bucket(&[("tenant", "small")]);
    for _ in 0..10 {
        one_second(&mut envoys, &[2, 3], &tenant, &log).await;
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9);
    assert!(last[&0] >= 2.0 && last[&1] >= 3.0, "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_goes_away_expires_and_a_reconnect_picks_its_bucket_up_again() {
    let rlqs = quota_service(paused_store(), QuotaTuning::default());
    let server = InProcess::serve(Arc::clone(&rlqs));
    let log: Log = Arc::default();
    let tenant = bucket(&[("tenant", "acme")]);
    let mut envoys = vec![
        Envoy::connect(server.channel().await, 0, &log).await,
        Envoy::connect(server.channel().await, 1, &log).await,
    ];
    for _ in 0..12 {
        one_second(&mut envoys, &[10, 10], &tenant, &log).await;
    }
    let (_, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(within(last[&1], 5.0, 0.05), "{last:?}");
    // Envoy 1 goes away; its assignment stays in force until its TTL, and the other grows
    // only after it.
    let gone = envoys.pop().expect("two Envoys");
    drop(gone);
    for _ in 0..12 {
        one_second(&mut envoys, &[10], &tenant, &log).await;
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9, "{most} a second at once");
    assert!(
        within(last[&0], LIMIT_PER_SECOND, 0.05),
        "alone, the whole limit: {last:?}"
    );
    assert_eq!(rlqs.stats().streams, 1);
    // It comes back on a new stream and reports the same bucket: it is assigned again.
    envoys.push(Envoy::connect(server.channel().await, 2, &log).await);
    for _ in 0..12 {
        one_second(&mut envoys, &[10, 10], &tenant, &log).await;
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9, "{most} a second at once");
    assert!(within(last[&2], 5.0, 0.05), "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn blanket_buckets_and_the_configured_default() {
    let rlqs = quota_service(paused_store(), QuotaTuning::default());
    let server = InProcess::serve(rlqs);
    let log: Log = Arc::default();
    let mut envoy = Envoy::connect(server.channel().await, 0, &log).await;
    let free = bucket(&[("route", "/free")]);
    let other = bucket(&[("user", "someone")]);
    envoy
        .report(&[(free.clone(), 5, 0), (other.clone(), 5, 0)])
        .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let log = log.lock().expect("the log");
    let rate_of = |id: &BucketId| {
        log.iter()
            .find_map(|(_, _, received)| match received {
                Received::Action(action) if action.bucket_id.as_ref() == Some(id) => rate(action),
                _ => None,
            })
            .map(|(rate, _)| rate)
    };
    assert_eq!(rate_of(&free), Some(f64::INFINITY), "unlimited: allow all");
    assert_eq!(rate_of(&other), Some(0.0), "unmatched_buckets: deny_all");
}

/// The status a stream ended with.
fn ended(log: &Log, envoy: usize) -> Option<tonic::Status> {
    log.lock()
        .expect("the log")
        .iter()
        .find_map(|(_, index, received)| match received {
            Received::Ended(status) if *index == envoy => Some(status.clone()),
            _ => None,
        })
}

#[tokio::test(start_paused = true)]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn bad_messages_end_their_own_stream_with_a_clear_status_and_no_other() {
    let tuning = QuotaTuning {
        max_buckets_per_stream: 3,
        ..QuotaTuning::default()
    };
    let rlqs = quota_service(paused_store(), tuning);
    let server = InProcess::serve(Arc::clone(&rlqs));
    let log: Log = Arc::default();
    let tenant = bucket(&[("tenant", "acme")]);
    let mut good = Envoy::connect(server.channel().await, 0, &log).await;
    good.report(&[(tenant.clone(), 1, 0)]).await;

    let unknown = Envoy::connect(server.channel().await, 1, &log).await;
    unknown
        .reports
        .send(RateLimitQuotaUsageReports {
            domain: "elsewhere".to_owned(),
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: Some(tenant.clone()),
                time_elapsed: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                ..BucketQuotaUsage::default()
            }],
        })
        .await
        .expect("sent");
    let mut oversized = Envoy::connect(server.channel().await, 2, &log).await;
    oversized
        .report(&[(bucket(&[("tenant", &"x".repeat(600))]), 1, 0)])
        .await;
    let mut greedy = Envoy::connect(server.channel().await, 3, &log).await;
    let many: Vec<(BucketId, u64, u64)> = (0..4)
        .map(|n| (bucket(&[("tenant", &format!("t{n}"))]), 1, 0))
        .collect();
    greedy.report(&many).await;
    let backwards = Envoy::connect(server.channel().await, 4, &log).await;
    backwards
        .reports
        .send(RateLimitQuotaUsageReports {
            domain: "envoy".to_owned(),
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: Some(tenant.clone()),
                time_elapsed: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..BucketQuotaUsage::default()
            }],
        })
        .await
        .expect("sent");
    tokio::time::sleep(Duration::from_millis(100)).await;

    for (envoy, code, message) in [
        (
            1,
            tonic::Code::NotFound,
            "domain \"elsewhere\" is not configured",
        ),
        (
            2,
            tonic::Code::InvalidArgument,
            "report 0: bucket_id entry \"tenant\": longer than 512 bytes",
        ),
        (
            4,
            tonic::Code::InvalidArgument,
            "report 0: time_elapsed must not be negative",
        ),
    ] {
        let status = ended(&log, envoy).expect("the stream ended");
        assert_eq!((status.code(), status.message()), (code, message));
    }

    // The stream past its cap of buckets is kept; the bucket past it is denied whole.
    assert!(ended(&log, 3).is_none(), "a cap ends no stream");
    let over = bucket(&[("tenant", "t3")]);
    let denied = log.lock().expect("the log").iter().any(|(_, envoy, received)| {
        *envoy == 3
            && matches!(received, Received::Action(action)
                if action.bucket_id.as_ref() == Some(&over) && rate(action).map(|(r, _)| r) == Some(0.0))
    });
    assert!(denied, "the fourth bucket is denied");
    // The good stream is still assigned, slot after slot.
    assert!(ended(&log, 0).is_none());
    let mut good = vec![good];
    for _ in 0..6 {
        one_second(&mut good, &[4], &tenant, &log).await;
    }
    let (_, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(last[&0] >= 4.0, "{last:?}");
    assert_eq!(rlqs.stats().streams, 2, "the refused streams are gone");
    assert_eq!(rlqs.stats().refused_buckets, 1);
}

/// Two servers on one Redis serve the same bucket to Envoys of their own: in every slot, the
/// shares they assigned add up to no more than the limit. Real time here (Redis keeps its own
/// clock, the machine's), so only what holds whatever the timing is asserted. An assignment's
/// slot is read from when it expires: at the slot's end and the overlap, less the part of a
/// second Envoy would not read, which any delay under a second keeps within the slot; each
/// Envoy's largest share of a slot counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_redis_never_assign_more_than_the_limit_together() {
    let redis = tollgate_testkit::RedisServer::start();
    let tuning = QuotaTuning {
        period: Duration::from_secs(4),
        overlap: Duration::from_secs(1),
        ..QuotaTuning::default()
    };
    let log: Log = Arc::default();
    let tenant = bucket(&[("tenant", "acme")]);
    let mut envoys = Vec::new();
    for server in 0..2 {
        let store = tollgate::RedisStore::connect(&redis.url(), tollgate::RedisConfig::default())
            .await
            .expect("Redis reached");
        let rlqs = quota_service(AnyStore::Redis(store), tuning);
        let address =
            support::serve_grpc(tonic::service::Routes::new(RlqsGrpc::server(rlqs))).await;
        let channel = Endpoint::from_shared(format!("http://{address}"))
            .expect("a URL")
            .connect()
            .await
            .expect("connected");
        for n in 0..2 {
            envoys.push(Envoy::connect(channel.clone(), server * 2 + n, &log).await);
        }
    }
    // 40 requests a second against 10, for three slots.
    for _ in 0..12 {
        one_second(&mut envoys, &[10, 10, 10, 10], &tenant, &log).await;
    }
    // When each was received, on the Unix clock.
    let now = (Instant::now(), std::time::SystemTime::now());
    let unix = |at: Instant| {
        (now.1 - now.0.duration_since(at))
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
    };
    let log = log.lock().expect("the log");
    let mut slots: BTreeMap<u64, HashMap<usize, f64>> = BTreeMap::new();
    for (at, envoy, received) in log.iter() {
        let Received::Action(action) = received else {
            continue;
        };
        let Some((rate, ttl)) = rate(action) else {
            continue;
        };
        let end = unix(*at) + ttl + Duration::from_millis(500) - tuning.overlap;
        let slot = (end.as_secs_f64() / tuning.period.as_secs_f64()).round() as u64;
        let most = slots.entry(slot).or_default().entry(*envoy).or_default();
        *most = most.max(rate);
    }
    assert!(slots.len() >= 3, "assignments in {} slots", slots.len());
    for (slot, shares) in &slots {
        let total: f64 = shares.values().sum();
        assert!(
            total <= LIMIT_PER_SECOND + 1e-9,
            "slot {slot}: the two servers assigned {total} a second together: {shares:?}"
        );
    }
    let assigned: HashMap<usize, f64> = slots.values().flatten().map(|(e, r)| (*e, *r)).collect();
    assert_eq!(assigned.len(), 4, "every Envoy was assigned: {assigned:?}");
}

/// Two servers on one store (here the memory store both use, on the paused clock), each with
/// Envoys of its own: the limit is shared across servers by demand, and the assignments in
/// force never add up to more than the limit.
#[tokio::test(start_paused = true)]
async fn two_servers_share_a_limit_by_demand_and_never_assign_more_together() {
    let limiter = Limiter::new(paused_store());
    let log: Log = Arc::default();
    let mut envoys = Vec::new();
    for server in 0..2 {
        let transport = InProcess::serve(quota_server(&limiter, QuotaTuning::default()));
        for n in 0..2 {
            envoys.push(Envoy::connect(transport.channel().await, server * 2 + n, &log).await);
        }
    }
    let tenant = bucket(&[("tenant", "acme")]);
    let demands = [10, 10, 5, 5];
    for _ in 0..30 {
        one_second(&mut envoys, &demands, &tenant, &log).await;
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9, "{most} a second at once");
    for (envoy, target) in demand_parts(&demands).iter().enumerate() {
        assert!(
            within(last[&envoy], *target, 0.05),
            "Envoy {envoy} has {} a second, its part is {target}: {last:?}",
            last[&envoy]
        );
    }
}

/// An Envoy that claims an enormous demand (2^40 requests in a nanosecond, every second)
/// weighs no more than one that wants the whole limit, and Envoys on another server keep
/// their part.
#[tokio::test(start_paused = true)]
async fn a_claimed_flood_weighs_no_more_than_the_whole_limit() {
    let limiter = Limiter::new(paused_store());
    let log: Log = Arc::default();
    let liar = InProcess::serve(quota_server(&limiter, QuotaTuning::default()));
    let honest = InProcess::serve(quota_server(&limiter, QuotaTuning::default()));
    let mut flood = Envoy::connect(liar.channel().await, 0, &log).await;
    let mut envoys = vec![Envoy::connect(honest.channel().await, 1, &log).await];
    let tenant = bucket(&[("tenant", "acme")]);
    for _ in 0..30 {
        one_second(&mut envoys, &[5], &tenant, &log).await;
        flood
            .reports
            .send(RateLimitQuotaUsageReports {
                domain: if flood.sent_domain { "" } else { "envoy" }.to_owned(),
                bucket_quota_usages: vec![BucketQuotaUsage {
                    bucket_id: Some(tenant.clone()),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: 0,
                        nanos: 1,
                    }),
                    num_requests_allowed: 1 << 40,
                    num_requests_denied: 0,
                }],
            })
            .await
            .expect("sent");
        flood.sent_domain = true;
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9, "{most} a second at once");
    // The flood counts as the whole limit (10 a second) against an honest 5.
    let honest_part = LIMIT_PER_SECOND * 5.0 / 15.0;
    assert!(
        within(last[&1], honest_part, 0.05),
        "the honest Envoy has {} a second, its part is {honest_part}: {last:?}",
        last[&1]
    );
}

/// An allow-all bucket stays assigned across turns: each renewal arrives before the last
/// assignment's TTL runs out.
#[tokio::test(start_paused = true)]
async fn a_blanket_assignment_never_lapses() {
    let rlqs = quota_service(paused_store(), QuotaTuning::default());
    let server = InProcess::serve(rlqs);
    let log: Log = Arc::default();
    let mut envoy = Envoy::connect(server.channel().await, 0, &log).await;
    let free = bucket(&[("route", "/free")]);
    for _ in 0..30 {
        envoy.report(&[(free.clone(), 5, 0)]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let log = log.lock().expect("the log");
    let mut assigned: Vec<(Instant, Instant)> = log
        .iter()
        .filter_map(|(at, _, received)| match received {
            Received::Action(action) if action.bucket_id.as_ref() == Some(&free) => {
                rate(action).map(|(_, ttl)| (*at, *at + ttl))
            }
            _ => None,
        })
        .collect();
    assigned.sort();
    assert!(assigned.len() >= 5, "renewed every slot: {assigned:?}");
    for pair in assigned.windows(2) {
        let ((_, until), (next, _)) = (pair[0], pair[1]);
        assert!(
            next <= until,
            "the assignment lapsed for {:?} before its renewal",
            next - until
        );
    }
}

fn peer(last: u8) -> Option<SocketAddr> {
    Some(SocketAddr::from(([10, 0, 0, last], 40_000)))
}

/// One client's streams and buckets used to fill the service-wide caps, after which another
/// tenant's new bucket got DENY_ALL and a real Envoy's stream RESOURCE_EXHAUSTED. A client that
/// holds less than an even part gets its place, taken from the client holding the most.
#[tokio::test(start_paused = true)]
async fn one_client_filling_the_caps_never_locks_another_out() {
    let tuning = QuotaTuning {
        max_streams: 10,
        max_buckets: 20,
        ..QuotaTuning::default()
    };
    let rlqs = quota_service(paused_store(), tuning);
    let server = InProcess::serve(Arc::clone(&rlqs));
    let log: Log = Arc::default();
    let mut hog = Vec::new();
    for index in 0..10 {
        hog.push(Envoy::connect(server.channel_from(peer(66)).await, index, &log).await);
    }
    // One of the hog's streams reports 20 buckets: the service-wide bucket cap.
    let buckets: Vec<BucketId> = (0..20)
        .map(|n| bucket(&[("tenant", &format!("hog-{n}"))]))
        .collect();
    let usage: Vec<(BucketId, u64, u64)> = buckets.iter().map(|id| (id.clone(), 1, 0)).collect();
    hog[9].report(&usage).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rlqs.stats().buckets, 20);

    // Another client: its stream takes the place of the hog's oldest, its bucket gets a share.
    let mut honest = Envoy::connect(server.channel_from(peer(1)).await, 100, &log).await;
    let tenant = bucket(&[("tenant", "acme")]);
    honest.report(&[(tenant.clone(), 0, 0)]).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let log_now = log.lock().expect("the log").clone();
    let honest_rates: Vec<f64> = log_now
        .iter()
        .filter(|(_, envoy, _)| *envoy == 100)
        .filter_map(|(_, _, received)| match received {
            Received::Action(action) if action.bucket_id.as_ref() == Some(&tenant) => {
                rate(action).map(|(rate, _)| rate)
            }
            _ => None,
        })
        .collect();
    assert!(
        honest_rates.iter().any(|rate| *rate > 0.0),
        "the honest tenant gets a share, not DENY_ALL: {honest_rates:?}"
    );
    let ended: Vec<usize> = log_now
        .iter()
        .filter(|(_, _, received)| matches!(received, Received::Ended(_)))
        .map(|(_, envoy, _)| *envoy)
        .collect();
    assert!(
        !ended.contains(&100),
        "the honest stream is open: {ended:?}"
    );

    // The hog holds its part: one more stream of its own is refused, counted.
    let mut more = Envoy::connect(server.channel_from(peer(66)).await, 200, &log).await;
    more.report(&[(tenant.clone(), 0, 0)]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = log.lock().expect("the log").iter().any(|(_, envoy, received)| {
        *envoy == 200
            && matches!(received, Received::Ended(status) if status.code() == tonic::Code::ResourceExhausted)
    });
    assert!(refused, "the hog's extra stream is refused");
    let stats = rlqs.stats();
    assert!(stats.evicted_streams >= 1, "{stats:?}");
    assert!(stats.evicted_buckets >= 1, "{stats:?}");
    assert!(stats.refused_streams >= 1, "{stats:?}");
    assert!(stats.streams <= 10 && stats.buckets <= 20, "{stats:?}");
}

/// 20 streams of one client reporting large demand used to cut an honest Envoy needing 5 of a
/// 10 a second limit to 0.23 a second. Shares are split max-min fairly across clients, and a
/// client's demand counts only as far as its admitted counts and share show it.
#[tokio::test(start_paused = true)]
async fn many_streams_claiming_demand_leave_an_honest_client_its_need() {
    let rlqs = quota_service(paused_store(), QuotaTuning::default());
    let server = InProcess::serve(rlqs);
    let log: Log = Arc::default();
    let mut liars = Vec::new();
    for index in 0..20 {
        liars.push(Envoy::connect(server.channel_from(peer(66)).await, index, &log).await);
    }
    let mut honest = vec![Envoy::connect(server.channel_from(peer(1)).await, 100, &log).await];
    let tenant = bucket(&[("tenant", "acme")]);
    for _ in 0..40 {
        one_second(&mut honest, &[5], &tenant, &log).await;
        for liar in &mut liars {
            liar.report(&[(tenant.clone(), 1_000, 1_000_000)]).await;
        }
    }
    let (most, last) = in_force(&log.lock().expect("the log"), &tenant);
    assert!(most <= LIMIT_PER_SECOND + 1e-9, "{most} a second at once");
    assert!(
        last[&100] >= 4.75,
        "the honest client has {} a second, it needs 5: {last:?}",
        last[&100]
    );
}
