//! Run-time overrides kept in Redis, so that every node sharing the Redis applies the same
//! table: a hash of records and the table's version beside it, both under one hash tag (one
//! Cluster slot), written by a script that compares the version a write replaces and raises
//! the table's version in the same step. A node reads the version (one `GET`) to learn whether
//! to read the table again. Besides the limits' commands, a Redis user needs `HGET`, `HSET`,
//! `HDEL`, `HGETALL` and `INCR` (called by the scripts) to read and write overrides.

use redis::Script;
use tollgate_core::overrides::{
    OverrideBackend, OverrideFuture, OverrideRecord, OverrideSnapshot, OverrideWritten,
};
use tollgate_core::store::StoreError;

use super::RedisStore;
use super::connection::store_error;

/// Writes a record if it is at the version the write replaces.
const WRITE: &str = include_str!("scripts/override_write.lua");

/// Reads the table and its version in one step.
const LOAD: &str = "return {redis.call('MGET', KEYS[2])[1] or '0', redis.call('HGETALL', KEYS[1])}";

/// The overrides of a Redis store's deployment (see [`RedisStore::override_backend`]).
#[derive(Debug, Clone)]
pub struct RedisOverrideBackend {
    store: RedisStore,
    table: String,
    version: String,
}

impl RedisStore {
    /// Where this store's deployment keeps its run-time overrides: beside the limits' state,
    /// under the same key prefix (`<prefix>{overrides}` and `<prefix>{overrides}:version`).
    pub fn override_backend(&self) -> RedisOverrideBackend {
        let prefix = &self.shared.config.prefix;
        RedisOverrideBackend {
            store: self.clone(),
            table: format!("{prefix}{{overrides}}"),
            version: format!("{prefix}{{overrides}}:version"),
        }
    }
}

impl RedisOverrideBackend {
    /// Runs `script` on the table's keys with `args`, within the store's timeout.
    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &str,
        args: &[&str],
    ) -> Result<T, StoreError> {
        let script = Script::new(script);
        let mut invocation = script.key(&self.table);
        invocation.key(&self.version);
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.store.shared.connection.clone();
        let timeout = self.store.shared.config.timeout;
        match tokio::time::timeout(timeout, invocation.invoke_async(&mut connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(store_error(&error, timeout)),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

/// A record as the table keeps it: `<version> <body>`.
fn record(id: String, stored: &str) -> Result<OverrideRecord, StoreError> {
    let (version, body) = stored
        .split_once(' ')
        .and_then(|(version, body)| Some((version.parse().ok()?, body)))
        .ok_or_else(|| StoreError::Failed(format!("override {id:?}: unreadable record")))?;
    Ok(OverrideRecord {
        id,
        version,
        body: body.to_owned(),
    })
}

impl OverrideBackend for RedisOverrideBackend {
    fn version(&self) -> OverrideFuture<'_, u64> {
        Box::pin(async move {
            let mut connection = self.store.shared.connection.clone();
            let timeout = self.store.shared.config.timeout;
            // MGET, which the limits' scripts use too: a Redis user allowed those reads the
            // version without a further permission, and finds no overrides until one is set.
            let mut command = redis::cmd("MGET");
            command.arg(&self.version);
            let get = command.query_async::<Vec<Option<u64>>>(&mut connection);
            match tokio::time::timeout(timeout, get).await {
                Ok(Ok(version)) => Ok(version.into_iter().flatten().next().unwrap_or(0)),
                Ok(Err(error)) => Err(store_error(&error, timeout)),
                Err(_) => Err(StoreError::Timeout(timeout)),
            }
        })
    }

    fn load(&self) -> OverrideFuture<'_, OverrideSnapshot> {
        Box::pin(async move {
            let (version, fields): (String, Vec<(String, String)>) = self.run(LOAD, &[]).await?;
            let version = version
                .parse()
                .map_err(|_| StoreError::Failed("overrides: unreadable table version".into()))?;
            let records = fields
                .into_iter()
                .map(|(id, stored)| record(id, &stored))
                .collect::<Result<_, _>>()?;
            Ok(OverrideSnapshot { version, records })
        })
    }

    fn write<'a>(
        &'a self,
        id: &'a str,
        replaces: u64,
        body: Option<&'a str>,
    ) -> OverrideFuture<'a, OverrideWritten> {
        Box::pin(async move {
            let replaces = replaces.to_string();
            let args = match body {
                Some(body) => [id, replaces.as_str(), "1", body],
                None => [id, replaces.as_str(), "0", ""],
            };
            let (written, version): (u64, u64) = self.run(WRITE, &args).await?;
            Ok(if written == 1 {
                OverrideWritten::Done { version }
            } else {
                OverrideWritten::Conflict { current: version }
            })
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
