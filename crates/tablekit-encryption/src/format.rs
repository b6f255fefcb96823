//! tablekit's own stored format, version 1 (see the crate README's "Format" section): the
//! metadata property, the associated data, and AES-256-GCM sealing and opening.

use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{AeadInPlace, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use serde::{Deserialize, Serialize};

use crate::key::ContentKey;

/// The name of the metadata property tablekit writes next to encrypted properties.
pub const METADATA_PROPERTY: &str = "_TablekitEncryption";
/// The format version written (`"v"` in the metadata).
pub const FORMAT_VERSION: u32 = 1;
/// The content-encryption algorithm of version 1 (`"alg"` in the metadata).
pub const CONTENT_ALGORITHM: &str = "A256GCM";
/// Length of an AES-GCM nonce, stored before each ciphertext.
pub const NONCE_LEN: usize = 12;
/// Length of an AES-GCM tag, stored after each ciphertext.
pub const TAG_LEN: usize = 16;
/// Bytes an encrypted property stores beyond its UTF-8 plaintext: nonce and tag.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;

const PROPERTY_LABEL: &str = "tablekit-encryption/1/A256GCM/property";
const SEAL_LABEL: &str = "tablekit-encryption/1/A256GCM/seal";

/// The metadata property's JSON, version 1. Field order is the order written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Metadata {
    pub(crate) v: u32,
    pub(crate) alg: String,
    pub(crate) kid: String,
    pub(crate) wrap_alg: String,
    /// Base64 (standard alphabet, padded) of the wrapped content key.
    pub(crate) wrapped: String,
    /// The encrypted properties' names.
    pub(crate) props: Vec<String>,
    /// Base64 of nonce ‖ tag: AES-GCM over no plaintext, authenticating everything above.
    pub(crate) seal: String,
}

/// Just the version, read first so that a later version is reported as unsupported rather
/// than malformed.
#[derive(Deserialize)]
pub(crate) struct Version {
    pub(crate) v: u32,
}

/// Appends `field` with its length (u32, big-endian) in front, so that no two sequences of
/// fields encode to the same bytes.
fn push_field(out: &mut Vec<u8>, field: &[u8]) {
    // Keys, names, ids and wrapped keys are far below 4 GiB.
    let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(field);
}

/// The associated data of an encrypted property: label, PartitionKey, RowKey, name.
pub(crate) fn property_ad(pk: &str, rk: &str, name: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(64 + pk.len() + rk.len() + name.len());
    for field in [PROPERTY_LABEL, pk, rk, name] {
        push_field(&mut ad, field.as_bytes());
    }
    ad
}

/// The associated data of the seal: label, PartitionKey, RowKey, key id, wrapping algorithm,
/// wrapped key, then each listed property name in stored order.
pub(crate) fn seal_ad(
    pk: &str,
    rk: &str,
    kid: &str,
    wrap_alg: &str,
    wrapped: &[u8],
    props: &[String],
) -> Vec<u8> {
    let mut ad = Vec::with_capacity(128 + wrapped.len());
    for field in [SEAL_LABEL, pk, rk, kid, wrap_alg] {
        push_field(&mut ad, field.as_bytes());
    }
    push_field(&mut ad, wrapped);
    for name in props {
        push_field(&mut ad, name.as_bytes());
    }
    ad
}

/// AES-256-GCM under one content key.
pub(crate) struct Sealer(Aes256Gcm);

impl Sealer {
    pub(crate) fn new(key: &ContentKey) -> Self {
        Self(Aes256Gcm::new(key.expose().into()))
    }

    /// Encrypts `plaintext` in place and returns nonce ‖ ciphertext ‖ tag, with a random nonce.
    /// The content key is fresh for every entity write, so random nonces never repeat under
    /// one key in practice.
    pub(crate) fn seal(&self, mut plaintext: Vec<u8>, ad: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        // Encrypting in place first leaves no plaintext copy behind in a reallocation.
        let tag = self
            .0
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), ad, &mut plaintext)
            .expect("AES-GCM encrypts anything under 64 GiB");
        let mut out = Vec::with_capacity(OVERHEAD + plaintext.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&plaintext);
        out.extend_from_slice(&tag);
        out
    }

    /// Decrypts nonce ‖ ciphertext ‖ tag; `None` when it is too short or does not
    /// authenticate with `ad`.
    pub(crate) fn open(&self, stored: &[u8], ad: &[u8]) -> Option<Vec<u8>> {
        if stored.len() < OVERHEAD {
            return None;
        }
        let (nonce, rest) = stored.split_at(NONCE_LEN);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut buffer = ciphertext.to_vec();
        self.0
            .decrypt_in_place_detached(
                Nonce::from_slice(nonce),
                ad,
                &mut buffer,
                Tag::from_slice(tag),
            )
            .ok()?;
        Some(buffer)
    }
}
