//! Key-encryption keys held in this process: AES key wrap and RSA-OAEP.

use std::fmt;

use aes::cipher::generic_array::GenericArray;
use aes_gcm::aead::OsRng;
use aes_kw::KekAes256;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::traits::PublicKeyParts;
use rsa::{Oaep, RsaPrivateKey};
use sha1::Sha1;
use tablekit_core::{Error, Result};
use zeroize::Zeroizing;

use crate::key::{
    BoxFuture, CONTENT_KEY_LEN, ContentKey, KeyEncryptionKey, UnwrapError, WrappedKey, check_key_id,
};

fn config(part: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig {
        part: part.into(),
        reason: reason.into(),
    }
}

fn check_algorithm(wrapped: &WrappedKey, own: &str) -> std::result::Result<(), UnwrapError> {
    if wrapped.algorithm() == own {
        Ok(())
    } else {
        Err(UnwrapError::rejected(format!(
            "the key was wrapped with {:?}; this key unwraps {own}",
            wrapped.algorithm()
        )))
    }
}

/// A key-encryption key from 32 raw bytes: AES-256 key wrap (RFC 3394), algorithm `A256KW`.
/// Wrapping and unwrapping are local and send no request. The key schedule is wiped when this
/// is dropped; `Debug` shows the id only.
///
/// ```
/// use tablekit_encryption::{AesKeyWrap, KeyEncryptionKey};
/// let kek = AesKeyWrap::new("orders-2026", &[7u8; 32]).unwrap();
/// assert_eq!((kek.id(), kek.algorithm()), ("orders-2026", "A256KW"));
/// assert!(AesKeyWrap::new("short", &[7u8; 16]).is_err());
/// ```
pub struct AesKeyWrap {
    id: String,
    kek: KekAes256,
}

impl AesKeyWrap {
    /// The algorithm name stored with keys this wraps.
    pub const ALGORITHM: &'static str = "A256KW";

    /// A key named `id` from its 32 bytes.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `key` is not 32 bytes long or `id` is empty or contains
    /// control characters.
    pub fn new(id: impl Into<String>, key: &[u8]) -> Result<Self> {
        let id = id.into();
        check_key_id(&id)?;
        if key.len() != 32 {
            return Err(config(
                "AES key-wrap key",
                format!("must be 32 bytes (AES-256), not {}", key.len()),
            ));
        }
        Ok(Self {
            id,
            kek: KekAes256::new(GenericArray::from_slice(key)),
        })
    }
}

impl KeyEncryptionKey for AesKeyWrap {
    fn id(&self) -> &str {
        &self.id
    }

    fn algorithm(&self) -> &str {
        Self::ALGORITHM
    }

    fn wrap<'a>(&'a self, key: &'a ContentKey) -> BoxFuture<'a, Result<WrappedKey>> {
        let mut out = vec![0u8; CONTENT_KEY_LEN + aes_kw::IV_LEN];
        let wrapped = self
            .kek
            .wrap(key.expose(), &mut out)
            .map(|()| WrappedKey::new(Self::ALGORITHM, out))
            .map_err(|e| config("AES key-wrap key", format!("wrapping failed: {e}")));
        Box::pin(async move { wrapped })
    }

    fn unwrap<'a>(
        &'a self,
        wrapped: &'a WrappedKey,
    ) -> BoxFuture<'a, std::result::Result<ContentKey, UnwrapError>> {
        let result = check_algorithm(wrapped, Self::ALGORITHM).and_then(|()| {
            let bytes = wrapped.bytes();
            if bytes.len() != CONTENT_KEY_LEN + aes_kw::IV_LEN {
                return Err(UnwrapError::rejected(format!(
                    "a wrapped AES-256 key is 40 bytes, not {}",
                    bytes.len()
                )));
            }
            let mut out = Zeroizing::new([0u8; CONTENT_KEY_LEN]);
            self.kek
                .unwrap(bytes, out.as_mut())
                .map_err(|_| UnwrapError::rejected("AES key unwrap integrity check failed"))?;
            ContentKey::from_bytes(out.as_ref())
                .ok_or_else(|| UnwrapError::rejected("not a 32-byte key"))
        });
        Box::pin(async move { result })
    }
}

