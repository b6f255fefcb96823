//! [`EventualList`]: index entities kept away from the entities' partition — in partitions of
//! their own (option 3) or in blobs (option 1) — and updated by queued jobs.

mod job;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tablekit_azure::{Container, Queue, Table};
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::edm::{from_properties, to_properties};
use tablekit_core::{ETag, Entity, Error, IfMatch, IntoKeys, Keys, Result, TableEntity, Target};
use tablekit_eventual::{JobQueue, Worker, WorkerOptions};

pub use job::{ListHandler, ListJob};

use super::lookup::ListLookup;
use super::rows::read_lists;
use super::spec::ListSpec;
use crate::follow::{DEFAULT_CLOCK_SKEW, Pending, delete_followed};
use job::{Context, Pair, Store};

/// An index of entities by a non-unique value whose lists live apart from the entities and
/// follow them through queued jobs: the guide's index entities, option 3 (a separate
/// partition or table: `Jones/Jones` holding `[["Sales","000152"], …]`) and option 1 (a blob
/// per value: `Jones.json`). Lists hold (PartitionKey, RowKey) pairs, so lookups span the
/// whole organisation, not one department.
///
/// **Consistency:** the entity is written at once; its place in the lists follows when its
/// [`ListJob`] has run (eventually consistent). The job is enqueued before the entity write, and
/// every list change is conditioned on the list's ETag (a row's, or a blob's), so concurrent
/// jobs never lose an entry. The write stamps the entity with a write id
/// ([`WRITE_ID_PROPERTY`](crate::WRITE_ID_PROPERTY)) its job carries, so a job delivered
/// before its write has landed waits for it, up to a deadline past which the write can no
/// longer land, and never lists the entity under a value it is about to lose. Table lists overflow into numbered rows as
/// [`SamePartitionList`](crate::SamePartitionList)'s do; a blob has no size limit to speak of.
pub struct EventualList<T> {
    context: Arc<Context<T>>,
    queue: Queue,
    clock_skew: Duration,
}

impl<T> Clone for EventualList<T> {
    fn clone(&self) -> Self {
        Self {
            context: Arc::clone(&self.context),
            queue: self.queue.clone(),
            clock_skew: self.clock_skew,
        }
    }
}

impl<T> fmt::Debug for EventualList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventualList")
            .field("index", &self.context.name)
            .field("store", &self.context.store)
            .field("queue", &self.queue.name())
            .finish_non_exhaustive()
    }
}

