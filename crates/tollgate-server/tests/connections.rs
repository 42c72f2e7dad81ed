//! The bounds on client connections, over real sockets against the real binary: clients that
//! send nothing (HTTP/1.1 or HTTP/2) are closed after the header timeout, silent connections
//! filling the cap are closed to serve a new client, and a client waits at the cap only while
//! every connection has a request under way.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use reqwest::StatusCode;
use support::{Tollgate, proxy_args};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

/// Long enough for anything on a loaded machine; only ever waited out when something is wrong.
const PATIENCE: Duration = Duration::from_secs(30);

/// The HTTP/2 client connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the accept loop logs when a connection not known to be HTTP/2 reaches its age.
const PAST_AGE: &str = "a connection at its maximum age: its next answer closes it";

/// Logs that show what the accept loop does with each connection.
const DEBUG_LOG: (&str, &str) = ("TOLLGATE_LOG", "info,tollgate_http::http_server=debug");

/// Reads until the server closes `stream`, and returns what it sent; fails the test if it
/// keeps the connection open for [`PATIENCE`].
async fn closed_by_server(mut stream: impl AsyncRead + Unpin, what: &str) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut received)).await;
    match read {
        Ok(Ok(_)) => {}
        // A reset is a close too.
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(Err(error)) => panic!("{what}: reading failed: {error}"),
        Err(_) => panic!("{what}: the server kept the connection open for {PATIENCE:?}"),
    }
    received
}

/// Waits until the server logs `text`, without holding up the test's other tasks.
async fn logged(server: &Tollgate, text: &str) {
    support::eventually(&format!("the server logs {text:?}"), || async {
        server.stderr().contains(text)
    })
    .await;
}

/// What an HTTP/1 connection past its age sent before the server closed it, lower-cased; fails
/// the test unless it is one `200` answer that says `Connection: close`.
async fn answered_then_closed(stream: TcpStream) -> String {
    let received = closed_by_server(stream, "an HTTP/1 connection past its age").await;
    let received = String::from_utf8_lossy(&received).to_ascii_lowercase();
    assert!(received.starts_with("http/1.1 200"), "{received}");
    assert_eq!(received.matches("http/1.1 ").count(), 1, "{received}");
    assert!(received.contains("\r\nconnection: close\r\n"), "{received}");
    received
}

/// Connects to `address` and sends `head`, then one more byte of a header name every 100 ms
/// until the server closes the connection (a slow-loris client); returns the reading half.
async fn trickle(address: SocketAddr, head: &'static [u8]) -> tokio::net::tcp::OwnedReadHalf {
    let stream = TcpStream::connect(address).await.expect("connects");
    let (reader, mut writer) = stream.into_split();
    tokio::spawn(async move {
        let _ = writer.write_all(head).await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b"x").await.is_err() {
                break;
            }
        }
    });
    reader
}

/// Waits until the server logs that it accepted a connection from `peer`.
async fn accepted(server: &Tollgate, peer: SocketAddr) {
    logged(server, &format!("connection accepted peer={peer}")).await;
}

