//! A TCP proxy that misbehaves on command: the bad network between Tollgate and Redis, for
//! tests on a kernel without `netem`.
//!
//! Written here rather than taken from crates.io: `noxious`, the in-process Toxiproxy port,
//! still depends on tokio-util 0.6 and rand 0.8, `tokio-netem` wraps one stream rather than
//! proxying, and the rest drive an external Toxiproxy server. This one is small, deterministic
//! (no randomness) and runs on a thread and runtime of its own, so a test's runtime being busy
//! or blocked never slows the network down.
//!
//! Faults and what they model:
//! - latency: each chunk is delivered `latency` after it was read, in order, both ways;
//! - stall: nothing is read or written; bytes wait (in the kernel's buffers or the proxy's
//!   queue) and are delivered in order on resume, as TCP delivers across a short outage;
//! - reset: every current connection is closed with an RST, both ways;
//! - partition: a black hole, as a partition drops packets: nothing crosses existing
//!   connections, and new ones are accepted (the kernel completes the handshake of a listening
//!   socket) but never connected to the target, so the client gets no answer at all. `heal`
//!   resets every connection the partition held, as a partition that outlasted them would
//!   leave them dead, and forwards new connections again: the client must reconnect.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::ports::free_port;
use crate::server::RedisServer;

/// How many ports to try before giving up on a listener.
const BIND_ATTEMPTS: usize = 20;
/// The most bytes read (and then delayed and written) at once.
const CHUNK: usize = 16 * 1024;

/// The faults in force; every connection watches them.
#[derive(Debug, Clone, Default)]
struct Faults {
    latency: Duration,
    stalled: bool,
    partitioned: bool,
    /// Bumped to reset every connection accepted before.
    generation: u64,
    closing: bool,
}

impl Faults {
    /// Whether bytes may cross a connection of `generation`: never again once it is to be
    /// reset, so that nothing a partition held slips through as it heals.
    fn flowing(&self, generation: u64) -> bool {
        !self.stalled && !self.partitioned && self.generation == generation
    }
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    open: AtomicU64,
}

