//! A small xDS management server for the tests: the state-of-the-world Aggregated Discovery
//! Service (tonic, on the protos the server is built from) serving `RateLimitConfig`
//! resources from one snapshot per node id, as Envoy Gateway serves them through
//! go-control-plane's snapshot cache and sotw server (`NewSnapshotCache(false, IDHash{}, ..)`):
//!
//! - a stream answers a request only when it has a snapshot for the request's node id: at once
//!   if the snapshot's version is not the one the request says it has (or on the stream's
//!   first request), else when a newer snapshot is set, which is pushed to every stream
//!   waiting for one;
//! - every response carries the whole snapshot and a fresh nonce; a request whose nonce is not
//!   the last one sent is stale and only recorded;
//! - a NACK (which names the version still in force) gets the snapshot again at once, as
//!   go-control-plane's cache does.
//!
//! Left out compared to go-control-plane: delta xDS; other resource types (requests for them
//! are recorded, never answered) and several types per stream; subscriptions to named
//! resources (every stream is a wildcard one); the no-answer case of a first request whose
//! version already matches an empty snapshot; resource TTLs and heartbeats; the linear and
//! mux caches; server callbacks and statistics. Each request is recorded, with its stream's
//! gRPC metadata, for the tests to look at; with TLS, every handshake's outcome is recorded too.
//! Stopping drops the whole server at once, every connection closed, as when the process is
//! killed.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use prost::Message as _;
use tokio::sync::watch;
use tollgate_envoy::rls::proto::discovery::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use tollgate_envoy::rls::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use tollgate_envoy::rls::proto::rls_conf::RateLimitConfig;
use tonic::{Request, Response, Status, Streaming};

/// The type of the resources served.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// How long a test waits for the server to see something.
const PATIENCE: Duration = Duration::from_secs(30);

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub request: DiscoveryRequest,
    /// The gRPC metadata of the stream it came on.
    pub metadata: tonic::metadata::MetadataMap,
    /// Which stream (1, 2, ... in the order they were opened).
    pub stream: u64,
}

impl Received {
    /// An ACK of `version`.
    pub fn acks(&self, version: &str) -> bool {
        self.request.error_detail.is_none()
            && self.request.version_info == version
            && !self.request.response_nonce.is_empty()
    }

    /// A NACK's message.
    pub fn refusal(&self) -> Option<&str> {
        self.request
            .error_detail
            .as_ref()
            .map(|status| status.message.as_str())
    }
}

/// What one TLS handshake came to.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// The protocol agreed by ALPN, or why the handshake failed.
    pub outcome: Result<Option<String>, String>,
    /// The TLS version agreed.
    pub version: Option<rustls::ProtocolVersion>,
}

struct Snapshot {
    version: String,
    resources: Vec<prost_types::Any>,
}

#[derive(Default)]
struct Shared {
    snapshots: Mutex<HashMap<String, Snapshot>>,
    requests: Mutex<Vec<Received>>,
    handshakes: Mutex<Vec<Handshake>>,
    /// Bumped whenever a snapshot is set (wakes waiting streams) ...
    snapshot_set: watch::Sender<u64>,
    /// ... and whenever something is recorded (wakes waiting tests).
    recorded: watch::Sender<u64>,
    streams: AtomicU64,
}

impl Shared {
    fn record(&self, received: Received) {
        self.requests.lock().expect("not poisoned").push(received);
        self.recorded.send_modify(|n| *n += 1);
    }
}

/// A running management server.
pub struct ManagementServer {
    address: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ManagementServer {
    /// Serves on a free loopback port, without TLS.
    pub fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().expect("an address"), None)
    }

    /// Serves on `address` (a stopped server's, to bring it back), with TLS if given.
    pub fn start_on(address: SocketAddr, tls: Option<rustls::ServerConfig>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let listener = {
            let _inside = runtime.enter();
            bind(address)
        };
        let address = listener.local_addr().expect("an address");
        let shared = Arc::new(Shared::default());
        let service = AggregatedDiscoveryServiceServer::new(Ads {
            shared: Arc::clone(&shared),
        });
        let router = tonic::transport::Server::builder().add_service(service);
        match tls {
            None => {
                runtime
                    .spawn(router.serve_with_incoming(
                        tonic::transport::server::TcpIncoming::from(listener),
                    ));
            }
            Some(config) => {
                let incoming = tls_incoming(listener, config, Arc::clone(&shared));
                runtime.spawn(router.serve_with_incoming(incoming));
            }
        }
        Self {
            address,
            shared,
            runtime: Some(runtime),
        }
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets `node`'s snapshot: `version` and `resources`, replacing what it had.
    pub fn set(&self, node: &str, version: &str, resources: &[RateLimitConfig]) {
        let resources = resources
            .iter()
            .map(|config| prost_types::Any {
                type_url: TYPE_URL.to_owned(),
                value: config.encode_to_vec(),
            })
            .collect();
        self.set_any(node, version, resources);
    }

    /// Sets `node`'s snapshot from resources as they go on the wire.
    pub fn set_any(&self, node: &str, version: &str, resources: Vec<prost_types::Any>) {
        self.shared.snapshots.lock().expect("not poisoned").insert(
            node.to_owned(),
            Snapshot {
                version: version.to_owned(),
                resources,
            },
        );
        self.shared.snapshot_set.send_modify(|n| *n += 1);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.requests.lock().expect("not poisoned").clone()
    }

    /// Every TLS handshake so far.
    pub fn handshakes(&self) -> Vec<Handshake> {
        self.shared.handshakes.lock().expect("not poisoned").clone()
    }

    /// Waits for a request that `matches`.
    pub async fn request(&self, what: &str, matches: impl Fn(&Received) -> bool) -> Received {
        self.wait(what, || self.requests().into_iter().find(|r| matches(r)))
            .await
    }

    /// Waits for a TLS handshake that `matches`.
    pub async fn handshake(&self, what: &str, matches: impl Fn(&Handshake) -> bool) -> Handshake {
        self.wait(what, || self.handshakes().into_iter().find(|h| matches(h)))
            .await
    }

    async fn wait<T>(&self, what: &str, found: impl Fn() -> Option<T>) -> T {
        let mut recorded = self.shared.recorded.subscribe();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(found) = found() {
                return found;
            }
            if tokio::time::timeout_at(deadline, recorded.changed())
                .await
                .is_err()
            {
                panic!(
                    "the management server never saw {what}; it received {:#?}",
                    self.requests()
                );
            }
        }
    }

    /// Stops at once: every connection is dropped, as when the process is killed.
    pub fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for ManagementServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A listener on `address`, reusing it while the connections of a stopped server on it wind
