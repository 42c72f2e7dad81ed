//! One HTTP/1.1 connection to the upstream, read and written by the request that holds it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use tokio::net::TcpStream;

/// How much room each read asks for.
const READ_ROOM: usize = 8 * 1024;

/// A connection and what was read from it but not yet taken.
pub(crate) struct Connection {
    pub(super) stream: TcpStream,
    pub(super) buffer: BytesMut,
}

impl Connection {
    /// Connects to `address` (`host:port`, resolved now).
    pub(super) async fn open(address: &str) -> io::Result<Self> {
        let stream = TcpStream::connect(address).await?;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            buffer: BytesMut::new(),
        })
    }

    /// Whether an idle connection can carry a request: the upstream neither closed it nor
    /// sent anything unasked. Read from the readiness the runtime already knows, so an open
    /// connection costs no system call.
    pub(super) fn is_open(&mut self) -> bool {
        let mut context = Context::from_waker(Waker::noop());
        match self.stream.poll_read_ready(&mut context) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.stream.try_read(&mut probe),
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Reads what the upstream sent next onto the buffer: the bytes read, 0 at its end. A read
    /// that leaves the socket empty clears its readiness, so the next look at an idle
    /// connection ([`Connection::is_open`]) or the next read waits without a system call.
    pub(super) fn poll_fill(&mut self, context: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buffer.reserve(READ_ROOM);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), context, &mut self.buffer)
    }

    /// [`Connection::poll_fill`] as a future.
    pub(super) async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|context| self.poll_fill(context)).await
    }
}
