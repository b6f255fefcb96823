//! Writes through an [`InterPartitionIndex`]: the primary copy at once, stamped with the write
//! id its queued [`CopyJob`] carries; the other copies when the job has run.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::edm::from_properties;
use tablekit_core::{ETag, Entity, Error, IfMatch, Keys, Result, Target};

use super::{CopyJob, InterPartitionIndex};
use crate::follow::{Pending, delete_followed};
use crate::read::{IndexEntry, Resolved, sealed::Indexed as _};
use crate::spec::Family;

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> InterPartitionIndex<T> {
    /// A write of the primary about to be made, conditioned on `previous`; `stamp` unless it
    /// is a delete.
    fn pending(&self, previous: Option<ETag>, stamp: bool) -> Pending {
        Pending::new(
            &self.queue,
            &self.context.placement.tables[0],
            previous,
            stamp,
            self.clock_skew,
        )
    }

    /// The primary copy of `family`, stamped with `pending`'s write id.
    fn primary(family: &Family, pending: &Pending) -> Result<Entity<Properties>> {
        let primary = family.primary();
        let entity = Entity::new(primary.keys.clone(), pending.stamp(primary.props.clone())?);
        tablekit_core::batch::Operation::insert(&entity)?;
        Ok(entity)
    }

    /// The job of a write that leaves `family` (the entity written, or deleted), the entity
    /// having held the copies of `stale` before it.
    fn job(&self, family: &Family, stale: Option<&Family>, pending: &Pending) -> CopyJob {
        let spec = &self.context.placement.spec;
        let primary = family.primary();
        let secondary = |f: &Family| -> Vec<(String, String)> {
            f.copies
                .iter()
                .enumerate()
                .skip(1)
                .map(|(i, row)| (spec.copies()[i].name().to_owned(), row.value.clone()))
                .collect()
        };
        CopyJob {
            index: self.context.name.clone(),
            partition: primary.keys.pk()[spec.primary().prefix().len()..].to_owned(),
            id: primary.value.clone(),
            stale: stale.map(secondary).unwrap_or_default(),
            // A delete writes no copy.
            fresh: if pending.write.write_id.is_some() {
                secondary(family)
            } else {
                Vec::new()
            },
            write: pending.write.clone(),
        }
    }

    /// Stores a new entity: enqueues its copy job, then inserts its primary copy, stamped
    /// with the write id the job carries. The other copies appear when the job has run.
    /// Returns the primary copy's ETag.
    ///
    /// **Requests:** 2 (a queue put, an insert), +1 read when the insert failed after an
    /// attempt that got no answer; the job then takes its own (see
    /// [`CopyHandler`](super::CopyHandler)). **Consistency:** the primary copy at once; the others eventually.
    ///
    /// **Outcomes:** `Ok` — the primary is stored. [`Error::Indeterminate`] — it may be.
    /// Any other error — it is not stored, and no attempt of it can land any more: when the
    /// write fails after an attempt that got no answer (a lost response, a timeout), the
    /// primary is read back once no attempt can land, and a primary carrying this write's
    /// stamp makes it `Ok`.
    ///
    /// # Errors
    /// Key, value and size errors before any request (every copy is encoded first, the
    /// primary with its stamp; an entity with a property named
    /// [`WRITE_ID_PROPERTY`](crate::WRITE_ID_PROPERTY) is refused);
    /// [`Error::AlreadyExists`] when the entity exists (its job then finds nothing to do);
    /// [`Error::Indeterminate`] when the outcome was left open and the read-back failed;
    /// [`Error::DeadlineExceeded`], the entity not written, when the write could no longer
    /// land before its job's deadline (the enqueue or a wait for throughput budget took that
    /// long): its job then ends in the poison queue, and may be re-queued.
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let family = self.family(entity)?;
        let pending = self.pending(None, true);
        let primary = Self::primary(&family, &pending)?;
        self.jobs()
            .enqueue(&self.job(&family, None, &pending))
            .await?;
        let table = &self.context.placement.tables[0];
        pending
            .store(table, &primary.keys, table.insert(&primary))
            .await
    }

    /// Stores an entity, new or not: reads its primary copy (to learn the copies it had),
    /// enqueues the copy job, then writes the primary copy, stamped with the job's write id,
    /// conditioned on the ETag read (or inserts it). A concurrent write makes it start again
    /// from the read. Returns the new ETag.
    ///
    /// **Requests:** 3 (a point read, a queue put, a write), plus 3 per conflict retry, +1
    /// read when the write failed after an attempt that got no answer. **Consistency:** the
    /// primary copy at once; the others eventually. **Outcomes:** as [`insert`](Self::insert)'s.
    ///
    /// # Errors
    /// As [`insert`](Self::insert); [`Error::PreconditionFailed`] when conflicts outlast the
    /// account's `conflict_retry` attempts; [`Error::Decode`] when the stored entity
    /// does not fit `T`.
    pub async fn upsert(&self, entity: &T) -> Result<ETag> {
        let new = self.family(entity)?;
        Self::primary(&new, &self.pending(None, true))?;
        let table = &self.context.placement.tables[0];
        let mut conflicts = table.account().conflict_loop();
        loop {
            // The read and the enqueue fail as they fail; only the write can lose a race.
            let written = async {
                let current = table.get::<Properties>(&new.primary().keys).await?;
                let (old, previous) = match &current {
                    None => (None, None),
                    Some(c) => (
                        Some(self.family(&from_properties::<T>(&c.value)?)?),
                        Some(c.etag.clone()),
                    ),
                };
                let pending = self.pending(previous, true);
                let primary = Self::primary(&new, &pending)?;
                self.jobs()
                    .enqueue(&self.job(&new, old.as_ref(), &pending))
                    .await?;
                let keys = &primary.keys;
                Ok::<_, Error>(match current {
                    None => pending.store(table, keys, table.insert(&primary)).await,
                    Some(current) => {
                        let write = table.replace(&primary, current.if_match());
                        pending.store(table, keys, write).await
                    }
                })
            };
            match written.await? {
                Ok(etag) => return Ok(etag),
                Err(e) => conflicts.retry(e.not_found_as_conflict()).await?,
            }
        }
    }

    /// Deletes an entity: enqueues the job that removes its other copies, then deletes the
    /// primary copy under its ETag.
    ///
    /// `entry` is the entity as read (`&stored.value`) or its partition and primary value
    /// (`("Sales", "000223")`). With [`IfMatch::ETag`] and the entity as read — whose ETag
    /// that must be (`index.delete(&stored.value, stored.if_match())`) — the job is computed
    /// from it, with no read. Otherwise the primary copy is read first: with
    /// [`IfMatch::Any`] the delete is conditioned on the ETag read and retried from the read
    /// on a conflict; with an ETag, an entity that has another is refused.
    ///
    /// **Requests:** 2 (a queue put, a delete) for an entity as read with its ETag;
    /// otherwise 3 (a point read, a queue put, a delete; 1 when the entity does not exist),
    /// plus 3 per conflict retry, +1 read when the delete failed after an attempt that got no
    /// answer. **Consistency:** the primary copy at once; the others eventually.
    /// **Outcomes:** as [`insert`](Self::insert)'s: an error other than
    /// [`Error::Indeterminate`] leaves the primary in place.
    ///
    /// # Errors
    /// Key errors before any request; [`Error::NotFound`] when the entity does not exist;
    /// [`Error::PreconditionFailed`] when its ETag is not the one given, or when conflicts
    /// outlast the retries; [`Error::DeadlineExceeded`] as for [`insert`](Self::insert).
    pub async fn delete(&self, entry: impl IndexEntry<T>, if_match: IfMatch) -> Result<()> {
        let (keys, expected) = match (entry.resolve(self.placement())?, if_match) {
            (Resolved::Family(family), IfMatch::ETag(etag)) => {
                let keys = family.primary().keys.clone();
                let pending = self.pending(Some(etag.clone()), false);
                self.jobs()
                    .enqueue(&self.job(&family, Some(&family), &pending))
                    .await?;
                let table = &self.context.placement.tables[0];
                let write = table.delete(&keys, IfMatch::ETag(etag));
                return pending.remove(table, &keys, write).await;
            }
            (resolved, IfMatch::ETag(etag)) => (resolved.primary_keys(), Some(etag)),
            (resolved, IfMatch::Any) => (resolved.primary_keys(), None),
        };
        if self.delete_read(&keys, expected.as_ref()).await? {
            return Ok(());
        }
        Err(Error::NotFound {
            target: Target::entity(self.context.placement.tables[0].name(), keys),
        })
    }

    /// Deletes an entity if it exists: as [`delete`](Self::delete) with [`IfMatch::Any`],
    /// returning whether it existed.
    ///
    /// **Requests:** 3 (1 if it does not exist), plus 3 per conflict retry, +1 read as for
    /// [`delete`](Self::delete). **Consistency:** the primary copy at once; the others
    /// eventually. **Outcomes:** as [`delete`](Self::delete)'s.
    ///
    /// # Errors
    /// Key errors; [`Error::PreconditionFailed`] when conflicts outlast the retries;
    /// [`Error::DeadlineExceeded`] as for [`insert`](Self::insert).
    pub async fn delete_if_exists(&self, entry: impl IndexEntry<T>) -> Result<bool> {
        let keys = entry.resolve(self.placement())?.primary_keys();
        self.delete_read(&keys, None).await
    }

    /// Reads the primary at `keys`, enqueues the job, and deletes the primary under the ETag
    /// read (which must be `expected`, if given; otherwise a lost race runs it again).
    /// `false` when it is gone.
    async fn delete_read(&self, keys: &Keys, expected: Option<&ETag>) -> Result<bool> {
        let table = &self.context.placement.tables[0];
        delete_followed(table, keys, expected, |current| async move {
            let old = self.family(&from_properties::<T>(&current.value)?)?;
            let pending = self.pending(Some(current.etag), false);
            self.jobs()
                .enqueue(&self.job(&old, Some(&old), &pending))
                .await?;
            Ok(pending)
        })
        .await
    }
}
