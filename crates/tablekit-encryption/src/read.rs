//! Decrypting a stored entity: tablekit's format (version 3, or 1 and 2), or the legacy one
//! when the policy reads it, then the policy's check that nothing it encrypts was stored in the
//! clear.

use std::collections::BTreeSet;
use std::sync::Arc;

use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, Result, Target};

use crate::beacon::is_beacon_name;
use crate::error::{Cause, DecryptionFailure};
use crate::format::v2::{self, Opener, SEAL_COUNTER, property_counter};
use crate::format::v3::MAX_WRAPPED_KEY;
use crate::format::v3::{self, ItemKeys, Kind};
use crate::format::{METADATA_PROPERTY, MetadataError, Stored};
use crate::key::{ContentKey, KeyEncryptionKey, UnwrapError, WrappedKey, is_key_id};
use crate::legacy::{self, LEGACY_METADATA_1, LegacyError};
use crate::policy::{Action, EncryptionPolicy};

/// The entity being read, for error reports.
pub(crate) struct Reading<'a> {
    pub(crate) target: Target,
    pub(crate) keys: &'a Keys,
    pub(crate) shape: Shape,
}

impl Reading<'_> {
    pub(crate) fn fail(&self, property: &str, cause: Cause) -> Error {
        DecryptionFailure::new(&self.target, property, cause).into()
    }

    /// On a full read, the first of `listed` that `properties` does not hold, as a failure:
    /// it was removed from the stored entity. A projection may leave any of them out.
    fn check_complete<'n>(
        &self,
        listed: impl IntoIterator<Item = &'n str>,
        properties: &Properties,
    ) -> Result<()> {
        if self.shape == Shape::Projection {
            return Ok(());
        }
        match listed.into_iter().find(|name| !properties.contains(name)) {
            Some(name) => Err(self.fail(name, Cause::Missing)),
            None => Ok(()),
        }
    }
}

/// What a read returned: the whole entity, or the properties a projection selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Every stored property: each one the metadata lists must be there.
    Full,
    /// A projection: a listed property may be left out.
    Projection,
}

/// What an entity read protected: the properties it decrypted, and those its item covers
/// (every encrypted one among them).
#[derive(Debug, Default)]
struct Protected {
    encrypted: BTreeSet<String>,
    signed: BTreeSet<String>,
}

impl Protected {
    /// Encrypted properties authenticated one by one, where nothing else is signed (formats
    /// 1 and 2, and the legacy format).
    fn encrypted(names: BTreeSet<String>) -> Self {
        Self {
            signed: names.clone(),
            encrypted: names,
        }
    }
}

/// Why a content key could not be had.
pub(crate) enum KeyFailure {
    /// Something about the stored entity: an unknown key id, a key that does not unwrap it.
    Data(Cause),
    /// The resolver or the key store failed: its error, which says nothing about the entity.
    Service(Error),
}

impl EncryptionPolicy {
    /// Decrypts a stored entity of `table` with `keys`, read whole as a property bag (every
    /// stored property, as a point read or a query without projection returns it): in
    /// tablekit's format (the [`METADATA_PROPERTY`]) or, when the policy reads it
    /// ([`read_legacy_format`](crate::EncryptionPolicyBuilder::read_legacy_format)), the
    /// legacy format of the former .NET, Java and Python clients
    /// (`_ClientEncryptionMetadata1`/`2`). Encrypted properties become strings again and the
    /// metadata properties are removed. Every property the metadata lists must be present: a
    /// removed one is a failure, not an absence. An entity without metadata is returned as it
    /// is, unless it holds a property this policy encrypts. For the properties a projection
    /// returned, use [`decrypt_projection`](Self::decrypt_projection).
    ///
    /// Requests: none to the table service; one resolver lookup (unless the entity names the
    /// policy's own key) and one `unwrap` call of the key-encryption key per encrypted entity
    /// (local keys send no request).
    ///
    /// # Errors
    /// A [`DecryptionFailure`] converted into [`tablekit_core::Error::Corrupt`], naming
    /// the entity and the property, when the metadata is malformed or of an unknown version,
    /// its key id is unknown, the content key does not unwrap, a property it lists is absent,
    /// a value or the item does not authenticate (altered, or moved from another property or
    /// entity), a property this policy encrypts is stored without encryption, or the entity is
    /// in the legacy format and the policy does not read it (or it does not decrypt: one cause
    /// for every legacy failure). Errors of the resolver or of a key that cannot be used
    /// ([`UnwrapError::Unavailable`]) are passed on unchanged.
    pub async fn decrypt(
        &self,
        table: &str,
        keys: &Keys,
        properties: Properties,
    ) -> Result<Properties> {
        self.decrypt_shaped(table, keys, properties, Shape::Full)
            .await
    }

