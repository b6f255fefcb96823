//! [`DenormalizedCopy`]: data of one entity copied into another of the same partition, kept
//! in step by writing both in one transaction (the design guide's denormalization pattern).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{AsEntity, ETag, Entity, Error, IfMatch, IntoKeys, Keys, Result};

/// How the source entity is written alongside its copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceWrite {
    /// Insert it; fails if it exists.
    Insert,
    /// Insert it, or replace it if it exists (last writer wins for the source's data; the
    /// copy still sees exactly the version it replaced).
    Upsert,
    /// Replace it if the condition holds (pass the ETag you read). With [`IfMatch::Any`] the
    /// replace is conditioned on the ETag of the version the copy was given as `before`.
    Replace(IfMatch),
}

/// The new ETags of a source and its target after a [`DenormalizedCopy`] write.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DenormalizedWrite {
    /// The source's new ETag.
    pub source: ETag,
    /// The target's new ETag.
    pub target: ETag,
}

type CopyFn<S, D> = Arc<dyn Fn(Option<&S>, &S, &mut D) + Send + Sync>;

/// Keeps a denormalized copy of a source entity's data (the manager's name and email) in a
/// target entity (the department), so one point read of the target answers what would take
/// two. Source and target must share a partition: both are written in one transaction, the
/// target conditioned on the ETag it was read with. The target is *merged*: properties `D`
/// does not model (an `EntityType`, fields of newer versions) are kept.
///
/// `copy(before, after, target)` updates the target for a source going from `before` (`None`
/// when this write creates it) to `after`. A copy of fields ignores `before`; a summary uses
/// it (`if before.is_none() { d.employee_count += 1 }`, or `d.payroll += after.salary -
/// before.salary`). Summaries stay exact under every [`SourceWrite`]: `before` is the version
/// the write replaces, because the source write is an insert when `before` is `None` (it
/// fails if another writer created the source first) and otherwise conditioned on
/// `before`'s ETag; a write that loses either race starts again from the reads. `copy` may run
/// more than once per call (once per attempt) and must depend only on its inputs.
pub struct DenormalizedCopy<S, D> {
    table: Table,
    copy: CopyFn<S, D>,
    _types: PhantomData<fn() -> (S, D)>,
}

impl<S, D> Clone for DenormalizedCopy<S, D> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            copy: Arc::clone(&self.copy),
            _types: PhantomData,
        }
    }
}

impl<S, D> fmt::Debug for DenormalizedCopy<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenormalizedCopy")
            .field("table", &self.table.name())
            .finish_non_exhaustive()
    }
}

fn same_partition(source: &Keys, target: &Keys) -> Result<()> {
    if source.partition_key == target.partition_key {
        return Ok(());
    }
    Err(Error::CrossPartitionTransaction {
        first: 0,
        second: 1,
        a: source.pk().to_owned(),
        b: target.pk().to_owned(),
    })
}

fn etag_at(outcomes: &[tablekit_azure::TransactionOutcome], index: usize) -> ETag {
    outcomes
        .iter()
        .find_map(|o| {
            o.indices
                .iter()
                .position(|&i| i == index)
                .and_then(|p| o.etags[p].clone())
        })
        .unwrap_or_else(|| ETag::new(""))
}

