//! Encrypting an entity's properties for a write, in tablekit's format version 1.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use tablekit_core::edm::{EdmValue, Properties, to_entity_json};
use tablekit_core::limits::{MAX_PROPERTY_BYTES, MAX_USER_PROPERTIES};
use tablekit_core::{Error, Keys, Limit, Result};

use crate::error::not_a_string;
use crate::format::{
    CONTENT_ALGORITHM, FORMAT_VERSION, METADATA_PROPERTY, Metadata, OVERHEAD, Sealer, property_ad,
    seal_ad,
};
use crate::key::ContentKey;
use crate::policy::{EncryptionPolicy, check_not_reserved};

impl EncryptionPolicy {
    /// Encrypts the properties this policy selects, for an insert or replace of the entity
    /// with `keys`: each becomes an `Edm.Binary` (nonce ‖ AES-256-GCM ciphertext ‖ tag) under a
    /// fresh content key, which is wrapped by the policy's key-encryption key and stored with
    /// the list of encrypted names in the [`METADATA_PROPERTY`]. Other properties are returned
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
    /// ([`Limit::PropertyBytes`]: UTF-8 length + 28 bytes) or the metadata makes more than 252
    /// properties. After it: [`Error::LimitExceeded`] ([`Limit::EntityBytes`]) when the
    /// encrypted entity exceeds 1 MiB, and the key's own errors.
    pub async fn encrypt(&self, keys: &Keys, properties: Properties) -> Result<Properties> {
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
                EdmValue::String(text) if selected.contains(&name) => {
                    EdmValue::Binary(sealer.seal(text.into_bytes(), &property_ad(pk, rk, &name)))
                }
                other => other,
            };
            out.insert(name, value);
        }

        let wrapped = self.kek.wrap(&content_key).await?;
        let (kid, wrap_alg) = (self.kek.id().to_owned(), wrapped.algorithm().to_owned());
        let seal = sealer.seal(
            Vec::new(),
            &seal_ad(pk, rk, &kid, &wrap_alg, wrapped.bytes(), &selected),
        );
        let metadata = Metadata {
            v: FORMAT_VERSION,
            alg: CONTENT_ALGORITHM.to_owned(),
            kid,
            wrap_alg,
            wrapped: BASE64.encode(wrapped.bytes()),
            props: selected,
            seal: BASE64.encode(seal),
        };
        let json = serde_json::to_string(&metadata)
            .map_err(|e| Error::encode(METADATA_PROPERTY, e.to_string()))?;
        out.insert(METADATA_PROPERTY, json);
        // The service's rules exactly as tablekit's writer applies them: entity size,
        // property count and sizes, names.
        to_entity_json(keys, &out)?;
        Ok(out)
    }
}
