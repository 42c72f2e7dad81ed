//! The two binaries the tools' tests run: `tollgate-tools`, built for this crate's tests, and
//! the `tollgate` server, which another crate builds. Cargo gives a test only its own crate's
//! binaries (`CARGO_BIN_EXE_*`), so the server is found where Cargo puts every binary of the
//! workspace: beside `tollgate-tools`, in `target/<profile>/`. `cargo test --workspace` (and so
//! scripts/test) builds it first; a missing server fails the test, never skips it.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the server has to start.
const PATIENCE: Duration = Duration::from_secs(30);

/// The `tollgate-tools` binary under test.
pub fn tools() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate-tools"))
}

/// Runs `tollgate-tools` to completion: (exit status, stdout, stderr).
pub fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let output = tools()
        .args(args)
        .output()
        .expect("the tollgate-tools binary runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `tollgate` server binary of the same build, beside `tollgate-tools`.
pub fn server_binary() -> PathBuf {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_tollgate-tools")).with_file_name("tollgate");
    assert!(
        binary.is_file(),
        "{} is missing: these tests drive the tollgate server, which belongs to another crate. \
         Build it first with `cargo build -p tollgate-server` (same profile and target \
         directory), or run `cargo test --workspace` (scripts/test), which builds every binary.",
        binary.display()
    );
    binary
}

/// A running `tollgate serve` on free loopback ports; killed when dropped.
pub struct Tollgate {
    child: Child,
    /// What it printed at start-up, by label: `http`, `grpc`, `admin`, ...
    printed: HashMap<String, String>,
}

impl Tollgate {
    /// Starts `tollgate serve` on free loopback ports with `args`, and waits for its start-up
    /// lines (up to the `policies:` line).
    pub fn serve(args: &[&str]) -> Self {
        let mut child = Command::new(server_binary())
            .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(["--admin", "127.0.0.1:0"])
            .args(args)
            .env_remove("TOLLGATE_CONFIG")
            .env("TOLLGATE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the tollgate binary starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (lines, receive) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if lines.send(line).is_err() {
                    return;
                }
            }
        });
        let mut printed = HashMap::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let Ok(line) = receive.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                let _ = child.kill();
                let status = child.wait();
                panic!("tollgate serve {args:?} did not start ({status:?})");
            };
            if let Some((label, value)) = line.trim().split_once(": ") {
                printed.insert(label.to_owned(), value.to_owned());
                if label == "policies" {
                    return Self { child, printed };
                }
            }
        }
    }

    /// The address printed under `label`, from a line such as `http: http://127.0.0.1:4000 (...)`.
    pub fn address(&self, label: &str) -> SocketAddr {
        let text = self
            .printed
            .get(label)
            .unwrap_or_else(|| panic!("tollgate printed no {label:?} line: {:?}", self.printed));
        let text = text.trim_start_matches("http://");
        let end = text.find(' ').unwrap_or(text.len());
        text[..end]
            .parse()
            .unwrap_or_else(|_| panic!("no address in {text:?}"))
    }

    /// `http://<the HTTP API>`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.address("http"))
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
