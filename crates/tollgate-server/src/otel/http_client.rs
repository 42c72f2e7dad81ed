//! The OTLP/HTTP exporter's client: hyper's, run on the server's Tokio runtime. The batch
//! processor exports from a thread of its own, outside the runtime, where hyper's connector and
//! timer cannot run; each request is handed to the runtime and awaited from there.

use std::time::Duration;

use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// How long one export may take, as `OTEL_EXPORTER_OTLP_TIMEOUT` defaults it.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// An [`HttpClient`] whose requests run on a Tokio runtime, whichever thread sends them.
#[derive(Debug, Clone)]
pub(super) struct RuntimeHttpClient {
    runtime: tokio::runtime::Handle,
    client: HyperClient,
}

impl RuntimeHttpClient {
    /// A client whose requests run on `runtime`.
    pub(super) fn on(runtime: tokio::runtime::Handle) -> Self {
        Self {
            runtime,
            client: HyperClient::with_default_connector(EXPORT_TIMEOUT, None),
        }
    }
}

#[tonic::async_trait]
impl HttpClient for RuntimeHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|error| Box::new(error) as HttpError)?
    }
}
