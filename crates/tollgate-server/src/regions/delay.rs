//! A loopback TCP proxy that delivers every byte a fixed time after it was read, each way: the
//! distance from a region to the global store, on a kernel without `netem`.
//!
//! The test kit's `FaultyLink` does this among other faults, but it is a test helper that
//! panics when it cannot bind and runs a thread of its own; this one reports errors and runs on
//! the demonstration's runtime.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The most bytes read, and then delayed and written, at once.
const CHUNK: usize = 16 * 1024;

/// A running proxy; it stops accepting when dropped.
pub(super) struct DelayedLink {
    address: SocketAddr,
    accepting: JoinHandle<()>,
}

impl DelayedLink {
    /// A proxy to `target` on a free loopback port, delaying each direction by `one_way`.
    pub(super) async fn start(target: SocketAddr, one_way: Duration) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("cannot listen for a delayed link to {target}: {error}"))?;
        let address = listener
            .local_addr()
            .map_err(|error| format!("a delayed link to {target} has no address: {error}"))?;
        let accepting = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        tokio::spawn(carry(client, target, one_way));
                    }
                    // Out of descriptors, say: wait rather than spin.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(Self { address, accepting })
    }

    /// `redis://ADDRESS` of the proxy.
    pub(super) fn url(&self) -> String {
        format!("redis://{}", self.address)
    }
}

impl Drop for DelayedLink {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Carries one connection to `target` until either end closes it.
async fn carry(client: TcpStream, target: SocketAddr, one_way: Duration) {
    let Ok(upstream) = TcpStream::connect(target).await else {
        // The target is gone: the client sees its connection closed.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    tokio::join!(
        delayed_copy(client_read, upstream_write, one_way),
        delayed_copy(upstream_read, client_write, one_way),
    );
}

/// Copies one direction, each chunk written `delay` after it was read, in order; passes the
/// end of the stream on. Reading goes on while earlier chunks wait, so the delay is latency
/// only, not a limit on throughput.
async fn delayed_copy(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buffer = vec![0u8; CHUNK];
        while let Ok(read @ 1..) = from.read(&mut buffer).await {
            if queue
                .send((Instant::now() + delay, buffer[..read].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let writing = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_cross_after_the_delay_each_way() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("a listener");
        let target = echo.local_addr().expect("an address");
        tokio::spawn(async move {
            let (mut stream, _) = echo.accept().await.expect("a connection");
            let mut buffer = [0u8; 4];
            stream.read_exact(&mut buffer).await.expect("four bytes");
            stream.write_all(&buffer).await.expect("echoed");
        });
        let link = DelayedLink::start(target, Duration::from_millis(20))
            .await
            .expect("a link");
        let mut stream = TcpStream::connect(link.address).await.expect("connected");
        let sent = Instant::now();
        stream.write_all(b"ping").await.expect("sent");
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer).await.expect("an answer");
        assert_eq!(&answer, b"ping");
        assert!(
            sent.elapsed() >= Duration::from_millis(40),
            "{:?}",
            sent.elapsed()
        );
    }
}
