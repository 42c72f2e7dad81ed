//! The real `tollgate` binary as a child process: started on free loopback ports, its
//! addresses read from what it prints, stopped with SIGTERM or killed when dropped.
//!
//! The binary is the one of the test's own build: Cargo puts every binary of the workspace in
//! `target/<profile>/`, beside the `deps/` directory that holds the test, so the server's own
//! tests and those of crates that drive it (the tools) run the same file. A missing binary
//! fails the test with what to build, never skips it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the binary has to start, or to stop once asked.
const PATIENCE: Duration = Duration::from_secs(30);

/// The `tollgate` binary of the running test's build.
pub fn tollgate_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile = test
        .parent()
        .and_then(Path::parent)
        .expect("a test runs from target/<profile>/deps");
    let binary = profile.join("tollgate");
    assert!(
        binary.is_file(),
        "{} is missing: build it first with `cargo build -p tollgate-server` (same profile and \
         target directory), or run `cargo test --workspace` (scripts/test), which builds every \
         binary",
        binary.display()
    );
    binary
}

/// The binary as a command, with no configuration file or log filter from the environment.
fn command() -> Command {
    let mut command = Command::new(tollgate_binary());
    command
        .env_remove("TOLLGATE_CONFIG")
        .env("TOLLGATE_LOG", "info");
    command
}

/// Runs the binary to completion: (exit status, stdout, stderr).
pub fn run(args: &[&str]) -> (ExitStatus, String, String) {
    let output = command()
        .args(args)
        .output()
        .expect("the tollgate binary runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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

/// Collects everything `pipe` says into a string shared with the caller, until the pipe
/// closes (when the thread returned ends).
fn collect(pipe: std::process::ChildStderr) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let said = Arc::new(Mutex::new(String::new()));
    let collected = Arc::clone(&said);
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            collected.lock().expect("not poisoned").push_str(&line);
            line.clear();
        }
    });
    (said, reader)
}

/// The lines `pipe` prints, as they come.
fn lines(pipe: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    receive
}

/// A running `tollgate` process.
#[derive(Debug)]
pub struct Tollgate {
    child: Option<Child>,
    /// What it printed at start-up, by label: `http`, `grpc`, `listen`, `store`, ...
    pub printed: HashMap<String, String>,
    stderr: Arc<Mutex<String>>,
    /// The thread that collects stderr, joined once the process has exited, so that what it
    /// said last is there to read.
    stderr_reader: Option<JoinHandle<()>>,
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
    pub fn start_in(directory: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = command();
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
        let (stderr, stderr_reader) = collect(child.stderr.take().expect("stderr is piped"));
        let printed = lines(child.stdout.take().expect("stdout is piped"));
        let mut said = HashMap::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let Ok(line) = printed.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "tollgate {args:?} did not start ({status:?}); it said:\n{}",
                    stderr.lock().expect("not poisoned")
                );
            };
            if let Some((label, value)) = line.trim().split_once(": ") {
                said.insert(label.to_owned(), value.to_owned());
                if label == "policies" {
                    break;
                }
            }
        }
        Self {
            child: Some(child),
            printed: said,
            stderr,
            stderr_reader: Some(stderr_reader),
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

    /// Waits for the process to exit on its own; then [`stderr`](Self::stderr) holds
    /// everything it said.
    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("the child can be waited on") {
                if let Some(reader) = self.stderr_reader.take() {
                    let _ = reader.join();
                }
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
