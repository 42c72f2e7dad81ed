//! `--refund-window`, `--refund-secret-file` and `TOLLGATE_REFUND_SECRET`: the charges the
//! check API (`tollgate_http::api`) issues and redeems.

use std::time::Duration;

use tollgate::secret::Secret;
use tollgate_http::api::Charges;

/// `--refund-window` and the refund secret.
#[derive(Debug, Clone, clap::Args)]
pub struct RefundArgs {
    /// How long after its check a charge can be refunded.
    #[arg(long, env = "TOLLGATE_REFUND_WINDOW", default_value = "1h", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub refund_window: Duration,
    /// A file holding the secret charge tokens are signed with (at least 16 bytes), for servers
    /// that share a store and must accept each other's charges; `TOLLGATE_REFUND_SECRET` gives
    /// it directly. Without either, each process signs with a random secret of its own.
    #[arg(long, env = "TOLLGATE_REFUND_SECRET_FILE", value_name = "FILE")]
    pub refund_secret_file: Option<std::path::PathBuf>,
}

impl RefundArgs {
    /// The charges these settings describe.
    pub fn charges(&self) -> Result<Charges, String> {
        let configured = match (
            &self.refund_secret_file,
            std::env::var_os("TOLLGATE_REFUND_SECRET"),
        ) {
            (Some(path), _) => Some(
                std::fs::read(path)
                    .map_err(|error| format!("--refund-secret-file {}: {error}", path.display()))?,
            ),
            (None, Some(value)) => Some(value.into_encoded_bytes()),
            (None, None) => None,
        };
        let secret = match configured {
            Some(bytes) => Secret::from_bytes(bytes.trim_ascii())
                .map_err(|error| format!("the refund secret: {error}"))?,
            None => Secret::random(),
        };
        Charges::new(secret, self.refund_window)
    }
}
