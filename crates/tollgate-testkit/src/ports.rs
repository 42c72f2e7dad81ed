//! Free loopback ports.
//!
//! Ports are handed out below the kernel's ephemeral range (`ip_local_port_range`), cluster bus
//! ports (`p + 10000`) included. A port in that range can be taken between the check and the
//! server's start by any outgoing connection, as its source port, which would make the server
//! fail to bind; below it, only listeners that name their port can, and those come from here.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// Ports are handed out from a moving cursor so that two servers started at once in one process
/// never race for the same port; each candidate is checked free before use.
static NEXT: AtomicU16 = AtomicU16::new(0);

/// The lowest port handed out: above the well-known services a machine runs.
const LOWEST: u16 = 10_000;
/// How far a cluster node's bus port is from its client port.
const BUS_OFFSET: u16 = 10_000;

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A free loopback port `p` whose cluster bus port `p + 10000` is free too, both below the
/// ephemeral range, not handed out before by this process.
pub fn free_port() -> u16 {
    let end = ephemeral_start()
        .saturating_sub(BUS_OFFSET)
        .max(LOWEST + 1_000);
    if NEXT.load(Ordering::Relaxed) == 0 {
        // Start somewhere different in each test process: they may run in parallel.
        let span = u32::from(end - LOWEST);
        let start = LOWEST + ((std::process::id() * 10) % span) as u16;
        let _ = NEXT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    loop {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        if port >= end {
            NEXT.store(LOWEST, Ordering::Relaxed);
            continue;
        }
        if is_free(port) && is_free(port + BUS_OFFSET) {
            return port;
        }
    }
}
