//! [`IntraPartitionIndex`]: every copy of an entity in its own partition, kept consistent by
//! entity group transactions (the design guide's intra-partition secondary index pattern).

mod plan;
mod relocate;
mod repair;

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::Properties;
use tablekit_core::edm::from_properties;
use tablekit_core::{ETag, Error, ErrorKind, IfMatch, Keys, Result, Stored, Target};
use tracing::Instrument as _;

use crate::range::range_filter;
use crate::read::{IndexEntry, Placement, Resolved, sealed::Indexed};
use crate::spec::{Family, IndexSpec, Layout};
use crate::verify::{Audit, VerifyReport, audit};
use plan::{Plan, Role};

/// An intra-partition secondary index: each entity stored once per declared copy, all in the
/// entity's partition under different RowKey prefixes (`Sales/empid_000223`,
/// `Sales/email_jonesj@contoso.com`), every write one entity group transaction. Read through
/// [`IndexRead`](crate::IndexRead).
///
/// **Consistency:** strong. Every write reads nothing or only the primary copy, then commits
/// all copies at once, guarded by the primary copy's ETag: a concurrent write of the same
/// entity always rewrites the primary, so the transaction that read an older state fails as a
/// whole (412) and is retried from the read — copies can never be left stale or missing.
/// Writes made outside the index (or before a copy was declared) are the one way copies can
/// drift; [`verify`](Self::verify), [`repair`](Self::repair) and
/// [`backfill`](Self::backfill) handle that.
pub struct IntraPartitionIndex<T> {
    placement: Arc<Placement<T>>,
}

impl<T> Clone for IntraPartitionIndex<T> {
    fn clone(&self) -> Self {
        Self {
            placement: Arc::clone(&self.placement),
        }
    }
}

impl<T> fmt::Debug for IntraPartitionIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntraPartitionIndex")
            .field("table", &self.table().name())
            .field("spec", &self.placement.spec)
            .finish()
    }
}

impl<T> Indexed<T> for IntraPartitionIndex<T> {
    fn placement(&self) -> &Placement<T> {
        &self.placement
    }
}

impl<T> crate::IndexRead<T> for IntraPartitionIndex<T> {}

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

/// A delete's own failure (the primary's, index 0) as the error a plain delete reports:
/// `NotFound` when the entity is gone, `PreconditionFailed` when it changed.
pub(crate) fn own_failure(e: Error) -> Error {
    match e {
        Error::BatchFailed { index: 0, source } => *source,
        e => e,
    }
}

impl<T> IntraPartitionIndex<T> {
    /// The table the copies live in.
    pub fn table(&self) -> &Table {
        self.placement.primary_table()
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> IntraPartitionIndex<T> {
    /// An index over `table` following `spec`. No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::filter::Property;
    /// use tablekit_index::{CopySpec, IndexRead as _, IndexSpec, IntraPartitionIndex};
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize)]
    /// # #[serde(rename_all = "PascalCase")]
    /// # struct Employee { department: String, id: u32, email: String }
    /// # impl Employee {
    /// #     const DEPARTMENT: Property<String> = Property::new("Department");
    /// #     const ID: Property<u32> = Property::new("Id");
    /// #     const EMAIL: Property<String> = Property::new("Email");
    /// # }
    ///
    /// # async fn run(table: tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// let mut spec = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
    /// spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    /// let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL));
    /// let index = IntraPartitionIndex::new(table, spec.build()?);
    ///
    /// let jones = Employee { department: "Sales".into(), id: 223, email: "jonesj@contoso.com".into() };
    /// index.insert(&jones).await?; // Sales/empid_000223 and Sales/email_jonesj@contoso.com
    /// let found = index.get_by(&by_email, "Sales", "jonesj@contoso.com").await?;
    /// assert_eq!(found.map(|s| s.value.id), Some(223));
    /// # Ok(()) }
    /// ```
    pub fn new(table: Table, spec: IndexSpec<T>) -> Self {
        Self {
            placement: Arc::new(Placement::new(Arc::new(spec), Layout::Intra, table)),
        }
    }

