//! What the operator sees of refusals: the keys most often refused and the routes most asked
//! for (bounded summaries), and refusal logs, sampled by the denial log and showing keys as
//! configured (plain, keyed pseudonyms, or not at all). An observer of the limiter.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use super::denial_log::DenialLog;
use crate::observer::StoreObserver;
use crate::observer::{Observer, Refused};
use crate::policy::{Evaluation, Request};
use crate::secret::Secret;
use crate::top_keys::{TopKey, TopKeys};

/// How many keys and routes the top lists track.
const TOP_CAPACITY: usize = 200;

/// How refused keys appear in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyLogging {
    /// As they are.
    Plain,
    /// As the first 16 hex digits of their HMAC-SHA-256 under a secret (random per process
    /// unless set with `Limiter::set_key_log_secret`): the same key always looks the same in
    /// one process's logs, and without the secret no key can be found from its pseudonym, not
    /// even by hashing every IPv4 address.
    #[default]
    Hashed,
    /// Not at all.
    Omitted,
}

impl std::str::FromStr for KeyLogging {
    type Err = String;

    /// `plain`, `hashed` or `none`, as the server's `--log-keys` takes them.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "plain" => Ok(KeyLogging::Plain),
            "hashed" => Ok(KeyLogging::Hashed),
            "none" => Ok(KeyLogging::Omitted),
            other => Err(format!(
                "unknown key logging {other:?} (expected one of: plain, hashed, none)"
            )),
        }
    }
}

/// Top keys, hot routes and refusal logs.
pub(crate) struct Denials {
    denied_keys: TopKeys,
    hot_routes: TopKeys,
    key_logging: AtomicU8,
    key_log_secret: RwLock<Secret>,
    log: DenialLog,
}

impl std::fmt::Debug for Denials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Denials")
            .field("key_logging", &self.key_logging)
            .finish_non_exhaustive()
    }
}

impl Denials {
    pub(crate) fn new() -> Self {
        Self {
            denied_keys: TopKeys::new(TOP_CAPACITY),
            hot_routes: TopKeys::new(TOP_CAPACITY),
            key_logging: AtomicU8::new(KeyLogging::Hashed as u8),
            key_log_secret: RwLock::new(Secret::random()),
            log: DenialLog::new(),
        }
    }

    /// The most refused keys, shown as the key logging says (hashed by default), like the
    /// refusal logs: the admin API and dashboard show no client's key in clear unless asked to.
    pub(crate) fn top_denied_keys(&self, n: usize) -> Vec<TopKey> {
        let mut top = self.denied_keys.top(n);
        for entry in &mut top {
            entry.key = self.key_for_logs(&entry.key);
        }
        top
    }

    pub(crate) fn top_routes(&self, n: usize) -> Vec<TopKey> {
        self.hot_routes.top(n)
    }

    pub(crate) fn set_key_logging(&self, logging: KeyLogging) {
        self.key_logging.store(logging as u8, Ordering::Relaxed);
    }

    pub(crate) fn set_key_log_secret(&self, secret: Secret) {
        *self
            .key_log_secret
            .write()
            .unwrap_or_else(|e| e.into_inner()) = secret;
    }

    pub(crate) fn key_for_logs(&self, key: &str) -> String {
        match self.key_logging.load(Ordering::Relaxed) {
            x if x == KeyLogging::Plain as u8 => key.to_owned(),
            x if x == KeyLogging::Omitted as u8 => "(hidden)".to_owned(),
            _ => self
                .key_log_secret
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .digest_hex(&[b"log key", key.as_bytes()], 8),
        }
    }
}

impl StoreObserver for Denials {}

impl Observer for Denials {
    fn evaluated(&self, request: &Request<'_>, _evaluation: &Evaluation, _took: Duration) {
        self.hot_routes
            .record(request.route.unwrap_or(request.path));
    }

    /// Counts the key among the most refused, and logs the refusal when the denial log's
    /// sampling lets it: the first of a key and limit in each period, with how many went
    /// unlogged since, within a global budget of lines.
    fn refused(&self, refused: &Refused<'_>) {
        self.denied_keys.record(refused.key);
        let Some(unlogged) = self
            .log
            .admit(refused.key, refused.limit.state_name(), refused.at)
        else {
            return;
        };
        let decision = refused.decision;
        tracing::info!(
            target: "tollgate::denial",
            policy = refused.policy,
            limit = refused.label,
            algorithm = refused.limit.algorithm().as_str(),
            remaining = decision.remaining(),
            retry_after_ms = decision.retry_after_micros().map(|micros| micros.div_ceil(1_000)),
            key = %self.key_for_logs(refused.key),
            unlogged_since_last = unlogged,
            "refused"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::KeyLogging;

    #[test]
    fn key_logging_is_named_as_the_server_flag_names_it() {
        assert_eq!("plain".parse(), Ok(KeyLogging::Plain));
        assert_eq!("hashed".parse(), Ok(KeyLogging::Hashed));
        assert_eq!("none".parse(), Ok(KeyLogging::Omitted));
        let error = "all".parse::<KeyLogging>().unwrap_err();
        assert!(error.contains("plain, hashed, none"), "{error}");
    }
}
