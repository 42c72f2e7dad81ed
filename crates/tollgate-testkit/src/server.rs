//! One redis-server process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::free_port;
use crate::tls::Certificates;

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A running redis-server on a free loopback port; stopped when dropped.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// Where the harness sends its own commands: the port, or a Unix socket on a TLS-only server.
    control: String,
    pid: u32,
    watchdog: Child,
    dir: PathBuf,
    _tempdir: Option<tempfile::TempDir>,
}

fn redis_server_path() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-server is not on PATH. The Redis tests start their own servers and never skip: \
             run scripts/test (it installs redis-server) or `apt-get install -y redis-server`."
        )
    })
}

impl RedisServer {
    /// Starts a plain server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--maxmemory", "10mb"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        let tempdir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let dir = tempdir.path().to_path_buf();
        let mut server = Self::spawn(free_port(), &dir, extra);
        server._tempdir = Some(tempdir);
        server
    }

    /// Starts a plain server on `port`, one chosen with [`free_port`](crate::free_port)
    /// beforehand (a test that starts a client first, with nothing listening there yet).
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        let tempdir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let dir = tempdir.path().to_path_buf();
        let mut server = Self::spawn(port, &dir, extra);
        server._tempdir = Some(tempdir);
        server
    }

    /// Starts a server on `port` in `dir` (a cluster node, say).
    pub(crate) fn spawn(port: u16, dir: &Path, extra: &[&str]) -> Self {
        Self::launch_at(port, format!("redis://127.0.0.1:{port}"), dir, &[], extra)
    }

    /// Starts a TLS-only server: no plain port, TLS on a free port with `certificates`'
    /// server certificate, client certificates checked against their CA when a client sends
    /// one (`--tls-auth-clients optional`), or required with `extra` =
    /// `["--tls-auth-clients", "yes"]`. The harness reaches it through a Unix socket.
    pub fn start_tls(certificates: &Certificates, extra: &[&str]) -> Self {
        let tempdir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let mut server = Self::spawn_tls(free_port(), tempdir.path(), &[], certificates, extra);
        server._tempdir = Some(tempdir);
        server
    }

    /// Starts a TLS-only server on `port` in `dir` (a cluster node, say); `leading` goes first
    /// (a sentinel's configuration file).
    pub(crate) fn spawn_tls(
        port: u16,
        dir: &Path,
        leading: &[&str],
        certificates: &Certificates,
        extra: &[&str],
    ) -> Self {
        let socket = dir.join("redis.sock");
        let path = |path: &Path| path.to_str().expect("a UTF-8 path").to_owned();
        let owned = [
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--unixsocket".to_owned(),
            path(&socket),
            "--tls-cert-file".to_owned(),
            path(&certificates.server_cert),
            "--tls-key-file".to_owned(),
            path(&certificates.server_key),
            "--tls-ca-cert-file".to_owned(),
            path(&certificates.ca),
            "--tls-auth-clients".to_owned(),
            "optional".to_owned(),
        ];
        let mut args: Vec<&str> = owned.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        // A server with a password (`--requirepass` among `extra`) asks the harness for it too.
        let password = extra
            .iter()
            .position(|arg| *arg == "--requirepass")
            .and_then(|at| extra.get(at + 1));
        let control = match password {
            Some(password) => format!("redis+unix://{}?pass={password}", socket.display()),
            None => format!("redis+unix://{}", socket.display()),
        };
        Self::launch_at(port, control, dir, leading, &args)
    }

    /// Starts a Redis Sentinel (`redis-server FILE --sentinel`) on a free port in its own
    /// directory, with `config` as its configuration file (it rewrites the file as it learns);
    /// TLS-only with `certificates`; `extra` as for [`RedisServer::start_with`].
    pub fn start_sentinel(
        config: &str,
        certificates: Option<&Certificates>,
        extra: &[&str],
    ) -> Self {
        let tempdir = tempfile::tempdir().expect("a temporary directory for the sentinel");
        let dir = tempdir.path().to_path_buf();
        let file = dir.join("sentinel.conf");
        std::fs::write(&file, config).expect("write the sentinel's configuration");
        let port = free_port();
        let file = file.to_str().expect("a UTF-8 path").to_owned();
        let leading = [file.as_str(), "--sentinel"];
        if let Some(certificates) = certificates {
            let mut server = Self::spawn_tls(port, &dir, &leading, certificates, extra);
            server._tempdir = Some(tempdir);
            return server;
        }
        let control = format!("redis://127.0.0.1:{port}");
        Self::launch_in(tempdir, port, control, &leading, extra)
    }

    /// Launches a server that runs in `tempdir` (removed with it) and is reached through
    /// `control`.
    fn launch_in(
        tempdir: tempfile::TempDir,
        port: u16,
        control: String,
        leading: &[&str],
        args: &[&str],
    ) -> Self {
        let mut server = Self::launch_at(port, control, tempdir.path(), leading, args);
        server._tempdir = Some(tempdir);
        server
    }

    /// Launches a server that runs in `dir` and is reached through `control`.
    fn launch_at(port: u16, control: String, dir: &Path, leading: &[&str], args: &[&str]) -> Self {
        let (watchdog, pid) = launch(port, &control, dir, leading, args);
        Self {
            port,
            control,
            pid,
            watchdog,
            dir: dir.to_path_buf(),
            _tempdir: None,
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The directory the server runs in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs one command on a fresh connection.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> redis::RedisResult<T> {
        query(&self.control, cmd)
    }

    /// Sends a signal (`"KILL"`, `"STOP"`, `"CONT"`) to the server process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .expect("the kill command");
        assert!(status.success(), "kill -{signal} {} failed", self.pid);
    }

    /// Kills the server at once (no shutdown), as a crash would.
    pub fn kill(&mut self) {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(self.pid.to_string())
            .status();
        let _ = self.watchdog.wait();
    }

    /// Starts a fresh server on the same port and directory (Redis keeps nothing: state is gone).
    pub fn restart(&mut self, extra: &[&str]) {
        self.kill();
        (self.watchdog, self.pid) = launch(self.port, &self.control, &self.dir, &[], extra);
    }

    /// How many times each way of running the store's code was called on this server:
    /// (FCALL, EVALSHA), from `INFO commandstats`.
    pub fn calls_by_kind(&self) -> (u64, u64) {
        let info: String = self
            .query(redis::cmd("INFO").arg("commandstats"))
            .expect("INFO commandstats");
        let calls = |command: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse().expect("a count"))
        };
        (calls("fcall"), calls("evalsha"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs redis-server under a watchdog and waits for its first answer: the watchdog and the
/// server's pid.
/// `leading` goes before the common arguments (a configuration file must come first).
fn launch(port: u16, control: &str, dir: &Path, leading: &[&str], extra: &[&str]) -> (Child, u32) {
    let binary = redis_server_path();
    let port_text = port.to_string();
    let mut args: Vec<&str> = leading.to_vec();
    args.extend([
        "--port",
        &port_text,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--logfile",
        "redis.log",
        "--daemonize",
        "no",
    ]);
    args.extend_from_slice(extra);
    // The watchdog: runs the server in the background and kills it as soon as the test
    // process (this shell's parent) is gone, or stops when the server exits.
    let script = r#"
            parent=$1; shift
            "$@" &
            server=$!
            while kill -0 "$parent" 2>/dev/null && kill -0 "$server" 2>/dev/null; do sleep 0.2; done
            kill -9 "$server" 2>/dev/null
            wait "$server" 2>/dev/null
        "#;
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("watchdog")
        .arg(std::process::id().to_string())
        .arg(&binary)
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", binary.display()));
    let mut watchdog = watchdog;
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = watchdog.try_wait() {
            panic!(
                "redis-server on port {port} exited ({status}); its log:\n{}",
                std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
            );
        }
        if let Ok(info) = query::<String>(control, redis::cmd("INFO").arg("server")) {
            let pid = info
                .lines()
                .find_map(|line| line.strip_prefix("process_id:"))
                .and_then(|pid| pid.trim().parse().ok());
            if let Some(pid) = pid {
                return (watchdog, pid);
            }
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "redis-server on port {port} did not answer within {START_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs one command on a fresh connection to `control`.
fn query<T: redis::FromRedisValue>(control: &str, cmd: &mut redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(control)?;
    let mut connection = client.get_connection_with_timeout(Duration::from_secs(2))?;
    cmd.query(&mut connection)
}
