//! [`InterPartitionIndex`]: copies in other partitions or tables, kept eventually consistent
//! by queued jobs (PATTERNS.md §5.2, §5.3).

mod audit;
mod job;

use std::collections::BTreeSet;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{Queue, Table};
use tablekit_core::edm::{Properties, from_properties};
use tablekit_core::{ETag, Entity, Error, Keys, Result, Stored};
use tablekit_eventual::{JobQueue, Worker, WorkerOptions};

pub use job::{CopyHandler, CopyJob};

use crate::range::{IndexRange, prefix_bounds, range_filter, value_bounds};
use crate::spec::{Family, IndexSpec, Layout};
use job::Context;

/// An inter-partition secondary index: each copy of an entity in its own partition —
/// `empid_Sales/000223`, `email_Sales/jonesj@contoso.com` — or its own table, so lookups by
/// any key spread over many partitions instead of loading one.
///
/// **Consistency:** the primary copy is written at once (strongly consistent); the other
/// copies follow through a queued, idempotent [`CopyJob`] that a
/// [`tablekit_eventual::Worker`] runs (eventually consistent). The job is enqueued *before*
/// the primary write, so no acknowledged write is ever without its job; a job that runs before
/// its write is visible waits for it. Until the job has run, lookups through a copy may miss
/// the entity or see its previous values. [`verify`](Self::verify) reports copies that are
/// missing, stale or orphaned; [`repair`](Self::repair) fixes them without the queue.
///
/// Secondary values are expected to be unique. If a value moves from one entity to another
/// while a job for the first is pending, that job can remove the second entity's copy; the
/// next `verify` reports it missing and `repair` restores it.
pub struct InterPartitionIndex<T> {
    context: Arc<Context<T>>,
    queue: Queue,
}

impl<T> Clone for InterPartitionIndex<T> {
    fn clone(&self) -> Self {
        Self {
            context: Arc::clone(&self.context),
            queue: self.queue.clone(),
        }
    }
}

impl<T> fmt::Debug for InterPartitionIndex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterPartitionIndex")
            .field("index", &self.context.name)
            .field("queue", &self.queue.name())
            .finish_non_exhaustive()
    }
}

/// Builds an [`InterPartitionIndex`].
pub struct InterPartitionIndexBuilder<T> {
    table: Table,
    spec: IndexSpec<T>,
    queue: Queue,
    tables: Vec<(String, Table)>,
}

impl<T> fmt::Debug for InterPartitionIndexBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterPartitionIndexBuilder")
            .field("table", &self.table.name())
            .field("queue", &self.queue.name())
            .finish_non_exhaustive()
    }
}

impl<T> InterPartitionIndexBuilder<T> {
    /// Keeps the copy named `copy` in `table` instead of the primary's table (its partitions
    /// are still `<prefix><partition>`).
    #[must_use]
    pub fn copy_table(mut self, copy: impl Into<String>, table: Table) -> Self {
        self.tables.push((copy.into(), table));
        self
    }