impl<S, D> DenormalizedCopy<S, D>
where
    S: Serialize + DeserializeOwned + Send + Sync,
    D: Serialize + DeserializeOwned + Send + Sync,
{
    /// A denormalized copy in `table`, written by `copy(before, after, target)`. No request is
    /// sent.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::{IfMatch, Keys, TableEntity};
    /// use tablekit_index::{DenormalizedCopy, SourceWrite};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Employee { department: String, id: u32, name: String }
    /// # impl TableEntity for Employee {
    /// #     fn keys(&self) -> tablekit_core::Result<Keys> { Keys::new(&self.department, format!("{:06}", self.id)) }
    /// # }
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Department { manager_name: String }
    ///
    /// # async fn run(table: tablekit_azure::Table, manager: Employee) -> tablekit_core::Result<()> {
    /// // The department row carries its manager's name, kept in step in one transaction.
    /// let manager_name = DenormalizedCopy::new(table, |_, m: &Employee, d: &mut Department| {
    ///     d.manager_name = m.name.clone();
    /// });
    /// manager_name
    ///     .write(&manager, SourceWrite::Upsert, ("Sales", "Department"))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn new(
        table: Table,
        copy: impl Fn(Option<&S>, &S, &mut D) + Send + Sync + 'static,
    ) -> Self {
        Self {
            table,
            copy: Arc::new(copy),
            _types: PhantomData,
        }
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Writes `source` (an entity that knows its keys, or an [`Entity`]) and refreshes its
    /// copy in the entity at `target` in one transaction: reads the
    /// target (and, unless `how` is [`SourceWrite::Insert`], the source as it is now), applies
    /// `copy(before, source, target)`, then commits the source write and the target merge
    /// under the target's ETag. The source write is an insert when there is no `before`, and
    /// is conditioned on `before`'s ETag otherwise (on the caller's for
    /// [`SourceWrite::Replace`] with an ETag), so `before` is exactly the version replaced and
    /// a summary never counts a source twice. If the target changed in between — or, for
    /// [`SourceWrite::Upsert`] and `Replace(IfMatch::Any)`, the source — starts again from the
    /// reads.
    ///
    /// **Requests:** [`SourceWrite::Insert`] 2 (a point read, one transaction); `Upsert` and
    /// `Replace` 3 (two point reads in parallel, one transaction); the same again per
    /// conflict retry. **Consistency:** strong: the source and its copy change together or
    /// not at all.
    ///
    /// # Errors
    /// Before any request: [`Error::CrossPartitionTransaction`] when source and target are in
    /// different partitions, encoding errors. [`Error::NotFound`] when the target does not
    /// exist; [`Error::BatchFailed`] with index 0 when the source write is refused (it
    /// exists for [`SourceWrite::Insert`]; its ETag changed, or it does not exist, for
    /// [`SourceWrite::Replace`]); [`Error::PreconditionFailed`] when conflicts outlast the
    /// retries.
    pub async fn write(
        &self,
        source: &impl AsEntity<Value = S>,
        how: SourceWrite,
        target: impl IntoKeys,
    ) -> Result<DenormalizedWrite> {
        let (source_keys, target) = (&source.entity_keys()?, &target.into_keys()?);
        same_partition(source_keys, target)?;
        Operation::insert(source)?;
        // Whether a lost race on the source itself is ours to retry: only when its condition
        // is the ETag we read, not one the caller gave.
        let retry_source = matches!(
            how,
            SourceWrite::Upsert | SourceWrite::Replace(IfMatch::Any)
        );
        let missing = |keys: &Keys| Error::NotFound {
            target: tablekit_core::Target::entity(self.table.name(), keys.clone()),
        };
        let (how, missing) = (&how, &missing);
        let outcome = self
            .table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let (before, current) = match how {
                    SourceWrite::Insert => (None, self.table.get::<D>(target).await?),
                    _ => futures::try_join!(
                        self.table.get::<S>(source_keys),
                        self.table.get::<D>(target)
                    )?,
                };
                let mut current = current.ok_or_else(|| missing(target))?;
                let source_op = match (how, &before) {
                    (SourceWrite::Insert | SourceWrite::Upsert, None) => Operation::insert(source)?,
                    // Nothing to replace: answered below as the service would, unsent.
                    (SourceWrite::Replace(IfMatch::Any), None) => return Ok(Ok(None)),
                    (SourceWrite::Replace(IfMatch::ETag(etag)), _) => {
                        Operation::replace(source, IfMatch::ETag(etag.clone()))?
                    }
                    (_, Some(read)) => Operation::replace(source, read.if_match())?,
                };
                (self.copy)(
                    before.as_ref().map(|b| &b.value),
                    source.entity_value(),
                    &mut current.value,
                );
                let target_op = Operation::merge(
                    &Entity::new(target.clone(), &current.value),
                    current.if_match(),
                )?;
                let batch = BatchPlan::atomic([source_op, target_op])?;
                match self.table.submit(&batch).await {
                    Ok(outcomes) => Ok(Ok(Some(outcomes))),
                    // A lost race on the target, or on the source when its condition is
                    // ours: run again from the reads.
                    Err(e @ Error::BatchFailed { index: 1, .. }) => Err(e.not_found_as_conflict()),
                    Err(e @ Error::BatchFailed { index: 0, .. }) if retry_source => {
                        Err(e.not_found_as_conflict())
                    }
                    // The caller's own condition failed, or anything else: the answer.
                    Err(e) => Ok(Err(e)),
                }
            })
            .await??;
        match outcome {
            Some(outcomes) => Ok(DenormalizedWrite {
                source: etag_at(&outcomes, 0),
                target: etag_at(&outcomes, 1),
            }),
            None => Err(Error::BatchFailed {
                index: 0,
                source: Box::new(missing(source_keys)),
            }),
        }
    }

    /// Copies the current entity at `source` into the one at `target` (keys, or entities that
    /// know theirs) without changing the source (after the
    /// target was pointed at another source, e.g. a new manager), calling `copy` with the
    /// source as both `before` and `after` (so a summary does not count it): reads both, then one
    /// transaction merges the target under its ETag and guards the source with an empty
    /// merge under its ETag, so a copy of a source that changed meanwhile is never written.
    /// Retried from the reads on a conflict.
    ///
    /// **Requests:** 3 (two point reads in parallel, one transaction), plus 3 per retry.
    /// **Consistency:** strong.
    ///
    /// # Errors
    /// As [`write`](Self::write); [`Error::NotFound`] when either entity does not exist.
    pub async fn refresh(
        &self,
        source: impl IntoKeys,
        target: impl IntoKeys,
    ) -> Result<DenormalizedWrite> {
        let (source, target) = (&source.into_keys()?, &target.into_keys()?);
        same_partition(source, target)?;
        let missing = |keys: &Keys| Error::NotFound {
            target: tablekit_core::Target::entity(self.table.name(), keys.clone()),
        };
        let missing = &missing;
        let outcomes = self
            .table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let (s, d) =
                    futures::try_join!(self.table.get::<S>(source), self.table.get::<D>(target))?;
                let s = s.ok_or_else(|| missing(source))?;
                let mut d = d.ok_or_else(|| missing(target))?;
                (self.copy)(Some(&s.value), &s.value, &mut d.value);
                let guard = Operation::merge(
                    &Entity::new(source.clone(), Properties::new()),
                    s.if_match(),
                )?;
                let write = Operation::merge(&Entity::new(target.clone(), &d.value), d.if_match())?;
                // Both writes are under ETags just read: any conflict is a lost race.
                self.table
                    .submit(&BatchPlan::atomic([guard, write])?)
                    .await
                    .map_err(Error::not_found_as_conflict)
            })
            .await?;
        Ok(DenormalizedWrite {
            source: etag_at(&outcomes, 0),
            target: etag_at(&outcomes, 1),
        })
    }
}
