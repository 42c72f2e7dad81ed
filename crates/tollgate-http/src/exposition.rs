//! `GET /metrics`: the limiter's metrics, then those of the services this process runs, in one
//! OpenMetrics text.

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use tollgate::{AnyStore, Limiter};

use tollgate_envoy::rlqs::Rlqs;
use tollgate_envoy::rls::Rls;

/// The content type of [`metrics_text`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The limiter's metrics and, where this process serves them, the rate limit service's
/// per-descriptor statistics, the quota service's, the proxy's, and the process's own.
pub fn metrics_text(
    limiter: &Limiter<AnyStore>,
    rls: Option<&Rls>,
    quotas: Option<&Rlqs>,
    proxy: Option<&prometheus_client::registry::Registry>,
) -> String {
    const EOF: &str = "# EOF\n";
    let mut text = limiter.telemetry().metrics_text();
    if text.ends_with(EOF) {
        text.truncate(text.len() - EOF.len());
    }
    // Writing to a String cannot fail.
    if let Some(rls) = rls {
        let _ = encode_registry(&mut text, &rls.stats().registry());
    }
    if let Some(quotas) = quotas {
        let _ = encode_registry(&mut text, &quotas.stats().registry());
    }
    if let Some(proxy) = proxy {
        let _ = encode_registry(&mut text, proxy);
    }
    let _ = encode_registry(&mut text, &crate::process_metrics::registry());
    let _ = encode_eof(&mut text);
    text
}
