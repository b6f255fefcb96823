//! [`InterPartitionIndex`]: copies in other partitions or tables, kept eventually consistent
//! by queued jobs (PATTERNS.md §5.2, §5.3).

mod audit;
mod job;
mod write;

use std::collections::BTreeSet;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{Queue, Table};
use tablekit_core::{Error, Keys, Result, Stored};
use tablekit_eventual::{JobQueue, Worker, WorkerOptions};

pub use job::{CopyHandler, CopyJob};

use crate::follow::DEFAULT_CLOCK_SKEW;
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
/// the primary write, so no acknowledged write is ever without its job. The write stamps the
/// primary with a write id ([`WRITE_ID_PROPERTY`](crate::WRITE_ID_PROPERTY)) its job carries,
/// so a job that runs before its write has landed — on any delivery, also after a lost
/// dequeue response or a timed-out attempt — waits for it, up to a deadline past which the
/// write can no longer land, and never completes against the older primary. Until the job has
/// run, lookups through a copy may miss the entity or see its previous values.
/// [`verify`](Self::verify) reports copies that are missing, stale or orphaned;
/// [`repair`](Self::repair) fixes them without the queue.
///
/// Secondary values are expected to be unique. If a value moves from one entity to another
/// while a job for the first is pending, that job can remove the second entity's copy; the
/// next `verify` reports it missing and `repair` restores it.
pub struct InterPartitionIndex<T> {
    context: Arc<Context<T>>,
    queue: Queue,
    clock_skew: Duration,
}

impl<T> Clone for InterPartitionIndex<T> {
    fn clone(&self) -> Self {
        Self {
            context: Arc::clone(&self.context),
            queue: self.queue.clone(),
            clock_skew: self.clock_skew,
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
    clock_skew: Duration,
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

    /// Sets the allowance for clock skew between the machines that write through the index
    /// and those that run its jobs (default [`DEFAULT_CLOCK_SKEW`], 1 minute).
    ///
    /// Each job carries a deadline, taken on the writer's clock: enqueue time + how long the
    /// enqueue and then the write may take to land by the accounts' settings
    /// ([`Settings::write_settles_within`](tablekit_azure::Settings::write_settles_within)) +
    /// this allowance. A job whose write has not landed waits within its delivery until the
    /// deadline, read on the worker's clock, so a worker whose clock runs ahead of the
    /// writer's by more than the allowance could give up on a write that still lands. A
    /// larger allowance costs nothing unless a write never lands (its writer crashed between
    /// the enqueue and the write, or gave up): its job then waits that much longer before it
    /// fails toward the poison queue.
    #[must_use]
    pub fn clock_skew_allowance(mut self, allowance: Duration) -> Self {
        self.clock_skew = allowance;
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
            clock_skew: self.clock_skew,
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
            clock_skew: DEFAULT_CLOCK_SKEW,
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
            clock_skew: DEFAULT_CLOCK_SKEW,
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
