//! Reading the upstream's response head, and from it how its body is delimited (RFC 9112
//! §6.3). Anything that leaves the body's end in doubt is an error, never a guess: a proxy that
//! reads a response's end differently from its upstream hands one client's bytes to another.

use std::mem::MaybeUninit;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version, header};
use bytes::{Buf as _, BytesMut};

use super::SendError;
use super::connection::Connection;

/// The longest response head read, and the most fields in it.
pub(super) const MAX_HEAD: usize = 64 * 1024;
pub(super) const MAX_FIELDS: usize = 128;
/// Fields the proxy may add to an answer: the rate-limit fields of every family.
const ADDED_FIELDS: usize = 8;
/// The most interim (1xx) responses skipped before the final one.
const MAX_INTERIM: usize = 16;

/// How a response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyFraming {
    /// No body (a `HEAD` request, `1xx`, `204`, `304`).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

/// A final response head.
pub(super) struct Head {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) framing: BodyFraming,
    /// Whether the connection can carry another request once the body is read.
    pub(super) keep_alive: bool,
}

/// Reads the final response head to a request of `method`, skipping interim ones. A
/// connection that closes before a byte of an answer is [`SendError::Unanswered`]: a request
/// sent on a connection the upstream had just closed may go again on another.
pub(super) async fn read_head(
    connection: &mut Connection,
    method: &Method,
) -> Result<Head, SendError> {
    let mut interim = 0;
    let mut answered = false;
    loop {
        if !connection.buffer.is_empty()
            && let Some(head) = parse(connection, method)?
        {
            if !head.status.is_informational() {
                return Ok(head);
            }
            interim += 1;
            if interim > MAX_INTERIM {
                return Err(malformed(format!(
                    "more than {MAX_INTERIM} interim (1xx) responses"
                )));
            }
            continue;
        }
        if connection.buffer.len() >= MAX_HEAD {
            return Err(malformed(format!(
                "a response head longer than {} KiB",
                MAX_HEAD / 1024
            )));
        }
        answered |= !connection.buffer.is_empty();
        match connection.fill().await {
            Ok(0) if !answered => return Err(SendError::Unanswered),
            Ok(0) => {
                return Err(malformed(
                    "the connection closed inside the response head".to_owned(),
                ));
            }
            Ok(_) => {}
            Err(error) if !answered => return Err(error.into()),
            Err(error) => {
                return Err(malformed(format!(
                    "the connection failed inside the response head: {error}"
                )));
            }
        }
    }
}

/// Whether a whole final head waits at the front of `buffer`, read while a request's body is
/// still being sent; interim heads before it are taken off.
pub(super) fn final_head_waits(buffer: &mut BytesMut) -> bool {
    loop {
        let mut fields = [const { MaybeUninit::uninit() }; MAX_FIELDS];
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            buffer,
            &mut fields,
        );
        match parsed {
            Ok(httparse::Status::Complete(length))
                if response
                    .code
                    .is_some_and(|code| (100..200).contains(&code) && code != 101) =>
            {
                buffer.advance(length);
            }
            Ok(httparse::Status::Complete(_)) => return true,
            Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => return false,
            // Too long or unreadable: what `read_head` makes of it is the answer.
            _ => return true,
        }
    }
}

/// One head off the front of the buffer, if all of it is there.
fn parse(connection: &mut Connection, method: &Method) -> Result<Option<Head>, SendError> {
    // Left uninitialised: filling 128 empty fields costs more than parsing a small head.
    let mut fields = [const { MaybeUninit::uninit() }; MAX_FIELDS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        &connection.buffer,
        &mut fields,
    );
    let length = match parsed {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(malformed(format!(
                "a response head with more than {MAX_FIELDS} fields"
            )));
        }
        Err(error) => return Err(malformed(format!("an unreadable response head: {error}"))),
    };
    let code = response.code.unwrap_or_default();
    let status =
        StatusCode::from_u16(code).map_err(|_| malformed(format!("the status code {code}")))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(malformed(
            "a protocol switch it was not asked for".to_owned(),
        ));
    }
    let version = if response.version == Some(1) {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    // With room for the rate-limit fields the proxy adds, which would otherwise grow the map.
    let headers = field_map(response.headers, ADDED_FIELDS, "field").map_err(malformed)?;
    connection.buffer.advance(length);
    let framing = framing(method, status, version, &headers)?;
    let keep_alive = version == Version::HTTP_11
        && framing != BodyFraming::UntilClose
        && !has_token(&headers, &header::CONNECTION, "close");
    Ok(Some(Head {
        status,
        headers,
        framing,
        keep_alive,
    }))
}

/// Parsed fields (of a head, or trailers, as `what` says) as a map with `room` to spare; an
/// error names what is not a valid field.
pub(super) fn field_map(
    fields: &[httparse::Header<'_>],
    room: usize,
    what: &str,
) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::with_capacity(fields.len() + room);
    for field in fields {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| format!("the {what} name {:?}", field.name))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| format!("the value of the {what} {name}"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// RFC 9112 §6.3, strictly: both `Transfer-Encoding` and `Content-Length`, a
/// `Transfer-Encoding` in HTTP/1.0, or `Content-Length` values that disagree are errors.
fn framing(
    method: &Method,
    status: StatusCode,
    version: Version,
    headers: &HeaderMap,
) -> Result<BodyFraming, SendError> {
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(BodyFraming::Empty);
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        if headers.contains_key(header::CONTENT_LENGTH) {
            return Err(malformed(
                "both Transfer-Encoding and Content-Length".to_owned(),
            ));
        }
        if version != Version::HTTP_11 {
            return Err(malformed(
                "Transfer-Encoding in an HTTP/1.0 response".to_owned(),
            ));
        }
        let last = headers
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .flat_map(|value| value.as_bytes().split(|&byte| byte == b','))
            .map(<[u8]>::trim_ascii)
            .rfind(|coding| !coding.is_empty());
        return Ok(match last {
            Some(coding) if coding.eq_ignore_ascii_case(b"chunked") => BodyFraming::Chunked,
            _ => BodyFraming::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&byte| byte == b',') {
            let part = part.trim_ascii();
            let parsed = (!part.is_empty() && part.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(part).ok()?.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| malformed(format!("the Content-Length {:?}", value)))?;
            if length.is_some_and(|earlier| earlier != parsed) {
                return Err(malformed("Content-Length values that disagree".to_owned()));
            }
            length = Some(parsed);
        }
    }
    Ok(length.map_or(BodyFraming::UntilClose, BodyFraming::Length))
}

/// Whether a comma-separated field `name` holds `token` (any case).
fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&byte| byte == b','))
        .any(|part| part.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

fn malformed(what: String) -> SendError {
    SendError::Malformed(what)
}
