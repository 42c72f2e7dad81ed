//! Where run-time overrides are kept: a table of records, each under an id, each with the
//! version of the write that made it. Writes name the version they replace (0 for a record that
//! does not exist yet), so that two operators changing the same override never lose one of the
//! changes silently; every write raises the table's version, so that a node learns whether
//! anything changed by reading one number.
//!
//! The records are opaque here (the `tollgate` crate gives them their meaning); this module
//! holds the trait a backend implements and the in-process backend.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use parking_lot::Mutex;

use crate::store::StoreError;

/// One stored override: its id, the version of the write that made it, and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideRecord {
    /// What the override is for, as the `tollgate` crate names it.
    pub id: String,
    /// The table's version when it was written.
    pub version: u64,
    /// Its body (JSON).
    pub body: String,
}

/// The whole table at one version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OverrideSnapshot {
    /// The table's version: raised by every write.
    pub version: u64,
    /// Every record.
    pub records: Vec<OverrideRecord>,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverrideWritten {
    /// Written: the record's new version (for a removal, the table's).
    Done {
        /// The version of the write.
        version: u64,
    },
    /// Refused: the record is at another version than the write replaces (0: it does not
    /// exist).
    Conflict {
        /// The record's version now.
        current: u64,
    },
}

/// One write of many (see [`OverrideBackend::write_all`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverrideWrite<'a> {
    /// The record's id.
    pub id: &'a str,
    /// The version it replaces (0: absent).
    pub replaces: u64,
    /// The body to write; `None` removes the record.
    pub body: Option<&'a str>,
}

/// A future a backend returns.
pub type OverrideFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where overrides are kept: in process, in a file, in Redis.
pub trait OverrideBackend: Send + Sync + std::fmt::Debug + 'static {
    /// The table's version, for a node that checks whether to read it again.
    fn version(&self) -> OverrideFuture<'_, u64>;
    /// The whole table.
    fn load(&self) -> OverrideFuture<'_, OverrideSnapshot>;
    /// Writes `body` under `id` (removes the record when `body` is `None`) if the record is
    /// at version `replaces` (0: absent); atomic with that comparison.
    fn write<'a>(
        &'a self,
        id: &'a str,
        replaces: u64,
        body: Option<&'a str>,
    ) -> OverrideFuture<'a, OverrideWritten>;
    /// Each of `writes` as [`write`](Self::write) makes it, in order, each compared on its own
    /// (a conflict refuses that write alone); a backend that can save them together (a file)
    /// does.
    fn write_all<'a>(
        &'a self,
        writes: &'a [OverrideWrite<'a>],
    ) -> OverrideFuture<'a, Vec<OverrideWritten>> {
        Box::pin(async move {
            let mut written = Vec::with_capacity(writes.len());
            for one in writes {
                written.push(self.write(one.id, one.replaces, one.body).await?);
            }
            Ok(written)
        })
    }
    /// Where the table lives, for logs and the admin API.
    fn kind(&self) -> &'static str;
}

/// Overrides kept in this process: gone when it stops (see the `tollgate` crate's file
/// backend for one that is not).
#[derive(Debug, Default)]
pub struct MemoryOverrideBackend {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    version: u64,
    records: BTreeMap<String, (u64, String)>,
}

impl MemoryOverrideBackend {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table holding `snapshot` (as read back from a file).
    pub fn with(snapshot: OverrideSnapshot) -> Self {
        let records = snapshot
            .records
            .into_iter()
            .map(|record| (record.id, (record.version, record.body)))
            .collect();
        Self {
            table: Mutex::new(Table {
                version: snapshot.version,
                records,
            }),
        }
    }

    /// The whole table, now.
    pub fn snapshot(&self) -> OverrideSnapshot {
        let table = self.table.lock();
        OverrideSnapshot {
            version: table.version,
            records: table
                .records
                .iter()
                .map(|(id, (version, body))| OverrideRecord {
                    id: id.clone(),
                    version: *version,
                    body: body.clone(),
                })
                .collect(),
        }
    }

    /// The table's version, now.
    pub fn version_now(&self) -> u64 {
        self.table.lock().version
    }

    /// [`OverrideBackend::write`], answered at once.
    pub fn write_now(&self, id: &str, replaces: u64, body: Option<&str>) -> OverrideWritten {
        let mut table = self.table.lock();
        let current = table.records.get(id).map_or(0, |(version, _)| *version);
        if current != replaces {
            return OverrideWritten::Conflict { current };
        }
        table.version += 1;
        let version = table.version;
        match body {
            Some(body) => {
                table
                    .records
                    .insert(id.to_owned(), (version, body.to_owned()));
            }
            None => {
                table.records.remove(id);
            }
        }
        OverrideWritten::Done { version }
    }
}

impl OverrideBackend for MemoryOverrideBackend {
    fn version(&self) -> OverrideFuture<'_, u64> {
        let version = self.version_now();
        Box::pin(async move { Ok(version) })
    }

    fn load(&self) -> OverrideFuture<'_, OverrideSnapshot> {
        let snapshot = self.snapshot();
        Box::pin(async move { Ok(snapshot) })
    }

    fn write<'a>(
        &'a self,
        id: &'a str,
        replaces: u64,
        body: Option<&'a str>,
    ) -> OverrideFuture<'a, OverrideWritten> {
        let written = self.write_now(id, replaces, body);
        Box::pin(async move { Ok(written) })
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_only_the_version_it_names() {
        let table = MemoryOverrideBackend::new();
        assert_eq!(
            table.write_now("a", 0, Some("one")),
            OverrideWritten::Done { version: 1 }
        );
        // A second creation, or a write naming a stale version, is refused.
        assert_eq!(
            table.write_now("a", 0, Some("two")),
            OverrideWritten::Conflict { current: 1 }
        );
        assert_eq!(
            table.write_now("b", 0, Some("other")),
            OverrideWritten::Done { version: 2 }
        );
        assert_eq!(
            table.write_now("a", 1, Some("two")),
            OverrideWritten::Done { version: 3 }
        );
        assert_eq!(
            table.write_now("a", 1, None),
            OverrideWritten::Conflict { current: 3 }
        );
        assert_eq!(
            table.write_now("a", 3, None),
            OverrideWritten::Done { version: 4 }
        );
        let snapshot = table.snapshot();
        assert_eq!(snapshot.version, 4);
        assert_eq!(
            snapshot.records,
            vec![OverrideRecord {
                id: "b".into(),
                version: 2,
                body: "other".into()
            }]
        );
        // Read back, the table goes on from where it was.
        let again = MemoryOverrideBackend::with(snapshot);
        assert_eq!(
            again.write_now("c", 0, Some("x")),
            OverrideWritten::Done { version: 5 }
        );
    }
}
