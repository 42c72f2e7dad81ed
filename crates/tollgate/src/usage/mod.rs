//! Charging what a response says its request used: a policy with `usage` charges its cost up
//! front as an estimate, a [`UsageMeter`] reads the real figure from the response as it passes
//! (a header, a trailer, or a member of a JSON body or of server-sent events), and
//! [`Limiter::settle_usage`](crate::Limiter::settle_usage) settles the difference when the
//! response has ended. A response cut short keeps its estimate.

mod events;
mod members;

use std::sync::Arc;

use smallvec::SmallVec;

use self::events::Events;
use self::members::Members;
use crate::policy::{Evaluation, Role, UsageConfig, UsageSource};

/// What one policy's response reported.
#[derive(Debug, Clone)]
struct Watch {
    policy: Arc<str>,
    usage: Arc<UsageConfig>,
    reading: Option<u64>,
}

/// How the body is read, once its type is known.
#[derive(Debug)]
enum BodyReader {
    /// Not at all: no policy reads it, or it is neither JSON nor an event stream.
    Ignored,
    /// One JSON document.
    Json(Members),
    /// Server-sent events, each a JSON document.
    Events(Events),
}

/// Reads the usage of one admitted request's response for the policies that ask for it.
#[derive(Debug)]
pub struct UsageMeter {
    watches: SmallVec<[Watch; 2]>,
    /// The distinct first names of the body paths that the watches read.
    members: Vec<String>,
    body: BodyReader,
    ended: bool,
}

/// The usage figures of a response that ended, by policy, ready to settle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub(crate) readings: SmallVec<[(Arc<str>, u64); 2]>,
}

impl Usage {
    /// What the response reported for `policy`, capped by the policy's `usage.max`.
    pub fn of(&self, policy: &str) -> Option<u64> {
        self.readings
            .iter()
            .find(|(name, _)| &**name == policy)
            .map(|(_, reading)| *reading)
    }

    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        self.readings.is_empty()
    }
}

impl Evaluation {
    /// A meter for this request's response, whose status is `status`, when an admitted request
    /// has policies that charge by usage (and that do not refund that status: a refunded
    /// request has nothing left to settle).
    pub fn usage_meter(&self, status: u16) -> Option<UsageMeter> {
        let mut watches: SmallVec<[Watch; 2]> = SmallVec::new();
        for charge in &self.charges {
            if charge.role != Role::Limit
                || charge.refunds_on(status)
                || watches.iter().any(|w| w.policy == charge.policy)
            {
                continue;
            }
            if let Some(usage) = &charge.usage {
                watches.push(Watch {
                    policy: Arc::clone(&charge.policy),
                    usage: Arc::clone(usage),
                    reading: None,
                });
            }
        }
        if watches.is_empty() {
            return None;
        }
        let mut members: Vec<String> = Vec::new();
        for watch in &watches {
            if let UsageSource::Body(path) = &watch.usage.source
                && !members.contains(&path[0])
            {
                members.push(path[0].clone());
            }
        }
        Some(UsageMeter {
            watches,
            members,
            body: BodyReader::Ignored,
            ended: false,
        })
    }
}

impl Evaluation {
    /// Whether a policy of this admitted request reads its usage from the response body, which
    /// must then come uncompressed (a gateway asks for it so by dropping `Accept-Encoding`).
    pub fn reads_response_body(&self) -> bool {
        self.charges.iter().any(|charge| {
            charge.role == Role::Limit
                && charge
                    .usage
                    .as_ref()
                    .is_some_and(|usage| matches!(usage.source, UsageSource::Body(_)))
        })
    }
}

/// A field's value as a count: ASCII digits, spaces around them allowed.
fn count(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

impl UsageMeter {
    /// Reads the response head: the header sources, and the content type that says how the
    /// body is read (`application/json` or `+json` as one document, `text/event-stream` as
    /// events; anything else, or a compressed body, is not read).
    pub fn head<'h>(&mut self, field: impl Fn(&str) -> Option<&'h [u8]>) {
        self.fields(&field, |source| match source {
            UsageSource::Header(name) => Some(name),
            _ => None,
        });
        let compressed = field("content-encoding")
            .is_some_and(|coding| !coding.eq_ignore_ascii_case(b"identity"));
        if self.members.is_empty() || compressed {
            return;
        }
        let content_type = field("content-type")
            .and_then(|value| std::str::from_utf8(value).ok())
            .map(|value| {
                value
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .unwrap_or_default();
        let members = Members::new(self.members.clone());
        self.body = if content_type == "text/event-stream" {
            BodyReader::Events(Events::new(members))
        } else if content_type == "application/json" || content_type.ends_with("+json") {
            BodyReader::Json(members)
        } else {
            BodyReader::Ignored
        };
    }

    /// Reads a piece of the body.
    pub fn data(&mut self, bytes: &[u8]) {
        let Self {
            watches,
            members,
            body,
            ..
        } = self;
        let mut found = |index: usize, value: &[u8]| record(watches, &members[index], value);
        match body {
            BodyReader::Ignored => {}
            BodyReader::Json(scanner) => scanner.feed(bytes, &mut found),
            BodyReader::Events(events) => events.feed(bytes, &mut found),
        }
    }

    /// Reads the trailers.
    pub fn trailers<'t>(&mut self, field: impl Fn(&str) -> Option<&'t [u8]>) {
        self.fields(field, |source| match source {
            UsageSource::Trailer(name) => Some(name),
            _ => None,
        });
    }

    /// The response turned out to fail with `status` after all (a gRPC error in its
    /// trailers): the policies that refund it stop settling, since their charge is given back.
    pub fn refunded(&mut self, evaluation: &Evaluation, status: u16) {
        self.watches.retain(|watch| {
            !evaluation
                .charges
                .iter()
                .any(|c| c.policy == watch.policy && c.refunds_on(status))
        });
    }

    /// The response has ended, whole: what it reported can be settled.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// What to settle: the figures read, if the response ended whole. A response that was cut
    /// (its body failed or was dropped) settles nothing, and its estimate stands.
    pub fn usage(&self) -> Option<Usage> {
        if !self.ended {
            return None;
        }
        let readings: SmallVec<[(Arc<str>, u64); 2]> = self
            .watches
            .iter()
            .filter_map(|w| Some((Arc::clone(&w.policy), w.reading?.min(w.usage.max))))
            .collect();
        (!readings.is_empty()).then_some(Usage { readings })
    }

    fn fields<'f>(
        &mut self,
        field: impl Fn(&str) -> Option<&'f [u8]>,
        name: impl Fn(&UsageSource) -> Option<&String>,
    ) {
        for watch in &mut self.watches {
            if let Some(value) = name(&watch.usage.source).and_then(|name| field(name))
                && let Some(reading) = count(value)
            {
                watch.reading = Some(reading);
            }
        }
    }
}

/// Takes a captured body member's value as the reading of every watch whose path it holds a
/// count at. A member that is not there (or `null`, as in the events before the last) leaves
/// the reading as it was.
fn record(watches: &mut [Watch], member: &str, value: &[u8]) {
    let Ok(value) = crate::json::from_slice::<serde_json::Value>(value) else {
        return;
    };
    for watch in watches {
        let UsageSource::Body(path) = &watch.usage.source else {
            continue;
        };
        if path[0] != member {
            continue;
        }
        let reading = path[1..]
            .iter()
            .try_fold(&value, |value, name| value.get(name))
            .and_then(serde_json::Value::as_u64);
        if reading.is_some() {
            watch.reading = reading;
        }
    }
}
