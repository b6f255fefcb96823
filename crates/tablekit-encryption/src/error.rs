//! Decryption failures: what is wrong with a stored entity, and which entity it is.

use std::fmt;

use tablekit_core::EdmType;
use tablekit_core::{Error, Target};

/// Why a stored entity cannot be decrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The policy encrypts this property, but the entity stores it without encryption: its
    /// encryption metadata is missing or does not list the property.
    NotEncrypted,
    /// The encryption metadata (or a value it lists) does not have the documented shape.
    Malformed(String),
    /// The metadata names a format version or algorithm this crate does not read.
    Unsupported(String),
    /// No key-encryption key with the stored key id is known to the resolver.
    UnknownKey {
        /// The stored key id.
        key_id: String,
    },
    /// The stored key id is not one the policy allows: the resolver was not asked.
    KeyNotAllowed {
        /// The stored key id.
        key_id: String,
    },
    /// The resolver returned a key whose id is not the stored one.
    KeyIdMismatch {
        /// The stored key id.
        stored: String,
        /// The id of the key the resolver returned.
        resolved: String,
    },
    /// The stored content key does not unwrap under the key with its id: another key with
    /// the same id, or altered bytes.
    Unwrap(String),
    /// The policy signs this property, but the entity stores it outside its signed item:
    /// added by a writer to the table, or written without the policy.
    NotSigned,
    /// The encryption metadata lists the property, but a full read of the entity does not
    /// hold it: it was removed from the stored entity.
    Missing,
    /// AES-GCM authentication or the item MAC failed: a ciphertext, a listed property, the
    /// metadata or the entity's keys were changed, or a ciphertext belongs to another property
    /// or entity.
    Authentication,
    /// The policy requires a signature by a key it trusts, and the entity has none, one by
    /// another key, or one that does not verify.
    Signature(String),
    /// The decrypted bytes are not UTF-8 (only a holder of the content key can make them).
    NotUtf8,
    /// The entity binds a logical table name other than the policy's, or binds one where the
    /// policy binds none, or none where the policy binds one.
    TableBinding(String),
    /// The entity is in the legacy format of the former clients (AES-CBC, unauthenticated),
    /// which this policy does not read: see `EncryptionPolicyBuilder::read_legacy_format`.
    LegacyNotRead,
    /// The entity is in the legacy format and does not decrypt. Every failure of the legacy
    /// format — bad padding, text that is not UTF-8, an unknown or altered key, malformed
    /// metadata — is this one cause, with one text, so that errors tell an attacker nothing
    /// about a ciphertext (the padding oracle of AES-CBC).
    Legacy,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::NotEncrypted => f.write_str(
                "the policy encrypts this property, but it is stored without encryption \
                 (encryption metadata missing or not listing it)",
            ),
            Cause::Malformed(why) => write!(f, "malformed encryption data: {why}"),
            Cause::Unsupported(what) => write!(f, "unsupported encryption format: {what}"),
            Cause::UnknownKey { key_id } => {
                write!(f, "no key-encryption key with id {key_id:?} is known")
            }
            Cause::KeyNotAllowed { key_id } => {
                write!(f, "the policy does not allow key id {key_id:?}")
            }
            Cause::KeyIdMismatch { stored, resolved } => write!(
                f,
                "the entity names key {stored:?}, the resolver returned key {resolved:?}"
            ),
            Cause::Unwrap(why) => write!(f, "the content key does not unwrap: {why}"),
            Cause::NotSigned => f.write_str(
                "the policy signs this property, but the entity's item does not cover it (added \
                 or written without the policy)",
            ),
            Cause::Missing => f.write_str(
                "listed in the encryption metadata but absent from the entity: it was removed",
            ),
            Cause::Authentication => f.write_str(
                "authentication failed: the data was altered or belongs to another property or \
                 entity",
            ),
            Cause::Signature(why) => write!(f, "signature: {why}"),
            Cause::NotUtf8 => f.write_str("the decrypted value is not UTF-8"),
            Cause::TableBinding(why) => write!(f, "logical table name: {why}"),
            Cause::LegacyNotRead => f.write_str(
                "the entity is in the legacy AES-CBC format of the former clients, which is \
                 unauthenticated and which this policy does not read",
            ),
            Cause::Legacy => f.write_str("the legacy-format entity does not decrypt"),
        }
    }
}

/// A stored entity that cannot be decrypted: corrupt, tampered with, or written under a key the
/// resolver does not know. Never a wrong plaintext.
///
/// Converts into [`Error::Corrupt`] naming the entity ([`Target::entity`]), with a reason that
/// names the property and says the decryption failed; that is what every function of this
/// crate returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecryptionFailure {
    /// The entity (table and keys).
    pub target: Target,
    /// The property that failed: an encrypted property, or the metadata property.
    pub property: String,
    /// Why.
    pub cause: Cause,
}

impl DecryptionFailure {
    pub(crate) fn new(target: &Target, property: &str, cause: Cause) -> Self {
        Self {
            target: target.clone(),
            property: property.to_owned(),
            cause,
        }
    }
}

impl fmt::Display for DecryptionFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "decryption failed for {}, property `{}`: {}",
            self.target, self.property, self.cause
        )
    }
}

impl std::error::Error for DecryptionFailure {}

impl From<DecryptionFailure> for Error {
    fn from(failure: DecryptionFailure) -> Self {
        let reason = format!(
            "decryption of property `{}` failed (corrupt or tampered data, or an unknown key): {}",
            failure.property, failure.cause
        );
        Error::Corrupt {
            target: failure.target,
            reason,
        }
    }
}

/// The reason a value selected for encryption is refused: only strings are encrypted.
pub(crate) fn not_a_string(property: &str, ty: EdmType) -> Error {
    Error::encode(
        property,
        format!(
            "selected for encryption, but it is {ty}; only Edm.String properties can be encrypted"
        ),
    )
}
