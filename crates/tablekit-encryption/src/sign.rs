//! Signing keys: authenticity of an item that does not rest on the key-encryption key. The
//! item MAC proves only that the writer could wrap a content key — with an RSA
//! key-encryption key, anyone holding its public half can. A signature proves the writer held
//! the signing key.

use std::fmt;

use ed25519_dalek::Signer as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tablekit_core::{Error, Result};
use zeroize::Zeroizing;

use crate::key::{BoxFuture, check_key_id};

/// A key that signs items on writes and verifies their signatures on reads. The secret never
/// leaves the implementation, which may be local ([`HmacSigningKey`], [`Ed25519SigningKey`])
/// or a remote key store.
///
/// The message signed is the item message of format version 3 (the crate README's "Format"
/// section): the keys, the wrapped content key, every listed property with its value as
/// stored, the flags and this key's id and algorithm.
///
/// Like [`KeyEncryptionKey`](crate::KeyEncryptionKey), the methods return boxed futures so
/// that the trait is object safe; implement them with `Box::pin(async move { … })`.
pub trait SigningKey: Send + Sync {
    /// The key's identifier, stored with every item it signs.
    fn id(&self) -> &str;

    /// The signature algorithm's name, stored with every item it signs (`HS256`, `EdDSA`).
    fn algorithm(&self) -> &str;

    /// Signs `message`.
    ///
    /// # Errors
    /// Any error of the key store, or [`Error::InvalidConfig`] for a key that only verifies;
    /// the write is then not attempted.
    fn sign<'a>(&'a self, message: &'a [u8]) -> BoxFuture<'a, Result<Vec<u8>>>;

    /// Whether `signature` is this key's signature of `message`. A signature that does not
    /// verify is `Ok(false)`, not an error.
    ///
    /// # Errors
    /// Only when the key cannot be used (a key store unreachable): reads pass it on.
    fn verify<'a>(&'a self, message: &'a [u8], signature: &'a [u8]) -> BoxFuture<'a, Result<bool>>;
}

fn config(part: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        part: part.into(),
        reason: reason.into(),
    }
}

/// A signing key from a shared secret: HMAC-SHA-256, algorithm `HS256`. Whoever verifies
/// holds the secret and can therefore also sign: it proves that the writer held this secret,
/// independently of the key-encryption key, not which holder wrote. `Debug` shows the id only;
/// the secret is wiped when this is dropped.
///
/// ```
/// use tablekit_encryption::{HmacSigningKey, SigningKey};
/// let key = HmacSigningKey::new("hr-signing-2026", &[5u8; 32]).unwrap();
/// assert_eq!((key.id(), key.algorithm()), ("hr-signing-2026", "HS256"));
/// assert!(HmacSigningKey::new("short", &[5u8; 16]).is_err());
/// ```
pub struct HmacSigningKey {
    id: String,
    secret: Zeroizing<Vec<u8>>,
}

impl HmacSigningKey {
    /// The algorithm name stored with items this signs.
    pub const ALGORITHM: &'static str = "HS256";

    /// A key named `id` from a secret of at least 32 bytes.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `secret` is shorter than 32 bytes or `id` is empty or
    /// contains control characters.
    pub fn new(id: impl Into<String>, secret: &[u8]) -> Result<Self> {
        let id = id.into();
        check_key_id(&id)?;
        if secret.len() < 32 {
            return Err(config(
                "HMAC signing key",
                format!("must be at least 32 bytes, not {}", secret.len()),
            ));
        }
        Ok(Self {
            id,
            secret: Zeroizing::new(secret.to_vec()),
        })
    }

    fn mac(&self, message: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .expect("HMAC takes a key of any length");
        mac.update(message);
        mac
    }
}

impl SigningKey for HmacSigningKey {
    fn id(&self) -> &str {
        &self.id
    }

    fn algorithm(&self) -> &str {
        Self::ALGORITHM
    }

    fn sign<'a>(&'a self, message: &'a [u8]) -> BoxFuture<'a, Result<Vec<u8>>> {
        let tag = self.mac(message).finalize().into_bytes().to_vec();
        Box::pin(async move { Ok(tag) })
    }

