//! `tollgate-tools regions`: one global limit shared by three regions, on this machine, for anyone
//! to run. Each region is a `tollgate serve` with a Redis of its own; a fourth Redis is the global
//! store, reached by every region through a proxy that adds that region's round trip. Uneven load,
//! open loop, well above the quota, shows what leases cost: latency at each region, calls to the
//! global store, quota left unused; and that the regions together never admit more than the quota
//! in any window (the run fails if they do).

mod load;
mod processes;
mod record;
mod report;
mod server_binary;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tollgate::Quota;
use tollgate_testkit::FaultyLink;

use crate::bench::{Target, progress_bar, thousands};
use load::{Load, Progress};
use processes::Processes;
use record::Record;
use report::{LeaseStats, Report, Row};

/// One region: its name, the round trip it adds to the global store, its share of the load.
#[derive(Debug, Clone, Copy)]
pub(super) struct Region {
    name: &'static str,
    round_trip_ms: u64,
    share_percent: u64,
}

/// The regions, near to far, busy to quiet by default (`--shares` sets their shares).
const REGIONS: [Region; 3] = [
    Region {
        name: "eu-west",
        round_trip_ms: 40,
        share_percent: 70,
    },
    Region {
        name: "us-east",
        round_trip_ms: 80,
        share_percent: 20,
    },
    Region {
        name: "ap-south",
        round_trip_ms: 120,
        share_percent: 10,
    },
];

/// Each region's share of the load, in percent, in the order of [`REGIONS`]; they add up to 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares([u64; 3]);

impl std::str::FromStr for Shares {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let parts: Vec<u64> = text
            .split(',')
            .map(|part| part.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{text:?}: give three whole percentages, as 70,20,10"))?;
        let shares: [u64; 3] = parts
            .try_into()
            .map_err(|_| format!("{text:?}: give one share for each of the three regions"))?;
        if shares.iter().sum::<u64>() != 100 || shares.contains(&0) {
            return Err(format!(
                "{text:?}: the shares are percentages of the load, each at least 1, adding up to 100"
            ));
        }
        Ok(Self(shares))
    }
}

impl Shares {
    /// The regions with these shares of the load.
    fn regions(self) -> [Region; 3] {
        let mut regions = REGIONS;
        for (region, share) in regions.iter_mut().zip(self.0) {
            region.share_percent = share;
        }
        regions
    }
}

/// How long after the load the lease statistics are read: leases idle for a second go back to
/// the global store at the next sweep (every 200 ms), and only then is it known which units
/// were returned and which stranded.
const SETTLE: Duration = Duration::from_millis(1_500);

/// The check every region's clients send: the tenant policy, for one tenant.
const CHECK: &str = r#"{"policy":"tenant","attributes":{"tenant":"acme"}}"#;

/// The baseline check, sent to the same servers at the same time: a limit counted in the
/// region alone, so its latency is what the machine gives any check, without the global tier.
const BASELINE_CHECK: &str = r#"{"policy":"regional","attributes":{"tenant":"acme"}}"#;

/// `tollgate-tools regions` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RegionsArgs {
    /// How long to drive the load, in seconds.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// The global limit: a fixed window shared by every region.
    #[arg(long, default_value = "60000/m")]
    pub quota: Quota,
    /// Checks a second offered in total, split over the regions by `--shares`.
    #[arg(long, default_value_t = 3000.0)]
    pub rate: f64,
    /// Each region's share of the load, in percent: eu-west (40 ms from the global store),
    /// us-east (80 ms), ap-south (120 ms).
    #[arg(long, value_name = "EU,US,AP", default_value = "70,20,10")]
    pub shares: Shares,
    /// Where to write an SVG chart of admissions over time.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// Checks under way at once per region, at most: enough that checks waiting for the
    /// global store do not hold up the schedule.
    #[arg(long, default_value_t = 64)]
    pub workers: usize,
    /// Checks a second of a regional limit sent to each region beside the load, whose latency
    /// is the baseline the global limit's is measured against.
    #[arg(long, default_value_t = 100.0)]
    pub baseline_rate: f64,
    /// The `tollgate` binary each region runs; by default the one beside `tollgate-tools`,
    /// else `tollgate` on PATH.
    #[arg(long, value_name = "PATH")]
    pub server: Option<PathBuf>,
}

impl RegionsArgs {
    fn validate(&self) -> Result<(), String> {
        if !(1..=3_600).contains(&self.seconds) {
            return Err("--seconds: give 1 to 3600".to_owned());
        }
        if !(self.rate.is_finite() && self.rate >= 1.0) {
            return Err("--rate: give at least one check a second".to_owned());
        }
        if !(self.baseline_rate.is_finite() && self.baseline_rate >= 1.0) {
            return Err("--baseline-rate: give at least one check a second".to_owned());
        }
        if !(1..=crate::bench::MAX_CONCURRENCY).contains(&self.workers) {
            return Err(format!(
                "--workers: give 1 to {}",
                crate::bench::MAX_CONCURRENCY
            ));
        }
        Ok(())
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }
}

/// The policy file every region loads: the tenant policy with its one global limit, and the
/// same limit counted in each region alone for the baseline.
fn policy_file(quota: Quota) -> String {
    format!(
        "# Written by `tollgate-tools regions`: one tenant quota that every region spends from.\n\
         policies:\n  - name: tenant\n    key: [tenant]\n    limits:\n      \
         - {{ name: tenant-quota, algorithm: fixed_window, quota: {quota}, scope: global }}\n\
         # The baseline: the same quota counted in the region alone.\n  \
         - name: regional\n    key: [tenant]\n    limits:\n      \
         - {{ name: tenant-regional, algorithm: fixed_window, quota: {quota}, scope: region }}\n"
    )
}

