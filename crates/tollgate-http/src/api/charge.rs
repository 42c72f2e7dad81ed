//! Charges: the check API's receipt for what an admitted check took, and the rule that a
//! refund must name one.
//!
//! An admitted check's answer carries `charge`, a token that binds the check's body (policy and
//! attributes, or inline limits, and the cost), the time of its decision, what it took charge
//! by charge (cost and the store's time of each: its [`Receipt`]) and what it took it from
//! (each charge's role, key and limit) under a keyed digest. A refund sends the same body and
//! the token: a token the server did not issue for that body and those charges (a denied check
//! has none; the policies changed the charges since) is refused, and the token is claimed in
//! the store before anything is given back, so that a second refund of the same charge is
//! refused on every node sharing the store. What is given back is read from the receipt, never
//! from the policies in force by then (a reload from cost 1 to cost 50 does not make a refund
//! give back 50). Claims are ordinary limit state (one per refund window), pinned so that a
//! full in-process store does not evict them, expire by themselves and live wherever the
//! limits live.

use std::time::Duration;

use tollgate::policy::Receipt;
use tollgate::secret::{Secret, constant_time_eq};
use tollgate::{AnyStore, Check, Limit, Limiter, MAX_ITEMS, Micros, Quota};

use super::problem::ApiError;

/// How a token starts, so that a later format can be told apart (`c1.` tokens carried no
/// receipt).
const PREFIX: &str = "c2.";
/// Bytes of the digest a token carries.
const TAG_BYTES: usize = 16;
/// The longest token read, in characters: a receipt of the most items a check may hold.
const MAX_TOKEN_CHARS: usize = PREFIX.len() + 2 * (8 + 3 + MAX_ITEMS * 16 + TAG_BYTES);

/// What a redeemed token is for: each is claimed once, apart from the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// A refund or a settlement (one or the other, once).
    GiveBack,
    /// Releasing concurrency slots.
    Release,
}

impl Claim {
    fn key_prefix(self) -> &'static str {
        match self {
            Claim::GiveBack => "charge|",
            Claim::Release => "release|",
        }
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
        "charge: does not match this check; send the very body of the admitted check with its charge (servers sharing a store must share TOLLGATE_REFUND_SECRET; a charge whose policies were changed since to take other limits can no longer be given back)"
    )]
    Mismatch,
    /// Refunded before.
    #[error("charge: already refunded; a charge is given back at most once")]
    AlreadyRefunded,
    /// Its slots were released before.
    #[error("charge: its slots were already released; a charge releases them at most once")]
    AlreadyReleased,
    /// Older than the refund window.
    #[error("charge: older than the refund window of {0:?}; it can no longer be refunded")]
    Expired(Duration),
}

impl From<ChargeError> for ApiError {
    fn from(error: ChargeError) -> Self {
        match error {
            ChargeError::AlreadyRefunded | ChargeError::AlreadyReleased => {
                ApiError::conflict(error.to_string())
            }
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

    /// The token for a check admitted at `at`, whose body reads `canonical`, that took
    /// `receipt` from the charges `charged` identifies.
    pub(crate) fn issue(
        &self,
        at: Micros,
        canonical: &[u8],
        charged: &[u8],
        receipt: &Receipt,
    ) -> String {
        let receipt = encode_receipt(at, receipt);
        let tag = self.tag(at, canonical, charged, &receipt);
        let mut token = String::with_capacity(PREFIX.len() + 2 * (8 + receipt.len() + TAG_BYTES));
        token.push_str(PREFIX);
        tollgate::hex::push(&mut token, &at.to_be_bytes());
        tollgate::hex::push(&mut token, &receipt);
        tollgate::hex::push(&mut token, &tag);
        token
    }

    /// Checks that `token` was issued for the check whose body reads `canonical` and that took
    /// from the charges `charged` identifies (the same request planned again), claims it once
    /// for `claim`, and returns what the check took.
    pub(crate) async fn redeem(
        &self,
        limiter: &Limiter<AnyStore>,
        token: &str,
        canonical: &[u8],
        charged: &[u8],
        claim: Claim,
    ) -> Result<Receipt, ApiError> {
        let parsed = parse(token).ok_or(ChargeError::Malformed)?;
        let expected = self.tag(parsed.at, canonical, charged, &parsed.receipt);
        if !constant_time_eq(&parsed.tag, &expected) {
            return Err(ChargeError::Mismatch.into());
        }
        let receipt = decode_receipt(parsed.at, &parsed.receipt).ok_or(ChargeError::Malformed)?;
        let mut claim_key = String::from(claim.key_prefix());
        tollgate::hex::push(&mut claim_key, &parsed.tag);
        let limit = if limiter.global().is_some() {
            &self.global_claim
        } else {
            &self.claim
        };
        let claimed = limiter.check(&Check::one(claim_key, limit)).await?;
        if !claimed.is_admitted() {
            return Err(match claim {
                Claim::GiveBack => ChargeError::AlreadyRefunded,
                Claim::Release => ChargeError::AlreadyReleased,
            }
            .into());
        }
        let age = claimed.at().saturating_sub(parsed.at);
        if u128::from(age) > self.window.as_micros() {
            return Err(ChargeError::Expired(self.window).into());
        }
        Ok(receipt)
    }

    fn tag(&self, at: Micros, canonical: &[u8], charged: &[u8], receipt: &[u8]) -> [u8; TAG_BYTES] {
        let digest =
            self.secret
                .digest(&[b"charge", &at.to_be_bytes(), canonical, charged, receipt]);
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&digest[..TAG_BYTES]);
        tag
    }
}

/// A receipt as a token carries it: the number of charges, then each one's cost and how much
/// earlier than `at` it was taken (zero but across a cluster's masters), as LEB128 numbers.
fn encode_receipt(at: Micros, receipt: &Receipt) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + 2 * receipt.items().len());
    push_number(&mut bytes, receipt.items().len() as u64);
    for &(cost, charged_at) in receipt.items() {
        push_number(&mut bytes, cost);
        push_number(&mut bytes, at.saturating_sub(charged_at));
    }
    bytes
}

