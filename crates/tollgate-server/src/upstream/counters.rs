//! How upstream keeps its counters: `CACHE_KEY_PREFIX`, `EXPIRATION_JITTER_MAX_SECONDS`,
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, `LOCAL_CACHE_SIZE_IN_BYTES` and the per-second
//! store (`REDIS_PERSECOND*`).

use super::apply::{Applied, Given};
use super::env::Env;
use crate::serve::ServeArgs;

/// The counters' settings.
pub(super) fn apply(
    _args: &mut ServeArgs,
    _given: Given<'_>,
    env: &mut Env<'_>,
    applied: &mut Applied,
) {
    let prefix = env.text("CACHE_KEY_PREFIX", "");
    let jitter = env.integer("EXPIRATION_JITTER_MAX_SECONDS", 300);
    let stop = env.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false);
    let local_cache = env.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0);
    let per_second = env.boolean("REDIS_PERSECOND", false);
    if !prefix.is_empty() {
        env.refuse(
            "CACHE_KEY_PREFIX",
            "unset it: counters are kept under Tollgate's own keys",
        );
    }
    if jitter < 0 {
        env.errors.push(format!(
            "EXPIRATION_JITTER_MAX_SECONDS: {jitter} is negative"
        ));
    }
    if stop {
        env.refuse(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            "unset it: counters are kept under Tollgate's own keys",
        );
    }
    if local_cache != 0 {
        applied.unused.push(
            "LOCAL_CACHE_SIZE_IN_BYTES is not needed: Tollgate keeps its own over-limit cache"
                .to_owned(),
        );
    }
    if per_second {
        env.refuse(
            "REDIS_PERSECOND",
            "unset it: per-second limits are kept in the one store",
        );
    }
    for name in [
        "REDIS_PERSECOND_SOCKET_TYPE",
        "REDIS_PERSECOND_TYPE",
        "REDIS_PERSECOND_URL",
        "REDIS_PERSECOND_AUTH",
        "REDIS_PERSECOND_TLS",
        "REDIS_PERSECOND_SENTINEL_AUTH",
        "REDIS_PERSECOND_TIMEOUT",
    ] {
        let _ = env.raw(name);
    }
    super::redis::tuning(env, applied, "REDIS_PERSECOND_");
}
