//! The Lua the store runs in Redis, and how it is called.
//!
//! A script run by EVALSHA executes its whole text on every call, and Lua builds a closure for
//! every function definition it runs, so each call first rebuilds the algorithms it uses. A
//! Redis Function library (Redis 7 and later) is loaded once per node and keeps its functions,
//! so a call pays only for its decisions: the store loads the library when a node does not
//! have it (a fresh, restarted or flushed node answers `Function not found`) and calls it with
//! `FCALL`. Where functions are not available (an older Redis, a compatible server without
//! them, or an ACL user without `FCALL` or `FUNCTION LOAD`), it falls back to the same code as
//! scripts by EVALSHA, once and for the store's lifetime.
//!
//! The library's name and its functions' names carry a hash of its code, so that nodes of two
//! Tollgate versions sharing one Redis during a rolling upgrade each call their own code.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind};

use super::connection::Connection;
use tollgate_core::clock::Micros;

/// The shared pieces: the algorithms and the plumbing every entry point uses.
const COMMON: &str = include_str!("scripts/algorithms.lua");
/// The entry point that decides checks.
const CHECK: &str = include_str!("scripts/check.lua");
/// The entry point that refunds and charges.
const ADJUST: &str = include_str!("scripts/adjust.lua");

/// The Lua source of the check script, for tooling that runs it directly (`redis-benchmark`,
/// `redis-cli --eval`). `ARGV[1]`: the time or `''`. `ARGV[2]`: one JSON array of numbers: the
/// number of distinct limits, each limit's algorithm (1-6, 7 for a fixed window with a calendar),
/// count, period, capacity, interval, delay_after and debt (and a calendar window's five period
/// starts), then the number of checks, and per check its item count and per item: key
/// index, limit index, cost (a one-item check may instead be the one negative number
/// `-(key index * 2^20 + limit index * 2^10 + cost)`). Returns one string: the time, then six
/// numbers per item, each a big-endian `i64`.
pub const CHECK_SCRIPT: &str = concat!(
    include_str!("scripts/algorithms.lua"),
    include_str!("scripts/check.lua"),
    "return check(KEYS, ARGV)\n"
);
const ADJUST_SCRIPT: &str = concat!(
    include_str!("scripts/algorithms.lua"),
    include_str!("scripts/adjust.lua"),
    "return adjust(KEYS, ARGV)\n"
);

/// An entry point of the Lua code.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Entry {
    Check,
    Adjust,
}

/// The store's Lua code as a function library and as scripts, and which of the two it calls.
pub(crate) struct Program {
    library: String,
    check_function: String,
    adjust_function: String,
    check_script: Script,
    adjust_script: Script,
    /// Whether functions are still used; cleared for good by the first sign that they are not
    /// available.
    functions: AtomicBool,
}

impl Program {
    pub(crate) fn new() -> Self {
        let code = [COMMON, CHECK, ADJUST].concat();
        let hash = Script::new(&code).get_hash().to_owned();
        let version = &hash[..16];
        let check_function = format!("tollgate_check_{version}");
        let adjust_function = format!("tollgate_adjust_{version}");
        let library = format!(
            "#!lua name=tollgate_{version}\n{code}\
             redis.register_function{{function_name='{check_function}', callback=check, \
             flags={{'allow-cross-slot-keys'}}}}\n\
             redis.register_function('{adjust_function}', adjust)\n"
        );
        Self {
            library,
            check_function,
            adjust_function,
            check_script: Script::new(CHECK_SCRIPT),
            adjust_script: Script::new(ADJUST_SCRIPT),
            functions: AtomicBool::new(true),
        }
    }

