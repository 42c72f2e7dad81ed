//! `tollgate-tools bench`: a load generator for the check API, the rate limit service and the
//! proxy.
//!
//! Without `--rate`, every worker sends its next request as soon as the last is answered (the
//! server's capacity). With `--rate`, requests are sent on a fixed schedule and each latency is
//! measured from when its request was due, so a stall shows in the percentiles instead of
//! silently slowing the load.

mod grpc;
mod pace;
mod report;
mod target;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;

pub(crate) use pace::Pacer;

pub use grpc::RlsClient;

pub use report::Summary;
pub(crate) use report::thousands;
pub use target::{
    Answer, DEFAULT_CHECK_BODY, IP_PLACEHOLDER, KEY_PLACEHOLDER, Target, check_answer, fill,
};

/// What `tollgate-tools bench` drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// `POST /v1/check` on `tollgate serve`.
    Http,
    /// Envoy's `ShouldRateLimit` on `tollgate serve`.
    Grpc,
    /// Plain GETs of a URL, such as an upstream through `tollgate proxy`.
    Get,
}

/// The most workers a run may have.
pub const MAX_CONCURRENCY: usize = 10_000;
/// The most distinct keys a run may cycle through.
pub const MAX_KEYS: u64 = 10_000_000;

/// `tollgate-tools bench` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// What to drive.
    #[arg(long, value_enum, default_value = "http")]
    pub target: TargetKind,
    /// The HTTP API's base URL (http), the gRPC address (grpc) or the URL to GET (get);
    /// defaults to `tollgate serve`'s and `tollgate proxy`'s default addresses.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Requests under way at once.
    #[arg(long, short = 'c', default_value_t = 64)]
    pub concurrency: usize,
    /// How long to run.
    #[arg(long, short = 'd', default_value = "10s", value_parser = tollgate::parse_duration)]
    pub duration: Duration,
    /// Send this many requests a second on a fixed schedule instead of as fast as possible.
    #[arg(long, value_name = "PER_SECOND")]
    pub rate: Option<f64>,
    /// How many distinct keys the requests cycle through (`{key}` in the body or descriptor, or
    /// `{ip}`: an IPv6 address in a /64 of its own per key, for policies keyed by address).
    #[arg(long, default_value_t = 1_000)]
    pub keys: u64,
    /// The check request (http), with `{key}` where the key number goes (`{ip}` where its
    /// address goes).
    #[arg(long, default_value = DEFAULT_CHECK_BODY)]
    pub body: String,
    /// A header field to send (http, get), `name: value`, with `{key}` where the key number
    /// goes; repeat for more, e.g. `--header 'x-forwarded-for: 10.1.0.{key}'`, or
    /// `--header 'prefer: return=minimal'` for the check API's brief answers.
    #[arg(long, short = 'H', value_name = "FIELD")]
    pub header: Vec<String>,
    /// The rate limit service domain (grpc).
    #[arg(long, default_value = "edge")]
    pub domain: String,
    /// A descriptor's entries (grpc), `key=value,...`, with `{key}` where the key number goes;
    /// repeat for a request of several descriptors.
    #[arg(long, default_value = "remote_address=10.0.0.{key}")]
    pub descriptor: Vec<String>,
    /// HTTP/2 connections to the rate limit service (grpc).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

impl BenchArgs {
    fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return Err(format!("--concurrency: give 1 to {MAX_CONCURRENCY}"));
        }
        if self.keys == 0 || self.keys > MAX_KEYS {
            return Err(format!("--keys: give 1 to {MAX_KEYS}"));
        }
        if self.duration.is_zero() {
            return Err("--duration: give a positive duration, such as 10s".to_owned());
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err("--rate: give a positive number of requests a second".to_owned());
        }
        if self.descriptor.len() > tollgate::MAX_ITEMS {
            return Err(format!(
                "--descriptor: at most {} per request",
                tollgate::MAX_ITEMS
            ));
        }
        if self.connections == 0 || self.connections > 1_000 {
            return Err("--connections: give 1 to 1000".to_owned());
        }
        Ok(())
    }

    async fn target(&self) -> Result<Target, String> {
        match self.target {
            TargetKind::Http => Target::check(
                self.url.as_deref().unwrap_or("http://127.0.0.1:8080"),
                &self.body,
                &self.header,
                self.keys,
            ),
            TargetKind::Get => Target::get(
                self.url.as_deref().unwrap_or("http://127.0.0.1:8000/"),
                &self.header,
                self.keys,
            ),
            TargetKind::Grpc => RlsClient::connect(
                self.url.as_deref().unwrap_or("127.0.0.1:8081"),
                &self.domain,
                &self.descriptor,
                self.keys,
                self.connections,
            )
            .await
            .map(Target::Grpc),
        }
    }

    fn load(&self) -> String {
        let pace = self.rate.map_or_else(
            || "as fast as answers come".to_owned(),
            |rate| format!("{rate}/s on schedule"),
        );
        format!(
            "{} workers for {:?}, {pace}, {} keys",
            self.concurrency, self.duration, self.keys
        )
    }
}

/// Counts shared by the workers and the progress bar.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    failed: AtomicU64,
}

/// A latency histogram in microseconds.
pub(crate) fn new_histogram() -> Histogram<u64> {
    // 1 µs to 10 minutes at three significant digits: bounds that are always valid.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant bounds are valid")
}

