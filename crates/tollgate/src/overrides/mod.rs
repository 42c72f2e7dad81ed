//! Overrides at run time: for one identity under one policy, a different quota or algorithm
//! parameter, a multiplier, a pass or a refusal, optionally until a time. Tiers stay in the
//! policy file; an override is the exception for one tenant, API key or user.
//!
//! Overrides live in a backend ([`OverrideBackend`]): in process, in a file for one node
//! ([`FileOverrideBackend`]), or in Redis for a deployment (`RedisStore::override_backend`),
//! versioned so that a write that names a version other than the record's is refused. Each
//! node holds the table compiled against its policies and reads it again when the backend's
//! version moves (see [`Limiter::overrides`](crate::Limiter::overrides)). A check pays for
//! overrides only while the table holds one.
//!
//! An override that changes a limit's quota or algorithm counts in a state of its own: the
//! identity's count under the policy's limit stays where it was, and applies again when the
//! override ends.

mod file;
pub mod lines;
mod model;
mod state;
pub(crate) mod table;

pub use file::FileOverrideBackend;
pub(crate) use model::rfc3339;
pub use model::{
    Change, MAX_ACTOR_BYTES, MAX_MULTIPLIER, MAX_REASON_BYTES, Override, OverrideTarget, SetLimit,
    StoredOverride,
};
pub(crate) use state::OverrideState;
pub use tollgate_core::overrides::{
    MemoryOverrideBackend, OverrideBackend, OverrideFuture, OverrideRecord, OverrideSnapshot,
    OverrideWrite, OverrideWritten,
};

use crate::store::StoreError;

/// The most overrides a table holds.
pub const MAX_OVERRIDES: usize = 100_000;

/// Why an override was not written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OverrideError {
    /// The override is malformed or does not fit the policies in force.
    #[error("{0}")]
    Invalid(String),
    /// The override is at another version than the write replaces (0: it does not exist).
    #[error(
        "the override is at version {current}, not the version this write replaces: read it again and name its version"
    )]
    Conflict {
        /// The override's version now (0: it does not exist).
        current: u64,
    },
    /// No such override.
    #[error("no such override")]
    NotFound,
    /// The table holds [`MAX_OVERRIDES`] already.
    #[error("the table holds {MAX_OVERRIDES} overrides already: remove some first")]
    Full,
    /// The backend could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}
