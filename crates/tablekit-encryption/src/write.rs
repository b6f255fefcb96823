//! Encrypting an entity's properties for a write, in tablekit's format version 3.

use std::borrow::Cow;
use std::sync::Arc;

use aes_gcm::aead::OsRng;
use aes_gcm::aead::rand_core::RngCore;
use tablekit_core::edm::to_entity_json;
use tablekit_core::limits::{MAX_ENTITY_BYTES, MAX_PROPERTY_BYTES, MAX_USER_PROPERTIES};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, Limit, Result};

use crate::beacon::is_beacon_name;
use crate::error::not_a_string;
use crate::format::v3::{
    self, Entry, ItemKeys, Kind, MAC_LEN, MAX_SIGNATURE, MAX_WRAPPED_KEY, SALT_LEN, Signer,
};
use crate::format::{METADATA_PROPERTY, OVERHEAD};
use crate::key::{ContentKey, WrappedKey};
use crate::policy::{Action, EncryptionPolicy, check_not_reserved};

impl EncryptionPolicy {
    /// The properties of `properties` this policy protects — encrypts, or signs only — in
    /// order, after every check [`encrypt`](Self::encrypt) makes before it calls the key:
    /// reserved names, properties to encrypt that are not strings, unclassified strings in
    /// strict mode, the property count and each encrypted value's size.
    fn to_protect(&self, keys: &Keys, properties: &Properties) -> Result<Vec<Entry>> {
        let (pk, rk) = (keys.pk(), keys.rk());
        let mut entries = Vec::new();
        for (name, value) in properties.iter() {
            // A beacon `with_beacons` added: signed, so that a writer to the table cannot
            // point it at another value.
            if is_beacon_name(name) && self.writes_beacon(name) {
                entries.push(Entry {
                    kind: Kind::SignOnly,
                    name: name.to_owned(),
                });
                continue;
            }
            check_not_reserved(name)?;
            let kind = match self.action(pk, rk, name) {
                Action::EncryptAndSign => match value {
                    EdmValue::String(_) => Kind::Encrypted,
                    other => return Err(not_a_string(name, other.edm_type())),
                },
                Action::SignOnly => Kind::SignOnly,
                Action::Plain => continue,
            };
            entries.push(Entry {
                kind,
                name: name.to_owned(),
            });
        }
        if self.is_strict() {
            let unclassified = properties.iter().find(|(name, value)| {
                matches!(value, EdmValue::String(_))
                    && !self.classifies(pk, rk, name)
                    && !(is_beacon_name(name) && self.writes_beacon(name))
            });
            if let Some((name, _)) = unclassified {
                return Err(Error::encode(
                    name,
                    "the strict encryption policy does not classify this string property \
                     (encrypted, signed only or plain): a name misspelled in the policy?",
                ));
            }
        }
        if entries.is_empty() {
            return Ok(entries);
        }
        if properties.len() + 1 > MAX_USER_PROPERTIES {
            return Err(Error::LimitExceeded {
                limit: Limit::UserProperties,
                actual: properties.len() + 1,
            });
        }
        for entry in entries.iter().filter(|e| e.kind == Kind::Encrypted) {
            let stored = properties
                .get_str(&entry.name)
                .ok()
                .flatten()
                .map_or(0, str::len)
                + OVERHEAD;
            if stored > MAX_PROPERTY_BYTES {
                return Err(Error::LimitExceeded {
                    limit: Limit::PropertyBytes {
                        property: entry.name.clone(),
                    },
                    actual: stored,
                });
            }
        }
        Ok(entries)
    }

    /// Whether `name` is the stored name of one of this policy's beacons.
    fn writes_beacon(&self, name: &str) -> bool {
        self.beacons.values().any(|b| b.stored_name() == name)
    }

