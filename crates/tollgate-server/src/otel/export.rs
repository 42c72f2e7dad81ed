//! The exporter: spans batched and sent over OTLP, by gRPC (on the workspace's tonic) or by
//! HTTP with protobuf bodies (on its hyper), to the collector `--otlp-endpoint` names.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use super::http_client::RuntimeHttpClient;

/// How spans reach the collector, as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (a collector's port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies, to `ENDPOINT/v1/traces` (a collector's port 4318).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

/// Flags of the exporter, for `serve` and `proxy`.
#[derive(Debug, Clone, clap::Args)]
pub struct OtelFlags {
    /// Export a span per check over OTLP to this collector, e.g. http://127.0.0.1:4317 (gRPC)
    /// or http://127.0.0.1:4318 (HTTP, which sends to /v1/traces under it). Off unless set.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// How spans are sent: `grpc` or `http/protobuf`.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_PROTOCOL",
        value_enum,
        default_value = "grpc",
        value_name = "PROTOCOL"
    )]
    pub otlp_protocol: OtlpProtocol,
    /// The service name of the exported spans.
    #[arg(
        long,
        env = "OTEL_SERVICE_NAME",
        default_value = "tollgate",
        value_name = "NAME"
    )]
    pub otel_service_name: String,
    /// `service.namespace` of the exported spans.
    #[arg(long, env = "TOLLGATE_OTEL_SERVICE_NAMESPACE", value_name = "NAME")]
    pub otel_service_namespace: Option<String>,
    /// `service.instance.id` of the exported spans (the pod's name, say).
    #[arg(long, env = "TOLLGATE_OTEL_SERVICE_INSTANCE_ID", value_name = "ID")]
    pub otel_service_instance_id: Option<String>,
    /// The share of traces sampled, from 0 to 1, a caller's sampling decision kept (parent
    /// based).
    #[arg(long, env = "TOLLGATE_OTEL_SAMPLING_RATIO", default_value_t = 1.0, value_parser = sampling_ratio, value_name = "RATIO")]
    pub otel_sampling_ratio: f64,
}

/// `--otel-sampling-ratio`: from 0 to 1.
fn sampling_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text:?} is not a ratio from 0 to 1")),
    }
}

/// The running exporter; [`shutdown`](Self::shutdown) sends what is still batched.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Starts exporting when `flags` name an endpoint. Call within the Tokio runtime: the
    /// exporter's connections live on it.
    pub fn start(flags: &OtelFlags) -> Result<Option<Self>, String> {
        let Some(endpoint) = flags.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) else {
            return Ok(None);
        };
        if !endpoint.starts_with("http://") {
            return Err(format!(
                "--otlp-endpoint {endpoint:?}: expected http://HOST:PORT (a collector reached \
                 without TLS, such as an agent on this host)"
            ));
        }
        let exporter = match flags.otlp_protocol {
            OtlpProtocol::Grpc => SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .build(),
            // The endpoint is a base, as the OTLP specification has it for HTTP.
            OtlpProtocol::HttpProtobuf => {
                let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
                    "the OpenTelemetry exporter starts within the Tokio runtime".to_owned()
                })?;
                SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_http_client(RuntimeHttpClient::on(runtime))
                    .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
                    .build()
            }
        }
        .map_err(|error| format!("--otlp-endpoint {endpoint:?}: {error}"))?;
        let mut resource = Resource::builder().with_service_name(flags.otel_service_name.clone());
        for (key, value) in [
            ("service.namespace", &flags.otel_service_namespace),
            ("service.instance.id", &flags.otel_service_instance_id),
        ] {
            if let Some(value) = value {
                resource =
                    resource.with_attribute(opentelemetry::KeyValue::new(key, value.clone()));
            }
        }
        let mut provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build());
        // Without a ratio given, the SDK's own sampler, which OTEL_TRACES_SAMPLER sets.
        if flags.otel_sampling_ratio < 1.0 {
            provider = provider.with_sampler(Sampler::ParentBased(Box::new(
                Sampler::TraceIdRatioBased(flags.otel_sampling_ratio),
            )));
        }
        // The batch processor reads OTEL_BSP_SCHEDULE_DELAY and its other standard variables.
        let provider = provider.build();
        tollgate_http::otel::enable();
        Ok(Some(Self { provider }))
    }

    /// The subscriber layer that turns check spans, and only those, into exported spans.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("tollgate"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(
                Targets::new().with_target(tollgate_http::otel::TARGET, tracing::Level::INFO),
            )
    }

    /// Sends the spans still batched and stops the exporter.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!("the OpenTelemetry exporter did not shut down cleanly: {error}");
        }
    }
}
