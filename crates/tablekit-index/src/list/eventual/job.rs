//! [`ListJob`]: keeping one entity's place in the lists right, idempotently.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit_azure::{BlobCondition, Container, Table, UploadOptions};
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::edm::from_properties;
use tablekit_core::{Entity, Error, Keys, ResourceKind, Result, Stored, Target};
use tablekit_eventual::{Handler, Job, Steps};

use tablekit_azure::track_landing;

use crate::effects::{Effects, check_index};
use crate::follow::{FollowedWrite, Settled};
use crate::list::rows::{Lists, RowWrite};
use crate::list::spec::{ListSpec, SHARDS};

/// A listed entity: its (PartitionKey, RowKey).
pub(crate) type Pair = (String, String);

/// Rounds of re-reading when the entity or a list keeps changing under a job.
const ROUNDS: usize = 8;

/// The queued job of an [`EventualList`](crate::EventualList): make the lists agree with one
/// entity's current value — listed under it, and under no value it had before — once the
/// write the job follows has landed (or can no longer land).
///
/// Applications name the type (a [`JobQueue`](tablekit_eventual::JobQueue) or
/// [`Worker`](tablekit_eventual::Worker) of it) but never build or read one: its fields are
/// the format of the queued message, hidden and outside semantic versioning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListJob {
    /// The index (`<table>/<name>`): a handler refuses jobs of another index.
    #[doc(hidden)]
    pub index: String,
    /// The entity's PartitionKey.
    #[doc(hidden)]
    pub partition: String,
    /// The entity's RowKey.
    #[doc(hidden)]
    pub row_key: String,
    /// Values it was listed under before the write: it is removed from those it no longer
    /// has.
    #[doc(hidden)]
    pub stale: Vec<String>,
    /// The value the write lists it under: removed too if the entity no longer has it (a
    /// delivery cut off after listing it, run again once the entity has changed). Empty in
    /// jobs enqueued before it was added (version 1).
    #[doc(hidden)]
    #[serde(default)]
    pub fresh: Vec<String>,
    /// The write the job follows, as a copy job's.
    #[doc(hidden)]
    pub write: FollowedWrite,
}

impl Job for ListJob {
    const KIND: &'static str = "tablekit-index.lists";
    /// 2: the job carries `fresh`, and a delivery defers instead of waiting.
    const VERSION: u32 = 2;
}

/// Where the lists are kept.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    /// Option 3: index rows in partitions of their own (`<prefix><value>`), in a table.
    Rows(Table),
    /// Option 1: one JSON blob per value.
    Blobs(Container),
}

/// What a job needs: the declaration, the entities' table and the list store.
pub(crate) struct Context<T> {
    pub(crate) name: String,
    pub(crate) spec: Arc<ListSpec<T>>,
    pub(crate) entities: Table,
    pub(crate) store: Store,
}

impl<T> Context<T> {
    /// The partition of `value`'s index rows (also the stem of its blob's name).
    pub(crate) fn list_partition(&self, value: &str) -> Result<String> {
        self.spec.row_key(value, 0)
    }

    /// The name of `value`'s blob.
    pub(crate) fn blob_name(&self, value: &str) -> Result<String> {
        Ok(format!("{}.json", self.list_partition(value)?))
    }

    /// Reads `value`'s rows with point reads only (a job has no queries): the base row, then
    /// each overflow row it counts.
    async fn read_rows<E: Effects>(
        &self,
        fx: &E,
        table: &Table,
        value: &str,
    ) -> Result<Lists<Pair>> {
        let pk = self.list_partition(value)?;
        let base = fx
            .get(table, &Keys::new(&pk, self.spec.row_key(value, 0)?)?)
            .await?;
        let shards = base
            .as_ref()
            .and_then(|b| b.value.get_i64(SHARDS).ok().flatten())
            .unwrap_or(0);
        let mut overflow: Vec<Stored<Properties>> = Vec::new();
        for n in 1..=u32::try_from(shards).unwrap_or(0) {
            let keys = Keys::new(&pk, self.spec.row_key(value, n)?)?;
            overflow.extend(fx.get(table, &keys).await?);
        }
        Lists::from_rows(&self.spec, value, base.as_ref(), &overflow)
    }

