//! Content keys, key-encryption keys and key resolvers: the envelope.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aes_gcm::aead::OsRng;
use aes_gcm::aead::rand_core::RngCore;
use tablekit_core::{Error, Result};
use zeroize::Zeroizing;

/// A boxed, `Send` future: what the key traits return, so that they stay object safe and a
/// key can be held as `Arc<dyn KeyEncryptionKey>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Length in bytes of a content key (AES-256).
pub const CONTENT_KEY_LEN: usize = 32;

/// A 256-bit content-encryption key: one per entity write, wrapped by a [`KeyEncryptionKey`]
/// and stored next to the ciphertexts. Wiped from memory when dropped; its `Debug` output never
/// shows the key.
pub struct ContentKey(Zeroizing<[u8; CONTENT_KEY_LEN]>);

impl ContentKey {
    /// A fresh random key from the operating system's generator.
    pub(crate) fn generate() -> Self {
        let mut key = Zeroizing::new([0u8; CONTENT_KEY_LEN]);
        OsRng.fill_bytes(key.as_mut());
        Self(key)
    }

    /// A content key from its 32 bytes, as a [`KeyEncryptionKey::unwrap`] implementation
    /// recovers it; `None` for any other length.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let array: [u8; CONTENT_KEY_LEN] = bytes.try_into().ok()?;
        Some(Self(Zeroizing::new(array)))
    }

    /// The key's bytes, for a [`KeyEncryptionKey::wrap`] implementation to wrap. Do not keep
    /// a copy: the bytes are wiped when this key is dropped, a copy is not.
    pub fn expose(&self) -> &[u8; CONTENT_KEY_LEN] {
        &self.0
    }
}

impl fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ContentKey(<redacted>)")
    }
}

/// A content key wrapped (encrypted) by a key-encryption key, with the name of the wrapping
/// algorithm (`A256KW`, `RSA-OAEP`, …). Not secret: it is stored with the entity.
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedKey {
    algorithm: String,
    bytes: Vec<u8>,
}

impl WrappedKey {
    /// A wrapped key produced by `algorithm`.
    pub fn new(algorithm: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self {
            algorithm: algorithm.into(),
            bytes,
        }
    }

    /// The wrapping algorithm's name.
    pub fn algorithm(&self) -> &str {
        &self.algorithm
    }

    /// The wrapped bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for WrappedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WrappedKey")
            .field("algorithm", &self.algorithm)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// Why a [`KeyEncryptionKey`] could not unwrap a content key.
#[derive(Debug)]
#[non_exhaustive]
pub enum UnwrapError {
    /// The wrapped bytes do not unwrap under this key: wrapped by another key or algorithm,
    /// or altered. For a stored entity this means it cannot be decrypted; reads report it as
    /// a decryption failure naming the entity.
    Rejected {
        /// Why, without any key material.
        reason: String,
    },
    /// The key could not be used at all (a remote key store unreachable, refusing or
    /// throttling). Reads pass this error on unchanged: it says nothing about the entity.
    Unavailable(Error),
}

impl UnwrapError {
    /// An [`UnwrapError::Rejected`].
    pub fn rejected(reason: impl Into<String>) -> Self {
        UnwrapError::Rejected {
            reason: reason.into(),
        }
    }
}

/// A key-encryption key (KEK): wraps each entity's content key on writes and unwraps it on
/// reads. The secret never leaves the implementation, which may be local
/// ([`AesKeyWrap`](crate::AesKeyWrap), [`RsaOaepKey`](crate::RsaOaepKey)) or a remote key
/// store.
///
/// The methods return boxed futures ([`BoxFuture`]) rather than being `async fn`s so that the
/// trait is object safe: a policy holds its key as `Arc<dyn KeyEncryptionKey>`. Implement them
/// with `Box::pin(async move { … })`.
pub trait KeyEncryptionKey: Send + Sync {
    /// The key's identifier, stored with every entity it wraps a key for (`kid`); the
    /// [`KeyResolver`] finds the key by it on reads. Unique among the keys a resolver knows.
    fn id(&self) -> &str;

    /// The name of the algorithm [`wrap`](Self::wrap) uses, as stored with the wrapped key
    /// (`A256KW`, `RSA-OAEP`, …).
    fn algorithm(&self) -> &str;