    /// [`decrypt`](Self::decrypt) for the properties a projection (`$select`) returned: a
    /// property the metadata lists may be absent — the projection left it out. Each encrypted
    /// property present is authenticated on its own (bound to the entity's keys and its
    /// name); the item as a whole is verified only when every listed property is present.
    /// The projection must also have asked for the metadata property ([`METADATA_PROPERTY`],
    /// and the legacy ones when the policy reads that format).
    ///
    /// Requests: as [`decrypt`](Self::decrypt).
    ///
    /// # Errors
    /// As [`decrypt`](Self::decrypt), but for absent listed properties.
    pub async fn decrypt_projection(
        &self,
        table: &str,
        keys: &Keys,
        properties: Properties,
    ) -> Result<Properties> {
        self.decrypt_shaped(table, keys, properties, Shape::Projection)
            .await
    }

    async fn decrypt_shaped(
        &self,
        table: &str,
        keys: &Keys,
        mut properties: Properties,
        shape: Shape,
    ) -> Result<Properties> {
        let reading = Reading {
            target: Target::entity(table, keys.clone()),
            keys,
            shape,
        };
        let own = properties.remove(METADATA_PROPERTY);
        let legacy = legacy::take_metadata(&mut properties);
        let decrypted = match (own, legacy) {
            (Some(_), Some(_)) => {
                return Err(reading.fail(
                    METADATA_PROPERTY,
                    Cause::Malformed("both tablekit and legacy encryption metadata".into()),
                ));
            }
            (Some(metadata), None) => {
                self.decrypt_own(&reading, metadata, &mut properties)
                    .await?
            }
            (None, Some(metadata)) => {
                let Some(key_ids) = &self.legacy_key_ids else {
                    return Err(reading.fail(LEGACY_METADATA_1, Cause::LegacyNotRead));
                };
                let legacy_failure = || reading.fail(LEGACY_METADATA_1, Cause::Legacy);
                let decrypted =
                    match legacy::decrypt(self, key_ids, &reading, metadata, &mut properties).await
                    {
                        Ok(decrypted) => decrypted,
                        Err(LegacyError::Rejected) => return Err(legacy_failure()),
                        Err(LegacyError::Unavailable(error)) => return Err(error),
                    };
                // A property the policy encrypts that the (unauthenticated) list leaves out
                // is a legacy failure like any other: no error may tell what a list held.
                let decrypted = Protected::encrypted(decrypted);
                if self
                    .first_unprotected(keys, &properties, &decrypted)
                    .is_some()
                {
                    return Err(legacy_failure());
                }
                decrypted
            }
            (None, None) => Protected::default(),
        };
        if let Some((name, cause)) = self.first_unprotected(keys, &properties, &decrypted) {
            return Err(reading.fail(name, cause));
        }
        // Beacons are for the service's filters, not the reader.
        let beacons: Vec<String> = properties
            .iter()
            .map(|(name, _)| name)
            .filter(|name| is_beacon_name(name))
            .map(str::to_owned)
            .collect();
        for name in beacons {
            properties.remove(&name);
        }
        Ok(properties)
    }