/// Runs the demonstration, prints the table and writes the chart; fails if the regions
/// together admitted more than the quota in any window.
pub async fn run(args: RegionsArgs) -> Result<(), String> {
    args.validate()?;
    let tollgate = server_binary::locate(args.server.as_deref())?;
    let mut processes = Processes::new(tollgate)?;
    let outcome = tokio::select! {
        outcome = demonstrate(&args, &mut processes) => outcome,
        () = tollgate_server::shutdown::signal() => Err("interrupted".to_owned()),
    };
    // Every child stops here, whatever happened.
    drop(processes);
    let report = outcome?;
    print!("{}", report.render());
    if let Some(path) = &args.chart {
        std::fs::write(path, report.svg())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        println!("chart: {}", path.display());
    }
    match report.overruns().first() {
        None => Ok(()),
        Some((_, admitted)) => Err(format!(
            "the regions together admitted {} in one window, above the quota of {}",
            thousands(*admitted),
            thousands(args.quota.count())
        )),
    }
}

/// Starts the stores and servers, drives the load, and reads what the servers counted.
async fn demonstrate(args: &RegionsArgs, processes: &mut Processes) -> Result<Report, String> {
    let policies = processes.path("policies.yaml");
    std::fs::write(&policies, policy_file(args.quota))
        .map_err(|error| format!("cannot write {}: {error}", policies.display()))?;
    let policies = policies.display().to_string();
    let global = processes.redis("global-redis").await?;
    let regions = args.shares.regions();
    let mut links = Vec::new();
    let mut servers = Vec::new();
    for region in regions {
        let redis = processes.redis(&format!("{}-redis", region.name)).await?;
        // The test kit's faulty link, with latency as its only fault: the region's distance.
        let link = FaultyLink::to(global);
        link.set_latency(Duration::from_millis(region.round_trip_ms) / 2);
        let flags = [
            "--config".to_owned(),
            policies.clone(),
            "--redis".to_owned(),
            format!("redis://{redis}"),
            "--global-redis".to_owned(),
            link.url(),
        ];
        servers.push(processes.tollgate(region.name, &flags).await?);
        links.push(link);
    }
    eprintln!(
        "3 regions up (files in {}); {} checks/s for {} s",
        processes.dir().display(),
        args.rate,
        args.seconds
    );
    let progress: Vec<Arc<Progress>> = regions.iter().map(|_| Arc::default()).collect();
    let mut loads = Vec::new();
    for ((region, server), progress) in regions.iter().zip(&servers).zip(&progress) {
        let base = format!("http://{}", server.http);
        let load = |body: &str, rate: f64, progress: Arc<Progress>| {
            Ok::<_, String>(
                Load {
                    target: Arc::new(Target::check(&base, body, &[], 1)?),
                    rate,
                    duration: args.duration(),
                    workers: args.workers,
                    period: args.quota.period_micros(),
                    progress,
                }
                .run(),
            )
        };
        let rate = args.rate * region.share_percent as f64 / 100.0;
        let global = load(CHECK, rate, Arc::clone(progress))?;
        let baseline = load(BASELINE_CHECK, args.baseline_rate, Arc::default())?;
        loads.push(futures_util::future::try_join(global, baseline));
    }
    let bar = progress_bar(args.duration());
    let records: Vec<(Record, Record)> = tokio::select! {
        records = futures_util::future::try_join_all(loads) => records?,
        never = show_progress(&bar, &progress) => match never {},
    };
    bar.finish_and_clear();
    tokio::time::sleep(SETTLE).await;
    let mut rows = Vec::new();
    for ((region, server), (record, baseline)) in regions.into_iter().zip(&servers).zip(records) {
        let url = format!("http://{}/admin/stats", server.admin);
        let (_, body) = Target::get(&url, &[], 1)?.exchange(0).await?;
        let stats = LeaseStats::from_admin(&body).map_err(|error| format!("{url}: {error}"))?;
        rows.push(Row {
            region,
            record,
            baseline: baseline.latency,
            stats,
        });
    }
    drop(links);
    Ok(Report {
        quota: args.quota,
        rate: args.rate,
        seconds: args.seconds,
        rows,
    })
}

/// Moves the bar along every 200 ms with what each region admitted so far.
async fn show_progress(bar: &indicatif::ProgressBar, progress: &[Arc<Progress>]) -> Infallible {
    let started = std::time::Instant::now();
    let mut interval = tokio::time::interval(Duration::from_millis(200));
    loop {
        interval.tick().await;
        bar.set_position(started.elapsed().as_millis() as u64);
        let regions: Vec<String> = REGIONS
            .iter()
            .zip(progress)
            .map(|(region, progress)| {
                format!(
                    "{} {}/{}",
                    region.name,
                    thousands(progress.admitted.load(Ordering::Relaxed)),
                    thousands(progress.sent.load(Ordering::Relaxed))
                )
            })
            .collect();
        bar.set_message(format!("admitted/sent: {}", regions.join("  ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_three_percentages_adding_up_to_100() {
        let shares: Shares = "89, 10, 1".parse().expect("shares");
        let regions = shares.regions();
        assert_eq!(regions.map(|region| region.share_percent), [89, 10, 1]);
        assert_eq!(regions.map(|region| region.round_trip_ms), [40, 80, 120]);
        for wrong in ["70,20", "70,20,10,0", "50,40,20", "99,1,0", "a,b,c"] {
            assert!(wrong.parse::<Shares>().is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_policy_file_has_one_global_limit() {
        let policies = tollgate::Policies::from_yaml(
            "policies.yaml",
            &policy_file("600/s".parse().expect("a quota")),
        )
        .expect("a valid policy file");
        assert_eq!(policies.names().collect::<Vec<_>>(), ["tenant", "regional"]);
    }
}
