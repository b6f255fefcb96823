//! [`InterPartitionIndex`]: copies in other partitions or tables, kept eventually consistent
//! by queued jobs (the design guide's inter-partition secondary index and eventually
//! consistent transactions patterns).

mod audit;
mod job;
mod write;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{Queue, Table};
use tablekit_core::{Error, Result};
use tablekit_eventual::{JobQueue, Worker, WorkerOptions};

pub use job::{CopyHandler, CopyJob};

use crate::follow::DEFAULT_CLOCK_SKEW;
use crate::read::{Placement, sealed::Indexed};
use crate::spec::{CopyHandle, Family, IndexSpec, Layout};
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
/// [`repair`](Self::repair) fixes them without the queue. Read through
/// [`IndexRead`](crate::IndexRead).
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

impl<T> Indexed<T> for InterPartitionIndex<T> {
    fn placement(&self) -> &Placement<T> {
        &self.context.placement
    }
}

impl<T> crate::IndexRead<T> for InterPartitionIndex<T> {}

/// Builds an [`InterPartitionIndex`].
pub struct InterPartitionIndexBuilder<T> {
    table: Table,
    spec: IndexSpec<T>,
    queue: Queue,
    tables: Vec<(crate::spec::CopyId, Table)>,
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
    /// Keeps the copy `copy` names in `table` instead of the primary's table (its partitions
    /// are still `<prefix><partition>`).
    #[must_use]
    pub fn with_copy_table<R>(mut self, copy: &CopyHandle<T, R>, table: Table) -> Self {
        self.tables.push((copy.id(), table));
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
    pub fn with_clock_skew_allowance(mut self, allowance: Duration) -> Self {
        self.clock_skew = allowance;
        self
    }

    /// Checks the placement and builds the index. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a `with_copy_table` naming a copy of another
    /// declaration or the primary.
    pub fn build(self) -> Result<InterPartitionIndex<T>> {
        let mut tables = vec![self.table.clone(); self.spec.copies().len()];
        for (copy, table) in self.tables {
            match self.spec.position(copy)? {
                0 => {
                    return Err(Error::invalid_argument(
                        self.spec.primary().name(),
                        "the primary copy lives in the index's own table",
                    ));
                }
                i => tables[i] = table,
            }
        }
        let name = format!("{}/{}", self.table.name(), self.spec.primary().name());
        Ok(InterPartitionIndex {
            context: Arc::new(Context {
                name,
                placement: Placement {
                    spec: Arc::new(self.spec),
                    layout: Layout::Inter,
                    tables,
                },
            }),
            queue: self.queue,
            clock_skew: self.clock_skew,
        })
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> InterPartitionIndex<T> {
    /// An index whose primary copies (and, unless placed elsewhere with
    /// [`InterPartitionIndexBuilder::with_copy_table`], other copies) live in `table`, with
    /// its jobs on `queue`. No request is sent.
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
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::filter::Property;
    /// use tablekit_eventual::WorkerOptions;
    /// use tablekit_index::{CopySpec, IndexRead as _, IndexSpec, InterPartitionIndex};
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize)]
    /// # #[serde(rename_all = "PascalCase")]
    /// # struct Employee { department: String, id: u32, email: String }
    /// # impl Employee {
    /// #     const DEPARTMENT: Property<String> = Property::new("Department");
    /// #     const ID: Property<u32> = Property::new("Id");
    /// #     const EMAIL: Property<String> = Property::new("Email");
    /// # }
    ///
    /// # async fn run(table: tablekit_azure::Table, queue: tablekit_azure::Queue) -> tablekit_core::Result<()> {
    /// let mut spec = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
    /// spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    /// let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL));
    /// let index = InterPartitionIndex::new(table, spec.build()?, queue);
    /// index.create().await?;
    ///
    /// let jones = Employee { department: "Sales".into(), id: 223, email: "jonesj@contoso.com".into() };
    /// index.insert(&jones).await?; // the job, then empid_Sales/000223
    /// index.worker(WorkerOptions::default()).drain().await?; // email_Sales/jonesj@contoso.com
    /// let found = index.get_by(&by_email, "Sales", "jonesj@contoso.com").await?;
    /// assert_eq!(found.map(|s| s.value.id), Some(223));
    /// # Ok(()) }
    /// ```
    pub fn new(table: Table, spec: IndexSpec<T>, queue: Queue) -> Self {
        let name = format!("{}/{}", table.name(), spec.primary().name());
        Self {
            context: Arc::new(Context {
                name,
                placement: Placement::new(Arc::new(spec), Layout::Inter, table),
            }),
            queue,
            clock_skew: DEFAULT_CLOCK_SKEW,
        }
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
        for table in &self.context.placement.tables {
            if seen.insert(table.name().to_owned()) {
                table.create_if_not_exists().await?;
            }
        }
        self.jobs().create().await
    }

    pub(crate) fn family(&self, entity: &T) -> Result<Family> {
        self.context.placement.spec.family(Layout::Inter, entity)
    }
}
