//! The first answers of idempotent requests, kept to answer their replays: a request that
//! repeats an admitted one (same idempotency key, method, path, identity and body) is not
//! charged again, and gets the first answer, never a fresh pass to the inner service.
//!
//! Bounded: answers up to the policies' `idempotency.max_body` bytes, at most [`MAX_ENTRIES`]
//! requests and [`MAX_BYTES`] of answers, each for the idempotency window. A replay whose first
//! answer is not here (still under way, too large, answered by another node, or pushed out) is
//! refused with `409`, never forwarded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

/// The most requests whose answers are kept at once.
pub(crate) const MAX_ENTRIES: usize = 10_000;
/// The most bytes of answers kept at once.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// A first answer, as it was sent.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Where a request's first answer is.
#[derive(Debug, Clone)]
pub(crate) enum Lookup {
    /// Here, to replay.
    Answered(Arc<Stored>),
    /// The first request is still under way.
    UnderWay,
    /// Not here.
    Missing,
}

#[derive(Debug)]
enum State {
    UnderWay,
    Answered(Arc<Stored>),
}

#[derive(Debug)]
struct Entry {
    state: State,
    expires: Instant,
}

/// The kept answers of one layer.
#[derive(Debug, Default)]
pub(crate) struct Replays {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    entries: HashMap<String, Entry>,
    /// Bytes of the answers held.
    bytes: usize,
}

impl Kept {
    fn remove(&mut self, key: &str) {
        if let Some(Entry {
            state: State::Answered(stored),
            ..
        }) = self.entries.remove(key)
        {
            self.bytes -= stored.body.len();
        }
    }

    fn drop_expired(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.expires <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
    }
}

impl Replays {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the first answer of the request recorded under `key` is.
    pub(crate) fn lookup(&self, key: &str) -> Lookup {
        let kept = self.kept();
        match kept.entries.get(key) {
            Some(entry) if entry.expires > Instant::now() => match &entry.state {
                State::UnderWay => Lookup::UnderWay,
                State::Answered(stored) => Lookup::Answered(Arc::clone(stored)),
            },
            _ => Lookup::Missing,
        }
    }

    /// Marks the request recorded under `key` as under way, kept for `window`.
    pub(crate) fn begin(&self, key: &str, window: Duration) {
        let mut kept = self.kept();
        let now = Instant::now();
        if kept.entries.len() >= MAX_ENTRIES {
            kept.drop_expired(now);
        }
        if kept.entries.len() >= MAX_ENTRIES {
            // Full of live answers: the first one met goes (its replays get 409).
            if let Some(victim) = kept.entries.keys().next().cloned() {
                kept.remove(&victim);
            }
        }
        kept.remove(key);
        kept.entries.insert(
            key.to_owned(),
            Entry {
                state: State::UnderWay,
                expires: now + window,
            },
        );
    }

    /// Keeps the whole first answer of the request under `key`, within the bound on bytes.
    pub(crate) fn answered(&self, key: &str, stored: Stored) {
        let mut kept = self.kept();
        if kept.bytes + stored.body.len() > MAX_BYTES {
            kept.drop_expired(Instant::now());
        }
        if kept.bytes + stored.body.len() > MAX_BYTES {
            kept.remove(key);
            return;
        }
        let length = stored.body.len();
        if let Some(entry) = kept.entries.get_mut(key) {
            entry.state = State::Answered(Arc::new(stored));
            kept.bytes += length;
        }
    }

    /// Forgets the request under `key`: its answer was cut short or not kept, or its charge
    /// was given back (so that a retry is charged and served afresh).
    pub(crate) fn forget(&self, key: &str) {
        self.kept().remove(key);
    }
}
