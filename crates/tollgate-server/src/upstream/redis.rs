//! `REDIS_*`: the store as envoyproxy/ratelimit reaches it (one server, a Sentinel group or a
//! Cluster; TCP or a unix socket; TLS; `user:password` auth), and its tuning knobs, which a
//! multiplexed client does not need.

use std::time::Duration;

use tollgate::RedisUrl;

use super::apply::{Applied, Given};
use super::env::Env;
use crate::serve_args::ServeArgs;

/// The store, unless one of Tollgate's own store flags names it.
pub(super) fn apply(
    args: &mut ServeArgs,
    given: Given<'_>,
    env: &mut Env<'_>,
    applied: &mut Applied,
) {
    let socket = env.text("REDIS_SOCKET_TYPE", "unix");
    let kind = env.text("REDIS_TYPE", "SINGLE");
    let url = env.text("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    let auth = env.text("REDIS_AUTH", "");
    let sentinel_auth = env.text("REDIS_SENTINEL_AUTH", "");
    let tls = env.boolean("REDIS_TLS", false);
    let client_cert = env.text("REDIS_TLS_CLIENT_CERT", "");
    let client_key = env.text("REDIS_TLS_CLIENT_KEY", "");
    let ca = env.text("REDIS_TLS_CACERT", "");
    if env.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
        env.refuse(
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            "give Redis a certificate that names the host in REDIS_URL (Tollgate verifies it)",
        );
    }
    tuning(env, applied, "REDIS_");
    let timeout = env.duration("REDIS_TIMEOUT", Duration::from_secs(10));
    let _ = env.duration("REDIS_STARTUP_INITIAL_INTERVAL", Duration::from_secs(1));
    let _ = env.duration("REDIS_STARTUP_MAX_INTERVAL", Duration::from_secs(30));
    let startup = env.duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO);
    let health_follows_connection = env.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false);
    if health_follows_connection && !given("readiness") {
        args.health.readiness = crate::health_flags::ReadinessMode::Store;
    }
    if !given("redis_connect_timeout") {
        args.store.redis_connect_timeout = Some(timeout);
    }
    if !startup.is_zero() && !given("redis_startup_timeout") {
        args.store.redis_startup_timeout = Some(startup);
    }
    if ["redis", "redis_cluster", "redis_sentinel_master"]
        .into_iter()
        .any(given)
    {
        return;
    }
    let scheme = if tls { "rediss" } else { "redis" };
    match locate(env, "REDIS_", &kind, &url, &socket, scheme, &sentinel_auth) {
        Some(Located::Single(url)) => args.store.redis = Some(url),
        Some(Located::Sentinel { sentinels, master }) => {
            args.store.redis_sentinel = sentinels;
            args.store.redis_sentinel_master = Some(master);
        }
        Some(Located::Cluster(nodes)) => args.store.redis_cluster = nodes,
        None => return,
    }
    if !auth.is_empty() && !given("redis_username") && !given("redis_password_file") {
        let (user, password) = user_and_password(&auth);
        args.store.redis_username = user;
        args.store.redis_password = Some(password);
    }
    if !tls && (!ca.is_empty() || !client_cert.is_empty()) {
        applied.unused.push(
            "REDIS_TLS_CACERT and REDIS_TLS_CLIENT_CERT are not used: REDIS_TLS is off".to_owned(),
        );
        return;
    }
    if !ca.is_empty() && !given("redis_ca") {
        args.store.redis_ca = Some(ca.into());
    }
    if !client_cert.is_empty() && !client_key.is_empty() && !given("redis_client_cert") {
        args.store.redis_client_cert = Some(client_cert.into());
        args.store.redis_client_key = Some(client_key.into());
    }
}

/// Where upstream's `<prefix>TYPE` and `<prefix>URL` say the Redis is.
pub(super) enum Located {
    /// One server.
    Single(RedisUrl),
    /// A master known to these sentinels.
    Sentinel {
        sentinels: Vec<RedisUrl>,
        master: String,
    },
    /// A Cluster reached through these nodes.
    Cluster(Vec<RedisUrl>),
}