    /// Applies row writes. A single write is one conditional step. An overflow — the new
    /// overflow row and the base row that counts it — is one transaction conditioned on the
    /// base row's ETag: while that ETag holds, no other job has counted the new row, so
    /// overwriting whatever an older, interrupted overflow left there is safe; when it does
    /// not hold, nothing is written and the job re-reads. (Written one by one, a job working
    /// from a stale read could overwrite a row another job had counted and changed since.)
    /// Emptied rows are kept empty rather than deleted. Returns `false` when the base row
    /// had to be created first (read again and retry).
    async fn apply_rows<E: Effects>(
        &self,
        fx: &E,
        table: &Table,
        value: &str,
        writes: Vec<RowWrite<Pair>>,
    ) -> Result<bool> {
        let pk = self.list_partition(value)?;
        let base_rk = self.spec.row_key(value, 0)?;
        if writes.len() > 1 {
            let ops: Result<Vec<Operation>> = writes
                .iter()
                .map(|write| match write {
                    RowWrite::Insert(row) => Operation::upsert_replace(&Entity::new(
                        Keys::new(&pk, &row.rk)?,
                        row.properties(&self.spec)?,
                    )),
                    RowWrite::Replace(..) | RowWrite::Delete(..) => {
                        write.operation(&self.spec, &pk)
                    }
                })
                .collect();
            fx.submit(table, &BatchPlan::atomic(ops?)?).await?;
            return Ok(true);
        }
        for write in writes {
            match write {
                RowWrite::Insert(row) if row.rk == base_rk => {
                    // Create it empty, if nobody has; the next round adds to it under its ETag.
                    let empty = Entity::new(Keys::new(&pk, &row.rk)?, Properties::new());
                    fx.upsert_merge(table, &empty).await?;
                    return Ok(false);
                }
                RowWrite::Insert(row) => {
                    let entity = Entity::new(Keys::new(&pk, &row.rk)?, row.properties(&self.spec)?);
                    fx.upsert_replace(table, &entity).await?;
                }
                RowWrite::Replace(row, etag) => {
                    let entity = Entity::new(Keys::new(&pk, &row.rk)?, row.properties(&self.spec)?);
                    fx.replace_if_match(table, &entity, &etag).await?;
                }
                RowWrite::Delete(rk, etag) => {
                    let empty = Properties::new().with(self.spec.property(), "[]");
                    fx.replace_if_match(table, &Entity::new(Keys::new(&pk, rk)?, empty), &etag)
                        .await?;
                }
            }
        }
        Ok(true)
    }

