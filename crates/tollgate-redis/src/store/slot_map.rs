//! Which master holds each hash slot, as the cluster last said (`CLUSTER SLOTS`), so that the
//! batcher can put checks of several slots held by one master into one call.
//!
//! The map is only a hint: Redis itself refuses a call that reaches a key its node does not
//! hold (a slot moved since), before the call has written anything, and the batcher then sends
//! those checks again slot by slot and has the map read anew. Reads are rate-limited, so a
//! cluster in the middle of a resharding is not asked for its slots on every call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::Value;
use redis::cluster_routing::Slot;

use super::connection::Connection;
use tollgate_core::clock::Stopwatch;

/// The least time from a read of the cluster's slots to the next.
const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// The least time from a read that failed (not connected yet, say) to the next.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// The longest a read may take; one that takes longer failed.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Slots by the master that holds them, each master named by a small number.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotMap {
    owners: HashMap<Slot, u16>,
}

impl SlotMap {
    /// The master that holds `slot`, if the map knows.
    pub(crate) fn owner(&self, slot: Slot) -> Option<u16> {
        self.owners.get(&slot).copied()
    }

    /// Reads a `CLUSTER SLOTS` reply: per range its first and last slot and its master's
    /// address first among its nodes. `None` for a reply of another shape.
    pub(crate) fn from_reply(reply: &Value) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut masters: Vec<(Vec<u8>, i64)> = Vec::new();
        let mut owners = HashMap::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let (Some(Value::BulkString(host)), Some(Value::Int(port))) =
                (master.first(), master.get(1))
            else {
                return None;
            };
            let address = (host.clone(), *port);
            let index = match masters.iter().position(|known| *known == address) {
                Some(index) => index,
                None => {
                    masters.push(address);
                    masters.len() - 1
                }
            };
            let index = u16::try_from(index).ok()?;
            for number in u16::try_from(*first).ok()?..=u16::try_from(*last).ok()? {
                owners.insert(Slot::new(number)?, index);
            }
        }
        Some(Self { owners })
    }
}

/// The map as last read, and the reading of a new one.
#[derive(Default)]
pub(crate) struct Owners {
    current: RwLock<Option<Arc<SlotMap>>>,
    reading: AtomicBool,
    /// Since when the last read ended, and how long it makes the next one wait.
    last_read: Mutex<Option<(Stopwatch, Duration)>>,
}

impl Owners {
    /// The map as last read, if one was.
    pub(crate) fn get(&self) -> Option<Arc<SlotMap>> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Reads the map anew in the background, unless a read is under way or the last one
    /// ended less than [`REFRESH_INTERVAL`] ago ([`RETRY_INTERVAL`] if it failed).
    pub(crate) fn refresh(self: &Arc<Self>, connection: &Connection) {
        let too_soon = self
            .last_read
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .is_some_and(|(ended, wait)| ended.elapsed() < *wait);
        if too_soon || self.reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let owners = Arc::clone(self);
        let mut connection = connection.clone();
        tokio::spawn(async move {
            let mut command = redis::cmd("CLUSTER");
            command.arg("SLOTS");
            let query = command.query_async::<Value>(&mut connection);
            let reply = tokio::time::timeout(READ_TIMEOUT, query)
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {READ_TIMEOUT:?}"),
                    )
                    .into())
                });
            let mut wait = RETRY_INTERVAL;
            match reply.as_ref().map(SlotMap::from_reply) {
                Ok(Some(map)) => {
                    *owners
                        .current
                        .write()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::new(map));
                    wait = REFRESH_INTERVAL;
                }
                // Without a map, checks go slot by slot as before.
                Ok(None) => tracing::debug!(
                    target: "tollgate::store",
                    "CLUSTER SLOTS answered in an unexpected shape; checks go slot by slot"
                ),
                Err(error) => tracing::debug!(
                    target: "tollgate::store",
                    "CLUSTER SLOTS failed ({}); checks go slot by slot",
                    crate::redact_credentials(&error.to_string())
                ),
            }
            *owners
                .last_read
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) =
                Some((Stopwatch::start(), wait));
            owners.reading.store(false, Ordering::Release);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn ranges_map_to_their_masters_and_replicas_are_not_owners() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(100),
                Value::Int(100),
                node("10.0.0.1", 7000),
            ]),
        ]);
        let map = SlotMap::from_reply(&reply).expect("a map");
        let slot = |number| Slot::new(number).expect("a slot");
        assert_eq!(map.owner(slot(0)), Some(0));
        assert_eq!(map.owner(slot(5460)), Some(0));
        assert_eq!(map.owner(slot(5461)), Some(1));
        assert_eq!(map.owner(slot(16383)), Some(1));
        assert_eq!(map.owner(slot(100)), Some(0));
    }

    #[test]
    fn a_reply_of_another_shape_is_no_map() {
        assert_eq!(SlotMap::from_reply(&Value::Int(1)), None);
        let short = Value::Array(vec![Value::Array(vec![Value::Int(0)])]);
        assert_eq!(SlotMap::from_reply(&short), None);
        let beyond = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(20_000),
            node("h", 1),
        ])]);
        assert_eq!(SlotMap::from_reply(&beyond), None);
    }
}
