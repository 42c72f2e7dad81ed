//! `CONFIG_TYPE=GRPC_XDS_SOTW` and its `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` settings: the
//! limits pushed by an xDS management server (Envoy Gateway's).

use super::apply::{Applied, Given};
use super::env::Env;
use crate::serve::ServeArgs;

/// The xDS settings.
const SETTINGS: &[&str] = &[
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
];

/// With files for configuration, the xDS settings set are said to be unused.
pub(super) fn unused(env: &mut Env<'_>, applied: &mut Applied) {
    let set: Vec<&str> = SETTINGS
        .iter()
        .copied()
        .filter(|name| env.is_set(name))
        .collect();
    if !set.is_empty() {
        applied
            .unused
            .push(format!("{} not used: CONFIG_TYPE is FILE", set.join(", ")));
    }
}

/// The limits from an xDS server.
pub(super) fn apply(
    _args: &mut ServeArgs,
    _given: Given<'_>,
    env: &mut Env<'_>,
    _applied: &mut Applied,
) {
    for name in SETTINGS {
        let _ = env.raw(name);
    }
    env.refuse(
        "CONFIG_TYPE=GRPC_XDS_SOTW",
        "give the configuration as files (CONFIG_TYPE=FILE with RUNTIME_ROOT)",
    );
}