#[tokio::test]
async fn silent_connections_are_closed_after_the_header_timeout() {
    // Long enough that the client below sends its first head well within it, however loaded
    // the machine; short enough to wait out.
    let server = Tollgate::serve(&["--header-timeout", "2s"]);
    let address = server.address("http");

    // Nothing at all: the first request head is due within the header timeout from accept.
    let silent = TcpStream::connect(address).await.expect("connects");
    // An HTTP/2 client that never sends its preface, one that sends only the preface, and one
    // that stops half-way through it.
    let h2_preface_only = {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        stream.write_all(H2_PREFACE).await.expect("writes");
        stream
    };
    let h2_half_preface = {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        stream.write_all(&H2_PREFACE[..10]).await.expect("writes");
        stream
    };
    // A keep-alive connection after its answer: the next head is due within the timeout too.
    let keep_alive = {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("writes");
        stream
    };
    // A head that never ends, a byte at a time (a slow-loris client): it is due within the
    // timeout however it trickles in, the first on a connection and one after an answer.
    let trickling = trickle(address, b"GET /healthz HTTP/1.1\r\nhost: x\r\n").await;
    let trickling_next = trickle(
        address,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\nGET /healthz HTTP/1.1\r\nhost: x\r\n",
    )
    .await;
    let (silent, preface_only, half_preface, keep_alive, trickling, trickling_next) = tokio::join!(
        closed_by_server(silent, "a connection that sends nothing"),
        closed_by_server(
            h2_preface_only,
            "an HTTP/2 connection with only the preface"
        ),
        closed_by_server(h2_half_preface, "an HTTP/2 connection with half a preface"),
        closed_by_server(keep_alive, "an idle keep-alive connection"),
        closed_by_server(trickling, "a connection trickling its head in"),
        closed_by_server(trickling_next, "a connection trickling its next head in"),
    );
    assert!(trickling.is_empty(), "{trickling:?}");
    assert!(
        trickling_next.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&trickling_next)
    );
    assert!(silent.is_empty(), "{silent:?}");
    assert!(half_preface.is_empty(), "{half_preface:?}");
    // The server's SETTINGS frame (type 4), perhaps a GOAWAY (type 7), nothing else.
    assert!(
        preface_only.len() >= 9 && preface_only[3] == 4,
        "{preface_only:?}"
    );
    assert!(
        keep_alive.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&keep_alive)
    );
    // The server is still there for everyone else.
    let status = reqwest::get(format!("{}/healthz", server.http_url()))
        .await
        .expect("an answer")
        .status();
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn silent_sockets_filling_the_connection_cap_are_closed_to_serve_clients() {
    // The header timeout is far longer than the test may take: only making room serves them.
    let server = Tollgate::start_with_env(
        &support::serve_args(&["--max-connections", "2", "--header-timeout", "1h"]),
        &[DEBUG_LOG],
    );
    let address = server.address("http");
    let silent = TcpStream::connect(address).await.expect("connects");
    accepted(&server, silent.local_addr().expect("an address")).await;
    let mut h2_silent = TcpStream::connect(address).await.expect("connects");
    h2_silent.write_all(H2_PREFACE).await.expect("writes");
    accepted(&server, h2_silent.local_addr().expect("an address")).await;

    // Two clients that keep their connections: each takes the place of a silent one.
    let mut clients = Vec::new();
    for client in 0..2 {
        clients.push(
            reqwest::Client::builder()
                .timeout(PATIENCE)
                .build()
                .expect("a client"),
        );
        let response = clients[client]
            .get(format!("http://{address}/healthz"))
            .send()
            .await
            .unwrap_or_else(|error| panic!("client {client} is served: {error}"));
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.text().await.expect("a body"), "ok\n");
    }
    closed_by_server(silent, "the silent connection").await;
    closed_by_server(h2_silent, "the silent HTTP/2 connection").await;
    assert!(
        server
            .stderr()
            .contains("closing an idle connection to make room"),
        "{}",
        server.stderr()
    );
}

const POLICIES: &str = "
policies:
  - name: all
    match: { path_prefix: / }
    key: [ip]
    limits: [{ name: plenty, algorithm: fixed_window, quota: 1000/m }]
";

