//! Decrypting a stored entity: tablekit's format, or the legacy one, then the policy's check
//! that nothing it encrypts was stored in the clear.

use std::collections::BTreeSet;
use std::sync::Arc;

use tablekit_core::edm::{EdmValue, Properties};
use tablekit_core::{Keys, Result, Target};

use crate::error::{Cause, DecryptionFailure};
use crate::format::{
    METADATA_PROPERTY, Metadata, MetadataError, SEAL_COUNTER, Sealer, property_ad, property_counter,
};
use crate::key::{ContentKey, KeyEncryptionKey, UnwrapError, WrappedKey};
use crate::legacy;
use crate::policy::EncryptionPolicy;

/// The entity being read, for error reports.
pub(crate) struct Reading<'a> {
    pub(crate) target: Target,
    pub(crate) keys: &'a Keys,
}

impl Reading<'_> {
    pub(crate) fn fail(&self, property: &str, cause: Cause) -> tablekit_core::Error {
        DecryptionFailure::new(&self.target, property, cause).into()
    }
}

impl EncryptionPolicy {
    /// Decrypts a stored entity of `table` with `keys`, read as a property bag: in tablekit's
    /// format (the [`METADATA_PROPERTY`]) or the legacy format of the former .NET, Java and
    /// Python clients (`_ClientEncryptionMetadata1`/`2`). Encrypted properties become strings
    /// again and the metadata properties are removed. A listed property the bag does not hold
    /// (left out by a projection) is skipped. An entity without metadata is returned as it is,
    /// unless it holds a property this policy encrypts.
    ///
    /// Requests: none to the table service; one resolver lookup (unless the entity names the
    /// policy's own key) and one `unwrap` call of the key-encryption key per encrypted entity
    /// (local keys send no request).
    ///
    /// # Errors
    /// A [`DecryptionFailure`] converted into [`tablekit_core::Error::Corrupt`], naming
    /// the entity and the property, when the metadata is malformed or of an unknown version,
    /// its key id is unknown, the content key does not unwrap, a value does not authenticate
    /// (altered, or moved from another property or entity), or a property this policy
    /// encrypts is stored without encryption. Errors of the resolver or of a key that cannot be
    /// used ([`UnwrapError::Unavailable`]) are passed on unchanged.
    pub async fn decrypt(
        &self,
        table: &str,
        keys: &Keys,
        mut properties: Properties,
    ) -> Result<Properties> {
        let reading = Reading {
            target: Target::entity(table, keys.clone()),
            keys,
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
                legacy::decrypt(self, &reading, metadata, &mut properties).await?
            }
            (None, None) => BTreeSet::new(),
        };
        for (name, _) in properties.iter() {
            if !decrypted.contains(name) && self.selects(keys.pk(), keys.rk(), name) {
                return Err(reading.fail(name, Cause::NotEncrypted));
            }
        }
        Ok(properties)
    }

    async fn decrypt_own(
        &self,
        reading: &Reading<'_>,
        metadata: EdmValue,
        properties: &mut Properties,
    ) -> Result<BTreeSet<String>> {
        let malformed = |why: String| reading.fail(METADATA_PROPERTY, Cause::Malformed(why));
        let EdmValue::String(text) = metadata else {
            return Err(malformed(format!(
                "a string was expected, not {}",
                metadata.edm_type()
            )));
        };
        let metadata = Metadata::decode(&text).map_err(|e| match e {
            MetadataError::Malformed(why) => malformed(why),
            MetadataError::Unsupported(what) => {
                reading.fail(METADATA_PROPERTY, Cause::Unsupported(what))
            }
        })?;
        let listed: BTreeSet<String> = metadata.props.iter().cloned().collect();
        if listed.len() != metadata.props.len() {
            return Err(malformed("a property is listed twice".into()));
        }

        let wrapped = WrappedKey::new(metadata.wrap_alg.clone(), metadata.wrapped.clone());
        let content_key = self
            .unwrap_content_key(reading, METADATA_PROPERTY, &metadata.kid, &wrapped)
            .await?;
        let sealer = Sealer::new(&content_key);
        let (pk, rk) = (reading.keys.pk(), reading.keys.rk());
        let version = metadata.version;
        if sealer
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
            let plaintext = sealer
                .open(
                    version,
                    stored,
                    property_counter(index),
                    &property_ad(version, pk, rk, name),
                )
                .ok_or_else(|| reading.fail(name, Cause::Authentication))?;
            let text =
                String::from_utf8(plaintext).map_err(|_| reading.fail(name, Cause::NotUtf8))?;
            properties.insert(name.clone(), text);
        }
        Ok(listed)
    }

    /// Finds the key named `kid` (the policy's own key first, then the resolver) and unwraps
    /// the content key with it.
    pub(crate) async fn unwrap_content_key(
        &self,
        reading: &Reading<'_>,
        property: &str,
        kid: &str,
        wrapped: &WrappedKey,
    ) -> Result<ContentKey> {
        let key: Arc<dyn KeyEncryptionKey> = if kid == self.kek.id() {
            Arc::clone(&self.kek)
        } else {
            let found = match &self.resolver {
                Some(resolver) => resolver.resolve(kid).await?,
                None => None,
            };
            found.ok_or_else(|| {
                reading.fail(
                    property,
                    Cause::UnknownKey {
                        key_id: kid.to_owned(),
                    },
                )
            })?
        };
        if key.id() != kid {
            return Err(reading.fail(
                property,
                Cause::KeyIdMismatch {
                    stored: kid.to_owned(),
                    resolved: key.id().to_owned(),
                },
            ));
        }
        key.unwrap(wrapped).await.map_err(|e| match e {
            UnwrapError::Rejected { reason } => reading.fail(property, Cause::Unwrap(reason)),
            UnwrapError::Unavailable(error) => error,
        })
    }
}