    /// Wraps `key`.
    ///
    /// # Errors
    /// Any error of the key store; the write is then not attempted.
    fn wrap<'a>(&'a self, key: &'a ContentKey) -> BoxFuture<'a, Result<WrappedKey>>;

    /// Unwraps a content key this key (or another key with the same id) wrapped.
    ///
    /// What reaches it from stored data: a wrapped key whose stored algorithm is this key's
    /// [`algorithm`](Self::algorithm) and whose bytes number 1 to 4,096, from an entity naming
    /// this key's id. Anything else is a decryption failure without a call.
    ///
    /// # Errors
    /// [`UnwrapError::Rejected`] when the bytes do not unwrap (wrong key, wrong algorithm,
    /// altered bytes, a result that is not 32 bytes); [`UnwrapError::Unavailable`] when the
    /// key cannot be used.
    fn unwrap<'a>(
        &'a self,
        wrapped: &'a WrappedKey,
    ) -> BoxFuture<'a, std::result::Result<ContentKey, UnwrapError>>;
}

/// Finds the key-encryption key with a given id, so that entities written under an older key
/// stay readable after the writing key was rotated.
///
/// What reaches a resolver from stored data: only key ids the policy allows (its own key's,
/// those of [`known_ids`](Self::known_ids), and those it lists with
/// [`allow_key_ids`](crate::EncryptionPolicyBuilder::allow_key_ids) or
/// [`allow_key_id_prefix`](crate::EncryptionPolicyBuilder::allow_key_id_prefix)), each 1 to
/// 1,024 bytes of text without control characters. Any other id stored in an entity is a
/// decryption failure without a call.
pub trait KeyResolver: Send + Sync {
    /// The key with id `key_id`, or `None` when there is none.
    ///
    /// # Errors
    /// Any error of the key store: reads pass it on unchanged.
    fn resolve<'a>(
        &'a self,
        key_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<dyn KeyEncryptionKey>>>>;

    /// The ids this resolver knows, when it can list them ([`KeyRing`] does): a policy built
    /// with it allows them. `None` (the default), for a resolver over a key store: the policy
    /// then asks it only for the ids its builder allows.
    fn known_ids(&self) -> Option<Vec<String>> {
        None
    }
}

/// A [`KeyResolver`] over a fixed set of keys held in memory, looked up by id.
///
/// ```
/// use std::sync::Arc;
/// use tablekit_encryption::{AesKeyWrap, KeyRing};
/// let old = AesKeyWrap::new("orders-2025", &[7u8; 32]).unwrap();
/// let new = AesKeyWrap::new("orders-2026", &[9u8; 32]).unwrap();
/// let ring = KeyRing::new().with(Arc::new(old)).with(Arc::new(new));
/// assert_eq!(ring.ids().collect::<Vec<_>>(), ["orders-2025", "orders-2026"]);
/// ```
#[derive(Clone, Default)]
pub struct KeyRing {
    keys: BTreeMap<String, Arc<dyn KeyEncryptionKey>>,
}

impl KeyRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key` (replacing a key with the same id) and returns the ring.
    #[must_use]
    pub fn with(mut self, key: Arc<dyn KeyEncryptionKey>) -> Self {
        self.insert(key);
        self
    }

    /// Adds `key`, replacing a key with the same id.
    pub fn insert(&mut self, key: Arc<dyn KeyEncryptionKey>) {
        self.keys.insert(key.id().to_owned(), key);
    }

    /// The ids of the keys, in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }
}

impl KeyResolver for KeyRing {
    fn resolve<'a>(
        &'a self,
        key_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<dyn KeyEncryptionKey>>>> {
        let found = self.keys.get(key_id).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn known_ids(&self) -> Option<Vec<String>> {
        Some(self.keys.keys().cloned().collect())
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The longest key id (of a key-encryption or a signing key), in bytes.
pub(crate) const MAX_KEY_ID: usize = 1024;

/// Whether `id` may be a key id: 1 to 1,024 bytes of text without control characters (it is
/// stored in entities and shown in errors).
pub(crate) fn is_key_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_KEY_ID && !id.chars().any(char::is_control)
}

/// Checks a key id of the configuration ([`is_key_id`]).
pub(crate) fn check_key_id(id: &str) -> Result<()> {
    if !is_key_id(id) {
        return Err(Error::InvalidConfig {
            part: "key id".into(),
            reason: "must be 1 to 1,024 bytes of text without control characters".into(),
        });
    }
    Ok(())
}
