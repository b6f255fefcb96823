//! [`LargeEntities`]: entities whose payload lives in a blob the entity references (§5.11).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use tablekit_azure::{BlobCondition, Container, Deadline, Table, UploadOptions, track_landing};
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::edm::to_properties;
use tablekit_core::{
    AsEntity, ETag, Entity, Error, ErrorKind, IfMatch, IntoKeys, Keys, NameKind, Result, Target,
};
use tracing::Instrument as _;

use crate::reference::{
    BlobRef, GRACE_METADATA, Names, PK_METADATA, Payload, RK_METADATA, encode_grace, encode_key,
};

/// How often a write uploads its payload again after missing its commit deadline.
const MAX_STALLS: usize = 3;

/// Entities with a payload beyond the entity limits (a photo, a document, a serialized value
/// of several MiB): the payload is a blob under a name used once, and the entity holds the
/// reference — blob name, length and SHA-256 — next to its ordinary properties: a
/// `#[derive(TableEntity)]` value (its keys computed from its fields) or any serde value
/// with explicit keys ([`Entity`]).
///
/// **Write order** (never a reference to a missing blob): read the entity's ETag → upload
/// the payload under a new name → write the entity conditionally on that ETag (insert when
/// absent) → delete the blob it referenced before. A failure before the entity write leaves the old value; a
/// failure after it leaves the new one; what is left behind is an unreferenced blob, which
/// [`LargeEntities::sweep`] deletes. Concurrent writers of one entity each replace the
/// reference they read, so they end with one reference and delete each other's old blobs.
///
/// **Reads** fetch the entity, then the blob, and verify length and hash. Compression is not
/// built in: compress the payload before [`LargeEntities::upsert`] if it pays.
///
/// | operation | requests |
/// |---|---|
/// | [`LargeEntities::upsert`] | 4 (read, upload, conditional write, old-blob delete); 3 when new |
/// | [`LargeEntities::replace`] | 4 (read, upload, conditional write, old-blob delete); 1 when refused at the read |
/// | [`LargeEntities::insert`] | 2 (upload, insert) |
/// | [`LargeEntities::get`] | 2 (entity, blob); 1 for an inline payload |
/// | [`LargeEntities::get_entity`] | 1 |
/// | [`LargeEntities::merge`] | 1 |
/// | [`LargeEntities::delete`] | 3 (read, conditional delete, blob delete); `NotFound` after 1 when absent |
/// | [`LargeEntities::delete_if_exists`] | 3 (read, conditional delete, blob delete); 1 when absent |
/// | [`LargeEntities::sweep`] | 1 per 5,000 blobs + 1 per entity with a blob past the grace period + 1 per orphan |
#[derive(Clone)]
pub struct LargeEntities {
    pub(crate) table: Table,
    pub(crate) container: Container,
    pub(crate) names: Names,
    pub(crate) prefix: String,
    pub(crate) inline_max: usize,
    pub(crate) commit_deadline: Duration,
    pub(crate) clock_allowance: Duration,
    pub(crate) grace: Duration,
    pub(crate) content_type: Option<String>,
}

impl fmt::Debug for LargeEntities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LargeEntities")
            .field("table", &self.table.name())
            .field("container", &self.container.name())
            .field("property", &self.names.inline)
            .field("prefix", &self.prefix)
            .field("inline_max", &self.inline_max)
            .field("commit_deadline", &self.commit_deadline)
            .field("clock_allowance", &self.clock_allowance)
            .field("grace", &self.grace)
            .finish()
    }
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LargeWritten {
    /// The entity's new ETag.
    pub etag: ETag,
    /// The new blob reference (`None` for an inline payload).
    pub reference: Option<BlobRef>,
    /// The replaced blob, when deleting it failed: it is unreferenced and the next
    /// [`LargeEntities::sweep`] deletes it.
    pub orphaned: Option<String>,
}

impl LargeEntities {
    /// The table of the entities.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The container of the payload blobs.
    pub fn container(&self) -> &Container {
        &self.container
    }