/// Reads `<prefix>TYPE`'s kind and `<prefix>URL` as upstream does; a problem is pushed to
/// `env` and `None` returned.
pub(super) fn locate(
    env: &mut Env<'_>,
    prefix: &str,
    kind: &str,
    url: &str,
    socket: &str,
    scheme: &str,
    sentinel_auth: &str,
) -> Option<Located> {
    match kind.to_ascii_lowercase().as_str() {
        "single" => match single(url, socket, scheme, prefix) {
            Ok(url) => Some(Located::Single(url)),
            Err(problem) => {
                env.errors.push(problem);
                None
            }
        },
        "sentinel" => {
            let mut parts = url.split(',');
            let master = parts.next().unwrap_or_default().to_owned();
            let sentinels: Vec<&str> = parts.collect();
            if master.is_empty() || sentinels.is_empty() {
                env.errors.push(format!(
                    "{prefix}URL: {url:?} is not <master name>,<sentinel host:port>,... as {prefix}TYPE=sentinel asks"
                ));
                return None;
            }
            let credentials = credentials(sentinel_auth);
            let sentinels = sentinels
                .into_iter()
                .map(|host| RedisUrl::new(format!("{scheme}://{credentials}{host}")))
                .collect();
            Some(Located::Sentinel { sentinels, master })
        }
        "cluster" => Some(Located::Cluster(
            url.split(',')
                .map(|host| RedisUrl::new(format!("{scheme}://{host}")))
                .collect(),
        )),
        _ => {
            env.errors.push(format!(
                "{prefix}TYPE: {kind:?} is not single, sentinel or cluster"
            ));
            None
        }
    }
}

/// Upstream's `user:password` or bare password.
pub(super) fn user_and_password(auth: &str) -> (Option<String>, String) {
    match auth.split_once(':') {
        Some((user, password)) => (Some(user.to_owned()), password.to_owned()),
        None => (None, auth.to_owned()),
    }
}

/// One server's URL: `host:port` over TCP, a socket path, or a `redis://` URL as written.
fn single(url: &str, socket: &str, scheme: &str, prefix: &str) -> Result<RedisUrl, String> {
    if let Some(rest) = url.strip_prefix("redis://") {
        return Ok(RedisUrl::new(format!("{scheme}://{rest}")));
    }
    if socket.eq_ignore_ascii_case("unix") || url.starts_with('/') {
        if scheme == "rediss" {
            return Err(format!(
                "{prefix}TLS: TLS over a unix socket is not supported; use {prefix}SOCKET_TYPE=tcp"
            ));
        }
        return Ok(RedisUrl::new(format!("redis+unix://{url}")));
    }
    if socket.eq_ignore_ascii_case("tcp") {
        return Ok(RedisUrl::new(format!("{scheme}://{url}")));
    }
    Err(format!(
        "{prefix}SOCKET_TYPE: {socket:?} is neither tcp nor unix"
    ))
}

/// `user:password@`, `:password@` or nothing, for a URL, from upstream's auth form.
fn credentials(auth: &str) -> String {
    if auth.is_empty() {
        return String::new();
    }
    match auth.split_once(':') {
        Some((user, password)) => format!("{user}:{password}@"),
        None => format!(":{auth}@"),
    }
}

/// The pool and pipeline knobs of upstream's Redis client (`REDIS_` or `REDIS_PERSECOND_`):
/// one multiplexed connection per node needs none of them; a pool that refuses or grows when
/// empty is refused here as upstream refuses it.
pub(super) fn tuning(env: &mut Env<'_>, applied: &mut Applied, prefix: &str) {
    let name = |suffix: &str| -> &'static str {
        super::env::KNOWN
            .iter()
            .find(|known| known.strip_prefix(prefix) == Some(suffix))
            .copied()
            .unwrap_or("REDIS_POOL_SIZE")
    };
    for suffix in [
        "POOL_SIZE",
        "PIPELINE_WINDOW",
        "PIPELINE_LIMIT",
        "CLUSTER_PIPELINE_PARALLELISM",
    ] {
        let variable = name(suffix);
        if env.is_set(variable) {
            applied.unused.push(format!(
                "{variable} is not needed: Tollgate multiplexes one connection per Redis node and pipelines on it"
            ));
        }
    }
    let variable = name("POOL_ON_EMPTY_BEHAVIOR");
    let behaviour = env.text(variable, "WAIT");
    if matches!(behaviour.as_str(), "CREATE" | "ERROR") {
        env.errors.push(format!(
            "{variable}: {behaviour} is refused (envoyproxy/ratelimit refuses it too); unset it"
        ));
    }
}