    /// Checks the placement and builds the index. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a `copy_table` naming an unknown copy or the primary.
    pub fn build(self) -> Result<InterPartitionIndex<T>> {
        let mut tables = vec![self.table.clone(); self.spec.copies().len()];
        for (name, table) in self.tables {
            match self.spec.copy(&name)? {
                (0, _) => {
                    return Err(Error::invalid_argument(
                        &name,
                        "the primary copy lives in the index's own table",
                    ));
                }
                (i, _) => tables[i] = table,
            }
        }
        let name = format!("{}/{}", self.table.name(), self.spec.primary().name());
        Ok(InterPartitionIndex {
            context: Arc::new(Context {
                name,
                spec: Arc::new(self.spec),
                tables,
            }),
            queue: self.queue,
        })
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> InterPartitionIndex<T> {
    /// An index whose primary copies (and, unless placed elsewhere with
    /// [`InterPartitionIndexBuilder::copy_table`], other copies) live in `table`, with its
    /// jobs on `queue`. No request is sent.
    pub fn builder(
        table: Table,
        spec: IndexSpec<T>,
        queue: Queue,
    ) -> InterPartitionIndexBuilder<T> {
        InterPartitionIndexBuilder {
            table,
            spec,
            queue,
            tables: Vec::new(),
        }
    }

    /// An index with every copy in `table` and its jobs on `queue`. No request is sent.
    pub fn new(table: Table, spec: IndexSpec<T>, queue: Queue) -> Self {
        let name = format!("{}/{}", table.name(), spec.primary().name());
        let tables = vec![table; spec.copies().len()];
        Self {
            context: Arc::new(Context {
                name,
                spec: Arc::new(spec),
                tables,
            }),
            queue,
        }
    }

    /// The declaration.
    pub fn spec(&self) -> &IndexSpec<T> {
        &self.context.spec
    }

    /// The table of the copy named `index`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name.
    pub fn table_of(&self, index: &str) -> Result<&Table> {
        let (copy, _) = self.context.spec.copy(index)?;
        Ok(&self.context.tables[copy])
    }

    /// The job queue (and its poison queue).
    pub fn jobs(&self) -> JobQueue<CopyJob> {
        JobQueue::new(self.queue.clone())
    }

    /// The handler that runs this index's jobs.
    pub fn handler(&self) -> CopyHandler<T> {
        CopyHandler {
            context: Arc::clone(&self.context),
        }
    }

    /// A worker running this index's jobs (start it with `run_until` or `drain`).
    pub fn worker(&self, options: WorkerOptions) -> Worker<CopyJob, CopyHandler<T>> {
        Worker::new(self.jobs(), self.handler(), options)
    }

    /// Creates every table the copies use and the job queues, where missing.
    ///
    /// **Requests:** 1 per distinct table, plus 2 (the queue and its poison queue).
    ///
    /// # Errors
    /// Transport and service errors.
    pub async fn create(&self) -> Result<()> {
        let mut seen = BTreeSet::new();
        for table in &self.context.tables {
            if seen.insert(table.name().to_owned()) {
                table.create_if_not_exists().await?;
            }
        }
        self.jobs().create().await
    }

    /// The keys of the copy `index` holds for `value` of `partition`:
    /// `keys_by("email", "Sales", "jonesj@contoso.com")` is `email_Sales/jonesj@contoso.com`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown index, [`Error::Encode`] for a value of the
    /// wrong width; key errors.
    pub fn keys_by(&self, index: &str, partition: &str, value: &str) -> Result<Keys> {
        let (copy, _) = self.context.spec.copy(index)?;
        self.context
            .spec
            .copy_keys(Layout::Inter, copy, partition, value)
    }

    pub(crate) fn family(&self, entity: &T) -> Result<Family> {
        self.context.spec.family(Layout::Inter, entity)
    }

    pub(crate) fn job(
        &self,
        family: &Family,
        stale: Option<&Family>,
        previous: Option<ETag>,
    ) -> CopyJob {
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
            previous,
        }
    }

    /// Stores a new entity: enqueues its copy job, then inserts its primary copy. The other
    /// copies appear when the job has run. Returns the primary copy's ETag.
    ///
    /// **Requests:** 2 (a queue put, an insert); the job then takes its own (see
    /// [`CopyHandler`]). **Consistency:** the primary copy at once; the others eventually.
    ///
    /// # Errors
    /// Key, value and size errors before any request (every copy is encoded first);
    /// [`Error::AlreadyExists`] when the entity exists (its job then finds nothing to do).
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let family = self.family(entity)?;
        let primary = Entity::new(family.primary().keys.clone(), &family.primary().props);
        tablekit_core::batch::Operation::insert(&primary)?;
        self.jobs().enqueue(&self.job(&family, None, None)).await?;
        self.context.tables[0].insert(&primary).await
    }