/// A loopback TCP proxy to one target whose faults the test sets at run time; its thread and
/// every connection stop when it is dropped.
#[derive(Debug)]
pub struct FaultyLink {
    port: u16,
    faults: watch::Sender<Faults>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl FaultyLink {
    /// A link to `server`.
    pub fn in_front_of(server: &RedisServer) -> Self {
        Self::to(SocketAddr::from(([127, 0, 0, 1], server.port())))
    }

    /// A link to `target`, listening on a free loopback port (see [`free_port`]).
    pub fn to(target: SocketAddr) -> Self {
        let (listener, port) = bind();
        let (faults, watched) = watch::channel(Faults::default());
        let counters = Arc::new(Counters::default());
        let shared = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name(format!("faulty-link-{port}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the faulty link");
                runtime.block_on(serve(listener, target, watched, shared));
                // Dropping the runtime drops every connection task, closing its sockets.
            })
            .expect("a thread for the faulty link");
        Self {
            port,
            faults,
            counters,
            thread: Some(thread),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every chunk by `latency` in each direction from now on (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        self.faults.send_modify(|faults| faults.latency = latency);
    }

    /// Forwards nothing, either way, until [`resume`](Self::resume); connections stay open and
    /// their bytes are held.
    pub fn stall(&self) {
        self.faults.send_modify(|faults| faults.stalled = true);
    }

    /// Delivers what a stall held, in order, and forwards again.
    pub fn resume(&self) {
        self.faults.send_modify(|faults| faults.stalled = false);
    }

    /// Closes every current connection with a TCP RST to both ends; new ones are forwarded.
    pub fn reset_all(&self) {
        self.faults.send_modify(|faults| faults.generation += 1);
    }

    /// Black-holes every connection, current and new, until [`heal`](Self::heal).
    pub fn partition(&self) {
        self.faults.send_modify(|faults| faults.partitioned = true);
    }

    /// Ends a partition: the connections it held are reset, new ones are forwarded.
    pub fn heal(&self) {
        self.faults.send_modify(|faults| {
            faults.partitioned = false;
            faults.generation += 1;
        });
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> u64 {
        self.counters.open.load(Ordering::Relaxed)
    }
}

impl Drop for FaultyLink {
    fn drop(&mut self) {
        self.faults.send_modify(|faults| faults.closing = true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A listener on a free loopback port below the ephemeral range.
fn bind() -> (StdListener, u16) {
    for _ in 0..BIND_ATTEMPTS {
        let port = free_port();
        if let Ok(listener) = StdListener::bind(("127.0.0.1", port)) {
            listener
                .set_nonblocking(true)
                .expect("a non-blocking listener");
            return (listener, port);
        }
    }
    panic!("no free loopback port for a faulty link after {BIND_ATTEMPTS} attempts")
}

/// Accepts connections until the link is dropped.
async fn serve(
    listener: StdListener,
    target: SocketAddr,
    faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    let listener = TcpListener::from_std(listener).expect("a listener on the link's runtime");
    let mut closing = faults.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    // Out of descriptors, say: wait rather than spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let generation = faults.borrow().generation;
                counters.accepted.fetch_add(1, Ordering::Relaxed);
                let (faults, counters) = (faults.clone(), Arc::clone(&counters));
                tokio::spawn(async move {
                    counters.open.fetch_add(1, Ordering::Relaxed);
                    carry(client, target, generation, faults).await;
                    counters.open.fetch_sub(1, Ordering::Relaxed);
                });
            }
            _ = closing.wait_for(|faults| faults.closing) => return,
        }
    }
}

/// Resolves once the connections of `generation` are to be reset.
async fn doomed(mut faults: watch::Receiver<Faults>, generation: u64) {
    let _ = faults
        .wait_for(|faults| faults.generation != generation)
        .await;
}

/// Carries one connection to the target until either end closes it or it is reset.
async fn carry(
    mut client: TcpStream,
    target: SocketAddr,
    generation: u64,
    faults: watch::Receiver<Faults>,
) {
    let mut open = faults.clone();
    let connect = async {
        // A partitioned link never reaches the target.
        let reachable = open
            .wait_for(|faults| !faults.partitioned && faults.generation == generation)
            .await
            .is_ok();
        if !reachable {
            return None;
        }
        TcpStream::connect(target).await.ok()
    };
    let upstream = tokio::select! {
        biased;
        () = doomed(faults.clone(), generation) => {
            reset(&client);
            return;
        }
        upstream = connect => upstream,
    };
    let Some(mut upstream) = upstream else {
        // The target is gone: the client sees its connection closed, as it would be by a proxy.
        return;
    };
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let killed = {
        let (client_read, client_write) = client.split();
        let (upstream_read, upstream_write) = upstream.split();
        let both_ways = async {
            tokio::join!(
                pipe(client_read, upstream_write, generation, faults.clone()),
                pipe(upstream_read, client_write, generation, faults.clone()),
            )
        };
        tokio::select! {
            biased;
            () = doomed(faults.clone(), generation) => true,
            _ = both_ways => false,
        }
    };
    if killed {
        reset(&client);
        reset(&upstream);
    }
}

/// Makes dropping `stream` send an RST instead of a FIN.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Copies one direction, each chunk delivered `latency` after it was read and only while the
/// link flows; passes the end of the stream on.
async fn pipe(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    generation: u64,
    faults: watch::Receiver<Faults>,
) {
    let flowing = move |faults: &Faults| faults.flowing(generation);
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut reader_faults = faults.clone();
    let reading = async move {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            if reader_faults.wait_for(flowing).await.is_err() {
                return;
            }
            match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    let due = Instant::now() + reader_faults.borrow().latency;
                    if queue.send((due, buffer[..read].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let mut writer_faults = faults;
    let writing = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if writer_faults.wait_for(flowing).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}
