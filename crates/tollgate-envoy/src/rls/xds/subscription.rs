//! The state-of-the-world ADS subscription, as envoyproxy/ratelimit's client holds it: one
//! wildcard subscription to RateLimitConfig resources; each response is the whole
//! configuration, put in force whole and ACKed, or refused whole and NACKed with why (the
//! configuration in force stays); when the server goes away the configuration in force keeps
//! serving while the subscription is opened again after a backoff.

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use tokio::sync::{mpsc, watch};
use tollgate::{AnyStore, Limiter};

use super::backoff::Backoff;
use super::connect::{Connector, error_chain};
use super::convert::{TYPE_URL, configuration};
use super::flags::{XdsFlags, XdsHeader, XdsServer};
use crate::rls::Rls;
use crate::rls::proto::core::Node;
use crate::rls::proto::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::rls::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use crate::rls::proto::google::rpc::Status;

/// gRPC's INVALID_ARGUMENT, the code a NACK's error detail carries.
const INVALID_ARGUMENT: i32 = 3;

/// One subscription for the life of the process.
#[derive(Debug)]
pub(crate) struct Subscription {
    server: XdsServer,
    connector: Connector,
    node: Node,
    headers: Vec<XdsHeader>,
    max_message_bytes: usize,
    /// Waits between connections.
    reconnect: Backoff,
    /// The wait before refusing again a response already refused (the first reconnection
    /// wait): short enough for a fix to arrive soon, long enough not to spin.
    repeat_pause: std::time::Duration,
    rls: Arc<Rls>,
    limiter: Limiter<AnyStore>,
    /// The version in force: what requests say they have (empty before the first).
    version: String,
    /// The digest of the last response refused and why: a server that sends it again (as
    /// go-control-plane's does right after a NACK) gets the same answer, after a wait, so
    /// that the two do not spin.
    refused: Option<([u8; 32], String)>,
    /// Set once a configuration is in force.
    configured: watch::Sender<bool>,
}

/// Why a stream ended.
type Ended = String;

