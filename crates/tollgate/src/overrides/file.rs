//! Overrides of a single node that survive its restarts: the in-process table, written whole
//! to a file (to a temporary file beside it, then renamed over it) before a write is answered.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tollgate_core::overrides::{
    MemoryOverrideBackend, OverrideBackend, OverrideFuture, OverrideRecord, OverrideSnapshot,
    OverrideWrite, OverrideWritten,
};

use crate::store::StoreError;

/// The largest override file read.
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The file's form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    version: u64,
    records: Vec<SavedRecord>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedRecord {
    id: String,
    version: u64,
    body: String,
}

/// Overrides kept in process and in a file.
#[derive(Debug)]
pub struct FileOverrideBackend {
    path: PathBuf,
    table: Mutex<MemoryOverrideBackend>,
}

impl FileOverrideBackend {
    /// The table in `path` (empty when the file does not exist yet); the error names the file
    /// and what is wrong with it.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, String> {
        let path = path.into();
        let snapshot = read(&path)?;
        Ok(Self {
            path,
            table: Mutex::new(MemoryOverrideBackend::with(snapshot)),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, MemoryOverrideBackend> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writes, made on a copy that replaces the table once it is in the file (saved once,
    /// whatever their number).
    fn write_now(&self, writes: &[OverrideWrite<'_>]) -> Result<Vec<OverrideWritten>, StoreError> {
        let mut table = self.table();
        let next = MemoryOverrideBackend::with(table.snapshot());
        let written: Vec<OverrideWritten> = writes
            .iter()
            .map(|one| next.write_now(one.id, one.replaces, one.body))
            .collect();
        if written
            .iter()
            .any(|one| matches!(one, OverrideWritten::Done { .. }))
        {
            save(&self.path, &next.snapshot()).map_err(StoreError::Failed)?;
            *table = next;
        }
        Ok(written)
    }
}

fn read(path: &Path) -> Result<OverrideSnapshot, String> {
    let shown = path.display();
    let size = match std::fs::metadata(path) {
        Ok(metadata) => metadata.len(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OverrideSnapshot::default());
        }
        Err(error) => return Err(format!("{shown}: {error}")),
    };
    if size > MAX_FILE_BYTES {
        return Err(format!("{shown}: larger than {MAX_FILE_BYTES} bytes"));
    }
    let text = std::fs::read_to_string(path).map_err(|error| format!("{shown}: {error}"))?;
    let saved: Saved = serde_json::from_str(&text)
        .map_err(|error| format!("{shown}: not an override file: {error}"))?;
    Ok(OverrideSnapshot {
        version: saved.version,
        records: saved
            .records
            .into_iter()
            .map(|r| OverrideRecord {
                id: r.id,
                version: r.version,
                body: r.body,
            })
            .collect(),
    })
}

fn save(path: &Path, snapshot: &OverrideSnapshot) -> Result<(), String> {
    let saved = Saved {
        version: snapshot.version,
        records: snapshot
            .records
            .iter()
            .map(|r| SavedRecord {
                id: r.id.clone(),
                version: r.version,
                body: r.body.clone(),
            })
            .collect(),
    };
    let text = serde_json::to_string(&saved).map_err(|error| error.to_string())?;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let failed = |error: std::io::Error| format!("{}: {error}", path.display());
    std::fs::write(&temporary, text).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

impl OverrideBackend for FileOverrideBackend {
    fn version(&self) -> OverrideFuture<'_, u64> {
        let version = self.table().version_now();
        Box::pin(async move { Ok(version) })
    }

    fn load(&self) -> OverrideFuture<'_, OverrideSnapshot> {
        let snapshot = self.table().snapshot();
        Box::pin(async move { Ok(snapshot) })
    }

    fn write<'a>(
        &'a self,
        id: &'a str,
        replaces: u64,
        body: Option<&'a str>,
    ) -> OverrideFuture<'a, OverrideWritten> {
        let one = [OverrideWrite { id, replaces, body }];
        let written = self.write_now(&one).map(|mut written| written.remove(0));
        Box::pin(async move { written })
    }

    fn write_all<'a>(
        &'a self,
        writes: &'a [OverrideWrite<'a>],
    ) -> OverrideFuture<'a, Vec<OverrideWritten>> {
        let written = self.write_now(writes);
        Box::pin(async move { written })
    }

    fn kind(&self) -> &'static str {
        "file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_read_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        let first = FileOverrideBackend::open(&path).unwrap();
        let write = |id, replaces, body| OverrideWrite { id, replaces, body };
        assert_eq!(
            first
                .write_now(&[write("a", 0, Some("{}")), write("a", 0, Some("{}"))])
                .unwrap(),
            [
                OverrideWritten::Done { version: 1 },
                OverrideWritten::Conflict { current: 1 }
            ]
        );
        drop(first);
        let again = FileOverrideBackend::open(&path).unwrap();
        assert_eq!(again.table().snapshot().records.len(), 1);
        assert_eq!(
            again.write_now(&[write("a", 1, None)]).unwrap(),
            [OverrideWritten::Done { version: 2 }]
        );
        std::fs::write(&path, "not json").unwrap();
        let error = FileOverrideBackend::open(&path).unwrap_err();
        assert!(
            error.contains("overrides.json: not an override file"),
            "{error}"
        );
    }
}
