//! The container image: `scripts/build-image` builds it with buildah from this test's binary
//! (`--binary`, so no release build is needed), the image's configuration is the one
//! `deploy/Dockerfile` declares, and podman runs it: the binary serves `/healthz` from the
//! image's own filesystem, as user 65532, and exits cleanly on SIGTERM as the container's
//! PID 1.
//!
//! podman runs the container with runc and lowered `nofile`/`nproc` limits: on these machines
//! crun cannot set `RLIMIT_NOFILE`/`RLIMIT_NPROC` (the sandbox lacks `CAP_SYS_RESOURCE`) and
//! does not support their hybrid cgroups. `scripts/test` installs buildah, podman and runc;
//! this test fails, never skips, without them.

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `program` with `args`; panics with its output unless it succeeds.
fn run(program: &str, args: &[&str]) -> Output {
    let output = Command::new(program)
        .args(args)
        .current_dir(workspace())
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "{program} does not run ({error}): run scripts/test, which installs it, \
                 or apt-get install -y buildah podman runc"
            )
        });
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn require(tool: &str) {
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|directory| directory.join(tool).is_file())
    });
    assert!(
        found,
        "{tool} is not installed: run scripts/test (it installs it) or apt-get install -y buildah podman runc"
    );
}

/// The JSON array of the Dockerfile's `instruction` line (`ENTRYPOINT`, `CMD`).
fn dockerfile_array(dockerfile: &str, instruction: &str) -> serde_json::Value {
    let line = dockerfile
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix(&format!("{instruction} ")))
        .unwrap_or_else(|| panic!("deploy/Dockerfile has no {instruction}"));
    serde_json::from_str(line).expect("an exec-form JSON array")
}

/// `GET path` on `port` over plain HTTP/1.1: the status line and the body, or why not.
fn get(port: u16, path: &str) -> std::io::Result<(String, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    Ok((status, body.to_owned()))
}

/// Removes the test's container and image, whatever happened.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--ignore", &self.container])
            .output();
        let _ = Command::new("podman")
            .args(["rmi", "--force", "--ignore", &self.image])
            .output();
    }
}

#[test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
fn the_image_built_here_serves_healthz_from_its_own_filesystem_as_nonroot() {
    for tool in ["buildah", "podman", "runc"] {
        require(tool);
    }
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.subsec_nanos())
            .unwrap_or_default()
    );
    let image = format!("localhost/tollgate-test:{unique}");
    let container = format!("tollgate-test-{unique}");
    let _cleanup = Cleanup {
        container: container.clone(),
        image: image.clone(),
    };
    let output_dir = tempfile::tempdir().expect("a temporary directory");
    let archive = output_dir.path().join("tollgate.oci.tar");

    // Build: the script prints the image and its size, and writes the OCI archive.
    let started = Instant::now();
    let built = run(
        "scripts/build-image",
        &[
            "--binary",
            env!("CARGO_BIN_EXE_tollgate"),
            "--tag",
            &image,
            "--output",
            archive.to_str().expect("a UTF-8 path"),
        ],
    );
    let printed = String::from_utf8_lossy(&built.stdout).into_owned();
    eprintln!("built in {:?}:\n{printed}", started.elapsed());
    assert!(printed.contains(&format!("image: {image}")), "{printed}");
    assert!(printed.contains("size: "), "{printed}");
    let archive_bytes = std::fs::metadata(&archive)
        .expect("the OCI archive is written")
        .len();
    assert!(
        archive_bytes > 1_000_000,
        "archive of {archive_bytes} bytes"
    );

    // The image's configuration is deploy/Dockerfile's runtime stage.
    let dockerfile =
        std::fs::read_to_string(workspace().join("deploy/Dockerfile")).expect("deploy/Dockerfile");
    let inspected = run("podman", &["image", "inspect", &image]);
    let inspected: serde_json::Value =
        serde_json::from_slice(&inspected.stdout).expect("podman prints JSON");
    let config = &inspected[0]["Config"];
    assert_eq!(config["User"], "65532:65532");
    assert_eq!(
        config["Entrypoint"],
        dockerfile_array(&dockerfile, "ENTRYPOINT")
    );
    assert_eq!(config["Cmd"], dockerfile_array(&dockerfile, "CMD"));
    assert_eq!(
        config["Cmd"],
        serde_json::json!(["serve", "--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:8081"])
    );
    for port in ["8080/tcp", "8081/tcp", "9090/tcp"] {
        assert!(
            config["ExposedPorts"].get(port).is_some(),
            "{port} not exposed: {config}"
        );
    }
    let labels = &config["Labels"];
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        labels["org.opencontainers.image.source"]
            .as_str()
            .is_some_and(|source| source.starts_with("https://")),
        "{labels}"
    );

    // Run it: the binary and its libraries come from the image, not from this machine.
    let port = support::envoy::free_port();
    let http = format!("127.0.0.1:{port}");
    run(
        "podman",
        &[
            "--runtime",
            "runc",
            "run",
            "--detach",
            "--name",
            &container,
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--network",
            "host",
            &image,
            "serve",
            "--http",
            &http,
            "--grpc",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        match get(port, "/healthz") {
            Ok(answer) => break answer,
            Err(error) => {
                if Instant::now() > deadline {
                    let logs = Command::new("podman").args(["logs", &container]).output();
                    panic!("the container never answered /healthz ({error}); logs: {logs:?}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert!(status.contains(" 200 "), "{status}: {body}");
    assert_eq!(body.trim(), "ok");
    let (status, body) = get(port, "/readyz").expect("/readyz answers");
    assert!(status.contains(" 200 "), "{status}: {body}");

    // As user 65532, in its own root: the process's uid, and its root is not this machine's.
    let pid = run(
        "podman",
        &["inspect", "--format", "{{.State.Pid}}", &container],
    );
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_owned();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process");
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .expect("a Uid line");
    assert!(
        uid.split_whitespace().all(|id| id == "65532"),
        "uids: {uid}"
    );
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("the image's passwd");
    assert!(
        passwd.contains("nonroot:x:65532:65532:"),
        "not the image's root: {passwd}"
    );
    assert!(root.join("usr/local/bin/tollgate").is_file());
    assert_eq!(
        std::fs::read_link(root.join("bin/ratelimit")).expect("/bin/ratelimit is a link"),
        Path::new("/usr/local/bin/tollgate"),
        "envoyproxy/ratelimit's deployments run /bin/ratelimit"
    );
    assert!(
        Path::new("/bin/sh").exists() && !root.join("bin/sh").exists(),
        "the image has a shell"
    );

    // Run as Envoy Gateway runs envoyproxy/ratelimit's image (`command: [/bin/ratelimit]`),
    // the binary is `tollgate serve` reading upstream's environment.
    let help = run(
        "podman",
        &[
            "--runtime",
            "runc",
            "run",
            "--rm",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--network",
            "none",
            "--entrypoint",
            "/bin/ratelimit",
            &image,
            "--help",
        ],
    );
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--upstream-env"), "{help}");

    // SIGTERM to PID 1 stops it cleanly.
    let stopped = Instant::now();
    run("podman", &["stop", "--time", "20", &container]);
    let code = run(
        "podman",
        &["inspect", "--format", "{{.State.ExitCode}}", &container],
    );
    assert_eq!(String::from_utf8_lossy(&code.stdout).trim(), "0");
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "stopping took {:?}: SIGTERM was not handled",
        stopped.elapsed()
    );
}
