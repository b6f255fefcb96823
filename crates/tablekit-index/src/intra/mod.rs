//! [`IntraPartitionIndex`]: every copy of an entity in its own partition, kept consistent by
//! entity group transactions (PATTERNS.md §5.1).

mod plan;
mod relocate;
mod repair;

use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::edm::{Properties, from_properties};
use tablekit_core::{ETag, Error, ErrorKind, Keys, Result, Stored};
use tracing::Instrument as _;

use crate::range::{IndexRange, prefix_bounds, range_filter, value_bounds};
use crate::spec::{Family, IndexSpec, Layout};
use crate::verify::{Audit, VerifyReport, audit};
use plan::{Plan, Role};

/// An intra-partition secondary index: each entity stored once per declared copy, all in the
/// entity's partition under different RowKey prefixes (`Sales/empid_000223`,
/// `Sales/email_jonesj@contoso.com`), every write one entity group transaction.
///
/// **Consistency:** strong. Every write reads nothing or only the primary copy, then commits
/// all copies at once, guarded by the primary copy's ETag: a concurrent write of the same
/// entity always rewrites the primary, so the transaction that read an older state fails as a
/// whole (412) and is retried from the read — copies can never be left stale or missing.
/// Writes made outside the index (or before a copy was declared) are the one way copies can
/// drift; [`verify`](Self::verify), [`repair`](Self::repair) and
/// [`backfill`](Self::backfill) handle that.
pub struct IntraPartitionIndex<T> {
    table: Table,
    spec: Arc<IndexSpec<T>>,
}

impl<T> Clone for IntraPartitionIndex<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            spec: Arc::clone(&self.spec),
        }
    }
}

impl<T> fmt::Debug for IntraPartitionIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntraPartitionIndex")
            .field("table", &self.table.name())
            .field("spec", &self.spec)
            .finish()
    }
}

/// A family transaction's result, for [`ConflictLoop::run`](tablekit_azure::ConflictLoop::run):
/// a failure of the primary copy (index 0) is a lost race — someone else wrote, inserted or
/// deleted the entity since it was read — and is run again (`Err`); anything else is the
/// answer (`Ok`), even a conflict on another copy (a secondary value another entity holds).
fn lost_race_on_primary<R>(result: Result<R>) -> Result<Result<R>> {
    match result {
        Err(e @ Error::BatchFailed { index: 0, .. }) => Err(e.not_found_as_conflict()),
        other => Ok(other),
    }
}

