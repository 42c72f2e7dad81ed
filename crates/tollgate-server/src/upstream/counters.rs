//! How upstream keeps its counters: `CACHE_KEY_PREFIX`, `EXPIRATION_JITTER_MAX_SECONDS`,
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, `LOCAL_CACHE_SIZE_IN_BYTES` and the per-second
//! store (`REDIS_PERSECOND*`). Started from upstream's environment, the rate limit service
//! keeps its classic fixed windows under upstream's own keys, so that upstream's pods and
//! these, side by side on one Redis while one replaces the other, share every counter.

use std::time::Duration;

use super::apply::{Applied, Given};
use super::env::Env;
use super::redis::{Located, locate, user_and_password};
use crate::serve_args::ServeArgs;

/// The counters' settings.
pub(super) fn apply(
    args: &mut ServeArgs,
    given: Given<'_>,
    env: &mut Env<'_>,
    applied: &mut Applied,
) {
    let keys = &mut args.rls_upstream_keys;
    let prefix = env.text("CACHE_KEY_PREFIX", "");
    let jitter = env.integer("EXPIRATION_JITTER_MAX_SECONDS", 300);
    let stop = env.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false);
    let local_cache = env.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0);
    if !given("enabled") {
        keys.enabled = true;
        applied.notes.push(format!(
            "classic fixed windows are counted under envoyproxy/ratelimit's keys (prefix {prefix:?}), \
             shared with its pods on the same Redis"
        ));
    }
    if !given("prefix") {
        keys.prefix = prefix;
    }
    match u64::try_from(jitter) {
        Ok(seconds) if !given("expiration_jitter") => {
            keys.expiration_jitter = Duration::from_secs(seconds);
        }
        Ok(_) => {}
        Err(_) => env.errors.push(format!(
            "EXPIRATION_JITTER_MAX_SECONDS: {jitter} is negative"
        )),
    }
    if !given("stop_increment_over_limit") {
        keys.stop_increment_over_limit = stop;
    }
    match u64::try_from(local_cache) {
        Ok(bytes) if !given("local_cache_bytes") => keys.local_cache_bytes = bytes,
        Ok(_) => {}
        Err(_) => env.errors.push(format!(
            "LOCAL_CACHE_SIZE_IN_BYTES: {local_cache} is negative"
        )),
    }
    per_second(args, given, env, applied);
}

/// `REDIS_PERSECOND*`: a second Redis for the counters of one-second limits, read as the main
/// one is (its TLS files and timeouts are the main store's, as upstream shares them too).
fn per_second(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let enabled = env.boolean("REDIS_PERSECOND", false);
    let socket = env.text("REDIS_PERSECOND_SOCKET_TYPE", "unix");
    let kind = env.text("REDIS_PERSECOND_TYPE", "SINGLE");
    let url = env.text(
        "REDIS_PERSECOND_URL",
        "/var/run/nutcracker/ratelimitpersecond.sock",
    );
    let auth = env.text("REDIS_PERSECOND_AUTH", "");
    let tls = env.boolean("REDIS_PERSECOND_TLS", false);
    let sentinel_auth = env.text("REDIS_PERSECOND_SENTINEL_AUTH", "");
    let timeout = env.duration("REDIS_PERSECOND_TIMEOUT", Duration::from_secs(10));
    super::redis::tuning(env, applied, "REDIS_PERSECOND_");
    let ids = [
        "per_second_redis",
        "per_second_redis_cluster",
        "per_second_redis_sentinel_master",
    ];
    if !enabled || ids.into_iter().any(given) {
        return;
    }
    if env.is_set("REDIS_PERSECOND_TIMEOUT") {
        applied.unused.push(format!(
            "REDIS_PERSECOND_TIMEOUT ({timeout:?}): the per-second store takes REDIS_TIMEOUT's"
        ));
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let keys = &mut args.rls_upstream_keys;
    match locate(
        env,
        "REDIS_PERSECOND_",
        &kind,
        &url,
        &socket,
        scheme,
        &sentinel_auth,
    ) {
        Some(Located::Single(url)) => keys.per_second_redis = Some(url),
        Some(Located::Sentinel { sentinels, master }) => {
            keys.per_second_redis_sentinel = sentinels;
            keys.per_second_redis_sentinel_master = Some(master);
        }
        Some(Located::Cluster(nodes)) => keys.per_second_redis_cluster = nodes,
        None => return,
    }
    if !auth.is_empty()
        && !given("per_second_redis_username")
        && !given("per_second_redis_password_file")
    {
        let (user, password) = user_and_password(&auth);
        keys.per_second_redis_username = user;
        keys.per_second_redis_password = Some(password);
    }
}
