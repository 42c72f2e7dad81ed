//! The demonstration's child processes: `redis-server`s (the test kit's [`RedisServer`], each
//! under a watchdog that stops it if this process dies) and `tollgate serve`s on loopback, each
//! server's output in a temporary directory; all stopped when [`Processes`] is dropped (at the
//! end, on an error, and on Ctrl-C, when the run's future is dropped).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_testkit::RedisServer;

/// How long a `tollgate serve` has to start listening.
const PATIENCE: Duration = Duration::from_secs(30);
/// How often a starting server is looked at.
const POLL: Duration = Duration::from_millis(50);

/// The running children and the directory their files are in.
pub(super) struct Processes {
    redis: Vec<RedisServer>,
    servers: Vec<(String, Child)>,
    tollgate: PathBuf,
    dir: tempfile::TempDir,
}

/// A started `tollgate serve`: where its check API and admin API listen.
pub(super) struct Server {
    pub(super) http: SocketAddr,
    pub(super) admin: SocketAddr,
}

impl Processes {
    /// No children yet, a fresh temporary directory, and `tollgate` as the server binary.
    pub(super) fn new(tollgate: PathBuf) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-regions-")
            .tempdir()
            .map_err(|error| format!("cannot create a temporary directory: {error}"))?;
        Ok(Self {
            redis: Vec::new(),
            servers: Vec::new(),
            tollgate,
            dir,
        })
    }

    /// The temporary directory.
    pub(super) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts `redis-server` on a free loopback port, keeping nothing on disk, and waits
    /// until it answers; returns its address.
    pub(super) async fn redis(&mut self, name: &str) -> Result<SocketAddr, String> {
        // The test kit panics on a missing redis-server with advice for tests; say it plainly.
        if !on_path("redis-server") {
            return Err(format!(
                "{name}: redis-server is not installed (apt-get install redis-server)"
            ));
        }
        // The test kit waits for the server by blocking; keep that off the runtime's workers.
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .map_err(|error| format!("{name}: redis-server did not start: {}", why(error)))?;
        let address = SocketAddr::from(([127, 0, 0, 1], server.port()));
        self.redis.push(server);
        Ok(address)
    }

    /// Starts `tollgate serve` with `args` on free loopback ports, and waits for its start-up
    /// lines.
    pub(super) async fn tollgate(&mut self, name: &str, args: &[String]) -> Result<Server, String> {
        let file = |suffix: &str| -> Result<std::fs::File, String> {
            let path = self.dir.path().join(format!("{name}.{suffix}"));
            std::fs::File::create(&path)
                .map_err(|error| format!("cannot create {}: {error}", path.display()))
        };
        let child = Command::new(&self.tollgate)
            .args(["serve", "--no-watch"])
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(["--admin", "127.0.0.1:0"])
            .args(args)
            .env("TOLLGATE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(file("out")?)
            .stderr(file("err")?)
            .spawn()
            .map_err(|error| {
                format!("{name}: cannot start {}: {error}", self.tollgate.display())
            })?;
        self.servers.push((name.to_owned(), child));
        let out = self.dir.path().join(format!("{name}.out"));
        let started = Instant::now();
        while started.elapsed() < PATIENCE {
            let printed = read(&out);
            // The banner ends with the policies line, printed once every listener is bound.
            if printed.lines().any(|line| line.starts_with("  policies: ")) {
                return Ok(Server {
                    http: listener(&printed, "http", name)?,
                    admin: listener(&printed, "admin", name)?,
                });
            }
            if let Some(exited) = self.exited() {
                return Err(exited);
            }
            tokio::time::sleep(POLL).await;
        }
        Err(format!(
            "{name}: tollgate serve did not start within {PATIENCE:?}; see {}",
            out.display()
        ))
    }

    /// The last server started, if it has exited: what it said on stderr.
    fn exited(&mut self) -> Option<String> {
        let (name, child) = self.servers.last_mut()?;
        let status = child.try_wait().ok().flatten()?;
        let said = read(&self.dir.path().join(format!("{name}.err")));
        Some(format!("{name} exited ({status}): {}", said.trim()))
    }

    /// A file in the temporary directory.
    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.servers {
            let _ = child.kill();
        }
        for (_, child) in &mut self.servers {
            let _ = child.wait();
        }
        // Each RedisServer stops its server as it is dropped.
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether `program` is a file in a directory on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// What a failed start said: the test kit reports failures by panicking.
fn why(error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
            .unwrap_or_else(|| "it panicked".to_owned()),
        Err(error) => error.to_string(),
    }
}

/// The address on the start-up line `  label: http://ADDRESS (...)`.
fn listener(printed: &str, label: &str, name: &str) -> Result<SocketAddr, String> {
    let prefix = format!("  {label}: ");
    printed
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|rest| rest.trim_start_matches("http://"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|address| address.parse().ok())
        .ok_or_else(|| format!("{name}: tollgate serve printed no {label} address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_read_from_the_start_up_lines() {
        let printed = "tollgate serving\n  http: http://127.0.0.1:4000 (POST /v1/check)\n  admin: http://127.0.0.1:4002 (GET /dashboard)\n";
        assert_eq!(listener(printed, "admin", "r").map(|a| a.port()), Ok(4002));
        assert_eq!(
            listener(printed, "grpc", "r"),
            Err("r: tollgate serve printed no grpc address".to_owned())
        );
    }
}
