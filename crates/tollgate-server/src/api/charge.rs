//! Charges: the check API's receipt for what an admitted check took, and the rule that a
//! refund must name one.
//!
//! An admitted check's answer carries `charge`, a token that binds the check's body (policy and
//! attributes, or inline limits, and the cost) to the time of its decision under a keyed
//! digest. A refund sends the same body and the token: a token the server did not issue for
//! that body (a denied check has none) is refused, and the token is claimed in the store before
//! anything is given back, so that a second refund of the same charge is refused on every node
//! sharing the store. Claims are ordinary limit state (one per refund window), so they expire
//! by themselves and live wherever the limits live.

use std::time::Duration;

use tollgate::secret::{Secret, constant_time_eq};
use tollgate::{AnyStore, Check, Limit, Limiter, Micros, Quota};

use super::problem::ApiError;

/// How a token starts, so that a later format can be told apart.
const PREFIX: &str = "c1.";
/// Bytes of the digest a token carries.
const TAG_BYTES: usize = 16;

/// `--refund-window` and the refund secret.
#[derive(Debug, Clone, clap::Args)]
pub struct RefundArgs {
    /// How long after its check a charge can be refunded.
    #[arg(long, env = "TOLLGATE_REFUND_WINDOW", default_value = "1h", value_parser = crate::flags::duration_arg, value_name = "DURATION")]
    pub refund_window: Duration,
    /// A file holding the secret charge tokens are signed with (at least 16 bytes), for servers
    /// that share a store and must accept each other's charges; `TOLLGATE_REFUND_SECRET` gives
    /// it directly. Without either, each process signs with a random secret of its own.
    #[arg(long, env = "TOLLGATE_REFUND_SECRET_FILE", value_name = "FILE")]
    pub refund_secret_file: Option<std::path::PathBuf>,
}

impl RefundArgs {
    /// The charges these settings describe.
    pub(crate) fn charges(&self) -> Result<Charges, String> {
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

/// Issues and redeems charge tokens.
#[derive(Debug)]
pub struct Charges {
    secret: Secret,
    window: Duration,
    claim: Limit,
    /// The same claim counted across regions, for a server with a global store: a token is
    /// claimed once everywhere, since every region refunds the same global limits.
    global_claim: Limit,
}

/// Why a refund was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChargeError {
    /// Not a token this server could have written.
    #[error(
        "charge: not a charge token (expected the `charge` of an admitted check's answer, as it was given)"
    )]
    Malformed,
    /// A token for another check, or from a server with another refund secret.
    #[error(
        "charge: does not match this check; send the very body of the admitted check with its charge (servers sharing a store must share TOLLGATE_REFUND_SECRET)"
    )]
    Mismatch,
    /// Refunded before.
    #[error("charge: already refunded; a charge is given back at most once")]
    AlreadyRefunded,
    /// Older than the refund window.
    #[error("charge: older than the refund window of {0:?}; it can no longer be refunded")]
    Expired(Duration),
}

impl From<ChargeError> for ApiError {
    fn from(error: ChargeError) -> Self {
        match error {
            ChargeError::AlreadyRefunded => ApiError::conflict(error.to_string()),
            other => ApiError::invalid(other.to_string()),
        }
    }
}

impl Charges {
    /// Charges signed with `secret`, refundable for `window` after their check.
    pub fn new(secret: Secret, window: Duration) -> Result<Self, String> {
        let micros = Micros::try_from(window.as_micros()).unwrap_or(Micros::MAX);
        let quota = Quota::from_micros(1, micros.max(1_000_000))
            .map_err(|error| format!("--refund-window: {error}"))?;
        let claim = |scope| {
            Limit::builder("~refund-claim", tollgate::Algorithm::Gcra, quota)
                .scope(scope)
                // A claim evicted before its window ends would let its charge be refunded again.
                .pinned(true)
                .build()
                .map_err(|error| format!("--refund-window: {error}"))
        };
        Ok(Self {
            secret,
            window,
            claim: claim(tollgate::Scope::Region)?,
            global_claim: claim(tollgate::Scope::Global)?,
        })
    }

