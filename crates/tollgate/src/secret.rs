//! A secret key and the keyed digests made with it (HMAC-SHA-256): pseudonyms for keys in logs
//! that cannot be guessed back by hashing candidates, and tags that prove a value was issued
//! here. A fresh key comes from the operating system's random source; several processes that
//! must agree share one through configuration.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shortest secret accepted from configuration, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// A secret key for keyed digests. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Secret {
    /// HMAC keyed with the secret, its padded key blocks hashed once: each digest starts from
    /// a copy of it (which halves the cost of a short digest).
    keyed: Hmac<Sha256>,
}

/// Why a configured secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// Too short to resist guessing.
    #[error("the secret is {0} bytes long; it needs at least {MIN_SECRET_BYTES}")]
    TooShort(usize),
}

impl Secret {
    /// A fresh random secret, known only to this process.
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            // The standard library's hash keys come from the same source by another path.
            use std::hash::BuildHasher;
            for (chunk, salt) in key.chunks_mut(8).zip(0u64..) {
                let word = std::hash::RandomState::new().hash_one(salt);
                chunk.copy_from_slice(&word.to_le_bytes());
            }
        }
        Self::keyed(&key)
    }

    /// A secret derived from configured bytes (a passphrase or key file), so that several
    /// processes given the same bytes make the same digests.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SecretError> {
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort(bytes.len()));
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(&Self::keyed_by(b"tollgate secret", bytes));
        Ok(Self::keyed(&key))
    }

    fn keyed(key: &[u8; 32]) -> Self {
        Self {
            keyed: Self::mac(key),
        }
    }

    /// The keyed digest of `parts`, each length-prefixed so that no two lists of parts give
    /// the same input.
    pub fn digest(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// The first `bytes` bytes of the digest of `parts`, in lower-case hex.
    pub fn digest_hex(&self, parts: &[&[u8]], bytes: usize) -> String {
        let mut text = String::with_capacity(2 * bytes);
        crate::hex::push(&mut text, &self.digest(parts)[..bytes.min(32)]);
        text
    }

    fn keyed_by(key: &[u8], message: &[u8]) -> [u8; 32] {
        let mut mac = Self::mac(key);
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    fn mac(key: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length; this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Compares two byte strings in time that depends only on their lengths, for tags and tokens.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_keyed_and_unambiguous() {
        let a = Secret::random();
        let b = Secret::random();
        assert_ne!(
            a.digest(&[b"ip:203.0.113.7"]),
            b.digest(&[b"ip:203.0.113.7"])
        );
        assert_ne!(a.digest(&[b"ab", b"c"]), a.digest(&[b"a", b"bc"]));
        assert_eq!(a.digest_hex(&[b"k"], 8).len(), 16);
        assert_eq!(format!("{a:?}"), "Secret(..)");
    }

    #[test]
    fn configured_secrets_agree_across_processes_and_must_be_long() {
        let one = Secret::from_bytes(b"sixteen bytes at least").unwrap();
        let two = Secret::from_bytes(b"sixteen bytes at least").unwrap();
        assert_eq!(one.digest(&[b"k"]), two.digest(&[b"k"]));
        assert_eq!(
            Secret::from_bytes(b"short").unwrap_err(),
            SecretError::TooShort(5)
        );
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
