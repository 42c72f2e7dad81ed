//! The open connections of a listener and what each tells the accept loop: requests under way,
//! and since when it has been idle, so that the one idle the longest makes room at the cap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// What a connection tells the accept loop and its own task: whether it has requests under
/// way, and since when it has been idle.
pub(super) struct Tracked {
    /// Requests under way: from a complete head until the answer's body is sent (or dropped).
    pub(super) in_flight: AtomicUsize,
    /// When it last became idle, in the registry's sequence (smaller: idle for longer).
    pub(super) idle_since: AtomicU64,
    /// When it last became idle, in microseconds since the registry's epoch (set before the
    /// count drops to zero, so whoever sees zero sees this time).
    pub(super) idle_at: AtomicU64,
    /// Set once it was asked to close to make room.
    pub(super) reclaimed: AtomicBool,
    /// Wakes the connection's task to close it.
    pub(super) reclaim: Notify,
    /// Set once a request on it came over HTTP/2.
    pub(super) http2: AtomicBool,
    /// Set once a connection not known to be HTTP/2 is past its age: its next HTTP/1 answer
    /// says `Connection: close`, an HTTP/2 stream wakes `used_past_age`.
    pub(super) past_age: AtomicBool,
    /// Wakes the connection's task to send GOAWAY on a connection found to be HTTP/2 past
    /// its age.
    pub(super) used_past_age: Notify,
}

/// Marks a request under way on its connection until dropped.
pub(super) struct InFlight {
    tracked: Arc<Tracked>,
    registry: Arc<Registry>,
}

impl InFlight {
    /// Whether its connection is past its age, to be closed with this answer.
    pub(super) fn past_age(&self) -> bool {
        self.tracked.past_age.load(Ordering::Relaxed)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Marks only: the connection's task reads them when its deadline comes, so a request
        // wakes nothing.
        let tracked = &self.tracked;
        tracked
            .idle_at
            .store(self.registry.micros_since_epoch(), Ordering::Relaxed);
        if tracked.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let sequence = self.registry.sequence.fetch_add(1, Ordering::Relaxed);
            tracked.idle_since.store(sequence, Ordering::Relaxed);
            if self.registry.waiting.load(Ordering::SeqCst) {
                self.registry.became_idle.notify_one();
            }
        }
    }
}

/// The request extension that lets [`track_requests`] find its connection.
#[derive(Clone)]
pub(super) struct ConnectionHandle {
    pub(super) tracked: Arc<Tracked>,
    pub(super) registry: Arc<Registry>,
}

impl ConnectionHandle {
    pub(super) fn begin(&self) -> InFlight {
        self.tracked.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight {
            tracked: Arc::clone(&self.tracked),
            registry: Arc::clone(&self.registry),
        }
    }
}

/// The open connections of one listener.
pub(super) struct Registry {
    /// What connections' idle times count from.
    pub(super) epoch: Instant,
    pub(super) sequence: AtomicU64,
    pub(super) connections: Mutex<HashMap<u64, Arc<Tracked>>>,
    /// Set while a new client waits at the cap for a connection to go idle.
    pub(super) waiting: AtomicBool,
    /// Signalled when a connection goes idle while a client waits.
    pub(super) became_idle: Notify,
}

impl Registry {
    pub(super) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            sequence: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
            waiting: AtomicBool::new(false),
            became_idle: Notify::new(),
        }
    }

    pub(super) fn micros_since_epoch(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(super) fn instant_at(&self, micros: u64) -> Instant {
        self.epoch + Duration::from_micros(micros)
    }

    pub(super) fn add(&self, id: u64) -> Arc<Tracked> {
        let tracked = Arc::new(Tracked {
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.sequence.fetch_add(1, Ordering::Relaxed)),
            idle_at: AtomicU64::new(self.micros_since_epoch()),
            reclaimed: AtomicBool::new(false),
            reclaim: Notify::new(),
            http2: AtomicBool::new(false),
            past_age: AtomicBool::new(false),
            used_past_age: Notify::new(),
        });
        if let Ok(mut connections) = self.connections.lock() {
            connections.insert(id, Arc::clone(&tracked));
        }
        tracked
    }

    pub(super) fn remove(&self, id: u64) {
        if let Ok(mut connections) = self.connections.lock() {
            connections.remove(&id);
        }
    }

    /// Asks the connection idle the longest to close; false when every connection is busy.
    pub(super) fn reclaim_idle(&self) -> bool {
        let Ok(connections) = self.connections.lock() else {
            return false;
        };
        let oldest = connections
            .values()
            .filter(|t| {
                t.in_flight.load(Ordering::Acquire) == 0 && !t.reclaimed.load(Ordering::Relaxed)
            })
            .min_by_key(|t| t.idle_since.load(Ordering::Relaxed));
        match oldest {
            Some(tracked) => {
                tracked.reclaimed.store(true, Ordering::Relaxed);
                tracked.reclaim.notify_one();
                true
            }
            None => false,
        }
    }
}
