//! Moving an entity to another partition: two transactions, the first undone if the second
//! fails.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::{ETag, Error, Result, Stored, Target};
use tracing::Instrument as _;

use super::{IntraPartitionIndex, plan, submit};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> IntraPartitionIndex<T> {
    /// Moves an entity the caller has read (`current`) to the partition `entity` belongs to
    /// (an employee changing department): inserts `entity`'s copies in the new partition,
    /// then deletes every copy in the old one under `current`'s ETag. A partition change
    /// cannot be one transaction, so it is two; when the second fails (the entity changed
    /// since `current` was read, or a service error), the first is undone — the new copies
    /// deleted under the ETag they were written with — so the entity is left in exactly one
    /// partition. When `entity` stays in `current`'s partition this is
    /// [`replace`](Self::replace). Returns the new primary copy's ETag.
    ///
    /// [`put`](Self::put) cannot make this move: it finds the stored entity by the keys
    /// `entity` has now, so it never sees the old partition; it would add the entity there
    /// and leave the old copies live.
    ///
    /// **Requests:** 2 (two transactions, no read), +1 if a stale copy in the old partition
    /// was already missing; when the delete fails, 1 more to undo the insert.
    /// **Consistency:** each partition changes in one transaction; between the two, a reader
    /// finds the entity in both partitions. If the process stops between them, it stays in
    /// both: delete one of them.
    ///
    /// # Errors
    /// Before any request: key, value and size errors, and [`Error::InvalidArgument`] when
    /// `current`'s keys are not those its value calls for. [`Error::BatchFailed`] with index 0
    /// and [`Error::AlreadyExists`] when the new partition already holds the entity (with a
    /// higher index when another entity there holds one of its secondary values): nothing is
    /// written. [`Error::BatchFailed`] with index 0 and [`Error::PreconditionFailed`] (or
    /// [`Error::NotFound`]) when the entity changed (or went) since `current` was read: the
    /// insert is undone, read again and retry. [`Error::Indeterminate`] when the undo failed
    /// too: the entity is then in both partitions.
    pub async fn relocate(&self, current: &Stored<T>, entity: &T) -> Result<ETag> {
        let old = self.family(&current.value)?;
        let new = self.family(entity)?;
        if old.primary().keys != current.keys {
            return Err(Error::invalid_argument(
                "current",
                format!(
                    "{} holds an entity whose keys are {}",
                    current.keys,
                    old.primary().keys
                ),
            ));
        }
        if new.primary().keys.pk() == current.keys.pk() {
            return self.replace(current, entity).await;
        }
        let span = tracing::debug_span!(
            "tablekit.index.relocate",
            table = %self.table().name(),
            from = %current.keys,
            to = %new.primary().keys
        );
        async {
            // Both plans are made before the first request: nothing half-written by a refusal.
            let (insert, delete) = (plan::insert(&new)?, plan::delete(&old, &current.etag)?);
            let etag = submit(self.table(), insert)
                .await?
                .unwrap_or_else(|| ETag::new(""));
            let Err(failed) = submit(self.table(), delete).await else {
                return Ok(etag);
            };
            let undo = async { submit(self.table(), plan::delete(&new, &etag)?).await };
            match undo.await {
                Ok(_) => Err(failed),
                Err(undo) => Err(Error::Indeterminate {
                    target: Target::entity(self.table().name(), new.primary().keys.clone()),
                    reason: format!(
                        "moved from {} but its old copies could not be deleted ({failed}) nor \
                         the new ones undone ({undo}): the entity is in both partitions",
                        current.keys
                    ),
                }),
            }
        }
        .instrument(span)
        .await
    }
}
