//! The rate limit service's configuration pushed over xDS, as envoyproxy/ratelimit takes it
//! with CONFIG_TYPE=GRPC_XDS_SOTW and Envoy Gateway serves it: an ADS stream, state of the
//! world, subscribed to every `RateLimitConfig` resource for one node id. Each response
//! replaces the whole configuration (an empty one leaves no domain) or is refused whole.
//!
//! - `flags`: the `--rls-xds-*` flags.
//! - `connect`: TCP and TLS to the management server.
//! - `subscription`: the stream, ACKs and NACKs, reconnection.
//! - `convert`: resources into the configuration, through the YAML files' parser.
//! - `backoff`: the waits between attempts.

mod backoff;
mod connect;
mod convert;
mod flags;
mod subscription;

use std::ops::ControlFlow;
use std::sync::Arc;

use tollgate::{AnyStore, Limiter};

pub use flags::{MAX_MESSAGE_BYTES, XdsFlags, XdsHeader, XdsServer};

use super::Rls;

/// Subscribes `rls` to the management server the flags name, if any. Unless
/// --rls-xds-start-without-config, waits until the first configuration is in force, as
/// envoyproxy/ratelimit holds its listeners back, and breaks if the process is asked to stop
/// meanwhile. A problem with the flags or their files is an error now, not at a reconnection.
/// `stop` starts listening for the process's stop signals, which are the binary's to catch; it
/// is called only when there is a first configuration to wait for.
pub async fn subscribe<Stop: Future<Output = ()>>(
    flags: &XdsFlags,
    rls: &Arc<Rls>,
    limiter: &Limiter<AnyStore>,
    stop: impl FnOnce() -> Stop,
) -> Result<ControlFlow<()>, String> {
    let Some(server) = &flags.rls_xds_server else {
        return Ok(ControlFlow::Continue(()));
    };
    flags.check()?;
    let (subscription, mut configured) =
        subscription::Subscription::new(flags, server, rls, limiter)?;
    // The stop signals are caught before the subscription starts, so none is missed.
    let stop = (!flags.rls_xds_start_without_config).then(stop);
    if stop.is_some() {
        tracing::info!(
            server = %server,
            node = %flags.rls_xds_node_id,
            "waiting for the first rate limit configuration from the xDS management server before opening the listeners"
        );
    }
    tokio::spawn(subscription.run());
    let Some(stop) = stop else {
        return Ok(ControlFlow::Continue(()));
    };
    tokio::select! {
        configured = configured.wait_for(|configured| *configured) => match configured {
            Ok(_) => Ok(ControlFlow::Continue(())),
            Err(_) => Err("the xDS subscription ended before a configuration arrived".to_owned()),
        },
        () = stop => Ok(ControlFlow::Break(())),
    }
}
