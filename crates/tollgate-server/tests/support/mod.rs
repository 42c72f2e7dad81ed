//! The real `tollgate` binary as a child process (the test kit's [`Tollgate`]: started on
//! free loopback ports, its addresses read from what it prints, stopped with SIGTERM), and
//! what the tests share besides. [`envoy`] runs a real Envoy.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod envoy;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub use tollgate_testkit::tollgate::{Tollgate, proxy_args, run, serve_args};

/// How long something another process does may take.
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `condition` until it holds, for things that happen in another process.
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !condition().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Chromium from Debian's package; the test command installs it.
pub fn chromium() -> &'static str {
    for candidate in ["chromium", "chromium-browser"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return candidate;
        }
    }
    panic!(
        "chromium is not installed: run scripts/test (it installs it) or `apt-get install -y chromium`"
    );
}

/// Loads `url` in headless Chromium with `extra` flags: what it printed and logged.
pub fn headless(url: &str, extra: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().expect("a profile directory");
    let output = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=4000",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Serves gRPC `routes` on a free loopback port in this process; its address.
pub async fn serve_grpc(routes: tonic::service::Routes) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    address
}

/// Writes `files` into `directory` as the kubelet mounts a ConfigMap: the files in a
/// timestamped directory, `..data` a link to it, and each name a link through `..data`.
/// Called again, it swaps `..data` atomically to a new directory, as an update does.
pub fn project_configmap(directory: &Path, files: &[(String, String)], generation: u32) {
    std::fs::create_dir_all(directory).expect("the mount point");
    let timestamped = format!("..2026_01_01_00_00_00.{generation:09}");
    std::fs::create_dir(directory.join(&timestamped)).expect("a new data directory");
    for (name, content) in files {
        std::fs::write(directory.join(&timestamped).join(name), content).expect("written");
    }
    let staging = directory.join("..data_tmp");
    std::os::unix::fs::symlink(&timestamped, &staging).expect("a link");
    std::fs::rename(&staging, directory.join("..data")).expect("..data swapped");
    for (name, _) in files {
        let link = directory.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link).expect("a link");
        }
    }
}