impl fmt::Debug for AesKeyWrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AesKeyWrap")
            .field("id", &self.id)
            .field("algorithm", &Self::ALGORITHM)
            .finish_non_exhaustive()
    }
}

/// A key-encryption key from an RSA private key in PEM: RSA-OAEP with SHA-1 and MGF1-SHA-1,
/// algorithm `RSA-OAEP` — the algorithm Azure Key Vault and the former storage clients name
/// `RSA-OAEP`. Wrapping and unwrapping are local and send no request; unwrapping is blinded.
/// The private key is wiped when this is dropped; `Debug` shows the id and the modulus size.
///
/// See the crate documentation for the `rsa` crate's timing advisory (RUSTSEC-2023-0071).
pub struct RsaOaepKey {
    id: String,
    key: RsaPrivateKey,
}

impl RsaOaepKey {
    /// The algorithm name stored with keys this wraps.
    pub const ALGORITHM: &'static str = "RSA-OAEP";

    /// The smallest modulus accepted, in bits.
    pub const MIN_BITS: usize = 2048;

    /// A key named `id` from a PEM private key: PKCS#8 (`-----BEGIN PRIVATE KEY-----`) or
    /// PKCS#1 (`-----BEGIN RSA PRIVATE KEY-----`), unencrypted.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the PEM is neither (the message never contains key
    /// material), the modulus is under 2,048 bits, or `id` is empty or contains control
    /// characters.
    pub fn from_pem(id: impl Into<String>, pem: &str) -> Result<Self> {
        let id = id.into();
        check_key_id(&id)?;
        let pem = pem.trim();
        let key = if pem.starts_with("-----BEGIN PRIVATE KEY-----") {
            RsaPrivateKey::from_pkcs8_pem(pem)
                .map_err(|e| config("RSA private key", format!("not a PKCS#8 RSA key: {e}")))?
        } else if pem.starts_with("-----BEGIN RSA PRIVATE KEY-----") {
            RsaPrivateKey::from_pkcs1_pem(pem)
                .map_err(|e| config("RSA private key", format!("not a PKCS#1 RSA key: {e}")))?
        } else {
            return Err(config(
                "RSA private key",
                "expected an unencrypted PEM `PRIVATE KEY` (PKCS#8) or `RSA PRIVATE KEY` (PKCS#1)",
            ));
        };
        let bits = key.size() * 8;
        if bits < Self::MIN_BITS {
            return Err(config(
                "RSA private key",
                format!("{bits}-bit modulus; at least {} bits", Self::MIN_BITS),
            ));
        }
        Ok(Self { id, key })
    }

    /// The modulus size in bits.
    pub fn bits(&self) -> usize {
        self.key.size() * 8
    }
}

impl KeyEncryptionKey for RsaOaepKey {
    fn id(&self) -> &str {
        &self.id
    }

    fn algorithm(&self) -> &str {
        Self::ALGORITHM
    }

    fn wrap<'a>(&'a self, key: &'a ContentKey) -> BoxFuture<'a, Result<WrappedKey>> {
        let wrapped = self
            .key
            .to_public_key()
            .encrypt(&mut OsRng, Oaep::new::<Sha1>(), key.expose())
            .map(|bytes| WrappedKey::new(Self::ALGORITHM, bytes))
            .map_err(|e| config("RSA private key", format!("wrapping failed: {e}")));
        Box::pin(async move { wrapped })
    }

    fn unwrap<'a>(
        &'a self,
        wrapped: &'a WrappedKey,
    ) -> BoxFuture<'a, std::result::Result<ContentKey, UnwrapError>> {
        let result = check_algorithm(wrapped, Self::ALGORITHM).and_then(|()| {
            let key = Zeroizing::new(
                self.key
                    .decrypt_blinded(&mut OsRng, Oaep::new::<Sha1>(), wrapped.bytes())
                    .map_err(|_| UnwrapError::rejected("RSA-OAEP decryption failed"))?,
            );
            ContentKey::from_bytes(&key).ok_or_else(|| {
                UnwrapError::rejected(format!("unwrapped {} bytes, not a 32-byte key", key.len()))
            })
        });
        Box::pin(async move { result })
    }
}

impl fmt::Debug for RsaOaepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RsaOaepKey")
            .field("id", &self.id)
            .field("algorithm", &Self::ALGORITHM)
            .field("bits", &self.bits())
            .finish_non_exhaustive()
    }
}
