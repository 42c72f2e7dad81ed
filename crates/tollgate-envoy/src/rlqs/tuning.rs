//! How the quota service assigns, and its bounds: the tuning and the flags that set it.

use std::time::Duration;

/// How the service assigns quota, and its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaTuning {
    /// The length of a slot: how often every assignment is renewed.
    pub period: Duration,
    /// How long an assignment outlives its slot, covering its successor's way to Envoy.
    pub overlap: Duration,
    /// A bucket an Envoy reports no requests for this long is abandoned.
    pub idle: Duration,
    /// The most streams (Envoys) at once.
    pub max_streams: usize,
    /// The most buckets at once, over every stream.
    pub max_buckets: usize,
    /// The most buckets one stream may report.
    pub max_buckets_per_stream: usize,
    /// The most streams one client (one peer address) may hold.
    pub max_streams_per_client: usize,
    /// The most bucket subscriptions one client may hold, over its streams.
    pub max_buckets_per_client: usize,
}

impl Default for QuotaTuning {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(6),
            overlap: Duration::from_millis(1_500),
            idle: Duration::from_secs(60),
            max_streams: 10_000,
            max_buckets: 100_000,
            max_buckets_per_stream: 1_000,
            max_streams_per_client: 64,
            max_buckets_per_client: 10_000,
        }
    }
}

impl QuotaTuning {
    /// Refuses tunings whose guarantee could not hold.
    pub fn validate(&self) -> Result<(), String> {
        if self.period < Duration::from_millis(100) {
            return Err("the quota slot must be at least 100ms".to_owned());
        }
        if self.overlap < Duration::from_secs(1) || self.overlap * 4 > self.period {
            return Err(format!(
                "the assignment overlap must be at least a second (Envoy reads whole seconds of \
                 a TTL) and at most a quarter of the slot ({:?})",
                self.period
            ));
        }
        let caps = [
            self.max_streams,
            self.max_buckets,
            self.max_buckets_per_stream,
            self.max_streams_per_client,
            self.max_buckets_per_client,
        ];
        if caps.contains(&0) {
            return Err("the quota service's caps must be above zero".to_owned());
        }
        Ok(())
    }
}

/// `tollgate serve`'s flags for the quota service.
#[derive(Debug, Clone, clap::Args)]
pub struct QuotaFlags {
    /// How often the rate limit quota service renews every assignment (its slot; also the
    /// window of the share counters in the store, so every server on one store must agree).
    #[arg(long = "rlqs-slot", env = "TOLLGATE_RLQS_SLOT", default_value = "6s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub slot: Duration,
    /// How long a quota assignment outlives its slot, so that Envoy holds one while the next
    /// is on its way: at least a second, since Envoy reads TTLs in whole seconds (it drops the
    /// fraction), and more than an assignment takes to reach Envoy; at most a quarter of the
    /// slot.
    #[arg(long = "rlqs-overlap", env = "TOLLGATE_RLQS_OVERLAP", default_value = "1500ms", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub overlap: Duration,
    /// A bucket an Envoy reports no requests for this long is abandoned.
    #[arg(long = "rlqs-idle", env = "TOLLGATE_RLQS_IDLE", default_value = "60s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub idle: Duration,
}

impl QuotaFlags {
    /// The tuning these flags give, with the default caps.
    pub fn tuning(&self) -> QuotaTuning {
        QuotaTuning {
            period: self.slot,
            overlap: self.overlap,
            idle: self.idle,
            ..QuotaTuning::default()
        }
    }
}
