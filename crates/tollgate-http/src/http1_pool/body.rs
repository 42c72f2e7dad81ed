//! A response body read off its upstream connection as the client's side asks for it; read
//! to its end, it gives the connection back to the pool.

use std::io;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, ready};

use axum::http::HeaderMap;
use bytes::{Buf as _, Bytes};
use http_body::{Frame, SizeHint};

use super::Http1Pool;
use super::connection::Connection;
use super::response::{BodyFraming, MAX_FIELDS, MAX_HEAD, field_map};

/// The longest chunk-size line read (the size, and any extensions, which are ignored).
const MAX_CHUNK_LINE: usize = 4 * 1024;

/// Where in the body the next byte is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `left` bytes of a body of known length.
    Length { left: u64 },
    /// Before a chunk's size line.
    ChunkSize,
    /// Inside a chunk, `left` bytes to go.
    ChunkData { left: u64 },
    /// The line end after a chunk's data.
    ChunkEnd,
    /// After the last chunk: trailer fields, or the empty line.
    Trailers,
    /// Until the upstream closes.
    UntilClose,
    /// Read to its end.
    Done,
}

/// The body of one response.
pub(super) struct UpstreamBody {
    connection: Option<Connection>,
    place: Place,
    /// Whether the connection may carry another request after this body.
    keep_alive: bool,
    pool: Weak<Http1Pool>,
}

impl UpstreamBody {
    pub(super) fn new(
        connection: Connection,
        framing: BodyFraming,
        keep_alive: bool,
        pool: Weak<Http1Pool>,
    ) -> Self {
        let place = match framing {
            BodyFraming::Empty | BodyFraming::Length(0) => Place::Done,
            BodyFraming::Length(left) => Place::Length { left },
            BodyFraming::Chunked => Place::ChunkSize,
            BodyFraming::UntilClose => Place::UntilClose,
        };
        Self {
            connection: Some(connection),
            place,
            keep_alive,
            pool,
        }
    }

    /// The body's end: the connection goes back if nothing follows it on the wire.
    fn finish(&mut self) {
        self.place = Place::Done;
        let Some(connection) = self.connection.take() else {
            return;
        };
        if self.keep_alive
            && connection.buffer.is_empty()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.put(connection);
        }
    }

    /// Reads more; `what` names the part of the body the connection ended inside.
    fn poll_more(
        connection: &mut Connection,
        context: &mut Context<'_>,
        what: &str,
    ) -> Poll<io::Result<()>> {
        match ready!(connection.poll_fill(context)) {
            Ok(0) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the upstream closed the connection inside the response's {what}"),
            ))),
            Ok(_) => Poll::Ready(Ok(())),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

/// Up to `left` bytes of what is buffered.
fn take(connection: &mut Connection, left: &mut u64) -> Bytes {
    let n = usize::try_from(*left).map_or(connection.buffer.len(), |left| {
        left.min(connection.buffer.len())
    });
    *left -= n as u64;
    connection.buffer.split_to(n).freeze()
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            let place = this.place;
            let Some(connection) = this.connection.as_mut() else {
                return Poll::Ready(None);
            };
            let buffered = !connection.buffer.is_empty();
            match place {
                Place::Done => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Place::Length { mut left } | Place::ChunkData { mut left } if buffered => {
                    let data = take(connection, &mut left);
                    this.place = match (place, left) {
                        (Place::Length { .. }, 0) => Place::Done,
                        (Place::Length { .. }, left) => Place::Length { left },
                        (_, 0) => Place::ChunkEnd,
                        (_, left) => Place::ChunkData { left },
                    };
                    if this.place == Place::Done {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Place::UntilClose if buffered => {
                    let data = connection.buffer.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Place::UntilClose => match ready!(connection.poll_fill(context)) {
                    Ok(0) => {
                        this.keep_alive = false;
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(_) => {}
                    Err(error) => return Poll::Ready(Some(Err(error))),
                },
                Place::Length { .. } | Place::ChunkData { .. } => {
                    ready!(Self::poll_more(connection, context, "body"))?;
                }
                Place::ChunkSize => match chunk_size(connection) {
                    Ok(Some(next)) => this.place = next,
                    Ok(None) => ready!(Self::poll_more(connection, context, "chunk size"))?,
                    Err(error) => return Poll::Ready(Some(Err(error))),
                },
                Place::ChunkEnd if connection.buffer.len() >= 2 => {
                    if connection.buffer[..2] != *b"\r\n" {
                        return Poll::Ready(Some(Err(invalid(
                            "a chunk not ended by a line break".to_owned(),
                        ))));
                    }
                    connection.buffer.advance(2);
                    this.place = Place::ChunkSize;
                }
                Place::ChunkEnd => ready!(Self::poll_more(connection, context, "chunk"))?,
                Place::Trailers => match trailers(connection)? {
                    Some(fields) => {
                        this.finish();
                        return Poll::Ready(
                            (!fields.is_empty()).then(|| Ok(Frame::trailers(fields))),
                        );
                    }
                    None => ready!(Self::poll_more(connection, context, "trailers"))?,
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.place == Place::Done
    }

    fn size_hint(&self) -> SizeHint {
        match self.place {
            Place::Length { left } => SizeHint::with_exact(left),
            Place::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// A chunk's size line off the buffer, if all of it is there: where the body goes next.
fn chunk_size(connection: &mut Connection) -> io::Result<Option<Place>> {
    match httparse::parse_chunk_size(&connection.buffer) {
        Ok(httparse::Status::Complete((used, size))) => {
            connection.buffer.advance(used);
            Ok(Some(if size == 0 {
                Place::Trailers
            } else {
                Place::ChunkData { left: size }
            }))
        }
        Ok(httparse::Status::Partial) if connection.buffer.len() > MAX_CHUNK_LINE => Err(invalid(
            format!("a chunk-size line longer than {MAX_CHUNK_LINE} bytes"),
        )),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(invalid("an unreadable chunk size".to_owned())),
    }
}

/// The trailer section after the last chunk, if all of it is buffered (taken off the buffer).
fn trailers(connection: &mut Connection) -> io::Result<Option<HeaderMap>> {
    if connection.buffer.starts_with(b"\r\n") {
        connection.buffer.advance(2);
        return Ok(Some(HeaderMap::new()));
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    match httparse::parse_headers(&connection.buffer, &mut fields) {
        Ok(httparse::Status::Complete((used, fields))) => {
            let trailers = field_map(fields, 0, "trailer").map_err(invalid)?;
            connection.buffer.advance(used);
            Ok(Some(trailers))
        }
        Ok(httparse::Status::Partial) if connection.buffer.len() > MAX_HEAD => Err(invalid(
            format!("trailers longer than {} KiB", MAX_HEAD / 1024),
        )),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(error) => Err(invalid(format!("unreadable trailers: {error}"))),
    }
}