    /// The first property of `properties` this policy protects more than the entity did: one
    /// it encrypts that was not decrypted, or one it signs that the item does not cover.
    fn first_unprotected<'p>(
        &self,
        keys: &Keys,
        properties: &'p Properties,
        protected: &Protected,
    ) -> Option<(&'p str, Cause)> {
        properties
            .iter()
            .find_map(|(name, _)| match self.action(keys.pk(), keys.rk(), name) {
                Action::EncryptAndSign if !protected.encrypted.contains(name) => {
                    Some((name, Cause::NotEncrypted))
                }
                Action::SignOnly if !protected.signed.contains(name) => {
                    Some((name, Cause::NotSigned))
                }
                _ => None,
            })
    }

    async fn decrypt_own(
        &self,
        reading: &Reading<'_>,
        metadata: EdmValue,
        properties: &mut Properties,
    ) -> Result<Protected> {
        let malformed = |why: String| reading.fail(METADATA_PROPERTY, Cause::Malformed(why));
        let EdmValue::String(text) = metadata else {
            return Err(malformed(format!(
                "a string was expected, not {}",
                metadata.edm_type()
            )));
        };
        let stored = Stored::decode(&text).map_err(|e| match e {
            MetadataError::Malformed(why) => malformed(why),
            MetadataError::Unsupported(what) => {
                reading.fail(METADATA_PROPERTY, Cause::Unsupported(what))
            }
        })?;
        match stored {
            Stored::V3(metadata) => self.decrypt_v3(reading, metadata, properties).await,
            Stored::Sealed(metadata) => self.decrypt_sealed(reading, metadata, properties).await,
        }
    }

    /// Format version 3: the item MAC over every listed property, then each encrypted one.
    async fn decrypt_v3(
        &self,
        reading: &Reading<'_>,
        metadata: v3::Metadata,
        properties: &mut Properties,
    ) -> Result<Protected> {
        // Whether a name is bound is stored; which one is not: a wrong one fails the ciphertexts
        // and the item MAC, which cover it.
        match (metadata.table_bound, &self.table_binding) {
            (true, None) => {
                return Err(reading.fail(
                    METADATA_PROPERTY,
                    Cause::TableBinding(
                        "the entity is bound to one; this policy binds none".into(),
                    ),
                ));
            }
            (false, Some(name)) => {
                return Err(reading.fail(
                    METADATA_PROPERTY,
                    Cause::TableBinding(format!(
                        "the entity is bound to none; this policy binds {name:?}"
                    )),
                ));
            }
            _ => {}
        }
        let binding = self.binding();
        reading.check_complete(metadata.entries.iter().map(|e| e.name.as_str()), properties)?;
        for entry in &metadata.entries {
            match (entry.kind, properties.get(&entry.name)) {
                (Kind::Encrypted, Some(value)) if !matches!(value, EdmValue::Binary(_)) => {
                    return Err(reading.fail(
                        &entry.name,
                        Cause::Malformed(format!(
                            "an encrypted value is Edm.Binary, not {}",
                            value.edm_type()
                        )),
                    ));
                }
                _ => {}
            }
        }
        // The signature first: it needs no key-encryption key, so an item no trusted signer
        // wrote never reaches the key (nor its timing).
        if !self.signers.is_empty() {
            self.verify_signature(reading, &metadata, binding, properties)
                .await?;
        }
        let wrapped = WrappedKey::new(metadata.wrap_alg.clone(), metadata.wrapped.clone());
        let content_key = self
            .content_key(&metadata.kid, &wrapped)
            .await
            .map_err(|failure| key_failure(reading, failure))?;
        let item = ItemKeys::derive(&content_key, &metadata.salt);
        let (pk, rk) = (reading.keys.pk(), reading.keys.rk());

        // Each ciphertext first, so that an altered one is reported under its own name; then
        // the item, which covers them again with everything else. Nothing is returned unless
        // both hold.
        let mut plaintexts = Vec::new();
        for (index, entry) in metadata.entries.iter().enumerate() {
            if entry.kind != Kind::Encrypted {
                continue;
            }
            let Some(EdmValue::Binary(stored)) = properties.get(&entry.name) else {
                continue;
            };
            let plaintext = item
                .open(
                    stored,
                    index,
                    &v3::property_ad(binding, pk, rk, &entry.name),
                )
                .ok_or_else(|| reading.fail(&entry.name, Cause::Authentication))?;
            let text = String::from_utf8(plaintext)
                .map_err(|_| reading.fail(&entry.name, Cause::NotUtf8))?;
            plaintexts.push((entry.name.clone(), text));
        }
        let values: Option<Vec<&EdmValue>> = metadata
            .entries
            .iter()
            .map(|entry| properties.get(&entry.name))
            .collect();
        match values {
            Some(values) => {
                let message = metadata.message(binding, pk, rk, &values);
                if !item.verify(&message, &metadata.mac) {
                    return Err(reading.fail(METADATA_PROPERTY, Cause::Authentication));
                }
            }
            // A projection that left a listed property out: the encrypted ones present were
            // authenticated each, but a signed-only value has nothing of its own to verify it.
            None => {
                let signed = metadata
                    .entries
                    .iter()
                    .find(|e| e.kind == Kind::SignOnly && properties.contains(&e.name));
                if let Some(entry) = signed {
                    return Err(Error::invalid_argument(
                        "projection",
                        format!(
                            "`{}` of {} is signed only, and the item signature that covers it \
                             needs every property the entity lists ({}): select them too, or \
                             read the whole entity",
                            entry.name,
                            reading.target,
                            metadata
                                .entries
                                .iter()
                                .map(|e| e.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
        let mut protected = Protected::default();
        for (name, text) in plaintexts {
            properties.insert(name.clone(), text);
            protected.encrypted.insert(name);
        }
        protected.signed = metadata
            .entries
            .into_iter()
            .map(|e| e.name)
            .filter(|name| properties.contains(name))
            .collect();
        Ok(protected)
    }

    /// Checks that a trusted key signed the item as stored.
    async fn verify_signature(
        &self,
        reading: &Reading<'_>,
        metadata: &v3::Metadata,
        binding: &str,
        properties: &Properties,
    ) -> Result<()> {
        let fail = |why: String| reading.fail(METADATA_PROPERTY, Cause::Signature(why));
        let Some(signer) = &metadata.signer else {
            return Err(fail(
                "the entity is not signed, and the policy requires a signature by a key it \
                 trusts"
                    .into(),
            ));
        };
        let Some(key) = self.signers.get(&signer.id) else {
            return Err(fail(format!(
                "signed by key {:?}, which the policy does not trust",
                signer.id
            )));
        };
        if key.algorithm() != signer.algorithm {
            return Err(fail(format!(
                "signed with {:?}, but key {:?} signs with {:?}",
                signer.algorithm,
                signer.id,
                key.algorithm()
            )));
        }
        let values: Option<Vec<&EdmValue>> = metadata
            .entries
            .iter()
            .map(|entry| properties.get(&entry.name))
            .collect();
        let Some(values) = values else {
            return Err(Error::invalid_argument(
                "projection",
                format!(
                    "{} is signed, and a policy that requires signatures verifies whole items \
                     only: select every property it lists ({}), or read the whole entity",
                    reading.target,
                    metadata
                        .entries
                        .iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let message = metadata.message(binding, reading.keys.pk(), reading.keys.rk(), &values);
        if !key.verify(&message, &metadata.signature).await? {
            return Err(fail(format!(
                "the signature by key {:?} does not verify: the entity was changed after it was \
                 signed",
                signer.id
            )));
        }
        Ok(())
    }

    /// Format versions 1 and 2: the seal over the list, then each listed property present.
    async fn decrypt_sealed(
        &self,
        reading: &Reading<'_>,
        metadata: v2::Metadata,
        properties: &mut Properties,
    ) -> Result<Protected> {
        let listed: BTreeSet<String> = metadata.props.iter().cloned().collect();
        if listed.len() != metadata.props.len() {
            return Err(reading.fail(
                METADATA_PROPERTY,
                Cause::Malformed("a property is listed twice".into()),
            ));
        }
        reading.check_complete(metadata.props.iter().map(String::as_str), properties)?;
        let version = match metadata.version {
            v2::Version::V1 => 1,
            v2::Version::V2 => 2,
        };
        if let Some(name) = &self.table_binding {
            return Err(reading.fail(
                METADATA_PROPERTY,
                Cause::TableBinding(format!(
                    "format version {version} binds none; this policy binds {name:?}"
                )),
            ));
        }
        if !self.signers.is_empty() {
            return Err(reading.fail(
                METADATA_PROPERTY,
                Cause::Signature(format!(
                    "format version {version} has no signature, and the policy requires one"
                )),
            ));
        }
        let wrapped = WrappedKey::new(metadata.wrap_alg.clone(), metadata.wrapped.clone());
        let content_key = self
            .content_key(&metadata.kid, &wrapped)
            .await
            .map_err(|failure| key_failure(reading, failure))?;
        let opener = Opener::new(&content_key);
        let (pk, rk) = (reading.keys.pk(), reading.keys.rk());
        let version = metadata.version;
        if opener
            .open(
                version,
                &metadata.seal,
                SEAL_COUNTER,
                &metadata.seal_ad(pk, rk),
            )
            .is_none_or(|empty| !empty.is_empty())
        {
            return Err(reading.fail(METADATA_PROPERTY, Cause::Authentication));
        }

        for (index, name) in metadata.props.iter().enumerate() {
            let Some(value) = properties.get(name) else {
                continue;
            };
            let EdmValue::Binary(stored) = value else {
                return Err(reading.fail(
                    name,
                    Cause::Malformed(format!(
                        "an encrypted value is Edm.Binary, not {}",
                        value.edm_type()
                    )),
                ));
            };
            let plaintext = opener
                .open(
                    version,
                    stored,
                    property_counter(index),
                    &v2::property_ad(version, pk, rk, name),
                )
                .ok_or_else(|| reading.fail(name, Cause::Authentication))?;
            let text =
                String::from_utf8(plaintext).map_err(|_| reading.fail(name, Cause::NotUtf8))?;
            properties.insert(name.clone(), text);
        }
        Ok(Protected::encrypted(listed))
    }

    /// Finds the key named `kid` (the policy's own key first, then the resolver) and unwraps
    /// the content key with it.
    pub(crate) async fn content_key(
        &self,
        kid: &str,
        wrapped: &WrappedKey,
    ) -> std::result::Result<Arc<ContentKey>, KeyFailure> {
        // Nothing from the stored entity reaches the resolver or a key unchecked: the id must
        // be one the policy allows, the wrapped key bounded, its algorithm the key's own.
        if !is_key_id(kid) {
            return Err(KeyFailure::Data(Cause::Malformed(
                "the key id is not 1 to 1,024 bytes of text without control characters".into(),
            )));
        }
        if !self.allows_key_id(kid) {
            return Err(KeyFailure::Data(Cause::KeyNotAllowed {
                key_id: kid.to_owned(),
            }));
        }
        if wrapped.bytes().is_empty() || wrapped.bytes().len() > MAX_WRAPPED_KEY {
            return Err(KeyFailure::Data(Cause::Malformed(format!(
                "the wrapped key is not 1 to {MAX_WRAPPED_KEY} bytes"
            ))));
        }
        match &self.key_cache {
            Some(cache) => {
                cache
                    .get_or_unwrap(kid, wrapped, || self.resolve_and_unwrap(kid, wrapped))
                    .await
            }
            None => self.resolve_and_unwrap(kid, wrapped).await.map(Arc::new),
        }
    }

    /// Finds the key named `kid` (already allowed), pins the algorithm, unwraps.
    async fn resolve_and_unwrap(
        &self,
        kid: &str,
        wrapped: &WrappedKey,
    ) -> std::result::Result<ContentKey, KeyFailure> {
        let key: Arc<dyn KeyEncryptionKey> = if kid == self.kek.id() {
            Arc::clone(&self.kek)
        } else {
            let found = match &self.resolver {
                Some(resolver) => resolver.resolve(kid).await.map_err(KeyFailure::Service)?,
                None => None,
            };
            found.ok_or_else(|| {
                KeyFailure::Data(Cause::UnknownKey {
                    key_id: kid.to_owned(),
                })
            })?
        };
        if key.id() != kid {
            return Err(KeyFailure::Data(Cause::KeyIdMismatch {
                stored: kid.to_owned(),
                resolved: key.id().to_owned(),
            }));
        }
        if wrapped.algorithm() != key.algorithm() {
            return Err(KeyFailure::Data(Cause::Unwrap(format!(
                "the content key was wrapped with {:?}; key {kid:?} wraps with {:?}",
                wrapped.algorithm(),
                key.algorithm()
            ))));
        }
        key.unwrap(wrapped).await.map_err(|e| match e {
            UnwrapError::Rejected { reason } => KeyFailure::Data(Cause::Unwrap(reason)),
            UnwrapError::Unavailable(error) => KeyFailure::Service(error),
        })
    }
}

/// A failure to get the content key of tablekit's own format: a decryption failure of the
/// metadata property, or the service's error unchanged.
fn key_failure(reading: &Reading<'_>, failure: KeyFailure) -> Error {
    match failure {
        KeyFailure::Data(cause) => reading.fail(METADATA_PROPERTY, cause),
        KeyFailure::Service(error) => error,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablekit_core::Keys;
    use tablekit_core::{EdmValue, Properties};

    use crate::format::v3::{self, ItemKeys, Kind};
    use crate::format::{METADATA_PROPERTY, Stored};
    use crate::key::{KeyEncryptionKey, WrappedKey};
    use crate::local::AesKeyWrap;
    use crate::policy::EncryptionPolicy;
    use crate::sign::Ed25519SigningKey;

    /// What a holder of the key-encryption key can do without the signing key: unwrap the
    /// content key, change the item — a ciphertext re-encrypted, a signed value — and compute
    /// its MAC again. A policy without a signing key accepts that; the signature, which covers
    /// the same message, does not.
    #[tokio::test]
    async fn the_signature_covers_what_a_holder_of_the_key_encryption_key_can_recompute() {
        let kek = Arc::new(AesKeyWrap::new("k1", &[1; 32]).unwrap());
        let builder = || {
            EncryptionPolicy::builder(kek.clone())
                .properties(["Email"])
                .sign_only(["Age"])
        };
        let signer = Arc::new(Ed25519SigningKey::from_seed("s1", &[2; 32]).unwrap());
        let signing = builder().signing_key(signer).build().unwrap();
        let unsigned = builder().build().unwrap();
        let keys = Keys::new("Sales", "000223").unwrap();
        let original = signing
            .encrypt(
                &keys,
                Properties::new()
                    .with("Email", "jun@contoso.example")
                    .with("Age", 47i64),
            )
            .await
            .unwrap();

        type Change = fn(&mut Properties, &ItemKeys, &v3::Metadata, &Keys);
        let changes: [(&str, Change); 2] = [
            (
                "a ciphertext re-encrypted",
                |stored, item, metadata, keys| {
                    let index = metadata
                        .entries
                        .iter()
                        .position(|e| e.kind == Kind::Encrypted && e.name == "Email")
                        .unwrap();
                    let ad = v3::property_ad("", keys.pk(), keys.rk(), "Email");
                    let forged = item.seal(b"attacker@evil.example".to_vec(), index, &ad);
                    stored.insert("Email", EdmValue::Binary(forged));
                },
            ),
            ("a signed value changed", |stored, _, _, _| {
                stored.insert("Age", 18i64);
            }),
        ];
        for (what, change) in changes {
            let mut stored = original.clone();
            let Some(Stored::V3(mut metadata)) = stored
                .get_str(METADATA_PROPERTY)
                .unwrap()
                .map(|t| Stored::decode(t).unwrap())
            else {
                panic!("format 3");
            };
            let wrapped = WrappedKey::new(metadata.wrap_alg.clone(), metadata.wrapped.clone());
            let content_key = kek.unwrap(&wrapped).await.unwrap();
            let item = ItemKeys::derive(&content_key, &metadata.salt);
            change(&mut stored, &item, &metadata, &keys);
            let values: Vec<&EdmValue> = metadata
                .entries
                .iter()
                .map(|e| stored.get(&e.name).unwrap())
                .collect();
            metadata.mac = item.mac(&metadata.message("", keys.pk(), keys.rk(), &values));
            stored.insert(METADATA_PROPERTY, metadata.encode());

            // A policy that trusts no signer checks the MAC alone, which the key holder
            // recomputed …
            assert!(
                unsigned.decrypt("T", &keys, stored.clone()).await.is_ok(),
                "{what}: the MAC alone is the key holder's to recompute"
            );
            // … and the signature stops it.
            let error = signing.decrypt("T", &keys, stored).await.unwrap_err();
            assert!(
                error.to_string().contains("does not verify"),
                "{what}: {error}"
            );
        }
    }
}