    /// The prefix of every payload blob's name.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The store's grace period ([`LargeEntitiesBuilder::with_grace`](crate::LargeEntitiesBuilder::with_grace),
    /// default 1 hour): a blob is swept only once it is at least this old by the service's
    /// clock, and every entity write of this handle lands, if ever, within it less the clock
    /// allowance after the upload of its blob started. No request is sent.
    ///
    /// Why a sweep after it is safe: a blob's `Last-Modified` is stamped after its upload
    /// started, so once the service's clock reads `Last-Modified` + the grace, every entity
    /// write that could reference the blob has landed or never will — and a read of the
    /// entity then tells for good whether it does. The clock allowance covers the one-second
    /// resolution of the service's timestamps and differences between its servers' clocks.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The shortest grace period this handle's writes fit in: the commit deadline, plus the
    /// longest an entity write may take to land after it starts
    /// ([`Settings::write_settles_within`](tablekit_azure::Settings::write_settles_within) of
    /// the table's account), plus the clock allowance. No request is sent.
    ///
    /// [`LargeEntities::upsert`] and [`LargeEntities::insert`] refuse to write, before any
    /// request, when this exceeds [`LargeEntities::grace`]. With the default settings, about
    /// 15 min 55 s (10 min + 4 min 55 s + 1 min) against the default grace of 1 hour.
    pub fn required_grace(&self) -> Duration {
        self.commit_deadline
            .saturating_add(self.table.account().settings().write_settles_within())
            .saturating_add(self.clock_allowance)
    }

    /// Refuses a write from a handle whose entity writes could land after the grace period:
    /// a sweep could then delete a blob before the write that references it lands.
    fn check_grace(&self) -> Result<()> {
        let required = self.required_grace();
        if required <= self.grace {
            return Ok(());
        }
        Err(Error::InvalidConfig {
            part: "grace".into(),
            reason: format!(
                "an entity write of this handle may land up to {required:?} after its blob's upload starts (commit deadline {:?} + Settings::write_settles_within {:?} + clock allowance {:?}), later than the store's grace period of {:?} allows: a sweep could delete the blob first. Lengthen the grace period (LargeEntitiesBuilder::with_grace, the same for every handle of the store) or shorten the settings",
                self.commit_deadline,
                self.table.account().settings().write_settles_within(),
                self.clock_allowance,
                self.grace
            ),
        })
    }

    /// The entity's properties with `payload` in place, checked against every entity limit.
    fn entity<M: Serialize + ?Sized>(
        &self,
        keys: &Keys,
        value: &M,
        payload: &Payload,
    ) -> Result<Entity<Properties>> {
        let mut props = to_properties(value)?;
        for name in self.names.all() {
            if props.contains(name) {
                return Err(Error::InvalidName {
                    kind: NameKind::Property,
                    name: name.to_owned(),
                    reason: "reserved for the payload reference of this store".into(),
                });
            }
        }
        self.names.write(&mut props, payload);
        let entity = Entity::new(keys.clone(), props);
        // Encoding checks 252 properties and 1 MiB with the reference included.
        Operation::upsert_replace(&entity)?;
        Ok(entity)
    }

    /// A new blob name and the entity that would reference it; nothing is sent.
    fn prepare<M: Serialize + ?Sized>(
        &self,
        keys: &Keys,
        value: &M,
        data: &Bytes,
    ) -> Result<(Entity<Properties>, Payload)> {
        let payload = if data.len() <= self.inline_max {
            Payload::Inline(data.to_vec())
        } else {
            let name = format!("{}{}", self.prefix, uuid::Uuid::new_v4());
            Payload::Blob(BlobRef::for_payload(name, data))
        };
        Ok((self.entity(keys, value, &payload)?, payload))
    }

    async fn upload(&self, keys: &Keys, reference: &BlobRef, data: &Bytes) -> Result<()> {
        let metadata = BTreeMap::from([
            (PK_METADATA.to_owned(), encode_key(keys.pk())),
            (RK_METADATA.to_owned(), encode_key(keys.rk())),
            (GRACE_METADATA.to_owned(), encode_grace(self.grace)),
        ]);
        let mut options = UploadOptions::default()
            .with_metadata(metadata)
            .with_condition(BlobCondition::IfNotExists);
        if let Some(content_type) = &self.content_type {
            options = options.with_content_type(content_type.clone());
        }
        self.container
            .upload(&reference.name, data.clone(), options)
            .await
            .map(drop)
    }