    fn verify<'a>(&'a self, message: &'a [u8], signature: &'a [u8]) -> BoxFuture<'a, Result<bool>> {
        // Compared in constant time.
        let valid = self.mac(message).verify_slice(signature).is_ok();
        Box::pin(async move { Ok(valid) })
    }
}

impl fmt::Debug for HmacSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HmacSigningKey")
            .field("id", &self.id)
            .field("algorithm", &Self::ALGORITHM)
            .finish_non_exhaustive()
    }
}

/// An Ed25519 signing key (RFC 8032), algorithm `EdDSA`: writers sign with the private key,
/// readers verify with the public key alone and cannot sign. Built from the private key's
/// 32-byte seed ([`from_seed`](Self::from_seed)) to sign and verify, or from the public key
/// ([`verifying`](Self::verifying)) to verify only. Signing is deterministic. The private key
/// is wiped when this is dropped; `Debug` shows the id and whether it can sign.
///
/// ```
/// use tablekit_encryption::{Ed25519SigningKey, SigningKey};
/// let writer = Ed25519SigningKey::from_seed("hr-signing-2026", &[6u8; 32]).unwrap();
/// let reader = Ed25519SigningKey::verifying("hr-signing-2026", &writer.public_key()).unwrap();
/// assert_eq!(reader.algorithm(), "EdDSA");
/// assert!(!reader.can_sign());
/// ```
pub struct Ed25519SigningKey {
    id: String,
    verifying: ed25519_dalek::VerifyingKey,
    signing: Option<ed25519_dalek::SigningKey>,
}

impl Ed25519SigningKey {
    /// The algorithm name stored with items this signs.
    pub const ALGORITHM: &'static str = "EdDSA";

    /// A key named `id` that signs and verifies, from the private key's 32-byte seed.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `id` is empty or contains control characters.
    pub fn from_seed(id: impl Into<String>, seed: &[u8; 32]) -> Result<Self> {
        let id = id.into();
        check_key_id(&id)?;
        let signing = ed25519_dalek::SigningKey::from_bytes(seed);
        Ok(Self {
            id,
            verifying: signing.verifying_key(),
            signing: Some(signing),
        })
    }

    /// A key named `id` that verifies only, from the 32-byte public key.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the bytes are not a valid Ed25519 public key, or `id` is
    /// empty or contains control characters.
    pub fn verifying(id: impl Into<String>, public_key: &[u8; 32]) -> Result<Self> {
        let id = id.into();
        check_key_id(&id)?;
        let verifying = ed25519_dalek::VerifyingKey::from_bytes(public_key)
            .map_err(|_| config("Ed25519 public key", "not a valid point"))?;
        Ok(Self {
            id,
            verifying,
            signing: None,
        })
    }

    /// The public key, for readers' [`verifying`](Self::verifying) keys.
    pub fn public_key(&self) -> [u8; 32] {
        self.verifying.to_bytes()
    }

    /// Whether this key holds the private key.
    pub fn can_sign(&self) -> bool {
        self.signing.is_some()
    }
}

impl SigningKey for Ed25519SigningKey {
    fn id(&self) -> &str {
        &self.id
    }

    fn algorithm(&self) -> &str {
        Self::ALGORITHM
    }

    fn sign<'a>(&'a self, message: &'a [u8]) -> BoxFuture<'a, Result<Vec<u8>>> {
        let signed = match &self.signing {
            Some(key) => Ok(key.sign(message).to_bytes().to_vec()),
            None => Err(config(
                "Ed25519 signing key",
                format!(
                    "key {:?} holds only the public key: it verifies, it cannot sign",
                    self.id
                ),
            )),
        };
        Box::pin(async move { signed })
    }

    fn verify<'a>(&'a self, message: &'a [u8], signature: &'a [u8]) -> BoxFuture<'a, Result<bool>> {
        let valid = ed25519_dalek::Signature::from_slice(signature)
            // Strict verification: no malleable signatures, no small-order keys.
            .is_ok_and(|signature| self.verifying.verify_strict(message, &signature).is_ok());
        Box::pin(async move { Ok(valid) })
    }
}

impl fmt::Debug for Ed25519SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519SigningKey")
            .field("id", &self.id)
            .field("algorithm", &Self::ALGORITHM)
            .field("can_sign", &self.can_sign())
            .finish_non_exhaustive()
    }
}