    fn family(&self, entity: &T) -> Result<Family> {
        self.placement.spec.family(Layout::Intra, entity)
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
        let span = tablekit_azure::step_span("index insert", self.table().name());
        let etag = submit(self.table(), plan::insert(&family)?)
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
    pub async fn upsert(&self, entity: &T) -> Result<ETag> {
        let new = self.family(entity)?;
        let table = self.table();
        let span = tablekit_azure::step_span("index put", table.name());
        let new = &new;
        let etag = table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let plan = match table.get::<Properties>(&new.primary().keys).await? {
                    None => plan::insert(new)?,
                    Some(current) => {
                        let old = self.family_of_stored(&current.value)?;
                        plan::change(&old, &current.etag, new)?
                    }
                };
                lost_race_on_primary(submit(table, plan).await)
            })
            .instrument(span)
            .await??;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Replaces an entity the caller has read (`current`, e.g. from
    /// [`get`](crate::IndexRead::get)) with `entity`, in one transaction under `current`'s
    /// ETag. `current`'s value says which copies to release when a value changed. Returns the
    /// new ETag.
    ///
    /// **Requests:** 1 (plus 1 if a stale copy was already missing). **Consistency:** strong.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any request when `entity`'s primary keys differ from
    /// `current`'s (a move to another partition is [`relocate`](Self::relocate)); [`Error::BatchFailed`] with
    /// index 0 and [`Error::PreconditionFailed`] when the entity changed since `current` was
    /// read (read again and retry); otherwise as [`upsert`](Self::upsert).
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
        let etag = submit(self.table(), plan).await?;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Deletes an entity and every copy, in one transaction under the primary's ETag.
    ///
    /// `entry` is the entity as read (`&stored.value`) or its partition and primary value
    /// (`("Sales", "000223")`). With [`IfMatch::ETag`] and the entity as read — whose ETag
    /// that must be (`index.delete(&stored.value, stored.if_match())`) — its copies are
    /// computed from it and the transaction is sent at once. Otherwise the primary copy is
    /// read first to find the copies: with [`IfMatch::Any`] the delete is then conditioned on
    /// the ETag read and retried from the read on a conflict; with an ETag, an entity that
    /// has another is refused.
    ///
    /// **Requests:** 1 for an entity as read with its ETag; otherwise 2 (a point read, one
    /// transaction; 1 when the entity does not exist), plus 2 per conflict retry.
    /// **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors before any request; [`Error::NotFound`] when the entity does not exist;
    /// [`Error::PreconditionFailed`] when its ETag is not the one given, or when conflicts
    /// outlast the retries; transport and service errors.
    pub async fn delete(&self, entry: impl IndexEntry<T>, if_match: IfMatch) -> Result<()> {
        let keys = match (entry.resolve(&self.placement)?, if_match) {
            (Resolved::Family(family), IfMatch::ETag(etag)) => {
                let plan = plan::delete(&family, &etag)?;
                return submit(self.table(), plan)
                    .await
                    .map(drop)
                    .map_err(own_failure);
            }
            (resolved, IfMatch::ETag(etag)) => (resolved.primary_keys(), Some(etag)),
            (resolved, IfMatch::Any) => (resolved.primary_keys(), None),
        };
        if self.delete_read(&keys.0, keys.1.as_ref()).await? {
            return Ok(());
        }
        Err(Error::NotFound {
            target: Target::entity(self.table().name(), keys.0),
        })
    }

    /// Deletes an entity and every copy if it exists: as [`delete`](Self::delete) with
    /// [`IfMatch::Any`], returning whether it existed.
    ///
    /// **Requests:** 2 (1 if it does not exist), plus 2 per conflict retry.
    /// **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors before any request; [`Error::PreconditionFailed`] when conflicts outlast the
    /// retries; transport and service errors.
    pub async fn delete_if_exists(&self, entry: impl IndexEntry<T>) -> Result<bool> {
        let keys = entry.resolve(&self.placement)?.primary_keys();
        self.delete_read(&keys, None).await
    }

    /// Reads the primary at `keys` and deletes its family under the ETag read (which must be
    /// `expected`, if given; otherwise a lost race runs it again). `false` when it is gone.
    async fn delete_read(&self, keys: &Keys, expected: Option<&ETag>) -> Result<bool> {
        let table = self.table();
        table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let Some(current) = table.get::<Properties>(keys).await? else {
                    return Ok(Ok(false));
                };
                if expected.is_some_and(|etag| *etag != current.etag) {
                    return Ok(Err(Error::PreconditionFailed {
                        target: Target::entity(table.name(), keys.clone()),
                    }));
                }
                let old = self.family_of_stored(&current.value)?;
                let deleted = submit(table, plan::delete(&old, &current.etag)?)
                    .await
                    .map(|_| true);
                match expected {
                    Some(_) => Ok(deleted.map_err(own_failure)),
                    None => lost_race_on_primary(deleted),
                }
            })
            .await?
    }

    async fn audit(&self, partition: &str) -> Result<Audit> {
        let spec = &self.placement.spec;
        let read = |copy: usize| {
            let filter = range_filter(
                spec,
                Layout::Intra,
                copy,
                partition,
                &(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded),
            );
            self.table().query::<Properties>().filter(filter).collect()
        };
        let primaries = read(0).await?;
        let mut copies = Vec::with_capacity(spec.secondaries().len());
        for copy in 1..spec.copies().len() {
            copies.push(read(copy).await?);
        }
        audit(spec, Layout::Intra, partition, primaries, &copies)
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