    /// Whether calls go to the function library (rather than to scripts by EVALSHA).
    pub(crate) fn uses_functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// Calls `entry` with `keys`, the time (`None`: the server's clock) and the numbers.
    /// `slots` is empty when every key is of one hash slot (or not on a cluster); otherwise it
    /// gives how many keys of `keys`, in order, each slot has: the first slot's are declared,
    /// the others passed as arguments for the check function to reach across slots.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        connection: &mut Connection,
        entry: Entry,
        keys: &[&str],
        slots: &[usize],
        at: Option<Micros>,
        numbers: &str,
    ) -> RedisResult<T> {
        let at = at.map_or_else(String::new, |at| at.to_string());
        let call = CallKeys::new(keys, slots);
        if self.uses_functions() {
            match self
                .call_function(connection, entry, &call, &at, numbers)
                .await
            {
                Err(error) if lacks_functions(&error) => self.give_up_functions(&error),
                outcome => return outcome,
            }
        }
        let script = match entry {
            Entry::Check => &self.check_script,
            Entry::Adjust => &self.adjust_script,
        };
        let mut invocation = script.prepare_invoke();
        for key in call.declared {
            invocation.key(key);
        }
        invocation.arg(&at).arg(numbers);
        if let Some(sizes) = &call.further_sizes {
            // A script has no `allow-cross-slot-keys`: Redis refuses the call, and the caller
            // sends its checks slot by slot.
            invocation.arg(sizes).arg(call.further);
        }
        invocation.invoke_async(connection).await
    }

    /// `FCALL`, loading the library first where the node does not have it.
    async fn call_function<T: FromRedisValue>(
        &self,
        connection: &mut Connection,
        entry: Entry,
        call: &CallKeys<'_>,
        at: &str,
        numbers: &str,
    ) -> RedisResult<T> {
        let name = match entry {
            Entry::Check => &self.check_function,
            Entry::Adjust => &self.adjust_function,
        };
        let mut fcall = redis::cmd("FCALL");
        fcall
            .arg(name)
            .arg(call.declared.len())
            .arg(call.declared)
            .arg(at)
            .arg(numbers);
        if let Some(sizes) = &call.further_sizes {
            fcall.arg(sizes).arg(call.further);
        }
        match fcall.query_async(connection).await {
            Err(error) if function_missing(&error) => {
                // REPLACE: loading is idempotent, and nodes racing to load it do not fail.
                redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(&self.library)
                    .query_async::<()>(connection)
                    .await?;
                fcall.query_async(connection).await
            }
            outcome => outcome,
        }
    }

    fn give_up_functions(&self, error: &RedisError) {
        if self.functions.swap(false, Ordering::Relaxed) {
            tracing::info!(
                target: "tollgate::store",
                "Redis functions are not available ({}); running the same code as scripts by EVALSHA, \
                 which rebuilds it on every call",
                crate::redact_credentials(&error.to_string())
            );
        }
    }
}

/// A call's keys as Redis is given them: the declared ones (one hash slot), and the keys of
/// further slots with their sizes as a JSON array, if any.
struct CallKeys<'k> {
    declared: &'k [&'k str],
    further: &'k [&'k str],
    further_sizes: Option<String>,
}

impl<'k> CallKeys<'k> {
    fn new(keys: &'k [&'k str], slots: &[usize]) -> Self {
        match slots {
            [first, rest @ ..] if !rest.is_empty() => {
                let sizes: Vec<String> = rest.iter().map(ToString::to_string).collect();
                Self {
                    declared: &keys[..*first],
                    further: &keys[*first..],
                    further_sizes: Some(format!("[{}]", sizes.join(","))),
                }
            }
            _ => Self {
                declared: keys,
                further: &[],
                further_sizes: None,
            },
        }
    }
}

/// Redis refused a call for reaching keys of a slot the node does not hold, or of several slots
/// where that is not allowed: nothing was written, and the checks can go again slot by slot.
pub(crate) fn crossed_slots(error: &RedisError) -> bool {
    let text = error.to_string();
    text.contains("non local key")
        || text.contains("do not hash to the same slot")
        || text.contains("CROSSSLOT")
}

/// The node does not have the library (yet, or any more).
fn function_missing(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// The server has no functions, or this user may not call or load them.
fn lacks_functions(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::NoPerm) => true,
        ErrorKind::Server(ServerErrorKind::ResponseError) => error
            .detail()
            .is_some_and(|detail| detail.starts_with("unknown command")),
        _ => false,
    }
}