impl<T: TableEntity + Send + Sync + 'static> EventualList<T> {
    fn with_store(entities: Table, store: Store, spec: ListSpec<T>, queue: Queue) -> Self {
        let name = format!("{}/{}", entities.name(), spec.name());
        Self {
            context: Arc::new(Context {
                name,
                spec: Arc::new(spec),
                entities,
                store,
            }),
            queue,
            clock_skew: DEFAULT_CLOCK_SKEW,
        }
    }

    /// Sets the allowance for clock skew between writers and the workers running the jobs
    /// (default [`DEFAULT_CLOCK_SKEW`], 1 minute); see
    /// [`InterPartitionIndexBuilder::with_clock_skew_allowance`](crate::InterPartitionIndexBuilder::with_clock_skew_allowance).
    /// No request is sent.
    #[must_use]
    pub fn with_clock_skew_allowance(mut self, allowance: Duration) -> Self {
        self.clock_skew = allowance;
        self
    }

    /// Option 3: entities in `entities`, each value's list in its own partition of `lists`
    /// (`<prefix><value>`; `lists` may be `entities` — give the spec a prefix then, so list
    /// partitions cannot meet entity partitions). Jobs go to `queue`. No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit::TableEntity;
    /// use tablekit_eventual::WorkerOptions;
    /// use tablekit_index::{EventualList, ListSpec};
    ///
    /// #[derive(Debug, Clone, TableEntity)]
    /// #[table(partition_key = "{department}", row_key = "{id:06}")]
    /// struct Employee { department: String, id: u32, last_name: String }
    ///
    /// # async fn run(account: tablekit_azure::Account) -> tablekit_core::Result<()> {
    /// let employees = account.table("Employees")?;
    /// let lists = account.table("LastNames")?;
    /// let spec = ListSpec::builder("lastname", Employee::LAST_NAME).build()?;
    /// let by_last_name = EventualList::separate(employees, lists, spec, account.queue("lastnames")?);
    /// by_last_name.create().await?;
    /// let jones = Employee { department: "Sales".into(), id: 223, last_name: "Jones".into() };
    /// by_last_name.insert(&jones).await?; // the job is queued first, then the entity written
    /// by_last_name.worker(WorkerOptions::default()).drain().await?; // a worker lists it
    /// let joneses = by_last_name.lookup("Jones").collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn separate(entities: Table, lists: Table, spec: ListSpec<T>, queue: Queue) -> Self {
        Self::with_store(entities, Store::Rows(lists), spec, queue)
    }

    /// Option 1: entities in `entities`, each value's list in the blob
    /// `<prefix><value>.json` of `container`. Jobs go to `queue`. No request is sent.
    pub fn blobs(entities: Table, container: Container, spec: ListSpec<T>, queue: Queue) -> Self {
        Self::with_store(entities, Store::Blobs(container), spec, queue)
    }

    /// The declaration.
    pub fn spec(&self) -> &ListSpec<T> {
        &self.context.spec
    }

    /// The entities' table.
    pub fn table(&self) -> &Table {
        &self.context.entities
    }

    /// The job queue (and its poison queue).
    pub fn jobs(&self) -> JobQueue<ListJob> {
        JobQueue::new(self.queue.clone())
    }

    /// The handler that runs this index's jobs.
    pub fn handler(&self) -> ListHandler<T> {
        ListHandler {
            context: Arc::clone(&self.context),
        }
    }

    /// A worker running this index's jobs.
    pub fn worker(&self, options: WorkerOptions) -> Worker<ListJob, ListHandler<T>> {
        Worker::new(self.jobs(), self.handler(), options)
    }

    /// Creates the entities' table, the list table or container, and the job queues, where
    /// missing.
    ///
    /// **Requests:** 1 per distinct table or container, plus 2 (queue and poison queue).
    ///
    /// # Errors
    /// Transport and service errors.
    pub async fn create(&self) -> Result<()> {
        self.context.entities.create_if_not_exists().await?;
        match &self.context.store {
            Store::Rows(table) if table.name() != self.context.entities.name() => {
                table.create_if_not_exists().await?;
            }
            Store::Rows(_) => {}
            Store::Blobs(container) => {
                container.create_if_not_exists().await?;
            }
        }
        self.jobs().create().await
    }

    /// A write of an entity about to be made, conditioned on `previous`; `stamp` unless it is
    /// a delete.
    fn pending(&self, previous: Option<ETag>, stamp: bool) -> Pending {
        Pending::new(
            &self.queue,
            &self.context.entities,
            previous,
            stamp,
            self.clock_skew,
        )
    }

    /// `entity` as written: its properties stamped with `pending`'s write id, checked as an
    /// insert would be.
    fn row(keys: &Keys, entity: &T, pending: &Pending) -> Result<Entity<Properties>> {
        let row = Entity::new(keys.clone(), pending.stamp(to_properties(entity)?)?);
        Operation::insert(&row)?;
        Ok(row)
    }

    /// The job of a write listing the entity at `keys` under `fresh` (`None`: a delete),
    /// which was listed under `stale` before.
    fn job(
        &self,
        keys: &Keys,
        stale: Option<String>,
        fresh: Option<String>,
        pending: &Pending,
    ) -> ListJob {
        ListJob {
            index: self.context.name.clone(),
            partition: keys.pk().to_owned(),
            row_key: keys.rk().to_owned(),
            stale: stale.into_iter().collect(),
            fresh: fresh.into_iter().collect(),
            write: pending.write.clone(),
        }
    }

    /// Stores a new entity: enqueues its list job, then inserts it, stamped with the write id
    /// the job carries. Returns its ETag.
    ///
    /// **Requests:** 2 (a queue put, an insert), +1 read when the insert failed after an
    /// attempt that got no answer. **Consistency:** the entity at once; its list entry
    /// eventually.
    ///
    /// **Outcomes:** `Ok` — the entity is stored. [`Error::Indeterminate`] — it may be. Any
    /// other error — it is not stored, and no attempt of it can land any more: when the
    /// write fails after an attempt that got no answer (a lost response, a timeout), the
    /// entity is read back once no attempt can land, and an entity carrying this write's
    /// stamp makes it `Ok`.
    ///
    /// # Errors
    /// Key, encoding and size errors before any request (an entity with a property named
    /// [`WRITE_ID_PROPERTY`](crate::WRITE_ID_PROPERTY) is refused); [`Error::AlreadyExists`];
    /// [`Error::Indeterminate`] when the outcome was left open and the read-back failed;
    /// [`Error::DeadlineExceeded`], the entity not written, when the write could no longer
    /// land before its job's deadline (the enqueue or a wait for throughput budget took that
    /// long): its job then ends in the poison queue, and may be re-queued.
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let keys = entity.keys()?;
        let value = self.context.spec.value_of(entity)?;
        let pending = self.pending(None, true);
        let row = Self::row(&keys, entity, &pending)?;
        self.jobs()
            .enqueue(&self.job(&keys, None, Some(value), &pending))
            .await?;
        let table = &self.context.entities;
        pending.store(table, &keys, table.insert(&row)).await
    }

    /// Stores an entity, new or not: reads it (for the value it was listed under), enqueues
    /// its list job, then writes it, stamped with the job's write id, conditioned on the ETag
    /// read (or inserts it); retried from the read on a conflict. Returns its new ETag.
    ///
    /// **Requests:** 3 (read, queue put, write), plus 3 per conflict retry, +1 read when the
    /// write failed after an attempt that got no answer. **Consistency:** the entity at once;
    /// the lists eventually. **Outcomes:** as [`insert`](Self::insert)'s.
    ///
    /// # Errors
    /// As [`insert`](Self::insert); [`Error::PreconditionFailed`] when conflicts outlast the
    /// retries; [`Error::Decode`] when the stored entity does not fit `T`.
    pub async fn upsert(&self, entity: &T) -> Result<ETag> {
        let keys = entity.keys()?;
        let value = self.context.spec.value_of(entity)?;
        Self::row(&keys, entity, &self.pending(None, true))?;
        let table = &self.context.entities;
        let mut conflicts = table.account().conflict_loop();
        loop {
            let written = async {
                let current = table.get::<Properties>(&keys).await?;
                let (old, previous) = match &current {
                    None => (None, None),
                    Some(c) => (
                        Some(
                            self.context
                                .spec
                                .value_of(&from_properties::<T>(&c.value)?)?,
                        ),
                        Some(c.etag.clone()),
                    ),
                };
                let pending = self.pending(previous, true);
                let row = Self::row(&keys, entity, &pending)?;
                let job = self.job(&keys, old, Some(value.clone()), &pending);
                self.jobs().enqueue(&job).await?;
                Ok::<_, Error>(match current {
                    None => pending.store(table, &keys, table.insert(&row)).await,
                    Some(current) => {
                        let write = table.replace(&row, current.if_match());
                        pending.store(table, &keys, write).await
                    }
                })
            };
            match written.await? {
                Ok(etag) => return Ok(etag),
                Err(e) => conflicts.retry(e.not_found_as_conflict()).await?,
            }
        }
    }

    /// Deletes an entity: reads it (for the value it is listed under), enqueues the job that
    /// takes it off its list, then deletes it under the ETag read. `keys` are the entity's
    /// (`("Sales", "000152")`, or the entity itself). With [`IfMatch::Any`] a lost race is
    /// retried from the read; with an ETag, an entity that has another is refused.
    ///
    /// **Requests:** 3 (1 if it does not exist), plus 3 per conflict retry, +1 read when the
    /// delete failed after an attempt that got no answer. **Consistency:** the entity at
    /// once; the lists eventually. **Outcomes:** as [`insert`](Self::insert)'s: an error
    /// other than [`Error::Indeterminate`] leaves the entity in place.
    ///
    /// # Errors
    /// Key errors; [`Error::NotFound`] when the entity does not exist;
    /// [`Error::PreconditionFailed`] when its ETag is not the one given, or when conflicts
    /// outlast the retries; [`Error::DeadlineExceeded`] as for [`insert`](Self::insert).
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        let keys = keys.into_keys()?;
        let expected = match if_match {
            IfMatch::ETag(etag) => Some(etag),
            IfMatch::Any => None,
        };
        if self.remove(&keys, expected.as_ref()).await? {
            return Ok(());
        }
        Err(Error::NotFound {
            target: Target::entity(self.context.entities.name(), keys),
        })
    }

    /// Deletes an entity if it exists: as [`delete`](Self::delete) with [`IfMatch::Any`],
    /// returning whether it existed.
    ///
    /// **Requests:** 3 (1 if it does not exist), plus 3 per conflict retry, +1 read as for
    /// [`delete`](Self::delete). **Outcomes:** as [`delete`](Self::delete)'s.
    ///
    /// # Errors
    /// Key errors; [`Error::PreconditionFailed`] when conflicts outlast the retries;
    /// [`Error::DeadlineExceeded`] as for [`insert`](Self::insert).
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        self.remove(&keys.into_keys()?, None).await
    }

    async fn remove(&self, keys: &Keys, expected: Option<&ETag>) -> Result<bool> {
        let table = &self.context.entities;
        delete_followed(table, keys, expected, |current| async move {
            let old = self
                .context
                .spec
                .value_of(&from_properties::<T>(&current.value)?)?;
            let pending = self.pending(Some(current.etag), false);
            self.jobs()
                .enqueue(&self.job(keys, Some(old), None, &pending))
                .await?;
            Ok(pending)
        })
        .await
    }

    /// The (PartitionKey, RowKey) pairs listed for `value`, across all partitions, oldest
    /// first.
    ///
    /// **Requests:** 1 (a point read of the base row, or a blob read), +1 when a table list
    /// has overflow rows. **Consistency:** eventual: entities whose jobs have not run are
    /// missing, or still listed under an old value.
    ///
    /// # Errors
    /// Key errors; [`Error::Corrupt`] for a list this index did not write.
    pub async fn ids(&self, value: &str) -> Result<Vec<(String, String)>> {
        let context = &self.context;
        match &context.store {
            Store::Rows(table) => {
                let pk = context.list_partition(value)?;
                Ok(read_lists::<Pair, T>(table, &context.spec, &pk, value)
                    .await?
                    .items())
            }
            Store::Blobs(container) => {
                let name = context.blob_name(value)?;
                match container.download(&name).await? {
                    None => Ok(Vec::new()),
                    Some(blob) => serde_json::from_slice(&blob.data).map_err(|e| {
                        Error::corrupt(
                            tablekit_core::Target::resource(
                                tablekit_core::ResourceKind::Blob,
                                &name,
                            ),
                            format!("not a list this index wrote: {e}"),
                        )
                    }),
                }
            }
        }
    }

    /// The entities listed for `value`, across all partitions: a lazy [`ListLookup`] —
    /// nothing is sent until a page, the pages, the stream or the entities are asked for. It
    /// reads the list, then the entities of its entries page by page, one point read each,
    /// in (PartitionKey, RowKey) order. Entities listed but gone, or whose current value is
    /// no longer `value` (their job is pending), are left out.
    ///
    /// **Requests:** per [`page`](ListLookup::page): the list read as for
    /// [`ids`](Self::ids), plus 1 per entry of the page (100 by default); a stream reads the
    /// list once. **Consistency:** eventual, as [`ids`](Self::ids).
    ///
    /// # Errors
    /// When read: as [`ids`](Self::ids); [`Error::Decode`] when an entity does not fit `T`.
    pub fn lookup(&self, value: &str) -> ListLookup<T> {
        ListLookup::eventual(self.clone(), value)
    }
}
