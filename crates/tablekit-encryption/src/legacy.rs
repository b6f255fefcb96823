//! The legacy format of the former .NET, Java and Python table clients, read only:
//! `_ClientEncryptionMetadata1` (JSON) and `_ClientEncryptionMetadata2` (the encrypted list of
//! encrypted properties), each value AES-256-CBC with PKCS#7 padding. See the crate README's
//! "Legacy format" section. Read only when a policy asks for it, and only under the key ids
//! it names: the format is unauthenticated, and every failure is one error.

use std::collections::BTreeSet;

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockDecryptMut, KeyIvInit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tablekit_core::{EdmValue, Properties};
use zeroize::Zeroizing;

use crate::key::{ContentKey, WrappedKey};
use crate::policy::EncryptionPolicy;
use crate::read::{KeyFailure, Reading};

/// The JSON metadata property (the wrapped key, the algorithms, the entity IV).
pub const LEGACY_METADATA_1: &str = "_ClientEncryptionMetadata1";
/// The Binary property holding the encrypted JSON list of encrypted property names.
pub const LEGACY_METADATA_2: &str = "_ClientEncryptionMetadata2";

const PROTOCOL: &str = "1.0";
const ALGORITHM: &str = "AES_CBC_256";
const BLOCK: usize = 16;

type Aes256CbcDec = cbc::Decryptor<aes::Aes256>;

/// The two metadata properties, as found.
pub(crate) struct Legacy {
    first: Option<EdmValue>,
    second: Option<EdmValue>,
}

