//! `CONFIG_TYPE=GRPC_XDS_SOTW` and its `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` settings: the
//! limits pushed by an xDS management server (Envoy Gateway's).

use super::apply::{Applied, Given};
use super::env::Env;
use crate::serve_args::ServeArgs;
use tollgate_envoy::rls::xds::{XdsFlags, XdsHeader, XdsServer};

/// Whether upstream reads `name` for its xDS client.
fn is_xds_setting(name: &str) -> bool {
    name.starts_with("CONFIG_GRPC_XDS_") || name.starts_with("XDS_CLIENT_")
}

/// With files for configuration, the xDS settings set are said to be unused.
pub(super) fn unused(env: &mut Env<'_>, applied: &mut Applied) {
    let set: Vec<&str> = super::env::KNOWN
        .iter()
        .copied()
        .filter(|name| is_xds_setting(name) && env.is_set(name))
        .collect();
    if !set.is_empty() {
        applied
            .unused
            .push(format!("{} not used: CONFIG_TYPE is FILE", set.join(", ")));
    }
}

/// The limits from an xDS server: `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` onto `--rls-xds-*`.
pub(super) fn apply(
    args: &mut ServeArgs,
    given: Given<'_>,
    env: &mut Env<'_>,
    applied: &mut Applied,
) {
    let flags = &mut args.rls_xds;
    let url = server_and_node(flags, given, env);
    tls(flags, given, env, applied);
    client(flags, given, env);
    not_used_with_xds(flags, given, env, applied);
    applied.notes.push(format!(
        "the rate limit configuration comes from the xDS server {url} as node {:?}",
        flags.rls_xds_node_id
    ));
}

/// Where the xDS server is and who this node is to it: its URL, the node's id and metadata,
/// and the headers sent with every request. Returns the URL.
fn server_and_node(flags: &mut XdsFlags, given: Given<'_>, env: &mut Env<'_>) -> String {
    let url = env.text("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000");
    match XdsServer::parse(&url) {
        Ok(server) if !given("rls_xds_server") => flags.rls_xds_server = Some(server),
        Ok(_) => {}
        Err(problem) => env
            .errors
            .push(format!("CONFIG_GRPC_XDS_SERVER_URL: {problem}")),
    }
    let node = env.text("CONFIG_GRPC_XDS_NODE_ID", "default");
    if !given("rls_xds_node_id") {
        flags.rls_xds_node_id = node;
    }
    let metadata = env.text("CONFIG_GRPC_XDS_NODE_METADATA", "");
    let mut entries = Vec::new();
    for entry in metadata.split(',').filter(|entry| !entry.is_empty()) {
        match entry.split_once('=') {
            Some((key, value)) => entries.push((key.to_owned(), value.to_owned())),
            // Upstream drops such an entry without a word.
            None => env.errors.push(format!(
                "CONFIG_GRPC_XDS_NODE_METADATA: {entry:?} is not KEY=VALUE"
            )),
        }
    }
    if !given("rls_xds_node_metadata") {
        flags.rls_xds_node_metadata = entries;
    }
    let headers: Vec<XdsHeader> = env
        .map("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
        .into_iter()
        .map(|(name, value)| XdsHeader::parse(&format!("{name}:{value}")))
        .collect();
    if let Some(why) = headers.iter().find_map(|header| header.entry().err()) {
        env.errors
            .push(format!("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: {why}"));
    }
    if !given("rls_xds_header") {
        flags.rls_xds_header = headers;
    }
    url
}

/// TLS to the xDS server, used only when `CONFIG_GRPC_XDS_SERVER_USE_TLS` is on.
fn tls(flags: &mut XdsFlags, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let tls = env.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false);
    let cert = env.text("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "");
    let key = env.text("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "");
    let ca = env.text("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "");
    let server_name = env.text("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "");
    if tls && !given("rls_xds_tls") {
        flags.rls_xds_tls = true;
        // Upstream uses the pair only when both are given.
        if !cert.is_empty() && !key.is_empty() {
            flags.rls_xds_client_cert = Some(cert.into());
            flags.rls_xds_client_key = Some(key.into());
        }
        if !ca.is_empty() {
            flags.rls_xds_ca = Some(ca.into());
        }
        if !server_name.is_empty() {
            flags.rls_xds_server_name = Some(server_name);
        }
    } else if !tls && (!cert.is_empty() || !ca.is_empty() || !server_name.is_empty()) {
        applied.unused.push(
            "CONFIG_GRPC_XDS_CLIENT_TLS_*, CONFIG_GRPC_XDS_SERVER_TLS_* not used: CONFIG_GRPC_XDS_SERVER_USE_TLS is off"
                .to_owned(),
        );
    }
}

/// The xDS client's backoff and its largest message.
fn client(flags: &mut XdsFlags, given: Given<'_>, env: &mut Env<'_>) {
    let initial = env.duration(
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        std::time::Duration::from_secs(10),
    );
    let max = env.duration(
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        std::time::Duration::from_secs(60),
    );
    let jitter = env.boolean("XDS_CLIENT_BACKOFF_JITTER", true);
    if !given("rls_xds_backoff_initial") {
        flags.rls_xds_backoff_initial = initial;
    }
    if !given("rls_xds_backoff_max") {
        flags.rls_xds_backoff_max = max;
    }
    if !given("rls_xds_backoff_jitter") {
        flags.rls_xds_backoff_jitter = jitter;
    }
    let size = env.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0);
    match usize::try_from(size) {
        Ok(0) => {}
        Ok(bytes)
            if (1024..=tollgate_envoy::rls::xds::MAX_MESSAGE_BYTES as usize).contains(&bytes) =>
        {
            if !given("rls_xds_max_message_bytes") {
                flags.rls_xds_max_message_bytes = bytes;
            }
        }
        _ => env.errors.push(format!(
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: {size} is not from 1024 to {}",
            tollgate_envoy::rls::xds::MAX_MESSAGE_BYTES
        )),
    }
}

/// Settings upstream reads that mean nothing here (said to be unused), and starting without
/// a first configuration.
fn not_used_with_xds(
    flags: &mut XdsFlags,
    given: Given<'_>,
    env: &mut Env<'_>,
    applied: &mut Applied,
) {
    for (name, why) in [
        (
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "the wait doubles from the initial interval to the maximum, as upstream documents it",
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "it has no effect upstream either; the backoff intervals decide",
        ),
    ] {
        if env.is_set(name) {
            applied.unused.push(format!("{name} is not used: {why}"));
        }
    }
    if env.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
        && !given("rls_xds_start_without_config")
    {
        flags.rls_xds_start_without_config = true;
    }
    let runtime: Vec<&str> = [
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
        "RUNTIME_IGNOREDOTFILES",
        "RUNTIME_WATCH_ROOT",
    ]
    .into_iter()
    .filter(|name| env.is_set(name))
    .collect();
    if !runtime.is_empty() {
        applied.unused.push(format!(
            "{} not used: CONFIG_TYPE is GRPC_XDS_SOTW",
            runtime.join(", ")
        ));
    }
}
