//! The demonstration's child processes: `redis-server`s and `tollgate serve`s on loopback,
//! each with its output in a temporary directory, all killed when [`Processes`] is dropped
//! (at the end, on an error, and on Ctrl-C, when the run's future is dropped).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a child has to start listening.
const PATIENCE: Duration = Duration::from_secs(30);
/// How often a starting child is looked at.
const POLL: Duration = Duration::from_millis(50);
/// Ports tried for a redis-server before giving up (another process may take a port between
/// choosing it and the server binding it).
const PORT_ATTEMPTS: usize = 5;

/// The running children and the directory their files are in.
pub(super) struct Processes {
    children: Vec<(String, Child)>,
    dir: tempfile::TempDir,
}

/// A started `tollgate serve`: where its check API and admin API listen.
pub(super) struct Server {
    pub(super) http: SocketAddr,
    pub(super) admin: SocketAddr,
}

impl Processes {
    /// No children yet, and a fresh temporary directory.
    pub(super) fn new() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-regions-")
            .tempdir()
            .map_err(|error| format!("cannot create a temporary directory: {error}"))?;
        Ok(Self {
            children: Vec::new(),
            dir,
        })
    }

    /// The temporary directory.
    pub(super) fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self, name: &str, command: &mut Command) -> Result<(), String> {
        let file = |suffix: &str| -> Result<std::fs::File, String> {
            let path = self.dir.path().join(format!("{name}.{suffix}"));
            std::fs::File::create(&path)
                .map_err(|error| format!("cannot create {}: {error}", path.display()))
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(file("out")?)
            .stderr(file("err")?)
            .spawn()
            .map_err(|error| {
                let program = command.get_program().to_string_lossy().into_owned();
                if error.kind() == std::io::ErrorKind::NotFound {
                    format!("{name}: {program} is not installed (apt-get install redis-server)")
                } else {
                    format!("{name}: cannot start {program}: {error}")
                }
            })?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// The last child started, if it has exited: what it said on stderr and in `log`.
    fn exited(&mut self, log: Option<&Path>) -> Option<String> {
        let (name, child) = self.children.last_mut()?;
        let status = child.try_wait().ok().flatten()?;
        let mut said = read(&self.dir.path().join(format!("{name}.err")));
        if let Some(log) = log {
            said.push_str(&read(log));
        }
        Some(format!("{name} exited ({status}): {}", said.trim()))
    }

    /// Starts `redis-server` on a free loopback port, keeping nothing on disk, and waits
    /// until it answers PING; returns its address.
    pub(super) async fn redis(&mut self, name: &str) -> Result<SocketAddr, String> {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let address = free_loopback_address()?;
            self.spawn(
                name,
                Command::new("redis-server")
                    .args(["--bind", "127.0.0.1", "--port"])
                    .arg(address.port().to_string())
                    .args(["--save", "", "--appendonly", "no", "--logfile", "redis.log"])
                    .arg("--dir")
                    .arg(&dir),
            )?;
            let started = Instant::now();
            while started.elapsed() < PATIENCE {
                if pong(address).await {
                    return Ok(address);
                }
                if let Some(exited) = self.exited(Some(&dir.join("redis.log"))) {
                    last = exited;
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
            if last.is_empty() {
                return Err(format!(
                    "{name}: redis-server on {address} did not answer within {PATIENCE:?}"
                ));
            }
        }
        Err(last)
    }

    /// Starts `tollgate serve` (this very binary) with `args` on free loopback ports, and
    /// waits for its start-up lines.
    pub(super) async fn tollgate(&mut self, name: &str, args: &[String]) -> Result<Server, String> {
        let binary = std::env::current_exe()
            .map_err(|error| format!("cannot find the tollgate binary: {error}"))?;
        self.spawn(
            name,
            Command::new(binary)
                .args(["serve", "--no-watch"])
                .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
                .args(["--admin", "127.0.0.1:0"])
                .args(args)
                .env("TOLLGATE_LOG", "warn"),
        )?;
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
            if let Some(exited) = self.exited(None) {
                return Err(exited);
            }
            tokio::time::sleep(POLL).await;
        }
        Err(format!(
            "{name}: tollgate serve did not start within {PATIENCE:?}; see {}",
            out.display()
        ))
    }

    /// A file in the temporary directory.
    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
        }
        for (_, child) in &mut self.children {
            let _ = child.wait();
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A loopback port nothing listens on now.
fn free_loopback_address() -> Result<SocketAddr, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("no free loopback port: {error}"))
}

/// Whether a Redis answers PING at `address`.
async fn pong(address: SocketAddr) -> bool {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer == *b"+PONG\r\n")
    };
    tokio::time::timeout(Duration::from_secs(1), exchange)
        .await
        .is_ok_and(|answer| answer.unwrap_or(false))
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
