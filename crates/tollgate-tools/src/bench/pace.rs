//! Pacing for `--rate`: a thread hands out send permits on schedule. Tokio's timer ticks in
//! milliseconds, which would send 50 requests at once every millisecond at 50k/s and measure
//! the generator's bursts instead of the server; a thread sleeping 100 µs at a time spreads
//! them as a steady stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// How often the pacer releases the permits that have come due.
const TICK: Duration = Duration::from_micros(100);

/// Permits to send, released at `rate` a second until the deadline, then closed.
pub(crate) struct Pacer {
    permits: Arc<Semaphore>,
    start: Instant,
    rate: f64,
}

impl Pacer {
    /// Starts releasing permits now.
    pub(crate) fn start(rate: f64, duration: Duration) -> Self {
        let permits = Arc::new(Semaphore::new(0));
        let start = Instant::now();
        let released_by = Arc::clone(&permits);
        std::thread::spawn(move || {
            let mut released: u64 = 0;
            loop {
                let elapsed = start.elapsed().min(duration);
                let due = (elapsed.as_secs_f64() * rate) as u64;
                if due > released {
                    released_by.add_permits(usize::try_from(due - released).unwrap_or(usize::MAX));
                    released = due;
                }
                if elapsed >= duration {
                    // Let the workers drain what was released, then end their waits.
                    while released_by.available_permits() > 0 && !released_by.is_closed() {
                        std::thread::sleep(TICK);
                    }
                    released_by.close();
                    return;
                }
                std::thread::sleep(TICK);
            }
        });
        Self {
            permits,
            start,
            rate,
        }
    }

    /// Waits for the next permit; `None` once the run is over.
    pub(crate) async fn next(&self) -> Option<()> {
        self.permits.acquire().await.ok()?.forget();
        Some(())
    }

    /// When request number `n` was due: when its permit was released, `(n + 1) / rate` after
    /// the start (counting from `n / rate` added a whole interval to every latency: 3.3 ms at
    /// 300 requests a second).
    pub(crate) fn due(&self, n: u64) -> Instant {
        self.start + Duration::from_secs_f64((n + 1) as f64 / self.rate)
    }
}