/// Submits a family transaction. A release whose row is already gone (a copy never written,
/// e.g. before a backfill) is dropped and the rest sent again: one more request, only then.
/// Returns the primary copy's new ETag (none after a delete).
pub(crate) async fn submit(table: &Table, mut plan: Plan) -> Result<Option<ETag>> {
    loop {
        let batch = plan.batch()?;
        match table.submit(&batch).await {
            Ok(outcomes) => {
                return Ok(outcomes.iter().find_map(|o| {
                    o.indices
                        .iter()
                        .position(|&i| i == 0)
                        .and_then(|p| o.etags[p].clone())
                }));
            }
            Err(Error::BatchFailed { index, source })
                if plan.roles.get(index) == Some(&Role::Release)
                    && source.kind() == ErrorKind::NotFound =>
            {
                plan.without(index);
            }
            Err(e) => return Err(e),
        }
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> IntraPartitionIndex<T> {
    /// An index over `table` following `spec`. No request is sent.
    pub fn new(table: Table, spec: IndexSpec<T>) -> Self {
        Self {
            table,
            spec: Arc::new(spec),
        }
    }

    /// The table the copies live in.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The declaration.
    pub fn spec(&self) -> &IndexSpec<T> {
        &self.spec
    }

    /// The keys of the copy `index` holds for `value` in `partition`:
    /// `keys_by("email", "Sales", "jonesj@contoso.com")` is `Sales/email_jonesj@contoso.com`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown index, [`Error::Encode`] for a value of the
    /// wrong width; key errors.
    pub fn keys_by(&self, index: &str, partition: &str, value: &str) -> Result<Keys> {
        let (copy, _) = self.spec.copy(index)?;
        self.spec.copy_keys(Layout::Intra, copy, partition, value)
    }

    fn family(&self, entity: &T) -> Result<Family> {
        self.spec.family(Layout::Intra, entity)
    }

    fn family_of_stored(&self, stored: &Properties) -> Result<Family> {
        self.family(&from_properties::<T>(stored)?)
    }

    /// Stores a new entity: every copy inserted in one transaction. Returns the primary
    /// copy's ETag.
    ///
    /// **Requests:** 1 (no read: the caller says the entity is new). **Consistency:** all
    /// copies or none.
    ///
    /// # Errors
    /// Before any request: key, value and size errors (all copies together must be under
    /// 4 MiB). [`Error::BatchFailed`] with index 0 and [`Error::AlreadyExists`] when the
    /// entity exists; with a higher index and `AlreadyExists` when another entity holds one of
    /// its secondary values (the error's keys name the copy). Nothing is written on error.
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let family = self.family(entity)?;
        let span = tracing::debug_span!("tablekit.index.insert", table = %self.table.name(), keys = %family.primary().keys);
        let etag = submit(&self.table, plan::insert(&family)?)
            .instrument(span)
            .await?;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Stores an entity, new or not: reads its primary copy, then in one transaction replaces
    /// it under the ETag read, rewrites copies whose value is unchanged, and for each value
    /// that changed (a new email) deletes the stale copy and inserts the new one. A concurrent
    /// write makes the transaction fail as a whole; it is retried from the read. Returns the
    /// primary copy's new ETag.
    ///
    /// **Requests:** 2 (a point read and one transaction; a new entity too), plus 2 per
    /// conflict retry, plus 1 if a stale copy was already missing. **Consistency:** strong;
    /// every copy reflects this write or none does.
    ///
    /// `put` finds the stored entity by the keys `entity` has now. When the partition value
    /// changed (a new department), that is a new entity in the new partition and the old
    /// copies stay where they are: move an entity with [`relocate`](Self::relocate).
    ///
    /// # Errors
    /// As [`insert`](Self::insert) for invalid input and for a secondary value another entity
    /// holds; [`Error::PreconditionFailed`] when conflicts outlast the account's
    /// `conflict_retry` attempts; [`Error::Decode`] when the stored entity does not fit `T`.
    pub async fn put(&self, entity: &T) -> Result<ETag> {
        let new = self.family(entity)?;
        let span = tracing::debug_span!("tablekit.index.put", table = %self.table.name(), keys = %new.primary().keys);
        let new = &new;
        let etag = self
            .table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let plan = match self.table.get::<Properties>(&new.primary().keys).await? {
                    None => plan::insert(new)?,
                    Some(current) => {
                        let old = self.family_of_stored(&current.value)?;
                        plan::change(&old, &current.etag, new)?
                    }
                };
                lost_race_on_primary(submit(&self.table, plan).await)
            })
            .instrument(span)
            .await??;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Replaces an entity the caller has read (`current`, e.g. from [`get`](Self::get)) with
    /// `entity`, in one transaction under `current`'s ETag. Returns the new ETag.
    ///
    /// **Requests:** 1 (plus 1 if a stale copy was already missing). **Consistency:** strong.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any request when `entity`'s primary keys differ from
    /// `current`'s (a move to another partition is [`relocate`](Self::relocate)); [`Error::BatchFailed`] with
    /// index 0 and [`Error::PreconditionFailed`] when the entity changed since `current` was
    /// read (read again and retry); otherwise as [`put`](Self::put).
    pub async fn replace(&self, current: &Stored<T>, entity: &T) -> Result<ETag> {
        let old = self.family(&current.value)?;
        let new = self.family(entity)?;
        if new.primary().keys != current.keys || old.primary().keys != current.keys {
            return Err(Error::invalid_argument(
                "entity",
                format!(
                    "replace keeps an entity where it is: {} is not {}; move it with relocate",
                    new.primary().keys,
                    current.keys
                ),
            ));
        }
        let plan = plan::change(&old, &current.etag, &new)?;
        let etag = submit(&self.table, plan).await?;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Deletes an entity and every copy: reads the primary copy, then one transaction deletes
    /// all of them under its ETag (retried from the read on a conflict). Returns whether the
    /// entity existed.
    ///
    /// **Requests:** 2 (1 if it does not exist), plus 2 per conflict retry.
    /// **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors before any request; [`Error::PreconditionFailed`] when conflicts outlast the
    /// retries; transport and service errors.
    pub async fn delete(&self, partition: &str, id: &str) -> Result<bool> {
        let keys = &self.spec.copy_keys(Layout::Intra, 0, partition, id)?;
        self.table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let Some(current) = self.table.get::<Properties>(keys).await? else {
                    return Ok(Ok(false));
                };
                let old = self.family_of_stored(&current.value)?;
                let deleted = submit(&self.table, plan::delete(&old, &current.etag)?).await;
                lost_race_on_primary(deleted.map(|_| true))
            })
            .await?
    }

    /// Deletes an entity the caller has read, and every copy, in one transaction under its
    /// ETag.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// [`Error::BatchFailed`] with index 0 and [`Error::PreconditionFailed`] (or
    /// [`Error::NotFound`]) when the entity changed (or went) since it was read.
    pub async fn delete_stored(&self, current: &Stored<T>) -> Result<()> {
        let old = self.family(&current.value)?;
        submit(&self.table, plan::delete(&old, &current.etag)?).await?;
        Ok(())
    }

    /// Reads an entity by its primary value (`get("Sales", "000223")`): a point query.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors before any request; [`Error::NotFound`] if the table does not exist;
    /// [`Error::Decode`] when the stored entity does not fit `T`.
    pub async fn get(&self, partition: &str, id: &str) -> Result<Option<Stored<T>>> {
        let name = self.spec.primary().name().to_owned();
        self.get_by(&name, partition, id).await
    }

    /// Reads an entity through one of its copies (`get_by("email", "Sales",
    /// "jonesj@contoso.com")`): a point query on `Sales/email_jonesj@contoso.com`.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// As [`get`](Self::get); [`Error::InvalidArgument`] for an unknown index;
    /// [`Error::Decode`] when a projected copy lacks fields `T` requires — read it with
    /// [`get_by_as`](Self::get_by_as).
    pub async fn get_by(
        &self,
        index: &str,
        partition: &str,
        value: &str,
    ) -> Result<Option<Stored<T>>> {
        self.get_by_as::<T>(index, partition, value).await
    }

    /// As [`get_by`](Self::get_by), reading the copy as `U` (e.g. the type of its projection).
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// As [`get_by`](Self::get_by).
    pub async fn get_by_as<U: DeserializeOwned>(
        &self,
        index: &str,
        partition: &str,
        value: &str,
    ) -> Result<Option<Stored<U>>> {
        let keys = self.keys_by(index, partition, value)?;
        self.table.get::<U>(&keys).await
    }

    /// The copies of `index` in `partition` whose values lie in `range`, sorted by that value:
    /// `range_by("empid", "Sales", "000100"..="000199")` is the guide's
    /// `RowKey ge 'empid_000100' and RowKey le 'empid_000199'`. Use `..` for the whole index.
    ///
    /// **Requests:** one per page when read. **Consistency:** as a query.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown index; key errors for bounds too long to
    /// encode.
    pub fn range_by<'r>(
        &self,
        index: &str,
        partition: &str,
        range: impl RangeBounds<&'r str>,
    ) -> Result<IndexRange<T>> {
        let (copy, _) = self.spec.copy(index)?;
        let filter = range_filter(
            &self.spec,
            Layout::Intra,
            copy,
            partition,
            &value_bounds(&range)?,
        );
        Ok(IndexRange::new(
            &self.table,
            Arc::clone(&self.spec),
            Layout::Intra,
            copy,
            filter,
        ))
    }

    /// The copies of `index` in `partition` whose values start with `prefix`, sorted:
    /// `range_by_prefix("email", "Sales", "a")` is the guide's
    /// `RowKey ge 'email_a' and RowKey lt 'email_b'`.
    ///
    /// **Requests:** one per page when read.
    ///
    /// # Errors
    /// As [`range_by`](Self::range_by).
    pub fn range_by_prefix(
        &self,
        index: &str,
        partition: &str,
        prefix: &str,
    ) -> Result<IndexRange<T>> {
        let (copy, _) = self.spec.copy(index)?;
        let filter = range_filter(
            &self.spec,
            Layout::Intra,
            copy,
            partition,
            &prefix_bounds(prefix)?,
        );
        Ok(IndexRange::new(
            &self.table,
            Arc::clone(&self.spec),
            Layout::Intra,
            copy,
            filter,
        ))
    }

    async fn audit(&self, partition: &str) -> Result<Audit> {
        let read = |copy: usize| {
            let filter = range_filter(
                &self.spec,
                Layout::Intra,
                copy,
                partition,
                &(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded),
            );
            self.table.query::<Properties>().filter(filter).collect()
        };
        let primaries = read(0).await?;
        let mut copies = Vec::with_capacity(self.spec.secondaries().len());
        for copy in 1..self.spec.copies().len() {
            copies.push(read(copy).await?);
        }
        audit(&self.spec, Layout::Intra, partition, primaries, &copies)
    }

    /// Audits one partition: reads every copy and reports the copies that are missing, stale
    /// (other properties than the primary calls for), orphaned (no primary calls for them) or
    /// contested (two entities share a value).
    ///
    /// **Requests:** one range query per copy (primary included) per page of 1,000 rows.
    /// **Consistency:** the copies are read one range after the other; a write in between can
    /// show up as a transient issue.
    ///
    /// # Errors
    /// Key errors; [`Error::Decode`] when a primary does not fit `T`; transport and
    /// service errors.
    pub async fn verify(&self, partition: &str) -> Result<VerifyReport> {
        Ok(self.audit(partition).await?.report)
    }
}