/// Removes the legacy metadata properties from `properties`; `None` when there are none.
pub(crate) fn take_metadata(properties: &mut Properties) -> Option<Legacy> {
    let first = properties.remove(LEGACY_METADATA_1);
    let second = properties.remove(LEGACY_METADATA_2);
    (first.is_some() || second.is_some()).then_some(Legacy { first, second })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EncryptionData {
    wrapped_content_key: WrappedContentKey,
    encryption_agent: EncryptionAgent,
    #[serde(rename = "ContentEncryptionIV")]
    content_encryption_iv: String,
    #[serde(default)]
    key_wrapping_metadata: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WrappedContentKey {
    key_id: String,
    encrypted_key: String,
    algorithm: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EncryptionAgent {
    protocol: String,
    encryption_algorithm: String,
}

/// Why a legacy entity was not decrypted.
pub(crate) enum LegacyError {
    /// It does not decrypt, whatever the reason: one error, so that no reason reaches the
    /// caller (a padding oracle).
    Rejected,
    /// The resolver or the key store failed: that error, which says nothing about the entity.
    Unavailable(tablekit_core::Error),
}

impl From<KeyFailure> for LegacyError {
    fn from(failure: KeyFailure) -> Self {
        match failure {
            KeyFailure::Data(_) => LegacyError::Rejected,
            KeyFailure::Service(error) => LegacyError::Unavailable(error),
        }
    }
}

/// Decrypts the properties the legacy metadata lists, in place; returns their names. Only
/// keys named in `key_ids` (the policy's opt-in) are resolved.
pub(crate) async fn decrypt(
    policy: &EncryptionPolicy,
    key_ids: &BTreeSet<String>,
    reading: &Reading<'_>,
    metadata: Legacy,
    properties: &mut Properties,
) -> Result<BTreeSet<String>, LegacyError> {
    let Some(EdmValue::String(json)) = metadata.first else {
        return Err(LegacyError::Rejected);
    };
    let encrypted_list = match metadata.second {
        Some(EdmValue::Binary(bytes)) => bytes,
        // Some readers hand Binary values over as their base64 text.
        Some(EdmValue::String(text)) => BASE64.decode(text).map_err(|_| LegacyError::Rejected)?,
        _ => return Err(LegacyError::Rejected),
    };
    let data: EncryptionData = serde_json::from_str(&json).map_err(|_| LegacyError::Rejected)?;
    if data.encryption_agent.protocol != PROTOCOL
        || data.encryption_agent.encryption_algorithm != ALGORITHM
        || !key_ids.contains(&data.wrapped_content_key.key_id)
    {
        return Err(LegacyError::Rejected);
    }
    let entity_iv: [u8; BLOCK] = BASE64
        .decode(&data.content_encryption_iv)
        .ok()
        .and_then(|iv| iv.try_into().ok())
        .ok_or(LegacyError::Rejected)?;
    let wrapped = BASE64
        .decode(&data.wrapped_content_key.encrypted_key)
        .map_err(|_| LegacyError::Rejected)?;
    // Java's first release derived IVs from PartitionKey + RowKey, everyone else from
    // RowKey + PartitionKey; its metadata says so through the library name (or has none).
    let java_v1 = match &data.key_wrapping_metadata {
        None => true,
        Some(map) => map
            .get("EncryptionLibrary")
            .and_then(Value::as_str)
            .is_some_and(|library| library.contains("Java")),
    };

    let wrapped = WrappedKey::new(data.wrapped_content_key.algorithm, wrapped);
    let content_key = policy
        .content_key(&data.wrapped_content_key.key_id, &wrapped)
        .await?;
    let (pk, rk) = (reading.keys.pk(), reading.keys.rk());
    let open = |name: &str, ciphertext: &[u8]| {
        let iv = property_iv(&entity_iv, pk, rk, name, java_v1);
        decrypt_cbc(&content_key, &iv, ciphertext).ok_or(LegacyError::Rejected)
    };

    let list = open(LEGACY_METADATA_2, &encrypted_list)?;
    let names: Vec<String> = if java_v1 {
        // Java wrote the list as `[a, b]`, its `List.toString()`.
        let mut inner = list.chars();
        inner.next();
        inner.next_back();
        inner.as_str().split(", ").map(str::to_owned).collect()
    } else {
        serde_json::from_str(&list).map_err(|_| LegacyError::Rejected)?
    };

    let mut decrypted = BTreeSet::new();
    for name in names {
        let Some(value) = properties.get(&name) else {
            continue;
        };
        let EdmValue::Binary(ciphertext) = value else {
            return Err(LegacyError::Rejected);
        };
        let text = open(&name, ciphertext)?;
        properties.insert(name.clone(), text);
        decrypted.insert(name);
    }
    Ok(decrypted)
}

/// The IV of one property: the first 16 bytes of SHA-256(entity IV ‖ UTF-8(RowKey +
/// PartitionKey + name)), or of PartitionKey + RowKey + name for Java's first release.
fn property_iv(
    entity_iv: &[u8; BLOCK],
    pk: &str,
    rk: &str,
    name: &str,
    java_v1: bool,
) -> [u8; BLOCK] {
    let (first, second) = if java_v1 { (pk, rk) } else { (rk, pk) };
    let digest = Sha256::new()
        .chain_update(entity_iv)
        .chain_update(first.as_bytes())
        .chain_update(second.as_bytes())
        .chain_update(name.as_bytes())
        .finalize();
    let mut iv = [0u8; BLOCK];
    iv.copy_from_slice(&digest[..BLOCK]);
    iv
}

/// AES-256-CBC decryption with PKCS#7 padding, to UTF-8 text; `None` for every failure
/// alike (a length that is not whole blocks, bad padding, bytes that are not UTF-8).
fn decrypt_cbc(key: &ContentKey, iv: &[u8; BLOCK], ciphertext: &[u8]) -> Option<String> {
    if ciphertext.is_empty() || ciphertext.len() % BLOCK != 0 {
        return None;
    }
    let mut buffer = Zeroizing::new(ciphertext.to_vec());
    let plaintext = Aes256CbcDec::new(key.expose().into(), iv.into())
        .decrypt_padded_mut::<Pkcs7>(&mut buffer)
        .ok()?;
    std::str::from_utf8(plaintext).ok().map(str::to_owned)
}
