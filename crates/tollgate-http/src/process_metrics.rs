//! The process's own metrics, read from `/proc` at scrape time, as Prometheus' client libraries
//! name them (`process_*`), and `tollgate_build_info`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Linux reports CPU times in ticks of this many a second (USER_HZ, fixed for user space).
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// `tollgate_build_info` and the `process_*` metrics, as of now (those `/proc` cannot tell are
/// left out rather than made up).
pub fn registry() -> Registry {
    let mut registry = Registry::default();
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register(
        "tollgate_build_info",
        "The running build: its version, with the value 1",
        build,
    );
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // The fields after the command (which may hold spaces), counted from 3 (`state`).
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|stat| stat.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |number: usize| fields.get(number - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(user), Some(system)) = (field(14), field(15)) {
        registry.register(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            ConstCounter::new((user + system) / TICKS_PER_SECOND),
        );
    }
    if let (Some(started), Some(boot)) = (field(22), boot_time()) {
        registry.register(
            "process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch",
            ConstGauge::<f64>::new(boot + started / TICKS_PER_SECOND),
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for (field, name, help) in [
        (
            "VmRSS:",
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
        ),
        (
            "VmSize:",
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
        ),
    ] {
        if let Some(kib) = kib_of(&status, field) {
            registry.register(name, help, ConstGauge::new(kib.saturating_mul(1024)));
        }
    }
    if let Ok(open) = std::fs::read_dir("/proc/self/fd") {
        registry.register(
            "process_open_fds",
            "Open file descriptors",
            ConstGauge::new(open.count() as i64),
        );
    }
    if let Some(max) = max_open_files() {
        registry.register(
            "process_max_fds",
            "The most file descriptors the process may open",
            ConstGauge::new(max),
        );
    }
    registry
}

/// A `/proc/self/status` line's value in KiB.
fn kib_of(status: &str, field: &str) -> Option<i64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// When the machine booted, in seconds since the Unix epoch.
fn boot_time() -> Option<f64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|seconds| seconds.trim().parse().ok())
}

/// The soft limit on open files.
fn max_open_files() -> Option<i64> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
}
