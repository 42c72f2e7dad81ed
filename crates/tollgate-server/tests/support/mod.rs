//! The real `tollgate` binary as a child process: started on free loopback ports, its
//! addresses read from what it prints, stopped with SIGTERM. [`envoy`] runs a real Envoy.

#![allow(dead_code, unreachable_pub)]

pub mod envoy;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the binary has to start, or to stop once asked.
const PATIENCE: Duration = Duration::from_secs(30);

/// A running `tollgate` process.
pub struct Tollgate {
    child: Option<Child>,
    /// What it printed at start-up, by label: `http`, `grpc`, `listen`, `store`, ...
    pub printed: HashMap<String, String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .env_remove("TOLLGATE_CONFIG")
        .env("TOLLGATE_LOG", "info");
    command
}

/// The address in a start-up line such as `http://127.0.0.1:4000 (POST ...)`.
fn address_in(text: &str) -> SocketAddr {
    let text = text
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let end = text.find(' ').unwrap_or(text.len());
    text[..end]
        .parse()
        .unwrap_or_else(|_| panic!("no address in {text:?}"))
}

/// `tollgate serve` on free loopback ports, then `args`; a listener `args` names keeps the
/// address given there.
pub fn serve_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["serve"];
    for flag in ["--http", "--grpc", "--admin"] {
        if !args.contains(&flag) {
            all.extend([flag, "127.0.0.1:0"]);
        }
    }
    all.extend_from_slice(args);
    all
}

/// `tollgate proxy` on free loopback ports, then `args`.
pub fn proxy_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"];
    all.extend_from_slice(args);
    all
}

impl Tollgate {
    /// Starts `tollgate serve` on free ports with `args`.
    pub fn serve(args: &[&str]) -> Self {
        Self::start(&serve_args(args))
    }

    /// Starts `tollgate proxy` on a free port with `args`.
    pub fn proxy(args: &[&str]) -> Self {
        Self::start(&proxy_args(args))
    }

    /// Starts the binary and waits for its start-up lines (up to the `policies:` line).
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Starts the binary with extra environment variables (such as `TOLLGATE_LOG`).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(None, args, env)
    }

    /// Starts the binary in the working directory `directory` (the test's own when `None`),
    /// with extra environment variables.
    pub fn start_in(
        directory: Option<&std::path::Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = binary();
        if let Some(directory) = directory {
            command.current_dir(directory);
        }
        let mut child = command
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the tollgate binary starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().expect("stderr is piped");
        let collected = std::sync::Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(&mut err_pipe);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                collected.lock().expect("not poisoned").push_str(&line);
                line.clear();
            }
        });
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
            match receive.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    if let Some((label, value)) = line.trim().split_once(": ") {
                        printed.insert(label.to_owned(), value.to_owned());
                        if label == "policies" {
                            break;
                        }
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!(
                        "tollgate {args:?} did not start ({status:?}); it said:\n{}",
                        stderr.lock().expect("not poisoned")
                    );
                }
            }
        }
        Self {
            child: Some(child),
            printed,
            stderr,
        }
    }

    /// The address printed under `label`.
    pub fn address(&self, label: &str) -> SocketAddr {
        address_in(
            self.printed.get(label).unwrap_or_else(|| {
                panic!("tollgate printed no {label:?} line: {:?}", self.printed)
            }),
        )
    }

    /// `http://<the HTTP API or the proxy>`.
    pub fn http_url(&self) -> String {
        let label = if self.printed.contains_key("http") {
            "http"
        } else {
            "listen"
        };
        format!("http://{}", self.address(label))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal by name (`HUP`, `TERM`, ...).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} failed");
    }

    /// What the process has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("not poisoned").clone()
    }

    /// Waits until stderr contains `text`.
    pub fn wait_for_log(&self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < deadline,
                "tollgate never logged {text:?}; it said:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait()
    }

    /// Waits for the process to exit on its own.
    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("the child can be waited on") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tollgate did not exit; it said:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the binary to completion: (exit status, stdout, stderr).
pub fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let output = binary()
        .args(args)
        .output()
        .expect("the tollgate binary runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

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
