//! Moving an entity to another partition: two transactions, the first undone if the second
//! fails.

use tablekit_azure::track_landing;
use tablekit_core::{ETag, Error, ErrorKind, Keys, Result, Stored, TableEntity};

use crate::moved::Moved;

use super::{EntityWrite, SamePartitionList};

impl<T: TableEntity + Send + Sync + 'static> SamePartitionList<T> {
    /// Moves an entity the caller has read (`current`) to the partition `entity` belongs to
    /// (an employee changing department), with its place in the lists: as
    /// [`insert`](Self::insert) in the new partition, then one transaction in the old one
    /// deleting the entity under `current`'s ETag and removing it from its list. A partition
    /// change cannot be one transaction, so it is two; when the second is refused (the
    /// entity changed since `current` was read, or a service error), the first is undone —
    /// the new entity deleted under the ETag it was written with, and unlisted — so the
    /// entity is left in exactly one partition and one list. Nothing that may have landed is
    /// ever undone: a transaction whose outcome stays unknown ends the move with
    /// [`Error::Indeterminate`] saying where the entity is. When `entity` stays in
    /// `current`'s partition this is [`replace`](Self::replace). Returns the new entity's
    /// ETag.
    ///
    /// [`upsert`](Self::upsert) cannot make this move: it finds the stored entity by the keys
    /// `entity` has now, so it never sees the old partition; it would add the entity there
    /// and leave the old one listed.
    ///
    /// **Requests:** 4 (per partition a list read and one transaction; +1 per list with
    /// overflow rows; +2 per lost list race); when the delete is refused, 2 more to undo the
    /// insert (after waiting, if an attempt of the insert got no answer, until it can no
    /// longer land). A transaction that fails after an attempt that may have been applied is
    /// read back ([`Table::submit`](tablekit_azure::Table::submit)). **Consistency:** each
    /// partition changes in one transaction; between the two, a reader finds the entity in
    /// both partitions. If the process stops between them, it stays in both: delete one of
    /// them.
    ///
    /// # Errors
    /// Before any request: as [`insert`](Self::insert), and [`Error::InvalidArgument`] when
    /// `current`'s keys are not those its value calls for. [`Error::BatchFailed`] with index 0
    /// and [`Error::AlreadyExists`] when the new partition already holds the entity: nothing
    /// is written. [`Error::BatchFailed`] with index 0 and [`Error::PreconditionFailed`] (or
    /// [`Error::NotFound`]) when the entity changed (or went) since `current` was read: the
    /// insert is undone; read again and retry. [`Error::Indeterminate`] when a transaction's
    /// outcome could not be settled or the undo failed; its reason says where the entity is
    /// — "in both partitions", "in its old partition … and perhaps also in the new one", "in
    /// its new partition … and perhaps still in the old one" — and never leaves it in
    /// neither.
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
        let moved = Moved {
            table: self.table.name(),
            from: &current.keys,
            to: &keys,
        };
        // A late attempt of the insert could put the entity back after an undo: the undo
        // waits until none can land any more.
        let (inserted, insert_lands_by) = track_landing(self.insert(entity)).await;
        let etag = match inserted {
            Ok(etag) => etag,
            Err(e) if e.kind() == ErrorKind::Indeterminate => return Err(moved.perhaps_in_new(&e)),
            Err(refused) => return Err(refused),
        };
        let old_value = self.spec.value_of(&current.value)?;
        let failed = match self
            .remove_exact(&current.keys, &current.etag, &old_value)
            .await
        {
            Ok(()) => return Ok(etag),
            Err(e) if e.kind() == ErrorKind::Indeterminate => {
                return Err(moved.perhaps_still_in_old(&e));
            }
            Err(refused) => refused,
        };
        if let Some(lands_by) = insert_lands_by {
            tokio::time::sleep_until(lands_by.into()).await;
        }
        let value = self.spec.value_of(entity)?;
        match self.remove_exact(&keys, &etag, &value).await {
            Ok(()) => Err(failed),
            Err(undo) => Err(moved.undo_failed(&failed, &undo)),
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