    /// The token for a check admitted at `at`, whose body reads `canonical`.
    pub(crate) fn issue(&self, at: Micros, canonical: &[u8]) -> String {
        let tag = self.tag(at, canonical);
        let mut token = String::with_capacity(PREFIX.len() + 16 + 2 * TAG_BYTES);
        token.push_str(PREFIX);
        push_hex(&mut token, &at.to_be_bytes());
        push_hex(&mut token, &tag);
        token
    }

    /// Checks that `token` was issued for the check whose body reads `canonical`, claims it
    /// once, and returns when the check was decided.
    pub(crate) async fn redeem(
        &self,
        limiter: &Limiter<AnyStore>,
        token: &str,
        canonical: &[u8],
    ) -> Result<Micros, ApiError> {
        let (at, tag) = parse(token).ok_or(ChargeError::Malformed)?;
        if !constant_time_eq(&tag, &self.tag(at, canonical)) {
            return Err(ChargeError::Mismatch.into());
        }
        let mut claim_key = String::from("charge|");
        push_hex(&mut claim_key, &tag);
        let claim = if limiter.global().is_some() {
            &self.global_claim
        } else {
            &self.claim
        };
        let claimed = limiter.check(&Check::one(claim_key, claim)).await?;
        if !claimed.is_admitted() {
            return Err(ChargeError::AlreadyRefunded.into());
        }
        let age = claimed.at().saturating_sub(at);
        if u128::from(age) > self.window.as_micros() {
            return Err(ChargeError::Expired(self.window).into());
        }
        Ok(at)
    }

    fn tag(&self, at: Micros, canonical: &[u8]) -> [u8; TAG_BYTES] {
        let digest = self
            .secret
            .digest(&[b"charge", &at.to_be_bytes(), canonical]);
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&digest[..TAG_BYTES]);
        tag
    }
}

/// Appends `bytes` in lower-case hex (by table: this runs for every admitted check).
fn push_hex(text: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// The decision time and tag a token carries, if it is one.
fn parse(token: &str) -> Option<(Micros, [u8; TAG_BYTES])> {
    let hex = token.strip_prefix(PREFIX)?;
    if hex.len() != 16 + 2 * TAG_BYTES || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let byte = |i: usize| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok();
    let mut at = [0u8; 8];
    for (i, slot) in at.iter_mut().enumerate() {
        *slot = byte(i)?;
    }
    let mut tag = [0u8; TAG_BYTES];
    for (i, slot) in tag.iter_mut().enumerate() {
        *slot = byte(8 + i)?;
    }
    Some((Micros::from_be_bytes(at), tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_charges() -> Charges {
        Charges::new(Secret::random(), Duration::from_secs(3_600)).unwrap()
    }

    #[test]
    fn tokens_carry_their_time_and_bind_their_body() {
        let charges = new_charges();
        let token = charges.issue(1_700_000_000_123_456, b"{\"limits\":[1]}");
        let (at, tag) = parse(&token).unwrap();
        assert_eq!(at, 1_700_000_000_123_456);
        assert_eq!(tag, charges.tag(at, b"{\"limits\":[1]}"));
        assert_ne!(tag, charges.tag(at, b"{\"limits\":[2]}"));
        assert_ne!(tag, charges.tag(at + 1, b"{\"limits\":[1]}"));
        assert_ne!(
            tag,
            new_charges().tag(at, b"{\"limits\":[1]}"),
            "another secret"
        );
    }

    #[test]
    fn anything_else_is_not_a_token() {
        for text in [
            "",
            "c1.",
            "c2.00",
            "c1.zz",
            &format!("c1.{}", "0".repeat(47)),
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }
}
