//! Writing a request on an upstream connection: its head, then its body framed by
//! `Content-Length` when its size is known and chunked when not.

use std::io;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{Method, header};
use bytes::Bytes;
use futures_util::FutureExt as _;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::tcp::WriteHalf;

use super::connection::Connection;
use super::{SendError, response};

/// Data frames up to this size are copied after what is pending and written with it.
const COALESCE: usize = 16 * 1024;

/// How far a request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Written {
    /// All of it.
    Whole,
    /// The upstream began to answer before the body ended, which was left unsent: the
    /// connection cannot carry another request.
    Cut,
}

/// How a request's body is delimited on the wire.
#[derive(Debug, Clone, Copy)]
enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// Writes the request of `parts` and `body` on `connection`. The upstream's answer, should it
/// start before the body ends, is read onto the connection's buffer.
pub(super) async fn write(
    connection: &mut Connection,
    parts: &Parts,
    body: Body,
) -> Result<Written, SendError> {
    let framing = framing_of(parts, &body);
    let mut pending = head(parts, framing);
    if matches!(framing, Framing::None) {
        connection.stream.write_all(&pending).await?;
        return Ok(Written::Whole);
    }
    let mut rest = Sending {
        body,
        framing,
        sent: 0,
    };
    // What the body has ready goes out with the head, in one write.
    if let Some(frame) = rest.body.frame().now_or_never()
        && encode(frame, framing, &mut rest.sent, &mut pending)?.is_some()
    {
        connection.stream.write_all(&pending).await?;
        return Ok(Written::Whole);
    }
    send_watching(connection, pending, &mut rest).await
}

/// The body still to send.
struct Sending {
    body: Body,
    framing: Framing,
    /// Data bytes sent so far.
    sent: u64,
}

/// Sends `pending`, then the rest of the body, while watching for an answer that starts
/// before it ends (an upstream refusing a large body answers without reading it).
async fn send_watching(
    connection: &mut Connection,
    pending: Vec<u8>,
    rest: &mut Sending,
) -> Result<Written, SendError> {
    let Connection { stream, buffer } = connection;
    let (reader, mut writer) = stream.split();
    let sending = send_rest(&mut writer, pending, rest);
    tokio::pin!(sending);
    loop {
        tokio::select! {
            // An answer that has come is read before more of the body goes.
            biased;
            readable = reader.readable() => {
                readable?;
                match reader.try_read_buf(buffer) {
                    Ok(0) if buffer.is_empty() => {
                        return Err(SendError::Io(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the upstream closed the connection while the request was sent",
                        )));
                    }
                    Ok(0) => return Ok(Written::Cut),
                    // A `100 Continue` is the upstream asking for the body, not answering.
                    Ok(_) if response::final_head_waits(buffer) => return Ok(Written::Cut),
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) => return Err(error.into()),
                }
            }
            sent = &mut sending => return sent.map(|()| Written::Whole),
        }
    }
}

async fn send_rest(
    writer: &mut WriteHalf<'_>,
    mut pending: Vec<u8>,
    rest: &mut Sending,
) -> Result<(), SendError> {
    loop {
        if !pending.is_empty() {
            writer.write_all(&pending).await?;
            pending.clear();
        }
        let frame = rest.body.frame().await;
        match encode(frame, rest.framing, &mut rest.sent, &mut pending)? {
            Some(()) => {
                writer.write_all(&pending).await?;
                return Ok(());
            }
            None if pending.len() > COALESCE => {
                writer.write_all(&pending).await?;
                pending.clear();
            }
            None => {}
        }
    }
}

/// Appends `frame` as `framing` writes it to `out`, counting data in `sent`; `Some` once the
/// body has ended (its end written too).
fn encode(
    frame: Option<Result<http_body::Frame<Bytes>, axum::Error>>,
    framing: Framing,
    sent: &mut u64,
    out: &mut Vec<u8>,
) -> Result<Option<()>, SendError> {
    let short = |sent: u64, length: u64| {
        SendError::RequestBody(format!(
            "the request's body ended after {sent} of the {length} bytes its Content-Length gives"
        ))
    };
    let Some(frame) = frame else {
        match framing {
            Framing::Length(length) if *sent != length => return Err(short(*sent, length)),
            Framing::Chunked => out.extend_from_slice(b"0\r\n\r\n"),
            _ => {}
        }
        return Ok(Some(()));
    };
    let frame = frame.map_err(|error| SendError::RequestBody(error.to_string()))?;
    match frame.into_data() {
        Ok(data) => {
            *sent += data.len() as u64;
            match framing {
                Framing::Length(length) if *sent > length => {
                    return Err(SendError::RequestBody(format!(
                        "the request's body is longer than the {length} bytes its Content-Length gives"
                    )));
                }
                Framing::Chunked if data.is_empty() => {}
                Framing::Chunked => {
                    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                    out.extend_from_slice(&data);
                    out.extend_from_slice(b"\r\n");
                }
                _ => out.extend_from_slice(&data),
            }
            Ok(None)
        }
        Err(frame) => {
            let Ok(trailers) = frame.into_trailers() else {
                return Ok(None);
            };
            match framing {
                Framing::Length(length) if *sent != length => Err(short(*sent, length)),
                Framing::Chunked => {
                    out.extend_from_slice(b"0\r\n");
                    for (name, value) in &trailers {
                        push_field(out, name.as_str().as_bytes(), value.as_bytes());
                    }
                    out.extend_from_slice(b"\r\n");
                    Ok(Some(()))
                }
                // A body of known length has nowhere to put trailers (as hyper's client).
                _ => Ok(Some(())),
            }
        }
    }
}

/// How the body goes: by its length when known, chunked when not, and not at all when there
/// is none (a `Content-Length: 0` kept for a method that carries a body).
fn framing_of(parts: &Parts, body: &Body) -> Framing {
    match body.size_hint().exact() {
        Some(0)
            if body.is_end_stream()
                && !parts.headers.contains_key(header::CONTENT_LENGTH)
                && !matches!(parts.method, Method::POST | Method::PUT | Method::PATCH) =>
        {
            Framing::None
        }
        Some(0) if body.is_end_stream() => Framing::Length(0),
        Some(length) => Framing::Length(length),
        None => Framing::Chunked,
    }
}

/// The request line and fields. The method, target, names and values were checked when they
/// were parsed (none holds a line break); the framing fields are written from `framing`.
fn head(parts: &Parts, framing: Framing) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        push_field(&mut out, name.as_str().as_bytes(), value.as_bytes());
    }
    match framing {
        Framing::None => {}
        Framing::Length(length) => push_field(
            &mut out,
            b"content-length",
            itoa::Buffer::new().format(length).as_bytes(),
        ),
        Framing::Chunked => push_field(&mut out, b"transfer-encoding", b"chunked"),
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
