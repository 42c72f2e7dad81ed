//! Which algorithm a limit names: the enums a [`Limit`](crate::Limit) holds, apart from the
//! algorithms themselves (which take a limit), so that the two never import each other.

use std::fmt;
use std::str::FromStr;

/// Which algorithm enforces a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Counts per aligned window; cheap, but admits up to twice the quota across a boundary.
    FixedWindow,
    /// Remembers every admitted request; exact, memory grows with the quota.
    SlidingLog,
    /// Weights the previous window's count by its overlap; cheap and close to exact.
    SlidingWindow,
    /// Tokens refill at a steady rate up to a capacity; allows bursts.
    TokenBucket,
    /// Drains at a steady rate; rejects when full (meter) or delays (queue).
    LeakyBucket,
    /// Generic cell rate algorithm: one timestamp per key, exact rate with a burst.
    Gcra,
}

impl Algorithm {
    /// All six, in a fixed order.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ];

    /// The name used in configuration and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether the algorithm enforces a steady rate with a burst (as opposed to a count per window).
    pub fn is_rate(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        )
    }

    /// Whether the algorithm is exact: never admits more than its quota allows. Only the sliding
    /// window counter is approximate.
    pub fn is_exact(self) -> bool {
        self != Algorithm::SlidingWindow
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An algorithm name that is not one of the six.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown algorithm {0:?} (expected one of: fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra)"
)]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.as_str() == text)
            .ok_or_else(|| UnknownAlgorithm(text.to_owned()))
    }
}

/// How a leaky bucket treats a request that finds water in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LeakyMode {
    /// Admit at once while the bucket has room, reject when full (NGINX `nodelay`).
    #[default]
    Meter,
    /// Admit the first `delay_after` requests of a burst at once, delay the rest so that they
    /// leave at the steady rate, and reject past the burst (NGINX `burst=` with `delay=`:
    /// NGINX `burst=B delay=D` is `burst: B+1, delay_after: D+1`).
    Queue {
        /// How many back-to-back requests pass without delay; at least 1.
        delay_after: u64,
    },
}

/// Which transition a limit's states go through: its algorithm's, or the calendar window's
/// for a fixed window with a calendar. Kept with the limit, so that telling whether a stored
/// state belongs to it costs one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    FixedWindow,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    LeakyBucket,
    Gcra,
    CalendarWindow,
}

impl Kind {
    /// The kind of a limit of `algorithm`, with a calendar or not.
    pub(crate) fn of(algorithm: Algorithm, calendar: bool) -> Self {
        match algorithm {
            Algorithm::FixedWindow if calendar => Kind::CalendarWindow,
            Algorithm::FixedWindow => Kind::FixedWindow,
            Algorithm::SlidingLog => Kind::SlidingLog,
            Algorithm::SlidingWindow => Kind::SlidingWindow,
            Algorithm::TokenBucket => Kind::TokenBucket,
            Algorithm::LeakyBucket => Kind::LeakyBucket,
            Algorithm::Gcra => Kind::Gcra,
        }
    }
}
