//! Where the server keeps its overrides: in Redis with a Redis store (every node applies the
//! same table), in a file or in memory with the in-process store; and how often each node looks
//! for changes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate::overrides::{FileOverrideBackend, OverrideBackend};
use tollgate::{AnyStore, Limiter};

/// The shortest and longest refresh intervals.
const REFRESH_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(60);

/// `--overrides-file` and `--overrides-refresh`.
#[derive(Debug, Clone, clap::Args)]
pub struct OverrideFlags {
    /// With the in-process store, keep the overrides in this file so that they survive
    /// restarts (without it they live in memory only). With a Redis store they live in Redis.
    #[arg(long, env = "TOLLGATE_OVERRIDES_FILE", value_name = "FILE")]
    pub overrides_file: Option<PathBuf>,
    /// How often each node asks the store whether the overrides changed (one GET): a change
    /// made on one node applies on every other within this and one read.
    #[arg(
        long,
        env = "TOLLGATE_OVERRIDES_REFRESH",
        default_value = "250ms",
        value_parser = tollgate::parse_duration,
        value_name = "DURATION"
    )]
    pub overrides_refresh: Duration,
}

impl Default for OverrideFlags {
    fn default() -> Self {
        Self {
            overrides_file: None,
            overrides_refresh: Duration::from_millis(250),
        }
    }
}

/// Where `limiter`'s overrides live, for the start-up lines.
pub fn describe(limiter: &Limiter<AnyStore>, flags: &OverrideFlags) -> String {
    match (limiter.overrides().kind(), &flags.overrides_file) {
        ("redis", _) => "in the Redis store".to_owned(),
        ("file", Some(path)) => format!("in {}", path.display()),
        _ => "in memory (give --overrides-file to keep them across restarts)".to_owned(),
    }
}

/// Keeps `limiter`'s overrides where the flags and its store say, reads them, and follows
/// changes from then on.
pub async fn attach(limiter: &Limiter<AnyStore>, flags: &OverrideFlags) -> Result<(), String> {
    if !REFRESH_RANGE.contains(&flags.overrides_refresh) {
        return Err(format!(
            "--overrides-refresh must be between {:?} and {:?}",
            REFRESH_RANGE.start(),
            REFRESH_RANGE.end()
        ));
    }
    let backend: Option<Arc<dyn OverrideBackend>> = match (limiter.store(), &flags.overrides_file) {
        (AnyStore::Redis(_), Some(_)) => {
            return Err(
                "--overrides-file is for the in-process store: with a Redis store, the overrides live in Redis"
                    .to_owned(),
            );
        }
        (AnyStore::Redis(redis), None) => Some(Arc::new(redis.override_backend())),
        (_, Some(path)) => Some(Arc::new(FileOverrideBackend::open(path)?)),
        (_, None) => None,
    };
    let Some(backend) = backend else {
        return Ok(());
    };
    limiter.overrides().attach(backend);
    if let Err(error) = limiter.overrides().refresh().await {
        // The store may come up later: the follower reads the table once it answers.
        tracing::warn!(%error, "overrides: cannot read the table yet");
    }
    let following = limiter.clone();
    let every = flags.overrides_refresh;
    tokio::spawn(async move { following.overrides().follow(every).await });
    Ok(())
}