/// An upstream whose `/held` answers only when the test lets it, and says when a request came.
async fn held_upstream(
    arrived: mpsc::UnboundedSender<()>,
    release: &'static Semaphore,
) -> SocketAddr {
    let app = Router::new().route(
        "/held",
        get(move || {
            let arrived = arrived.clone();
            async move {
                let _ = arrived.send(());
                let _permit = release.acquire().await;
                "done"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// `tollgate proxy` with [`POLICIES`], debug logs and `flags` in front of a [`held_upstream`]
/// that waits for `release`, and the channel that says when a request reached it; the
/// directory holds the proxy's policy file.
async fn held_proxy(
    release: &'static Semaphore,
    flags: &[&str],
) -> (Tollgate, mpsc::UnboundedReceiver<()>, tempfile::TempDir) {
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let upstream = format!("http://{}", held_upstream(arrived, release).await);
    let directory = tempfile::tempdir().expect("a temporary directory");
    let config = directory.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).expect("written");
    let mut args = vec![
        "--config",
        config.to_str().expect("UTF-8"),
        "--upstream",
        &upstream,
        "--upstream-timeout",
        "1h",
    ];
    args.extend_from_slice(flags);
    let proxy = Tollgate::start_with_env(&proxy_args(&args), &[DEBUG_LOG]);
    (proxy, arrivals, directory)
}

#[tokio::test]
async fn a_client_waits_at_the_cap_only_while_every_connection_is_busy() {
    static RELEASE: Semaphore = Semaphore::const_new(0);
    let (proxy, mut arrivals, _config) = held_proxy(
        &RELEASE,
        &["--max-connections", "1", "--header-timeout", "1h"],
    )
    .await;
    let url = format!("{}/held", proxy.http_url());
    let client = reqwest::Client::builder()
        .timeout(PATIENCE)
        .build()
        .expect("a client");

    // The first request is under way: it reached the upstream, which holds it.
    let first = tokio::spawn(client.get(&url).send());
    tokio::time::timeout(PATIENCE, arrivals.recv())
        .await
        .expect("the first request reaches the upstream")
        .expect("the upstream runs");

    // A second client, on a connection of its own, is accepted and waits for a place.
    let second_client = reqwest::Client::builder()
        .timeout(PATIENCE)
        .build()
        .expect("a client");
    let second = tokio::spawn(second_client.get(&url).send());
    logged(&proxy, "every connection busy: waiting").await;
    assert!(
        !second.is_finished(),
        "nothing frees a place while the first request is held"
    );

    // The first request ends; its connection goes idle and makes room for the second.
    RELEASE.add_permits(2);
    let first = first.await.expect("joined").expect("answered");
    assert_eq!(first.status(), StatusCode::OK);
    let second = second.await.expect("joined").expect("answered");
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(second.text().await.expect("a body"), "done");
}

#[test]
fn a_cap_of_zero_connections_is_refused() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(support::serve_args(&["--max-connections", "0"]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited on") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tollgate serve --max-connections 0 started instead of refusing the flag");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .expect("stderr is read");
    assert!(!status.success());
    assert!(stderr.contains("--max-connections"), "{stderr}");
    assert!(
        stderr.contains("0 would accept no connection at all"),
        "{stderr}"
    );
}

/// The gRPC listener had no bounds of its own: a socket that never sent its preface was held
/// for good. It now goes through the same accept loop as HTTP.
#[tokio::test]
async fn silent_connections_to_the_grpc_listener_are_closed_too() {
    use tollgate_envoy::rls::proto::service::RateLimitRequest;
    use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;

    let server = Tollgate::serve(&["--header-timeout", "2s"]);
    let address = server.address("grpc");
    let silent = TcpStream::connect(address).await.expect("connects");
    let half_preface = {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        stream.write_all(&H2_PREFACE[..10]).await.expect("writes");
        stream
    };
    let (silent, half_preface) = tokio::join!(
        closed_by_server(silent, "a gRPC connection that sends nothing"),
        closed_by_server(half_preface, "a gRPC connection with half a preface"),
    );
    assert!(silent.is_empty(), "{silent:?}");
    assert!(half_preface.is_empty(), "{half_preface:?}");
    // The service still answers a real client.
    let mut client = RateLimitServiceClient::connect(format!("http://{address}"))
        .await
        .expect("gRPC connects");
    let answer = client
        .should_rate_limit(RateLimitRequest {
            domain: "unconfigured".to_owned(),
            descriptors: vec![Default::default()],
            hits_addend: 0,
        })
        .await;
    let answer = answer.expect("a descriptor without entries is answered, as upstream does");
    assert_eq!(answer.into_inner().overall_code, 1, "OK");
}

/// Envoy keeps its gRPC connections for good: without an age, pods added by a scale-out would
/// get none of its traffic. A connection past its age is asked to close (GOAWAY), its
/// long-lived streams get the grace, and the client's next call opens a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_connections_are_closed_at_their_age_after_a_grace_for_their_streams() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let server = Tollgate::start_with_env(
        &support::serve_args(&[
            "--max-connection-age",
            "1s",
            "--max-connection-age-grace",
            "2s",
        ]),
        &[DEBUG_LOG],
    );
    let address = server.address("grpc");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("a URL")
        .connect()
        .await
        .expect("gRPC connects");
    let mut client = HealthClient::new(channel);
    let mut watch = client
        .watch(HealthCheckRequest {
            service: "ratelimit".to_owned(),
        })
        .await
        .expect("a stream")
        .into_inner();
    let first = watch.message().await.expect("a status").expect("a status");
    assert_eq!(first.status, 1, "SERVING");
    logged(&server, "closing a connection at its maximum age").await;
    // The stream outlives the GOAWAY, then the connection goes under it.
    let ended = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("the stream ends within the grace");
    assert!(!matches!(ended, Ok(Some(_))), "{ended:?}");
    logged(
        &server,
        "connection dropped: requests still under way past its age's grace",
    )
    .await;
    // The same client goes on, on a new connection. A call the client sent before it saw the
    // old connection close is cancelled with it (`Cancelled`), as it would be for Envoy, which
    // retries; any other failure, or none that succeeds, fails the test.
    support::eventually("the client is answered on a new connection", || {
        let mut client = client.clone();
        async move {
            match client
                .check(HealthCheckRequest {
                    service: "ratelimit".to_owned(),
                })
                .await
            {
                Ok(answer) => {
                    assert_eq!(answer.into_inner().status, 1, "SERVING");
                    true
                }
                Err(status) if status.code() == tonic::Code::Cancelled => false,
                Err(status) => panic!("the client's next call failed: {status:?}"),
            }
        }
    })
    .await;
}

/// An HTTP/1 connection idle at its age is not closed under a request its client may be
/// sending on it (a proxy's keep-alive pool would answer that request with a 502 or 503): its
/// next request is answered, with `Connection: close`, and then it closes.
#[tokio::test]
async fn http1_connections_idle_at_their_age_close_with_their_next_answer() {
    let server = Tollgate::start_with_env(
        &support::serve_args(&["--max-connection-age", "1s", "--header-timeout", "1h"]),
        &[DEBUG_LOG],
    );
    let mut stream = TcpStream::connect(server.address("http"))
        .await
        .expect("connects");
    logged(&server, PAST_AGE).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("writes");
    answered_then_closed(stream).await;
}

/// An HTTP/1 request under way when its connection reaches its age is answered with
/// `Connection: close`, and the connection closes after it: closed after an answer that did
/// not say so, the client could send its next request into the close.
#[tokio::test]
async fn http1_requests_under_way_at_their_connections_age_close_it_with_their_answer() {
    static RELEASE: Semaphore = Semaphore::const_new(0);
    let (proxy, mut arrivals, _config) = held_proxy(
        &RELEASE,
        &[
            "--max-connection-age",
            "1s",
            "--max-connection-age-grace",
            "1h",
            "--header-timeout",
            "1h",
        ],
    )
    .await;
    let mut stream = TcpStream::connect(proxy.address("listen"))
        .await
        .expect("connects");
    stream
        .write_all(b"GET /held HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("writes");
    tokio::time::timeout(PATIENCE, arrivals.recv())
        .await
        .expect("the request reaches the upstream")
        .expect("the upstream runs");
    logged(&proxy, PAST_AGE).await;
    RELEASE.add_permits(1);
    let received = answered_then_closed(stream).await;
    assert!(received.ends_with("done"), "{received}");
}

/// An HTTP/2 connection that has sent no request by its age (so not yet known to be HTTP/2) is
/// asked to close (GOAWAY) when its first stream comes, and that stream is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_unused_at_their_age_close_when_first_used() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let server = Tollgate::start_with_env(
        &support::serve_args(&["--max-connection-age", "1s", "--header-timeout", "1h"]),
        &[DEBUG_LOG],
    );
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.address("grpc")))
            .expect("a URL")
            .connect()
            .await
            .expect("gRPC connects");
    logged(&server, PAST_AGE).await;
    assert!(
        !server
            .stderr()
            .contains("closing a connection at its maximum age"),
        "an idle connection is kept until it is used"
    );
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "ratelimit".to_owned(),
        })
        .await
        .expect("the stream that found the connection past its age is answered");
    assert_eq!(answer.into_inner().status, 1, "SERVING");
    logged(&server, "closing a connection at its maximum age").await;
}
