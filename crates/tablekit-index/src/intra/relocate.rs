//! Moving an entity to another partition: two transactions, the first undone if the second
//! fails.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::{ETag, Error, ErrorKind, Result, Stored};

use crate::moved::Moved;
use tablekit_azure::track_landing;
use tracing::Instrument as _;

use super::{IntraPartitionIndex, plan, submit};

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> IntraPartitionIndex<T> {
    /// Moves an entity the caller has read (`current`) to the partition `entity` belongs to
    /// (an employee changing department): inserts `entity`'s copies in the new partition,
    /// then deletes every copy in the old one under `current`'s ETag. A partition change
    /// cannot be one transaction, so it is two; when the second is refused (the entity
    /// changed since `current` was read, or a service error) the first is undone — the new
    /// copies deleted under the ETag they were written with — so the entity is left in
    /// exactly one partition. Nothing that may have landed is ever undone: a transaction
    /// whose outcome stays unknown ends the move with [`Error::Indeterminate`] saying where
    /// the entity is. When `entity` stays in `current`'s partition this is
    /// [`replace`](Self::replace). Returns the new primary copy's ETag.
    ///
    /// [`upsert`](Self::upsert) cannot make this move: it finds the stored entity by the keys
    /// `entity` has now, so it never sees the old partition; it would add the entity there
    /// and leave the old copies live.
    ///
    /// **Requests:** 2 (two transactions, no read), +1 if a stale copy in the old partition
    /// was already missing; when the delete is refused, 1 more to undo the insert (after
    /// waiting, if an attempt of the insert got no answer, until it can no longer land). A
    /// transaction that fails after an attempt that may have been applied is read back
    /// ([`Table::submit`](tablekit_azure::Table::submit): 1 or 2 range reads, waiting for
    /// late attempts to land). **Consistency:** each partition changes in one transaction;
    /// between the two, a reader finds the entity in both partitions. If the process stops
    /// between them, it stays in both: delete one of them.
    ///
    /// # Errors
    /// Before any request: key, value and size errors, and [`Error::InvalidArgument`] when
    /// `current`'s keys are not those its value calls for. [`Error::BatchFailed`] with index 0
    /// and [`Error::AlreadyExists`] when the new partition already holds the entity (with a
    /// higher index when another entity there holds one of its secondary values): nothing is
    /// written. [`Error::BatchFailed`] with index 0 and [`Error::PreconditionFailed`] (or
    /// [`Error::NotFound`]) when the entity changed (or went) since `current` was read: the
    /// insert is undone; read again and retry. Other errors of the insert: nothing written;
    /// of the delete: the insert undone. [`Error::Indeterminate`] when a transaction's outcome
    /// could not be settled or the undo failed; its reason says where the entity is — "in
    /// both partitions", "in its old partition … and perhaps also in the new one", "in its
    /// new partition … and perhaps still in the old one" — and never leaves it in neither.
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
        let span = tablekit_azure::step_span("index relocate", self.table().name());
        let moved = Moved {
            table: self.table().name(),
            from: &current.keys,
            to: &new.primary().keys,
        };
        async {
            // Both plans are made before the first request: nothing half-written by a refusal.
            let (insert, delete) = (plan::insert(&new)?, plan::delete(&old, &current.etag)?);
            // A late attempt of the insert could put the new copies back after an undo: the
            // undo waits until none can land any more.
            let (inserted, insert_lands_by) = track_landing(submit(self.table(), insert)).await;
            let etag = match inserted {
                Ok(etag) => etag.unwrap_or_else(|| ETag::new("")),
                Err(e) if e.kind() == ErrorKind::Indeterminate => {
                    return Err(moved.perhaps_in_new(&e));
                }
                Err(refused) => return Err(refused),
            };
            let failed = match submit(self.table(), delete).await {
                Ok(_) => return Ok(etag),
                Err(e) if e.kind() == ErrorKind::Indeterminate => {
                    return Err(moved.perhaps_still_in_old(&e));
                }
                Err(refused) => refused,
            };
            // The delete is not stored and cannot be any more: undoing the insert leaves the
            // entity where it was.
            if let Some(lands_by) = insert_lands_by {
                tokio::time::sleep_until(lands_by.into()).await;
            }
            match submit(self.table(), plan::delete(&new, &etag)?).await {
                Ok(_) => Err(failed),
                Err(undo) => Err(moved.undo_failed(&failed, &undo)),
            }
        }
        .instrument(span)
        .await
    }
}