/// [`encode_receipt`] read back; `None` for anything else.
fn decode_receipt(at: Micros, mut bytes: &[u8]) -> Option<Receipt> {
    let count = usize::try_from(read_number(&mut bytes)?).ok()?;
    if count > MAX_ITEMS {
        return None;
    }
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let cost = read_number(&mut bytes)?;
        let earlier = read_number(&mut bytes)?;
        items.push((cost, at.checked_sub(earlier)?));
    }
    bytes.is_empty().then(|| Receipt::new(items))
}

fn push_number(bytes: &mut Vec<u8>, mut value: u64) {
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(low);
            return;
        }
        bytes.push(low | 0x80);
    }
}

fn read_number(bytes: &mut &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// What a token carries.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    at: Micros,
    receipt: Vec<u8>,
    tag: [u8; TAG_BYTES],
}

/// The decision time, receipt and tag a token carries, if it is one.
fn parse(token: &str) -> Option<Parsed> {
    if token.len() > MAX_TOKEN_CHARS {
        return None;
    }
    let hex = token.strip_prefix(PREFIX)?;
    if hex.len() % 2 != 0 || hex.len() < 2 * (8 + 1 + TAG_BYTES) {
        return None;
    }
    let bytes = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let (at, rest) = bytes.split_at(8);
    let (receipt, tag) = rest.split_at(rest.len() - TAG_BYTES);
    Some(Parsed {
        at: Micros::from_be_bytes(at.try_into().ok()?),
        receipt: receipt.to_vec(),
        tag: tag.try_into().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_charges() -> Charges {
        Charges::new(Secret::random(), Duration::from_secs(3_600)).unwrap()
    }

    #[test]
    fn tokens_carry_their_time_and_receipt_and_bind_their_body_and_charges() {
        let charges = new_charges();
        let at = 1_700_000_000_123_456;
        let receipt = Receipt::new([(50, at), (1, at - 700)]);
        let token = charges.issue(at, b"{\"limits\":[1]}", b"ab", &receipt);
        let parsed = parse(&token).unwrap();
        assert_eq!(parsed.at, at);
        assert_eq!(decode_receipt(at, &parsed.receipt), Some(receipt));
        let tag = |at, body: &[u8], charged: &[u8]| charges.tag(at, body, charged, &parsed.receipt);
        assert_eq!(parsed.tag, tag(at, b"{\"limits\":[1]}", b"ab"));
        assert_ne!(parsed.tag, tag(at, b"{\"limits\":[2]}", b"ab"));
        assert_ne!(
            parsed.tag,
            tag(at, b"{\"limits\":[1]}", b"ac"),
            "other charges"
        );
        assert_ne!(parsed.tag, tag(at + 1, b"{\"limits\":[1]}", b"ab"));
        assert_ne!(
            parsed.tag,
            new_charges().tag(at, b"{\"limits\":[1]}", b"ab", &parsed.receipt),
            "another secret"
        );
    }

    #[test]
    fn anything_else_is_not_a_token() {
        for text in [
            "",
            "c2.",
            "c1.00",
            "c2.zz",
            &format!("c2.{}", "0".repeat(49)),
            &format!("c2.{}", "0".repeat(20_000)),
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
        assert_eq!(decode_receipt(10, &[2, 1, 0]), None, "cut short");
        assert_eq!(decode_receipt(10, &[1, 1, 11]), None, "before time began");
        assert_eq!(decode_receipt(10, &[1, 1, 0, 0]), None, "bytes left over");
    }
}