    /// Stores an entity, new or not: reads its primary copy (to learn the copies it had),
    /// enqueues the copy job, then writes the primary copy conditioned on the ETag read (or
    /// inserts it). A concurrent write makes it start again from the read. Returns the new
    /// ETag.
    ///
    /// **Requests:** 3 (a point read, a queue put, a write), plus 3 per conflict retry.
    /// **Consistency:** the primary copy at once; the others eventually.
    ///
    /// # Errors
    /// As [`insert`](Self::insert); [`Error::PreconditionFailed`] when conflicts outlast the
    /// account's `conflict_retry` attempts; [`Error::Decode`] when the stored entity does not
    /// fit `T`.
    pub async fn put(&self, entity: &T) -> Result<ETag> {
        let new = self.family(entity)?;
        let primary = Entity::new(new.primary().keys.clone(), &new.primary().props);
        tablekit_core::batch::Operation::insert(&primary)?;
        let table = &self.context.tables[0];
        let mut conflicts = table.account().conflict_loop();
        loop {
            // The read and the enqueue fail as they fail; only the write can lose a race.
            let written = async {
                Ok::<_, Error>(match table.get::<Properties>(&primary.keys).await? {
                    None => {
                        self.jobs().enqueue(&self.job(&new, None, None)).await?;
                        table.insert(&primary).await
                    }
                    Some(current) => {
                        let old = self.family(&from_properties::<T>(&current.value)?)?;
                        let job = self.job(&new, Some(&old), Some(current.etag.clone()));
                        self.jobs().enqueue(&job).await?;
                        table.replace(&primary, current.if_match()).await
                    }
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
    /// Key errors; [`Error::PreconditionFailed`] when conflicts outlast the retries.
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
                let job = self.job(&old, Some(&old), Some(current.etag.clone()));
                self.jobs().enqueue(&job).await?;
                Ok(Some(table.delete(&keys, current.if_match()).await))
            };
            match deleted.await? {
                None => return Ok(false),
                Some(Ok(())) => return Ok(true),
                Some(Err(e)) => conflicts.retry(e.not_found_as_conflict()).await?,
            }
        }
    }

    /// Reads an entity by its primary value: a point query on `empid_Sales/000223`.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors; [`Error::Decode`] when the stored entity does not fit `T`.
    pub async fn get(&self, partition: &str, id: &str) -> Result<Option<Stored<T>>> {
        let name = self.context.spec.primary().name().to_owned();
        self.get_by(&name, partition, id).await
    }

    /// Reads an entity through one of its copies: a point query on
    /// `email_Sales/jonesj@contoso.com`.
    ///
    /// **Requests:** 1. **Consistency:** eventual for secondary copies (the copy may lag its
    /// primary until the entity's job has run), strong for the primary.
    ///
    /// # Errors
    /// As [`get`](Self::get); [`Error::InvalidArgument`] for an unknown index,
    /// [`Error::Decode`] for a projected copy lacking fields `T` requires (use [`get_by_as`](Self::get_by_as)).
    pub async fn get_by(
        &self,
        index: &str,
        partition: &str,
        value: &str,
    ) -> Result<Option<Stored<T>>> {
        self.get_by_as::<T>(index, partition, value).await
    }

    /// As [`get_by`](Self::get_by), reading the copy as `U`.
    ///
    /// **Requests:** 1.
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
        self.table_of(index)?.get::<U>(&keys).await
    }

    /// The copies of `index` for `partition` whose values lie in `range`, sorted by value:
    /// `range_by("empid", "Sales", "000100"..="000199")` is the guide's
    /// `(PartitionKey eq 'empid_Sales') and (RowKey ge '000100') and (RowKey le '000199')`.
    ///
    /// **Requests:** one per page when read. **Consistency:** eventual for secondary copies.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown index.
    pub fn range_by<'r>(
        &self,
        index: &str,
        partition: &str,
        range: impl RangeBounds<&'r str>,
    ) -> Result<IndexRange<T>> {
        let (copy, _) = self.context.spec.copy(index)?;
        let filter = range_filter(
            &self.context.spec,
            Layout::Inter,
            copy,
            partition,
            &value_bounds(&range)?,
        );
        Ok(IndexRange::new(
            &self.context.tables[copy],
            Arc::clone(&self.context.spec),
            Layout::Inter,
            copy,
            filter,
        ))
    }

    /// The copies of `index` for `partition` whose values start with `prefix`:
    /// `range_by_prefix("email", "Sales", "a")` is
    /// `(PartitionKey eq 'email_Sales') and (RowKey ge 'a') and (RowKey lt 'b')`.
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
        let (copy, _) = self.context.spec.copy(index)?;
        let filter = range_filter(
            &self.context.spec,
            Layout::Inter,
            copy,
            partition,
            &prefix_bounds(prefix)?,
        );
        Ok(IndexRange::new(
            &self.context.tables[copy],
            Arc::clone(&self.context.spec),
            Layout::Inter,
            copy,
            filter,
        ))
    }
}