impl Subscription {
    /// The subscription the flags describe, and a receiver that turns true once a
    /// configuration is in force.
    pub(crate) fn new(
        flags: &XdsFlags,
        server: &XdsServer,
        rls: &Arc<Rls>,
        limiter: &Limiter<AnyStore>,
    ) -> Result<(Self, watch::Receiver<bool>), String> {
        let metadata = flags
            .rls_xds_node_metadata
            .iter()
            .map(|(key, value)| {
                let value = prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(value.clone())),
                };
                (key.clone(), value)
            })
            .collect();
        let (configured, waiting) = watch::channel(false);
        let subscription = Self {
            server: server.clone(),
            connector: Connector::new(flags, server)?,
            node: Node {
                id: flags.rls_xds_node_id.clone(),
                cluster: String::new(),
                metadata: Some(prost_types::Struct { fields: metadata }),
            },
            headers: flags.rls_xds_header.clone(),
            max_message_bytes: flags.rls_xds_max_message_bytes,
            reconnect: Backoff::new(
                flags.rls_xds_backoff_initial,
                flags.rls_xds_backoff_max,
                flags.rls_xds_backoff_jitter,
            ),
            repeat_pause: flags.rls_xds_backoff_initial,
            rls: Arc::clone(rls),
            limiter: limiter.clone(),
            version: String::new(),
            refused: None,
            configured,
        };
        Ok((subscription, waiting))
    }

    /// Subscribes, and again whenever the stream ends, for the life of the process.
    pub(crate) async fn run(mut self) {
        loop {
            let ended = self.stream().await;
            let wait = self.reconnect.next_wait();
            if self.version.is_empty() {
                tracing::warn!(server = %self.server, "{ended}; no rate limit configuration yet; subscribing again in {wait:?}");
            } else {
                tracing::warn!(
                    server = %self.server,
                    "{ended}; the rate limit configuration in force (version {:?}, {} domains) keeps serving; subscribing again in {wait:?}",
                    self.version,
                    self.rls.config().domains().count()
                );
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// One stream, until it ends.
    async fn stream(&mut self) -> Ended {
        let channel = match self.connector.connect().await {
            Ok(channel) => channel,
            Err(error) => return format!("cannot reach the xDS management server: {error}"),
        };
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes);
        let (requests, mut outgoing) = mpsc::channel::<DiscoveryRequest>(2);
        // The first request says which version this process has, and acknowledges no nonce:
        // nonces belong to a stream.
        let first = self.request(TYPE_URL, "", None);
        if requests.send(first).await.is_err() {
            return "the xDS stream could not be started".to_owned();
        }
        let mut request = tonic::Request::new(futures_util::stream::poll_fn(move |cx| {
            outgoing.poll_recv(cx)
        }));
        for (name, value) in self.headers.iter().filter_map(|header| header.entry().ok()) {
            request.metadata_mut().insert(name.clone(), value.clone());
        }
        let mut responses = match client.stream_aggregated_resources(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return format!(
                    "the xDS stream could not be opened: {}",
                    status_text(&status)
                );
            }
        };
        tracing::info!(server = %self.server, node = %self.node.id, "subscribed to the xDS management server for the rate limit configuration");
        loop {
            let response = match responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return "the xDS management server ended the stream".to_owned(),
                Err(status) => {
                    return format!("the xDS stream broke: {}", status_text(&status));
                }
            };
            self.reconnect.reset();
            let answer = self.answer(response).await;
            if requests.send(answer).await.is_err() {
                return "the xDS stream closed".to_owned();
            }
        }
    }

    /// Puts a response's configuration in force and ACKs it, or NACKs it with why.
    async fn answer(&mut self, response: DiscoveryResponse) -> DiscoveryRequest {
        if response.type_url != TYPE_URL {
            let why = format!(
                "type {:?} is not subscribed to (only {TYPE_URL})",
                response.type_url
            );
            tracing::warn!(server = %self.server, "xDS response refused: {why}");
            return self.request(&response.type_url, &response.nonce, Some(why));
        }
        let digest: [u8; 32] = {
            let mut hash = Sha256::new();
            for resource in &response.resources {
                for part in [resource.type_url.as_bytes(), &resource.value] {
                    hash.update((part.len() as u64).to_le_bytes());
                    hash.update(part);
                }
            }
            hash.finalize().into()
        };
        if let Some((refused, why)) = &self.refused
            && *refused == digest
        {
            let why = why.clone();
            let wait = self.repeat_pause;
            tracing::debug!(server = %self.server, version = %response.version_info, "the same configuration again, refused again in {wait:?}");
            tokio::time::sleep(wait).await;
            return self.request(TYPE_URL, &response.nonce, Some(why));
        }
        let loaded = configuration(&response.resources, self.rls.merges_domains());
        let metrics = self.limiter.telemetry().metrics();
        match loaded {
            Ok(config) => {
                let what = self.rls.config().domains_changed(&config);
                tracing::info!(
                    server = %self.server,
                    version = %response.version_info,
                    domains = config.domains().count(),
                    "rate limit service configuration reloaded: {what}"
                );
                self.rls.set_config(config);
                metrics.record_reload(true);
                metrics.set_last_reload_successful(true);
                self.version = response.version_info;
                self.refused = None;
                self.configured.send_replace(true);
                self.request(TYPE_URL, &response.nonce, None)
            }
            Err(why) => {
                tracing::error!(
                    server = %self.server,
                    version = %response.version_info,
                    "rate limit service configuration refused, the previous one stays in force: {why}"
                );
                metrics.record_reload(false);
                metrics.set_last_reload_successful(false);
                self.refused = Some((digest, why.clone()));
                self.request(TYPE_URL, &response.nonce, Some(why))
            }
        }
    }

    /// A request: the version in force, the nonce answered, and for a NACK why.
    fn request(&self, type_url: &str, nonce: &str, refused: Option<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: self.version.clone(),
            node: Some(self.node.clone()),
            resource_names: Vec::new(),
            type_url: type_url.to_owned(),
            response_nonce: nonce.to_owned(),
            error_detail: refused.map(|message| Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
        }
    }
}

/// A gRPC status as the logs say it: its code, then its message and causes, each said once.
fn status_text(status: &tonic::Status) -> String {
    let mut said = status.message().to_owned();
    if let Some(source) = std::error::Error::source(status) {
        let causes = error_chain(source);
        said = if said.is_empty() || causes.starts_with(&said) {
            causes
        } else {
            format!("{said}: {causes}")
        };
    }
    if said.is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {said}", status.code())
    }
}
