//! [`EventualList`]: index entities kept away from the entities' partition — in partitions of
//! their own (option 3) or in blobs (option 1) — and updated by queued jobs.

mod job;

use std::fmt;
use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{Container, Queue, Table};
use tablekit_core::batch::Operation;
use tablekit_core::edm::{Properties, from_properties};
use tablekit_core::{ETag, Entity, Error, Keys, Result, Stored};
use tablekit_eventual::{JobQueue, Worker, WorkerOptions};

pub use job::{ListHandler, ListJob};

use super::rows::read_lists;
use super::spec::ListSpec;
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
/// jobs never lose an entry. Table lists overflow into numbered rows as
/// [`SamePartitionList`](crate::SamePartitionList)'s do; a blob has no size limit to speak of.
pub struct EventualList<T> {
    context: Arc<Context<T>>,
    queue: Queue,
}

impl<T> Clone for EventualList<T> {
    fn clone(&self) -> Self {
        Self {
            context: Arc::clone(&self.context),
            queue: self.queue.clone(),
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

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> EventualList<T> {
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
        }
    }

    /// Option 3: entities in `entities`, each value's list in its own partition of `lists`
    /// (`<prefix><value>`; `lists` may be `entities` — give the spec a prefix then, so list
    /// partitions cannot meet entity partitions). Jobs go to `queue`. No request is sent.
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

    fn job(&self, keys: &Keys, stale: Option<String>, previous: Option<ETag>) -> ListJob {
        ListJob {
            index: self.context.name.clone(),
            partition: keys.pk().to_owned(),
            row_key: keys.rk().to_owned(),
            stale: stale.into_iter().collect(),
            previous,
        }
    }

    /// Stores a new entity: enqueues its list job, then inserts it. Returns its ETag.
    ///
    /// **Requests:** 2 (a queue put, an insert). **Consistency:** the entity at once; its
    /// list entry eventually.
    ///
    /// # Errors
    /// Key and encoding errors before any request; [`Error::AlreadyExists`].
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let keys = self.context.spec.entity_keys(entity)?;
        let row = Entity::new(keys.clone(), entity);
        Operation::insert(&row)?;
        self.jobs().enqueue(&self.job(&keys, None, None)).await?;
        self.context.entities.insert(&row).await
    }

    /// Stores an entity, new or not: reads it (for the value it was listed under), enqueues
    /// its list job, then writes it conditioned on the ETag read (or inserts it); retried
    /// from the read on a conflict. Returns its new ETag.
    ///
    /// **Requests:** 3 (read, queue put, write), plus 3 per conflict retry.
    /// **Consistency:** the entity at once; the lists eventually.
    ///
    /// # Errors
    /// As [`insert`](Self::insert); [`Error::PreconditionFailed`] when conflicts outlast the
    /// retries; [`Error::Decode`] when the stored entity does not fit `T`.
    pub async fn put(&self, entity: &T) -> Result<ETag> {
        let keys = self.context.spec.entity_keys(entity)?;
        let row = Entity::new(keys.clone(), entity);
        Operation::insert(&row)?;
        let table = &self.context.entities;
        let mut conflicts = table.account().conflict_loop();
        loop {
            let written = async {
                Ok::<_, Error>(match table.get::<Properties>(&keys).await? {
                    None => {
                        self.jobs().enqueue(&self.job(&keys, None, None)).await?;
                        table.insert(&row).await
                    }
                    Some(current) => {
                        let old = self
                            .context
                            .spec
                            .value_of(&from_properties::<T>(&current.value)?);
                        let job = self.job(&keys, Some(old), Some(current.etag.clone()));
                        self.jobs().enqueue(&job).await?;
                        table.replace(&row, current.if_match()).await
                    }
                })
            };
            match written.await? {
                Ok(etag) => return Ok(etag),
                Err(e) => conflicts.retry(e.not_found_as_conflict()).await?,
            }
        }
    }

    /// Deletes an entity: reads it, enqueues the job that takes it off its list, deletes it
    /// conditioned on the ETag read (retried on a conflict). Returns whether it existed.
    ///
    /// **Requests:** 3 (1 if it does not exist), plus 3 per conflict retry.
    ///
    /// # Errors
    /// Key errors; [`Error::PreconditionFailed`] when conflicts outlast the retries.
    pub async fn delete(&self, partition: &str, row_key: &str) -> Result<bool> {
        let keys = Keys::new(partition, row_key)?;
        let table = &self.context.entities;
        let mut conflicts = table.account().conflict_loop();
        loop {
            let deleted = async {
                let Some(current) = table.get::<Properties>(&keys).await? else {
                    return Ok::<_, Error>(None);
                };
                let old = self
                    .context
                    .spec
                    .value_of(&from_properties::<T>(&current.value)?);
                let job = self.job(&keys, Some(old), Some(current.etag.clone()));
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
                match container.get(&name).await? {
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

    /// The entities listed for `value`: the list, then a point read per entity
    /// (`concurrency` at a time). Entities listed but gone, or whose current value is no
    /// longer `value` (their job is pending), are left out.
    ///
    /// **Requests:** as [`ids`](Self::ids), plus 1 per listed entity.
    ///
    /// # Errors
    /// As [`ids`](Self::ids); [`Error::Decode`] when an entity does not fit `T`.
    pub async fn lookup(&self, value: &str) -> Result<Vec<Stored<T>>> {
        let ids = self.ids(value).await?;
        let table = &self.context.entities;
        let concurrency = table.account().settings().concurrency.max(1);
        let found: Vec<Option<Stored<T>>> = futures::stream::iter(ids)
            .map(|(pk, rk)| async move { table.get::<T>(&Keys::new(pk, rk)?).await })
            .buffered(concurrency)
            .try_collect()
            .await?;
        Ok(found
            .into_iter()
            .flatten()
            .filter(|s| self.context.spec.value_of(&s.value) == value)
            .collect())
    }
}
