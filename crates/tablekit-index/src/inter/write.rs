//! Writes through an [`InterPartitionIndex`]: the primary copy at once, stamped with the write
//! id its queued [`CopyJob`] carries; the other copies when the job has run.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::edm::{Properties, from_properties};
use tablekit_core::{ETag, Entity, Error, Result};

use super::{CopyJob, InterPartitionIndex};
use crate::follow::Pending;
use crate::spec::{Family, Layout};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> InterPartitionIndex<T> {
    /// A write of the primary about to be made, conditioned on `previous`; `stamp` unless it
    /// is a delete.
    fn pending(&self, previous: Option<ETag>, stamp: bool) -> Pending {
        Pending::new(
            &self.queue,
            &self.context.tables[0],
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

    fn job(&self, family: &Family, stale: Option<&Family>, pending: &Pending) -> CopyJob {
        let spec = &self.context.spec;
        let primary = family.primary();
        CopyJob {
            index: self.context.name.clone(),
            partition: primary.keys.pk()[spec.primary().prefix().len()..].to_owned(),
            id: primary.value.clone(),
            stale: stale
                .map(|old| {
                    old.copies
                        .iter()
                        .enumerate()
                        .skip(1)
                        .map(|(i, row)| (spec.copies()[i].name().to_owned(), row.value.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            write: pending.write.clone(),
        }
    }

    /// Stores a new entity: enqueues its copy job, then inserts its primary copy, stamped
    /// with the write id the job carries. The other copies appear when the job has run.
    /// Returns the primary copy's ETag.
    ///
    /// **Requests:** 2 (a queue put, an insert); the job then takes its own (see
    /// [`CopyHandler`](super::CopyHandler)). **Consistency:** the primary copy at once; the others eventually.
    ///
    /// # Errors
    /// Key, value and size errors before any request (every copy is encoded first, the
    /// primary with its stamp; an entity with a property named
    /// [`WRITE_ID_PROPERTY`](crate::WRITE_ID_PROPERTY) is refused);
    /// [`Error::AlreadyExists`] when the entity exists (its job then finds nothing to do);
    /// [`Error::Transport`], with nothing written, in the unlikely case that the enqueue took
    /// longer than the job's deadline allows.
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let family = self.family(entity)?;
        let pending = self.pending(None, true);
        let primary = Self::primary(&family, &pending)?;
        self.jobs()
            .enqueue(&self.job(&family, None, &pending))
            .await?;
        pending.in_time()?;
        self.context.tables[0].insert(&primary).await
    }

    /// Stores an entity, new or not: reads its primary copy (to learn the copies it had),
    /// enqueues the copy job, then writes the primary copy, stamped with the job's write id,
    /// conditioned on the ETag read (or inserts it). A concurrent write makes it start again
    /// from the read. Returns the new ETag.
    ///
    /// **Requests:** 3 (a point read, a queue put, a write), plus 3 per conflict retry.
    /// **Consistency:** the primary copy at once; the others eventually.
    ///
    /// # Errors
    /// As [`insert`](Self::insert); [`Error::PreconditionFailed`] when conflicts outlast the
    /// account's `conflict_retry` attempts; [`Error::Decode`] when the stored entity
    /// does not fit `T`.
    pub async fn put(&self, entity: &T) -> Result<ETag> {
        let new = self.family(entity)?;
        Self::primary(&new, &self.pending(None, true))?;
        let table = &self.context.tables[0];
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
                pending.in_time()?;
                Ok::<_, Error>(match current {
                    None => table.insert(&primary).await,
                    Some(current) => table.replace(&primary, current.if_match()).await,
                })
            };
            match written.await? {
                Ok(etag) => return Ok(etag),
                Err(e) => conflicts.retry(e.not_found_as_conflict()).await?,
            }
        }
    }

    /// Deletes an entity: reads its primary copy, enqueues the job that removes its other
    /// copies, then deletes the primary conditioned on the ETag read (retried from the read on
    /// a conflict). Returns whether it existed.
    ///
    /// **Requests:** 3 (1 if it does not exist), plus 3 per conflict retry.
    /// **Consistency:** the primary copy at once; the others eventually.
    ///
    /// # Errors
    /// Key errors; [`Error::PreconditionFailed`] when conflicts outlast the retries;
    /// [`Error::Transport`] as for [`insert`](Self::insert).
    pub async fn delete(&self, partition: &str, id: &str) -> Result<bool> {
        let keys = self
            .context
            .spec
            .copy_keys(Layout::Inter, 0, partition, id)?;
        let table = &self.context.tables[0];
        let mut conflicts = table.account().conflict_loop();
        loop {
            let deleted = async {
                let Some(current) = table.get::<Properties>(&keys).await? else {
                    return Ok::<_, Error>(None);
                };
                let old = self.family(&from_properties::<T>(&current.value)?)?;
                let pending = self.pending(Some(current.etag.clone()), false);
                self.jobs()
                    .enqueue(&self.job(&old, Some(&old), &pending))
                    .await?;
                pending.in_time()?;
                Ok(Some(table.delete(&keys, current.if_match()).await))
            };
            match deleted.await? {
                None => return Ok(false),
                Some(Ok(())) => return Ok(true),
                Some(Err(e)) => conflicts.retry(e.not_found_as_conflict()).await?,
            }
        }
    }
}