    /// Deletes a blob nobody references, or leaves it to the sweeper if that fails.
    async fn discard(&self, name: &str) -> Option<String> {
        match self.container.delete_blob_if_exists(name).await {
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(target: "tablekit", blob = name, error = %e, "unreferenced blob left for the sweeper");
                Some(name.to_owned())
            }
        }
    }

    /// Writes `entity` (its keys and ordinary properties) with `payload`, replacing whatever
    /// is stored (last writer wins): read the entity's ETag and current reference → upload the payload under
    /// a new name → write the entity conditionally on that ETag (insert when absent) → delete
    /// the blob it referenced before.
    ///
    /// A conflict is a write that finds the entity changed since the read (412), created
    /// since (409), or deleted since (404 on the conditional replace). The attempt then
    /// starts again from the read with a *fresh* blob: a blob whose write was sent is never
    /// offered again, because that write may have been applied and already replaced by
    /// another writer, who then deletes the blob. Such blobs are deleted as soon as a read
    /// shows the entity does not reference them; if a read shows it does, that write was
    /// applied and is the result.
    ///
    /// **Requests: 4** (point read, upload, conditional replace, delete of the old blob);
    /// 3 for a new entity; one fewer without a blob (inline payload) on either side.
    /// +4 per conflict (read, delete the unused blob, upload, write); +2 (delete, upload
    /// again) per upload that outlasted the commit deadline.
    ///
    /// **Consistency:** last writer wins among the `upsert`s and [`LargeEntities::delete`]s of
    /// one entity: each writes conditionally on what it read and starts again when that
    /// changed, so what is stored is the outcome of the one whose write landed last — a put
    /// that writes after a concurrent delete stores its value. Readers see the old or the new
    /// value, never a reference to a missing blob. Not covered: an insert attempt the service
    /// applies after the client stopped waiting for it can recreate an entity a later delete
    /// removed ("What does not hold" in the crate documentation).
    ///
    /// **Grace:** the entity write runs under a [`Deadline`] at the upload's start plus the
    /// store's [`LargeEntities::grace`] less the clock allowance, so it never lands after a
    /// sweep may have deleted its blob.
    ///
    /// # Errors
    /// Before any request: the entity's key errors, encoding errors of its value, a property
    /// name the reference uses, and entity limits with the reference included;
    /// [`Error::InvalidConfig`] (part `grace`) when this handle's
    /// [`LargeEntities::required_grace`] exceeds the store's [`LargeEntities::grace`]. Then
    /// transport and service errors of any step; a failed write leaves the old value (or, after
    /// an error that leaves its outcome unknown, possibly the new one), and possibly an
    /// unreferenced blob for the sweeper. [`Error::PreconditionFailed`] when conflicts outlast
    /// the account's conflict-retry limit; [`Error::Transport`] when the upload outlasts the
    /// commit deadline 3 times in a row; [`Error::DeadlineExceeded`] when the entity write was
    /// delayed past its deadline (its blob is then deleted, unless an earlier attempt may still
    /// land). A failure to delete the *old* blob is not an error: see
    /// [`LargeWritten::orphaned`].
    pub async fn upsert(
        &self,
        entity: &impl AsEntity,
        payload: impl Into<Bytes>,
    ) -> Result<LargeWritten> {
        self.write(entity, payload.into(), None).await
    }

    /// Replaces the entity and its payload only if the stored entity matches `if_match`:
    /// with [`IfMatch::ETag`], only the version with that ETag (from a read,
    /// [`Stored::if_match`](tablekit_core::Stored::if_match)); with [`IfMatch::Any`], any
    /// version, but the entity must exist. Same write order as [`LargeEntities::upsert`]:
    /// read → check the condition → upload the payload under a new name → replace the entity
    /// conditionally on the ETag read → delete the blob it referenced before.
    ///
    /// A refusal known from the read (the entity absent, or at another version) is returned
    /// before anything is uploaded. When the entity changes between the read and the write,
    /// the write is refused (412) and the entity read again: with an ETag that no longer
    /// matches, the replace fails and deletes the blob it uploaded; with [`IfMatch::Any`] it
    /// starts again from the read with a fresh blob, as `upsert` does, and fails with
    /// `NotFound` once the entity is gone.
    ///
    /// **Requests: 4** (point read, upload, conditional replace, delete of the old blob);
    /// one fewer without a blob (inline payload) on either side; **1** when refused at the
    /// read (absent, or another version). +2 (read again, delete the unused blob) when the
    /// entity changes before the write, and then with [`IfMatch::Any`] +2 more per new
    /// attempt (upload, write); +2 (delete, upload again) per upload that outlasted the
    /// commit deadline.
    ///
    /// **Consistency:** on `Ok`, the entity held the version the condition asked for until
    /// the replace, and readers see the old value or the new one, never a reference to a
    /// missing blob. On [`Error::PreconditionFailed`] or [`Error::NotFound`], what is stored
    /// is not changed by this call, and its uploaded blob (if any) is deleted, or left
    /// unreferenced for [`LargeEntities::sweep`] when that delete fails.
    ///
    /// **Grace:** as [`LargeEntities::upsert`]: the entity write lands, if ever, by the
    /// upload's start plus the store's grace less the clock allowance.
    ///
    /// # Errors
    /// Before any request: as [`LargeEntities::upsert`] (keys, encoding, a property name the
    /// reference uses, entity limits with the reference included, the grace check).
    /// [`Error::NotFound`] when the entity (or the table) does not exist;
    /// [`Error::PreconditionFailed`] when it is not at the ETag given, or, with
    /// [`IfMatch::Any`], when concurrent writes outlast the conflict-retry limit. Then the
    /// transport and service errors of [`LargeEntities::upsert`], with the same outcomes.
    pub async fn replace(
        &self,
        entity: &impl AsEntity,
        payload: impl Into<Bytes>,
        if_match: IfMatch,
    ) -> Result<LargeWritten> {
        self.write(entity, payload.into(), Some(&if_match)).await
    }

    /// The write loop of [`LargeEntities::upsert`] (`condition` `None`) and
    /// [`LargeEntities::replace`] (the condition the stored entity must meet).
    async fn write(
        &self,
        entity: &impl AsEntity,
        data: Bytes,
        condition: Option<&IfMatch>,
    ) -> Result<LargeWritten> {
        let keys = &entity.entity_keys()?;
        let value = entity.entity_value();
        // Validates everything before the first request; each attempt makes its own name.
        self.prepare(keys, value, &data)?;
        self.check_grace()?;
        let span = tablekit_azure::step_span("blob offload", self.table.name());
        async {
            let mut conflicts = self.table.account().conflict_loop();
            // Blobs whose entity write was sent but not confirmed, with the blob it replaced.
            let mut sent: Vec<(Payload, Option<String>)> = Vec::new();
            loop {
                let current = self.table.get::<Properties>(keys).await?;
                let current_blob = match &current {
                    Some(stored) => {
                        let mut props = stored.value.clone();
                        self.names
                            .take(keys, &mut props)
                            .ok()
                            .and_then(|p| blob_name(&p))
                    }
                    None => None,
                };
                if let Some(i) = sent
                    .iter()
                    .position(|(p, _)| blob_name(p).is_some() && blob_name(p) == current_blob)
                {
                    // An earlier attempt was applied after all (its response was lost).
                    let (payload, old) = sent.swap_remove(i);
                    for (other, _) in &sent {
                        self.discard_payload(other).await;
                    }
                    let etag = current.map(|c| c.etag).unwrap_or_else(|| ETag::new(""));
                    return Ok(self.finish(etag, &payload, old).await);
                }
                for (unreferenced, _) in sent.drain(..) {
                    self.discard_payload(&unreferenced).await;
                }
                if let Some(condition) = condition {
                    self.check_condition(keys, current.as_ref(), condition)?;
                }
                let staged = self.stage(keys, value, &data).await?;
                let entity = &staged.entity;
                let (written, unsettled) = staged
                    .bound(async {
                        match &current {
                            Some(stored) => self
                                .table
                                .replace(entity, stored.if_match())
                                .await
                                .map_err(deleted_is_a_conflict),
                            None => self.table.insert(entity).await,
                        }
                    })
                    .await;
                match written {
                    Ok(etag) => {
                        return Ok(self.finish(etag, &staged.payload, current_blob).await);
                    }
                    Err(e) => {
                        let refused = never_applied(&e, unsettled);
                        sent.push((staged.payload, current_blob));
                        if let Err(e) = conflicts.retry(e).await {
                            if refused {
                                // The service refused it: the entity does not reference it.
                                if let Some((payload, _)) = sent.pop() {
                                    self.discard_payload(&payload).await;
                                }
                            }
                            return Err(e);
                        }
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Refuses a replace, before anything is uploaded, when the stored entity `current`
    /// does not meet `condition`.
    fn check_condition(
        &self,
        keys: &Keys,
        current: Option<&tablekit_core::Stored<Properties>>,
        condition: &IfMatch,
    ) -> Result<()> {
        let target = || Target::entity(self.table.name(), keys.clone());
        match (current, condition) {
            (None, _) => Err(Error::NotFound { target: target() }),
            (Some(stored), IfMatch::ETag(etag)) if &stored.etag != etag => {
                Err(Error::PreconditionFailed { target: target() })
            }
            (Some(_), _) => Ok(()),
        }
    }

    /// After a successful write of `payload`: deletes the blob it replaced, if any.
    async fn finish(&self, etag: ETag, payload: &Payload, old: Option<String>) -> LargeWritten {
        let orphaned = match old {
            Some(old) if Some(&old) != blob_name(payload).as_ref() => self.discard(&old).await,
            _ => None,
        };
        LargeWritten {
            etag,
            reference: reference(payload),
            orphaned,
        }
    }

    async fn discard_payload(&self, payload: &Payload) {
        if let Some(name) = blob_name(payload) {
            self.discard(&name).await;
        }
    }

    /// Uploads the payload under a new name (nothing for an inline payload) and returns the
    /// entity that references it, for a write that must start at once, with the deadline that
    /// write must land by.
    ///
    /// The commit deadline and the grace period run from the moment the upload *starts*,
    /// which is before the service stamps the blob's `Last-Modified`: the sweeper's grace
    /// period, measured from that stamp, then covers the write that follows. When the commit
    /// deadline has passed by the time the write could start (a slow upload, a stalled
    /// process), the blob is deleted and a new one uploaded, [`MAX_STALLS`] times at most.
    /// Whatever delays the write after that (a codec waiting for its key store, a frozen
    /// process), its attempts are sent only if they land by the upload's start plus the
    /// grace period less the clock allowance.
    async fn stage<M: Serialize + ?Sized>(
        &self,
        keys: &Keys,
        value: &M,
        data: &Bytes,
    ) -> Result<Staged> {
        for _ in 0..MAX_STALLS {
            let (entity, payload) = self.prepare(keys, value, data)?;
            let Payload::Blob(reference) = &payload else {
                return Ok(Staged {
                    entity,
                    payload,
                    deadline: None,
                });
            };
            let started = Instant::now();
            self.upload(keys, reference, data).await?;
            if started.elapsed() <= self.commit_deadline {
                let lands_by = started + self.grace.saturating_sub(self.clock_allowance);
                return Ok(Staged {
                    entity,
                    payload,
                    deadline: Some(Deadline::at(lands_by)),
                });
            }
            // Too late: a sweeper may already count this blob as abandoned.
            self.discard(&reference.name).await;
        }
        Err(Error::Transport {
            message: format!(
                "the entity write could not start within the commit deadline ({:?}) of the upload {MAX_STALLS} times",
                self.commit_deadline
            ),
            source: None,
        })
    }

    /// Creates the entity with its payload; fails if the entity exists.
    ///
    /// **Requests: 2** (upload, insert); 1 for an inline payload; +2 per upload that
    /// outlasted the commit deadline. **Consistency:** the entity appears with a complete
    /// payload or not at all.
    ///
    /// # Errors
    /// As [`LargeEntities::upsert`] (the grace check and the deadline included);
    /// [`Error::AlreadyExists`] if the entity exists (the uploaded blob is deleted again:
    /// 1 more request).
    pub async fn insert(
        &self,
        entity: &impl AsEntity,
        payload: impl Into<Bytes>,
    ) -> Result<LargeWritten> {
        let keys = &entity.entity_keys()?;
        let value = entity.entity_value();
        let data: Bytes = payload.into();
        // Validates everything before the first request.
        self.prepare(keys, value, &data)?;
        self.check_grace()?;
        let span = tablekit_azure::step_span("blob offload", self.table.name());
        async {
            let staged = self.stage(keys, value, &data).await?;
            let (written, unsettled) = staged.bound(self.table.insert(&staged.entity)).await;
            match written {
                Ok(etag) => Ok(LargeWritten {
                    etag,
                    reference: reference(&staged.payload),
                    orphaned: None,
                }),
                Err(e) => {
                    // Refused (409, 4xx) or never sent: unreferenced. Otherwise the insert
                    // may have been applied, and the blob stays until the sweeper sees
                    // whether it is referenced.
                    if never_applied(&e, unsettled) {
                        self.discard_payload(&staged.payload).await;
                    }
                    Err(e)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Deletes the entity if it matches `if_match`, then its blob.
    ///
    /// With [`IfMatch::Any`], the entity is deleted whatever it holds: read, delete
    /// conditional on the read ETag, and on a conflict (a write between the read and the
    /// delete) read and delete again — last writer wins with concurrent
    /// [`LargeEntities::upsert`]s, which deletes their value and blob too. With an ETag (from a
    /// read, [`Stored::if_match`](tablekit_core::Stored::if_match)), only that version is
    /// deleted: a read that finds another version fails without a delete.
    ///
    /// **Requests: 3** (read, delete conditional on the read ETag, blob delete); 2 for an
    /// inline payload; 1 when absent or, with an ETag, changed; with [`IfMatch::Any`] +2 per
    /// conflict (read again, delete again). **Consistency:** the entity goes first, so no
    /// reader ever follows a reference to a deleted blob; if the blob delete fails, the
    /// sweeper deletes it.
    ///
    /// # Errors
    /// Invalid keys, before any request. [`Error::NotFound`] when the entity (or the table)
    /// does not exist; [`Error::PreconditionFailed`] when it is not at the ETag given, or when
    /// concurrent writes outlast the conflict-retry limit; transport and service errors of
    /// the entity requests.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        let keys = &keys.into_keys()?;
        let span = tablekit_azure::step_span("large delete", self.table.name());
        let deleted = match if_match {
            IfMatch::Any => self.delete_loop(keys).instrument(span).await?,
            IfMatch::ETag(etag) => self.delete_version(keys, &etag).instrument(span).await?,
        };
        if deleted {
            Ok(())
        } else {
            Err(Error::NotFound {
                target: Target::entity(self.table.name(), keys.clone()),
            })
        }
    }

    /// Deletes the entity whatever it holds, then its blob, as [`LargeEntities::delete`]
    /// with [`IfMatch::Any`]. Returns whether the entity existed.
    ///
    /// **Requests: 3** (read, conditional delete, blob delete); 2 for an inline payload; 1
    /// when absent; +2 per conflict. **Consistency:** as [`LargeEntities::delete`].
    ///
    /// # Errors
    /// As [`LargeEntities::delete`], without the `NotFound` for an absent entity.
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        let keys = &keys.into_keys()?;
        let span = tablekit_azure::step_span("large delete", self.table.name());
        self.delete_loop(keys).instrument(span).await
    }

    /// The blob the stored entity references, if any (none for an inline payload or a
    /// malformed reference, which the sweeper then handles).
    fn blob_of(&self, keys: &Keys, stored: &tablekit_core::Stored<Properties>) -> Option<String> {
        let mut props = stored.value.clone();
        self.names
            .take(keys, &mut props)
            .ok()
            .and_then(|p| blob_name(&p))
    }

    /// Deletes the version `etag` of the entity and its blob: `false` when absent; a
    /// precondition failure when the entity is at another version.
    async fn delete_version(&self, keys: &Keys, etag: &ETag) -> Result<bool> {
        let Some(stored) = self.table.get::<Properties>(keys).await? else {
            return Ok(false);
        };
        if &stored.etag != etag {
            return Err(Error::PreconditionFailed {
                target: Target::entity(self.table.name(), keys.clone()),
            });
        }
        let old = self.blob_of(keys, &stored);
        match self.table.delete(keys, IfMatch::ETag(etag.clone())).await {
            Ok(()) => {}
            // Deleted by someone else since the read: absent, as for a read that found
            // nothing; the other deleter deletes the blob.
            Err(Error::NotFound { target }) if target.keys.is_some() => return Ok(false),
            Err(e) => return Err(e),
        }
        if let Some(old) = old {
            self.discard(&old).await;
        }
        Ok(true)
    }

    async fn delete_loop(&self, keys: &Keys) -> Result<bool> {
        let deleted = self
            .table
            .account()
            .conflict_loop()
            .run(|_| async {
                let Some(stored) = self.table.get::<Properties>(keys).await? else {
                    return Ok(None);
                };
                let old = self.blob_of(keys, &stored);
                match self.table.delete(keys, stored.if_match()).await {
                    Ok(()) => Ok(Some(old)),
                    // Deleted by someone else meanwhile: as good as done.
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(Some(None)),
                    Err(e) => Err(e),
                }
            })
            .await?;
        match deleted {
            None => Ok(false),
            Some(old) => {
                if let Some(old) = old {
                    self.discard(&old).await;
                }
                Ok(true)
            }
        }
    }

    /// Writes only `entity`'s ordinary properties, keeping its payload reference: a merge
    /// conditioned on `if_match`.
    ///
    /// **Requests: 1.**
    ///
    /// # Errors
    /// [`Error::PreconditionFailed`], [`Error::NotFound`]; the entity's key errors and a
    /// property name the reference uses are refused before any request.
    pub async fn merge(&self, entity: &impl AsEntity, if_match: IfMatch) -> Result<ETag> {
        let keys = entity.entity_keys()?;
        let props = to_properties(entity.entity_value())?;
        if let Some(name) = self.names.all().into_iter().find(|n| props.contains(n)) {
            return Err(Error::InvalidName {
                kind: NameKind::Property,
                name: name.to_owned(),
                reason: "reserved for the payload reference of this store".into(),
            });
        }
        self.table.merge(&Entity::new(keys, props), if_match).await
    }
}

/// A staged write: the entity referencing an uploaded payload, and the deadline its write
/// must land by (none for an inline payload: no blob can be swept from under it).
struct Staged {
    entity: Entity<Properties>,
    payload: Payload,
    deadline: Option<Deadline>,
}

impl Staged {
    /// Runs the entity write `write` under the deadline. Returns its result, and the instant
    /// by which those of its attempts that got no definite answer have landed or never will
    /// (`None` when every attempt got one, or none was sent).
    async fn bound<T>(
        &self,
        write: impl Future<Output = Result<T>>,
    ) -> (Result<T>, Option<Instant>) {
        match &self.deadline {
            Some(deadline) => track_landing(deadline.scope(write)).await,
            None => track_landing(write).await,
        }
    }
}

/// Whether a failed entity write certainly did not store its entity: the service refused it
/// (4xx; an earlier attempt whose outcome was unknown cannot land after a conflict, as its
/// condition no longer holds), or an attempt was refused unsent for its deadline and no
/// earlier attempt is left without a definite answer.
fn never_applied(error: &Error, unsettled: Option<Instant>) -> bool {
    let refused = error.status().is_some_and(|s| (400..500).contains(&s));
    let unsent = matches!(error, Error::DeadlineExceeded { .. }) && unsettled.is_none();
    refused || unsent
}

/// A conditional replace that finds the entity gone met a concurrent delete: like a 412, the
/// entity is no longer what was read, and the write starts again from the read (and
/// inserts), so a put that writes after a delete wins. Attempts of that replace still in
/// flight cannot land either: their ETag condition fails on an absent entity.
fn deleted_is_a_conflict(error: Error) -> Error {
    match error {
        Error::NotFound { target } if target.keys.is_some() => Error::PreconditionFailed { target },
        other => other,
    }
}

fn blob_name(payload: &Payload) -> Option<String> {
    match payload {
        Payload::Blob(r) => Some(r.name.clone()),
        Payload::Inline(_) => None,
    }
}

fn reference(payload: &Payload) -> Option<BlobRef> {
    match payload {
        Payload::Blob(r) => Some(r.clone()),
        Payload::Inline(_) => None,
    }
}
