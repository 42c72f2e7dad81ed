//! Free loopback ports.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// Ports are handed out from a moving cursor so that two servers started at once in one process
/// never race for the same port; each candidate is checked free before use.
static NEXT: AtomicU16 = AtomicU16::new(0);

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free loopback port `p` whose cluster bus port `p + 10000` is free too, not handed out
/// before by this process.
pub fn free_port() -> u16 {
    if NEXT.load(Ordering::Relaxed) == 0 {
        // Start somewhere different in each test process: they run in parallel.
        let start = 20_000 + (std::process::id() % 2_000) as u16 * 10;
        let _ = NEXT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    loop {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        if port >= 45_000 {
            NEXT.store(20_000, Ordering::Relaxed);
            continue;
        }
        if is_free(port) && is_free(port + 10_000) {
            return port;
        }
    }
}