/// When a worker sends, and what its requests took: on `pacer`'s schedule, each latency
/// measured from when its request was due so that a server that falls behind shows in the
/// percentiles, or back to back until the deadline.
pub(crate) struct Schedule<'a> {
    pacer: Option<&'a Pacer>,
    deadline: Instant,
    sent: &'a AtomicU64,
    latency: Histogram<u64>,
}

/// One request to send: its number, and when its latency counts from.
pub(crate) struct Turn {
    /// The request's number, counted over every worker of the schedule.
    pub(crate) n: u64,
    from: Instant,
}

impl<'a> Schedule<'a> {
    /// A worker's schedule; `sent` counts the requests of every worker.
    pub(crate) fn new(pacer: Option<&'a Pacer>, deadline: Instant, sent: &'a AtomicU64) -> Self {
        Self {
            pacer,
            deadline,
            sent,
            latency: new_histogram(),
        }
    }

    /// Waits for the next request's turn; `None` once the run is over.
    pub(crate) async fn next(&mut self) -> Option<Turn> {
        if let Some(pacer) = self.pacer {
            pacer.next().await?;
        }
        let now = Instant::now();
        if self.pacer.is_none() && now >= self.deadline {
            return None;
        }
        let n = self.sent.fetch_add(1, Ordering::Relaxed);
        let from = self.pacer.map_or(now, |pacer| pacer.due(n).min(now));
        Some(Turn { n, from })
    }

    /// Records that the request of `turn` was answered now.
    pub(crate) fn answered(&mut self, turn: Turn) {
        let micros = turn.from.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        self.latency.saturating_record(micros.max(1));
    }

    /// The latencies recorded.
    pub(crate) fn into_latency(self) -> Histogram<u64> {
        self.latency
    }
}

/// One worker: sends until the run ends, counting the answers.
async fn worker(
    index: usize,
    target: Arc<Target>,
    counts: Arc<Counts>,
    deadline: Instant,
    pacer: Option<Arc<Pacer>>,
) -> (Histogram<u64>, Option<String>) {
    let mut first_failure = None;
    let mut schedule = Schedule::new(pacer.as_deref(), deadline, &counts.sent);
    while let Some(turn) = schedule.next().await {
        let counter = match target.send(index, turn.n).await {
            Answer::Allowed => &counts.allowed,
            Answer::Denied => &counts.denied,
            Answer::Failed(reason) => {
                first_failure.get_or_insert(reason);
                &counts.failed
            }
        };
        schedule.answered(turn);
        counter.fetch_add(1, Ordering::Relaxed);
    }
    (schedule.into_latency(), first_failure)
}

/// A bar that fills over `duration`.
pub(crate) fn progress_bar(duration: Duration) -> ProgressBar {
    let bar = ProgressBar::new(duration.as_millis() as u64);
    let style = ProgressStyle::with_template("{bar:30} {elapsed}/{duration} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Moves the progress bar and its rates along every 200 ms, until aborted.
async fn show_progress(bar: ProgressBar, counts: Arc<Counts>, start: Instant) {
    let mut interval = tokio::time::interval(Duration::from_millis(200));
    loop {
        interval.tick().await;
        let elapsed = start.elapsed();
        bar.set_position(elapsed.as_millis() as u64);
        let answered = counts.allowed.load(Ordering::Relaxed)
            + counts.denied.load(Ordering::Relaxed)
            + counts.failed.load(Ordering::Relaxed);
        bar.set_message(format!(
            "{:.0}/s  allowed {}  denied {}  failed {}",
            answered as f64 / elapsed.as_secs_f64().max(0.001),
            counts.allowed.load(Ordering::Relaxed),
            counts.denied.load(Ordering::Relaxed),
            counts.failed.load(Ordering::Relaxed),
        ));
    }
}

/// Runs the load and prints the summary.
pub async fn run(args: BenchArgs) -> Result<(), String> {
    args.validate()?;
    let target = Arc::new(args.target().await?);
    let counts = Arc::new(Counts::default());
    let start = Instant::now();
    let deadline = start + args.duration;
    let pacer = args
        .rate
        .map(|rate| Arc::new(Pacer::start(rate, args.duration)));
    let workers: Vec<_> = (0..args.concurrency)
        .map(|index| {
            tokio::spawn(worker(
                index,
                Arc::clone(&target),
                Arc::clone(&counts),
                deadline,
                pacer.clone(),
            ))
        })
        .collect();
    let bar = progress_bar(args.duration);
    let ticker = tokio::spawn(show_progress(bar.clone(), Arc::clone(&counts), start));
    let mut latency = new_histogram();
    let mut first_failure = None;
    for handle in workers {
        let (recorded, failure) = handle
            .await
            .map_err(|error| format!("a worker failed: {error}"))?;
        latency
            .add(&recorded)
            .map_err(|error| format!("cannot merge latencies: {error}"))?;
        if first_failure.is_none() {
            first_failure = failure;
        }
    }
    let elapsed = start.elapsed();
    ticker.abort();
    bar.finish_and_clear();
    let summary = Summary {
        target: target.describe(),
        load: args.load(),
        elapsed,
        allowed: counts.allowed.load(Ordering::Relaxed),
        denied: counts.denied.load(Ordering::Relaxed),
        failed: counts.failed.load(Ordering::Relaxed),
        first_failure,
        latency,
    };
    if args.json {
        println!("{}", summary.to_json());
    } else {
        print!("{}", summary.render());
    }
    if summary.allowed + summary.denied == 0 {
        return Err(format!(
            "no request was answered{}",
            summary
                .first_failure
                .as_ref()
                .map_or_else(String::new, |failure| format!(": {failure}"))
        ));
    }
    Ok(())
}