/// down (TIME_WAIT), and waiting while that server's listener is being dropped.
fn bind(address: SocketAddr) -> tokio::net::TcpListener {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        match socket.bind(address).and_then(|()| socket.listen(128)) {
            Ok(listener) => return listener,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("cannot listen on {address}: {error}"),
        }
    }
}

/// TLS connections accepted on `listener`, each handshake's outcome recorded; failed ones
/// are dropped.
fn tls_incoming(
    listener: tokio::net::TcpListener,
    config: rustls::ServerConfig,
    shared: Arc<Shared>,
) -> impl Stream<Item = std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    futures_util::stream::unfold(
        (listener, acceptor, shared),
        |(listener, acceptor, shared)| async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let accepted = acceptor.accept(tcp).await;
                let handshake = match &accepted {
                    Ok(stream) => {
                        let connection = stream.get_ref().1;
                        Handshake {
                            outcome: Ok(connection
                                .alpn_protocol()
                                .map(|p| String::from_utf8_lossy(p).into_owned())),
                            version: connection.protocol_version(),
                        }
                    }
                    Err(error) => Handshake {
                        outcome: Err(error.to_string()),
                        version: None,
                    },
                };
                shared
                    .handshakes
                    .lock()
                    .expect("not poisoned")
                    .push(handshake);
                shared.recorded.send_modify(|n| *n += 1);
                if let Ok(stream) = accepted {
                    return Some((Ok(stream), (listener, acceptor, shared)));
                }
            }
        },
    )
}

struct Ads {
    shared: Arc<Shared>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let id = self.shared.streams.fetch_add(1, Ordering::Relaxed) + 1;
        let metadata = request.metadata().clone();
        let stream = AdsStream {
            id,
            shared: Arc::clone(&self.shared),
            snapshot_set: self.shared.snapshot_set.subscribe(),
            inbound: request.into_inner(),
            metadata,
            waiting: None,
            last_nonce: None,
            sent: 0,
        };
        let responses = futures_util::stream::unfold(stream, |mut stream| async move {
            stream.next().await.map(|response| (Ok(response), stream))
        });
        Ok(Response::new(Box::pin(responses)))
    }
}

/// One client's stream.
struct AdsStream {
    id: u64,
    shared: Arc<Shared>,
    snapshot_set: watch::Receiver<u64>,
    inbound: Streaming<DiscoveryRequest>,
    metadata: tonic::metadata::MetadataMap,
    /// The request to answer when there is something to send.
    waiting: Option<DiscoveryRequest>,
    last_nonce: Option<String>,
    sent: u64,
}

impl AdsStream {
    /// The next response, once one is due; `None` when the client goes.
    async fn next(&mut self) -> Option<DiscoveryResponse> {
        loop {
            if let Some(response) = self.due() {
                return Some(response);
            }
            tokio::select! {
                message = self.inbound.message() => match message {
                    Ok(Some(request)) => self.receive(request),
                    _ => return None,
                },
                changed = self.snapshot_set.changed() => changed.ok()?,
            }
        }
    }

    fn receive(&mut self, request: DiscoveryRequest) {
        self.shared.record(Received {
            request: request.clone(),
            metadata: self.metadata.clone(),
            stream: self.id,
        });
        let stale = self
            .last_nonce
            .as_ref()
            .is_some_and(|nonce| *nonce != request.response_nonce);
        if !stale && request.type_url == TYPE_URL {
            self.waiting = Some(request);
        }
    }

    fn due(&mut self) -> Option<DiscoveryResponse> {
        let request = self.waiting.as_ref()?;
        let node = request
            .node
            .as_ref()
            .map(|n| n.id.as_str())
            .unwrap_or_default();
        let snapshots = self.shared.snapshots.lock().expect("not poisoned");
        let snapshot = snapshots.get(node)?;
        if self.last_nonce.is_some() && snapshot.version == request.version_info {
            return None;
        }
        self.sent += 1;
        let nonce = format!("{}-{}", self.id, self.sent);
        let response = DiscoveryResponse {
            version_info: snapshot.version.clone(),
            resources: snapshot.resources.clone(),
            canary: false,
            type_url: TYPE_URL.to_owned(),
            nonce: nonce.clone(),
        };
        drop(snapshots);
        self.last_nonce = Some(nonce);
        self.waiting = None;
        Some(response)
    }
}