    /// `properties` with the beacon of each encrypted string property this policy has a
    /// beacon for, under the beacon's stored name.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the bag already holds a name reserved for beacons.
    fn with_beacons<'p>(&self, properties: Cow<'p, Properties>) -> Result<Cow<'p, Properties>> {
        if self.beacons.is_empty() {
            return Ok(properties);
        }
        if let Some((name, _)) = properties.iter().find(|(name, _)| is_beacon_name(name)) {
            check_not_reserved(name)?;
        }
        let values: Vec<(String, String)> = self
            .beacons
            .values()
            .filter_map(|beacon| match properties.get(beacon.property()) {
                Some(EdmValue::String(text)) => {
                    Some((beacon.stored_name().to_owned(), beacon.value(text)))
                }
                _ => None,
            })
            .collect();
        if values.is_empty() {
            return Ok(properties);
        }
        let mut properties = properties.into_owned();
        for (name, value) in values {
            properties.insert(name, value);
        }
        Ok(Cow::Owned(properties))
    }

    /// Whether [`encrypt`](Self::encrypt) will accept `properties` for the entity `keys`
    /// without calling the key: `Ok(true)` when every check passes and the encrypted entity is
    /// certain to fit 1 MiB, `Ok(false)` when only encrypting it can tell (an entity close to
    /// the limit), the error `encrypt` would return otherwise.
    ///
    /// The size is an upper bound of what tablekit's writer counts: 2 bytes per UTF-8 byte of
    /// keys, names and plain strings (2 per UTF-16 unit, exactly, for ASCII), 16 bytes for a
    /// number, date, Boolean or Guid, an encrypted value's UTF-8 length + 16, and metadata
    /// sized for a wrapped key of 4 KiB (RSA-8192 wraps to 1 KiB).
    pub(crate) fn check_encrypt(&self, keys: &Keys, properties: &Properties) -> Result<bool> {
        let properties = self.with_beacons(Cow::Borrowed(properties))?;
        let properties = properties.as_ref();
        let entries = self.to_protect(keys, properties)?;
        if entries.is_empty() {
            return Ok(true);
        }
        let encrypted = |name: &str| {
            entries
                .iter()
                .any(|e| e.kind == Kind::Encrypted && e.name == name)
        };
        let mut bound = 4 + 2 * (keys.pk().len() + keys.rk().len());
        for (name, value) in properties.iter() {
            bound += 8 + 2 * name.len();
            bound += match value {
                EdmValue::String(text) if encrypted(name) => 4 + text.len() + OVERHEAD,
                EdmValue::String(text) => 4 + 2 * text.len(),
                EdmValue::Binary(bytes) => 4 + bytes.len(),
                _ => 16,
            };
        }
        let metadata = v3::Metadata {
            kid: self.kek.id().to_owned(),
            wrap_alg: self.kek.algorithm().to_owned(),
            wrapped: Vec::new(),
            salt: [0; SALT_LEN],
            table_bound: self.table_binding.is_some(),
            entries,
            signer: self.signer(),
            mac: Vec::new(),
            signature: Vec::new(),
        };
        // With the base64 of the largest wrapped key, of the MAC and of the largest signature.
        let signature = if self.signing_key.is_some() {
            4 * MAX_SIGNATURE.div_ceil(3)
        } else {
            0
        };
        let text = metadata.encode().len()
            + 4 * MAX_WRAPPED_KEY.div_ceil(3)
            + 4 * MAC_LEN.div_ceil(3)
            + signature;
        bound += 8 + 2 * METADATA_PROPERTY.len() + 4 + 2 * text;
        Ok(bound <= MAX_ENTITY_BYTES)
    }

    /// Encrypts the properties this policy selects, for an insert or replace of the entity
    /// with `keys`, in format version 3: each becomes an `Edm.Binary` (AES-256-GCM ciphertext
    /// ‖ tag) under a key derived for this write from a fresh content key, which is wrapped by
    /// the policy's key-encryption key and stored with the list of encrypted names and the
    /// item MAC in the [`METADATA_PROPERTY`]. Other properties are returned unchanged. When
    /// no property is selected the bag is returned as it is, without metadata.
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
        let properties = self.with_beacons(Cow::Owned(properties))?.into_owned();
        let entries = self.to_protect(keys, &properties)?;
        if entries.is_empty() {
            return Ok(properties);
        }
        if self.signing_key.is_none() && !self.signers.is_empty() {
            return Err(Error::InvalidConfig {
                part: "encryption policy".into(),
                reason: "it requires signatures on reads but has no signing key: what it wrote \
                         could not be read back"
                    .into(),
            });
        }
        let (content_key, wrapped) = self.data_key().await?;
        let mut salt = [0u8; SALT_LEN];
        OsRng.fill_bytes(&mut salt);
        let sealed = self.seal_item(keys, properties, entries, &content_key, &wrapped, salt);
        self.finish(sealed).await
    }

    /// The content key of the next entity written, and its wrapped form: a fresh one, or the
    /// one [`DataKeyReuse`](crate::DataKeyReuse) keeps (cached for reads when the policy has
    /// a key cache).
    async fn data_key(&self) -> Result<(Arc<ContentKey>, WrappedKey)> {
        let Some(reuse) = &self.data_keys else {
            let key = ContentKey::generate();
            let wrapped = self.kek.wrap(&key).await?;
            return Ok((Arc::new(key), wrapped));
        };
        let kid = self.kek.id();
        let (key, wrapped, new) = reuse
            .next(kid, |key| async move { self.kek.wrap(&key).await })
            .await?;
        if let (true, Some(cache)) = (new, &self.key_cache) {
            cache.insert(kid, &wrapped, Arc::clone(&key));
        }
        Ok((key, wrapped))
    }

    /// The signer fields of what this policy writes.
    fn signer(&self) -> Option<Signer> {
        self.signing_key.as_ref().map(|key| Signer {
            id: key.id().to_owned(),
            algorithm: key.algorithm().to_owned(),
        })
    }

    /// The stored form of `properties`, the encrypted `entries` encrypted under the keys
    /// derived from `content_key` and `salt`, with its metadata (MAC included, signature not
    /// yet) and the item message: the same bytes for the same inputs, which the known-answer
    /// test checks.
    pub(crate) fn seal_item(
        &self,
        keys: &Keys,
        properties: Properties,
        entries: Vec<Entry>,
        content_key: &ContentKey,
        wrapped: &WrappedKey,
        salt: [u8; SALT_LEN],
    ) -> Sealed {
        let (pk, rk) = (keys.pk(), keys.rk());
        let binding = self.binding();
        let item = ItemKeys::derive(content_key, &salt);
        let mut out = Properties::new();
        for (name, value) in properties {
            let encrypted = entries
                .iter()
                .position(|e| e.kind == Kind::Encrypted && e.name == name);
            let value = match (value, encrypted) {
                (EdmValue::String(text), Some(index)) => EdmValue::Binary(item.seal(
                    text.into_bytes(),
                    index,
                    &v3::property_ad(binding, pk, rk, &name),
                )),
                (other, _) => other,
            };
            out.insert(name, value);
        }
        let mut metadata = v3::Metadata {
            kid: self.kek.id().to_owned(),
            wrap_alg: wrapped.algorithm().to_owned(),
            wrapped: wrapped.bytes().to_vec(),
            salt,
            table_bound: self.table_binding.is_some(),
            entries,
            signer: self.signer(),
            mac: Vec::new(),
            signature: Vec::new(),
        };
        let values: Vec<&EdmValue> = metadata
            .entries
            .iter()
            .map(|entry| {
                out.get(&entry.name)
                    .expect("every listed property is written")
            })
            .collect();
        let message = metadata.message(binding, pk, rk, &values);
        metadata.mac = item.mac(&message);
        Sealed {
            properties: out,
            metadata,
            message,
        }
    }

    /// Signs a sealed item when the policy has a signing key, and stores its metadata.
    pub(crate) async fn finish(&self, sealed: Sealed) -> Result<Properties> {
        let Sealed {
            mut properties,
            mut metadata,
            message,
        } = sealed;
        if let Some(key) = &self.signing_key {
            let signature = key.sign(&message).await?;
            if signature.is_empty() || signature.len() > MAX_SIGNATURE {
                return Err(Error::InvalidConfig {
                    part: "signing key".into(),
                    reason: format!(
                        "key {:?} made a signature of {} bytes; 1 to {MAX_SIGNATURE} are stored",
                        key.id(),
                        signature.len()
                    ),
                });
            }
            metadata.signature = signature;
        }
        properties.insert(METADATA_PROPERTY, metadata.encode());
        Ok(properties)
    }
}

