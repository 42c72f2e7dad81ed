//! How leases on global limits are sized and kept: the operator's settings.

use std::time::Duration;

/// How leases on global limits are sized and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTuning {
    /// A lease holds about this long of the node's own demand (at least four round trips to
    /// the global store). Default 200 ms; the sweeper runs this often.
    pub horizon: Duration,
    /// The most one lease takes, in percent of the limit's capacity. Default 10.
    pub max_share_percent: u8,
    /// Units not spent for this long go back to the global store. Default 1 s.
    pub idle: Duration,
    /// How long the units of a rate or sliding-window limit stay spendable (a fixed window's
    /// stay until its window ends). Default 1 s.
    pub hold: Duration,
}

impl Default for LeaseTuning {
    fn default() -> Self {
        Self {
            horizon: Duration::from_millis(200),
            max_share_percent: 10,
            idle: Duration::from_secs(1),
            hold: Duration::from_secs(1),
        }
    }
}
