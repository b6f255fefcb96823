//! Reading a large entity: the entity, then the blob it references, verified.

use std::fmt;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::edm::from_properties;
use tablekit_core::{Error, IntoKeys, Keys, Result, Stored, Target};
use tracing::Instrument as _;

use crate::reference::{BlobRef, Payload};
use crate::store::LargeEntities;

/// How often [`LargeEntities::get`] re-reads the entity when the blob it referenced was
/// replaced (and deleted) between the two requests.
const READ_ATTEMPTS: usize = 3;

/// An entity and its payload, as read.
#[derive(Clone, PartialEq)]
pub struct Large<M> {
    /// The entity's keys, ETag, Timestamp and ordinary properties.
    pub entity: Stored<M>,
    /// The payload, verified against the reference.
    pub payload: Bytes,
    /// The blob reference (`None` for an inline payload).
    pub reference: Option<BlobRef>,
}

impl<M: fmt::Debug> fmt::Debug for Large<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Large")
            .field("entity", &self.entity)
            .field("payload_len", &self.payload.len())
            .field("reference", &self.reference)
            .finish()
    }
}

impl LargeEntities {
    /// Reads the entity and its payload, verifying the payload's length and SHA-256. If the
    /// blob was replaced and deleted between the two requests, the entity is read again.
    ///
    /// **Requests: 2** (entity, blob); 1 for an inline payload; +2 per concurrent
    /// replacement met. **Consistency:** the payload is the one the entity references.
    /// `None` when the entity does not exist.
    ///
    /// # Errors
    /// Invalid keys, before any request. [`Error::Corrupt`] when the entity has no valid
    /// reference, the blob does not match it, or the referenced blob is missing (which the
    /// write order rules out; only deleting blobs by hand causes it); [`Error::Decode`] when
    /// the properties do not fit `M`.
    pub async fn get<M: DeserializeOwned>(&self, keys: impl IntoKeys) -> Result<Option<Large<M>>> {
        let keys = &keys.into_keys()?;
        let span = tablekit_azure::step_span("large get", self.table.name());
        async {
            let mut missing: Option<String> = None;
            for _ in 0..READ_ATTEMPTS {
                let Some((entity, payload)) = self.read_entity::<M>(keys).await? else {
                    return Ok(None);
                };
                let reference = match payload {
                    Payload::Inline(bytes) => {
                        return Ok(Some(Large {
                            entity,
                            payload: bytes.into(),
                            reference: None,
                        }));
                    }
                    Payload::Blob(reference) => reference,
                };
                match self.container.download(&reference.name).await? {
                    Some(blob) => {
                        reference.verify(&blob.data)?;
                        return Ok(Some(Large {
                            entity,
                            payload: blob.data,
                            reference: Some(reference),
                        }));
                    }
                    // Replaced and deleted since the entity read: read the new reference.
                    None if missing.as_ref() != Some(&reference.name) => {
                        missing = Some(reference.name)
                    }
                    None => break,
                }
            }
            Err(Error::corrupt(
                Target::entity(self.table.name(), keys.clone()),
                format!(
                    "its property {} references blob {} which does not exist",
                    self.names.blob,
                    missing.unwrap_or_default()
                ),
            ))
        }
        .instrument(span)
        .await
    }

    /// Reads the entity only: its properties and the payload's reference, not the payload.
    ///
    /// **Requests: 1.**
    ///
    /// # Errors
    /// As [`LargeEntities::get`], without the blob checks.
    pub async fn get_entity<M: DeserializeOwned>(
        &self,
        keys: impl IntoKeys,
    ) -> Result<Option<(Stored<M>, Option<BlobRef>)>> {
        let keys = &keys.into_keys()?;
        Ok(self.read_entity::<M>(keys).await?.map(|(stored, payload)| {
            let reference = match payload {
                Payload::Blob(r) => Some(r),
                Payload::Inline(_) => None,
            };
            (stored, reference)
        }))
    }

    async fn read_entity<M: DeserializeOwned>(
        &self,
        keys: &Keys,
    ) -> Result<Option<(Stored<M>, Payload)>> {
        let Some(mut stored) = self.table.get::<Properties>(keys).await? else {
            return Ok(None);
        };
        let at = || Target::entity(self.table.name(), keys.clone());
        let payload = self
            .names
            .take(keys, &mut stored.value)
            .map_err(|e| e.with_target(at()))?;
        let value = from_properties::<M>(&stored.value).map_err(|e| e.with_target(at()))?;
        Ok(Some((stored.map(|_| value), payload)))
    }
}