    /// Makes `item` listed (or not) under `value`, retrying from the read when another
    /// writer changed the list first.
    async fn ensure<E: Effects>(
        &self,
        fx: &E,
        value: &str,
        item: &Pair,
        listed: bool,
    ) -> Result<()> {
        for _ in 0..ROUNDS {
            let done = match &self.store {
                Store::Rows(table) => {
                    let lists = self.read_rows(fx, table, value).await?;
                    let writes = if listed {
                        lists.add(&self.spec, value, item)?
                    } else {
                        lists.remove(item)
                    };
                    if writes.is_empty() {
                        return Ok(());
                    }
                    self.apply_rows(fx, table, value, writes).await
                }
                Store::Blobs(container) => {
                    self.ensure_blob(fx, container, value, item, listed).await
                }
            };
            match done {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Err(Error::Indeterminate {
            target: Target::default(),
            reason: format!("the list of {value:?} kept changing; the job runs again"),
        })
    }

    async fn ensure_blob<E: Effects>(
        &self,
        fx: &E,
        container: &Container,
        value: &str,
        item: &Pair,
        listed: bool,
    ) -> Result<bool> {
        let name = self.blob_name(value)?;
        let current = fx.get_blob(container, &name).await?;
        let items: Vec<Pair> = match &current {
            Some(blob) => serde_json::from_slice(&blob.data).map_err(|e| {
                Error::corrupt(
                    Target::resource(ResourceKind::Blob, &name),
                    format!("not a list this index wrote: {e}"),
                )
            })?,
            None => Vec::new(),
        };
        if items.contains(item) == listed {
            return Ok(true);
        }
        let mut next = items;
        if listed {
            next.push(item.clone());
        } else {
            next.retain(|i| i != item);
        }
        let condition = match current {
            Some(blob) => BlobCondition::IfMatch(blob.info.etag),
            None => BlobCondition::IfNotExists,
        };
        let data = serde_json::to_vec(&next).map_err(|e| Error::encode(&name, e.to_string()))?;
        let options = UploadOptions::default()
            .with_content_type("application/json")
            .with_condition(condition);
        fx.put_blob(container, &name, data, options).await?;
        Ok(true)
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync> Context<T> {
    /// Lists the job's entity under its current value and under no other it had, `current`
    /// being a read of the entity the caller just made.
    ///
    /// Requests: 1 more read of the entity; per list touched, its reads and 1 write (2 when
    /// the list is created); again, with a first read, per round while the entity keeps
    /// changing.
    pub(crate) async fn converge<E: Effects>(
        &self,
        fx: &E,
        job: &ListJob,
        mut current: Option<Stored<Properties>>,
    ) -> Result<()> {
        let keys = Keys::new(&job.partition, &job.row_key)?;
        let item: Pair = (job.partition.clone(), job.row_key.clone());
        let mut stale = job.stale.clone();
        for value in &job.fresh {
            if !stale.contains(value) {
                stale.push(value.clone());
            }
        }
        for round in 0..ROUNDS {
            if round > 0 {
                current = fx.get(&self.entities, &keys).await?;
            }
            let etag = current.as_ref().map(|s| s.etag.clone());
            let desired = match &current {
                Some(s) => Some(self.spec.value_of(&from_properties::<T>(&s.value)?)?),
                None => None,
            };
            let writes = async {
                if let Some(value) = &desired {
                    self.ensure(fx, value, &item, true).await?;
                }
                for value in &stale {
                    if desired.as_ref() != Some(value) {
                        self.ensure(fx, value, &item, false).await?;
                    }
                }
                Ok::<_, Error>(())
            };
            // Before the entity is read again, nothing this round wrote can still land.
            let (written, lands_by) = track_landing(writes).await;
            written?;
            if let Some(lands_by) = lands_by {
                tokio::time::sleep_until(lands_by.into()).await;
            }
            let after = fx.get(&self.entities, &keys).await?;
            if after.map(|s| s.etag) == etag {
                return Ok(());
            }
            if let Some(value) = desired {
                if !stale.contains(&value) {
                    stale.push(value);
                }
            }
        }
        Err(Error::Indeterminate {
            target: Target::entity(self.entities.name(), keys),
            reason: format!("the entity changed during {ROUNDS} rounds; the job runs again"),
        })
    }
}

/// Runs [`ListJob`]s for one [`EventualList`](crate::EventualList): give it to a
/// [`tablekit_eventual::Worker`] (or use [`EventualList::worker`](crate::EventualList::worker)).
pub struct ListHandler<T> {
    pub(crate) context: Arc<Context<T>>,
}

impl<T> Clone for ListHandler<T> {
    fn clone(&self) -> Self {
        Self {
            context: Arc::clone(&self.context),
        }
    }
}

impl<T> fmt::Debug for ListHandler<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListHandler")
            .field("index", &self.context.name)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Handler<ListJob> for ListHandler<T> {
    /// Lists the job's entity under its current value only, once the write the job follows
    /// has landed or can no longer land: a delivery that finds the entity still as before the
    /// write defers the job (1 s doubling to 30 s) until the job's deadline, as
    /// [`CopyHandler`](crate::CopyHandler) does.
    ///
    /// **Requests:** 2 point reads of the entity; per list touched, its reads (1, plus 1 per
    /// overflow row) and 1 write (2 when the list is created); a deferred delivery, 1 read
    /// (and the worker's 1 queue update).
    ///
    /// **Errors:** [`Error::Decode`] for a job of another index or an entity that does
    /// not fit `T`, and — permanent, so the job ends in the poison queue after its last
    /// delivery — when the write did not land by the job's deadline (for an insert: no
    /// entity found then); [`Error::Indeterminate`] while things keep changing (the worker
    /// runs it again).
    async fn handle(&self, job: ListJob, steps: &Steps) -> Result<()> {
        // The index job of one write: its reads and writes nest under this span, which
        // names the table, never the keys.
        let span = tablekit_azure::step_span("index job", self.context.entities.name());
        let job = async move {
            check_index(&job.index, &self.context.name)?;
            let keys = Keys::new(&job.partition, &job.row_key)?;
            // Each step's future lives on the heap: together they overflowed a 2 MiB
            // worker stack in debug builds.
            let settled =
                Box::pin(
                    job.write
                        .settle(steps, &self.context.entities, &keys, steps.deferrals()),
                )
                .await?;
            match settled {
                Settled::Ready(current) => {
                    Box::pin(self.context.converge(steps, &job, current)).await
                }
                Settled::Wait(delay) => steps.defer(delay),
            }
        };
        tracing::Instrument::instrument(Box::pin(job), span).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::Direct;
    use tablekit_azure::RequestKind;
    use tablekit_testkit::fixtures::{assert_requests, measured, table};

    type E = (String, String, String);

    fn pair(id: &str) -> Pair {
        ("P".to_owned(), format!("{id:0>6}"))
    }

    /// Lists of at most two items: `[["P","00000a"],["P","00000b"]]` is 62 bytes, a third
    /// item 92.
    async fn context(prefix: &str) -> (Context<E>, Table) {
        let table = table(prefix).await;
        let spec = ListSpec::builder("lastname", |e: &E| e.2.clone())
            .with_prefix("lastname_")
            .with_max_list_bytes(64)
            .build()
            .unwrap();
        let context = Context {
            name: format!("{}/lastname", table.name()),
            spec: Arc::new(spec),
            entities: table.clone(),
            store: Store::Rows(table.clone()),
        };
        (context, table)
    }

    fn items(lists: &Lists<Pair>) -> Vec<Pair> {
        let mut all: Vec<Pair> = lists
            .overflow
            .iter()
            .chain(std::iter::once(&lists.base))
            .flat_map(|r| r.items.clone())
            .collect();
        all.sort();
        all
    }

    #[tokio::test]
    async fn an_overflow_from_a_stale_read_writes_nothing() {
        let (cx, table) = context("listrace").await;
        for id in ["a", "b"] {
            cx.ensure(&Direct, "Jones", &pair(id), true).await.unwrap();
        }
        // Job A reads the full base row and plans an overflow for `c`...
        let stale = cx.read_rows(&Direct, &table, "Jones").await.unwrap();
        let writes = stale.add(&cx.spec, "Jones", &pair("c")).unwrap();
        assert_eq!(writes.len(), 2, "a new overflow row and the base row");
        // ...while job B overflows first (one transaction) and job C then removes `a` from
        // the overflow row B counted.
        let (r, spent) = measured(
            table.account(),
            cx.ensure(&Direct, "Jones", &pair("d"), true),
        )
        .await;
        r.unwrap();
        assert_requests(&spent, Some(RequestKind::Transaction), 1);
        assert_requests(&spent, None, 2);
        cx.ensure(&Direct, "Jones", &pair("a"), false)
            .await
            .unwrap();
        let before = cx.read_rows(&Direct, &table, "Jones").await.unwrap();
        assert_eq!(items(&before), vec![pair("b"), pair("d")]);
        assert_eq!(before.overflow.len(), 1);

        // A's writes, planned from its stale read, must not bring `a` back into the counted
        // overflow row: the whole overflow fails on the base row's ETag.
        let e = cx
            .apply_rows(&Direct, &table, "Jones", writes)
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e:?}");
        let after = cx.read_rows(&Direct, &table, "Jones").await.unwrap();
        assert_eq!(after, before, "nothing written");

        // A's job, run again from a fresh read, lists `c` beside the others.
        cx.ensure(&Direct, "Jones", &pair("c"), true).await.unwrap();
        let done = cx.read_rows(&Direct, &table, "Jones").await.unwrap();
        assert_eq!(items(&done), vec![pair("b"), pair("c"), pair("d")]);
        table.delete_table().await.unwrap();
    }
}
