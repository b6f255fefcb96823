//! Encrypting an entity's properties for a write, in tablekit's format version 1.

use tablekit_core::edm::{EdmValue, Properties, to_entity_json};
use tablekit_core::limits::{MAX_PROPERTY_BYTES, MAX_USER_PROPERTIES};
use tablekit_core::{Error, Keys, Limit, Result};

use crate::error::not_a_string;
use crate::format::{
    METADATA_PROPERTY, Metadata, OVERHEAD, SEAL_COUNTER, Sealer, Version, property_ad,
    property_counter,
};
use crate::key::ContentKey;
use crate::policy::{EncryptionPolicy, check_not_reserved};

impl EncryptionPolicy {
    /// Encrypts the properties this policy selects, for an insert or replace of the entity
    /// with `keys`, in format version 2: each becomes an `Edm.Binary` (AES-256-GCM ciphertext ‖
    /// tag) under a fresh content key, which is wrapped by the policy's key-encryption key and
    /// stored with the list of encrypted names in the [`METADATA_PROPERTY`]. Other properties
    /// are returned
    /// unchanged. When no property is selected the bag is returned as it is, without metadata.
    ///
    /// Requests: none to the table service; one `wrap` call of the key-encryption key when a
    /// property is encrypted (local keys send no request). Everything is checked before that
    /// call except the entity size, which depends on the wrapped key. The input is consumed
    /// so that plaintexts are encrypted in place rather than copied.
    ///
    /// # Errors
    /// Before any key call: [`Error::Encode`] when a selected property is not an
    /// `Edm.String`; [`Error::InvalidName`] when the bag already holds an encryption metadata
    /// property (`_TablekitEncryption`, `_ClientEncryptionMetadata1`/`2`);
    /// [`Error::LimitExceeded`] when an encrypted value exceeds 64 KiB
    /// ([`Limit::PropertyBytes`]: UTF-8 length + 16 bytes) or the metadata makes more than 252
    /// properties. After it: [`Error::LimitExceeded`] ([`Limit::EntityBytes`]) when the
    /// encrypted entity exceeds 1 MiB, and the key's own errors.
    pub async fn encrypt(&self, keys: &Keys, properties: Properties) -> Result<Properties> {
        let out = self.encrypt_unchecked(keys, properties).await?;
        // The service's rules exactly as tablekit's writer applies them: entity size,
        // property count and sizes, names.
        to_entity_json(keys, &out)?;
        Ok(out)
    }

    /// [`encrypt`](Self::encrypt) without its last check, the entity's size after encryption:
    /// for a caller that writes the result with tablekit's writer, which checks it anyway.
    pub(crate) async fn encrypt_unchecked(
        &self,
        keys: &Keys,
        properties: Properties,
    ) -> Result<Properties> {
        let (pk, rk) = (keys.pk(), keys.rk());
        let mut selected = Vec::new();
        for (name, value) in properties.iter() {
            check_not_reserved(name)?;
            if self.selects(pk, rk, name) {
                match value {
                    EdmValue::String(_) => selected.push(name.to_owned()),
                    other => return Err(not_a_string(name, other.edm_type())),
                }
            }
        }
        if selected.is_empty() {
            return Ok(properties);
        }
        if properties.len() + 1 > MAX_USER_PROPERTIES {
            return Err(Error::LimitExceeded {
                limit: Limit::UserProperties,
                actual: properties.len() + 1,
            });
        }
        for name in &selected {
            let stored = properties.get_str(name).map_or(0, str::len) + OVERHEAD;
            if stored > MAX_PROPERTY_BYTES {
                return Err(Error::LimitExceeded {
                    limit: Limit::PropertyBytes {
                        property: name.clone(),
                    },
                    actual: stored,
                });
            }
        }

        let content_key = ContentKey::generate();
        let sealer = Sealer::new(&content_key);
        let mut out = Properties::new();
        for (name, value) in properties {
            let value = match value {
                EdmValue::String(text) => match selected.iter().position(|s| *s == name) {
                    Some(index) => EdmValue::Binary(sealer.seal(
                        text.into_bytes(),
                        property_counter(index),
                        &property_ad(Version::V2, pk, rk, &name),
                    )),
                    None => EdmValue::String(text),
                },
                other => other,
            };
            out.insert(name, value);
        }

        let wrapped = self.kek.wrap(&content_key).await?;
        let mut metadata = Metadata {
            version: Version::V2,
            kid: self.kek.id().to_owned(),
            wrap_alg: wrapped.algorithm().to_owned(),
            wrapped: wrapped.bytes().to_vec(),
            props: selected,
            seal: Vec::new(),
        };
        metadata.seal = sealer.seal(Vec::new(), SEAL_COUNTER, &metadata.seal_ad(pk, rk));
        out.insert(METADATA_PROPERTY, metadata.encode_v2());
        Ok(out)
    }
}