/// An item encrypted and MACed, before it is signed.
pub(crate) struct Sealed {
    properties: Properties,
    metadata: v3::Metadata,
    message: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablekit_core::Keys;
    use tablekit_core::Properties;
    use tablekit_core::edm::{parse_entity, to_entity_json};

    use crate::format::v3::SALT_LEN;
    use crate::key::ContentKey;
    use crate::local::AesKeyWrap;
    use crate::policy::EncryptionPolicy;
    use crate::sign::Ed25519SigningKey;

    /// The known-answer vectors of format 3: a policy and what it is given, with the content
    /// key and salt fixed. The fixtures' integration test decrypts them with the same
    /// policies (`tests/common`).
    fn vectors() -> Vec<(&'static str, EncryptionPolicy)> {
        let kek = || Arc::new(AesKeyWrap::new("fixture-kek", &[7u8; 32]).unwrap());
        let basic = EncryptionPolicy::builder(kek())
            .properties(["Email", "Notes", "Empty"])
            .sign_only(["Age"])
            .build()
            .unwrap();
        let signed = EncryptionPolicy::builder(kek())
            .properties(["Email", "Notes", "Empty"])
            .sign_only(["Age"])
            .bind_table("fixture-table")
            .signing_key(Arc::new(
                Ed25519SigningKey::from_seed("fixture-signer", &[8u8; 32]).unwrap(),
            ))
            .build()
            .unwrap();
        vec![("format-v3.json", basic), ("format-v3-signed.json", signed)]
    }

