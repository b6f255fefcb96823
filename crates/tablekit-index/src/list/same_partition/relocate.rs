//! Moving an entity to another partition: two transactions, the first undone if the second
//! fails.

use tablekit_core::{ETag, Error, Keys, Result, Stored, TableEntity, Target};

use super::{EntityWrite, SamePartitionList};

impl<T: TableEntity + Send + Sync + 'static> SamePartitionList<T> {
    /// Moves an entity the caller has read (`current`) to the partition `entity` belongs to
    /// (an employee changing department), with its place in the lists: as
    /// [`insert`](Self::insert) in the new partition, then one transaction in the old one
    /// deleting the entity under `current`'s ETag and removing it from its list. A partition
    /// change cannot be one transaction, so it is two; when the second fails (the entity
    /// changed since `current` was read, or a service error), the first is undone — the new
    /// entity deleted under the ETag it was written with, and unlisted — so the entity is left
    /// in exactly one partition and one list. When `entity` stays in `current`'s partition
    /// this is [`replace`](Self::replace). Returns the new entity's ETag.
    ///
    /// [`put`](Self::put) cannot make this move: it finds the stored entity by the keys
    /// `entity` has now, so it never sees the old partition; it would add the entity there
    /// and leave the old one listed.
    ///
    /// **Requests:** 4 (per partition a list read and one transaction; +1 per list with
    /// overflow rows; +2 per lost list race); when the delete fails, 2 more to undo the
    /// insert. **Consistency:** each partition changes in one transaction; between the two,
    /// a reader finds the entity in both partitions. If the process stops between them, it
    /// stays in both: delete one of them.
    ///
    /// # Errors
    /// Before any request: as [`insert`](Self::insert), and [`Error::InvalidArgument`] when
    /// `current`'s keys are not those its value calls for. [`Error::BatchFailed`] with index 0
    /// and [`Error::AlreadyExists`] when the new partition already holds the entity: nothing
    /// is written. [`Error::BatchFailed`] with index 0 and [`Error::PreconditionFailed`] (or
    /// [`Error::NotFound`]) when the entity changed (or went) since `current` was read: the
    /// insert is undone; read again and retry. [`Error::Indeterminate`] when the undo failed
    /// too: the entity is then in both partitions.
    pub async fn relocate(&self, current: &Stored<T>, entity: &T) -> Result<ETag> {
        let keys = self.entity_keys(entity)?;
        let old_keys = self.entity_keys(&current.value)?;
        if old_keys != current.keys {
            return Err(Error::invalid_argument(
                "current",
                format!("{} holds an entity whose keys are {old_keys}", current.keys),
            ));
        }
        if keys.pk() == current.keys.pk() {
            return self.replace(current, entity).await;
        }
        let etag = self.insert(entity).await?;
        let old_value = self.spec.value_of(&current.value)?;
        let Err(failed) = self
            .remove_exact(&current.keys, &current.etag, &old_value)
            .await
        else {
            return Ok(etag);
        };
        let value = self.spec.value_of(entity)?;
        match self.remove_exact(&keys, &etag, &value).await {
            Ok(()) => Err(failed),
            Err(undo) => Err(Error::Indeterminate {
                target: Target::entity(self.table.name(), keys),
                reason: format!(
                    "moved from {} but the old entity could not be deleted ({failed}) nor the \
                     new one undone ({undo}): the entity is in both partitions",
                    current.keys
                ),
            }),
        }
    }

    /// Deletes the entity at `keys` if it still has `etag`, and removes it from `value`'s
    /// list, in one transaction. Lost list races are retried from the list read; a failure
    /// of the entity's own delete is returned.
    async fn remove_exact(&self, keys: &Keys, etag: &ETag, value: &str) -> Result<()> {
        self.retrying(true, || async {
            let lists = self.read(keys.pk(), value).await?;
            let writes = lists.remove(&keys.rk().to_owned());
            self.commit(None, keys, EntityWrite::Delete(etag.clone()), writes)
                .await?;
            Ok(())
        })
        .await
    }
}