    fn plain() -> Properties {
        Properties::new()
            .with("Age", 47i64)
            .with("Email", "jun@contoso.example")
            .with("Empty", "")
            .with("FirstName", "Jun")
            .with("Notes", "naïve 東京 «quoted» \"x\"")
    }

    #[tokio::test]
    async fn format_3_is_produced_byte_for_byte_from_a_fixed_content_key_and_salt() {
        let keys = Keys::new("Sales", "000223").unwrap();
        let content_key = ContentKey::from_bytes(&[0x11; 32]).unwrap();
        let salt = [0x22; SALT_LEN];
        for (file, policy) in vectors() {
            let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
            let expected = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let wrapped = policy.kek.wrap(&content_key).await.unwrap();
            let entries = policy.to_protect(&keys, &plain()).unwrap();
            let sealed = policy.seal_item(&keys, plain(), entries, &content_key, &wrapped, salt);
            let produced = policy.finish(sealed).await.unwrap();
            let (json, _) = to_entity_json(&keys, &produced).unwrap();
            assert!(
                json == expected,
                "{file} differs:\n{}\n{}",
                String::from_utf8_lossy(&json),
                String::from_utf8_lossy(&expected)
            );
            // And it reads back.
            let stored = parse_entity::<Properties>(&expected, Some("*")).unwrap();
            assert_eq!(
                policy
                    .decrypt("Employees", &keys, stored.value)
                    .await
                    .unwrap(),
                plain()
            );
        }
    }
}
