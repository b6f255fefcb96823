//! Index entities, option 2: the lists live in the entities' own partition and change in the
//! same transaction as the entities, conditioned on the list rows' ETags.

use std::fmt;
use std::sync::Arc;

use tablekit_azure::Table;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{
    ETag, Entity, Error, IfMatch, IntoKeys, Keys, Result, Stored, TableEntity, Target,
};

mod relocate;

use super::lookup::ListLookup;
use super::rows::{Lists, RowWrite, read_lists};
use super::spec::ListSpec;
use crate::intra::own_failure;

/// An index of entities by a non-unique value whose lists (`Sales/lastname_Jones` →
/// `EmployeeIDs`) live in the same partition as the entities and change in the same entity
/// group transaction: the guide's index entities, option 2.
///
/// **Consistency:** strong. Each write reads the list row(s) it changes, then one
/// transaction writes the entity and the lists, each list row conditioned on the ETag read
/// (a missing row is inserted, so two writers creating it collide too). A writer that lost
/// the race gets 412 (or 409) for the whole transaction and starts again from the read, so
/// concurrent writers never lose an id. Lookups are within one partition; for
/// organisation-wide lookups use an [`EventualList`](crate::EventualList).
///
/// **Lists never take an entity's place.** The lists share the entities' partition, so their
/// RowKeys carry the spec's [prefix](crate::ListSpecBuilder::with_prefix) (`Sales/lastname_Jones`),
/// which is required; entity RowKeys that start with it are refused before any request. A
/// row found under a list's key that this index could not have written (other properties, no
/// list) is refused with [`Error::Corrupt`] naming it, and nothing is written: the index
/// never reads someone else's entity as an empty list and overwrites it.
pub struct SamePartitionList<T> {
    table: Table,
    spec: Arc<ListSpec<T>>,
}

impl<T> Clone for SamePartitionList<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            spec: Arc::clone(&self.spec),
        }
    }
}

impl<T> fmt::Debug for SamePartitionList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SamePartitionList")
            .field("table", &self.table.name())
            .field("spec", &self.spec)
            .finish()
    }
}

/// How the entity itself is written in a list transaction.
enum EntityWrite {
    Insert,
    Replace(ETag),
    Delete(ETag),
}

impl<T: TableEntity + Send + Sync + 'static> SamePartitionList<T> {
    /// An index over the entities and lists of `table`. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `spec` has no [prefix](crate::ListSpecBuilder::with_prefix):
    /// without one, the list of a value equal to an entity's RowKey (a last name `000152`)
    /// would live under that entity's keys.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit::TableEntity;
    /// use tablekit_index::{ListSpec, SamePartitionList};
    ///
    /// #[derive(Debug, Clone, TableEntity)]
    /// #[table(partition_key = "{department}", row_key = "{id:06}")]
    /// struct Employee { department: String, id: u32, last_name: String }
    ///
    /// # async fn run(table: tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// // Sales/lastname_Jones lists the ids of the Joneses of Sales.
    /// let spec = ListSpec::builder("lastname", Employee::LAST_NAME)
    ///     .with_prefix("lastname_")
    ///     .build()?;
    /// let by_last_name = SamePartitionList::new(table, spec)?;
    /// let jones = Employee { department: "Sales".into(), id: 223, last_name: "Jones".into() };
    /// by_last_name.insert(&jones).await?; // a read of the list, one transaction
    /// let joneses = by_last_name.lookup("Sales", "Jones").collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(table: Table, spec: ListSpec<T>) -> Result<Self> {
        if spec.prefix().is_empty() {
            return Err(Error::InvalidConfig {
                part: "ListSpec::prefix".into(),
                reason: format!(
                    "list index `{}` keeps its rows among the entities, so it needs a RowKey \
                     prefix (such as `{}_`) that no entity's RowKey starts with",
                    spec.name(),
                    spec.name()
                ),
            });
        }
        Ok(Self {
            table,
            spec: Arc::new(spec),
        })
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The declaration.
    pub fn spec(&self) -> &ListSpec<T> {
        &self.spec
    }

    /// The keys of `value`'s base index row in `partition` (`Sales/lastname_Jones`).
    ///
    /// # Errors
    /// Key errors.
    pub fn list_keys(&self, partition: &str, value: &str) -> Result<Keys> {
        Keys::new(partition, self.spec.row_key(value, 0)?)
    }

    /// An entity's keys, refusing a RowKey among the list rows (one starting with the prefix):
    /// the entity and a list could otherwise overwrite each other.
    fn entity_keys(&self, entity: &T) -> Result<Keys> {
        let keys = entity.keys()?;
        self.outside_lists(&keys)?;
        Ok(keys)
    }

    fn outside_lists(&self, keys: &Keys) -> Result<()> {
        if keys.rk().starts_with(self.spec.prefix()) {
            return Err(Error::invalid_argument(
                "keys",
                format!(
                    "{keys}: the RowKey starts with `{}`, the prefix of list index `{}`'s rows",
                    self.spec.prefix(),
                    self.spec.name()
                ),
            ));
        }
        Ok(())
    }

    /// Reads `value`'s list rows, refusing rows of any other shape — including a row with no
    /// properties at all, which this index never writes.
    async fn read(&self, partition: &str, value: &str) -> Result<Lists<String>> {
        let lists: Lists<String> = read_lists(&self.table, &self.spec, partition, value).await?;
        if lists.base.blank {
            return Err(Error::corrupt(
                Target::entity(self.table.name(), Keys::new(partition, &lists.base.rk)?),
                format!(
                    "it is not a row of list index `{}` (it has no properties); nothing was \
                     written",
                    self.spec.name()
                ),
            ));
        }
        Ok(lists)
    }

    /// One transaction: the entity write first, then the list writes.
    async fn commit(
        &self,
        entity: Option<&Entity<&T>>,
        keys: &Keys,
        write: EntityWrite,
        lists: Vec<RowWrite<String>>,
    ) -> Result<Option<ETag>> {
        let mut ops = Vec::with_capacity(1 + lists.len());
        ops.push(match (write, entity) {
            (EntityWrite::Insert, Some(e)) => Operation::insert(e)?,
            (EntityWrite::Replace(etag), Some(e)) => Operation::replace(e, IfMatch::ETag(etag))?,
            (EntityWrite::Delete(etag), _) => Operation::delete(keys.clone(), IfMatch::ETag(etag))?,
            (_, None) => return Err(Error::invalid_argument("entity", "no entity to write")),
        });
        for w in &lists {
            ops.push(w.operation(&self.spec, keys.pk())?);
        }
        let outcomes = self.table.submit(&BatchPlan::atomic(ops)?).await?;
        Ok(outcomes
            .first()
            .and_then(|o| o.etags.first().cloned())
            .flatten())
    }

    /// Runs `attempt` until it does not lose a race on a list row. `entity_final` says whether
    /// a failure of the entity's own operation (index 0) is an answer rather than a race: a
    /// 409 on an insert means "exists", a 412 on a write under the caller's ETag "changed".
    async fn retrying<F, Fut, R>(&self, entity_final: bool, mut attempt: F) -> Result<R>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<R>>,
    {
        self.table
            .account()
            .conflict_loop()
            .run(|_| {
                let attempt = attempt();
                async move {
                    match attempt.await {
                        Ok(r) => Ok(Ok(r)),
                        Err(e @ Error::BatchFailed { index: 0, .. }) if entity_final => Ok(Err(e)),
                        // A row changed, appeared or went since it was read: run again.
                        Err(e @ Error::BatchFailed { .. }) => Err(e.not_found_as_conflict()),
                        Err(e) => Ok(Err(e)),
                    }
                }
            })
            .await?
    }

    /// Inserts a new entity and adds its RowKey to its value's list, in one transaction:
    /// reads the list row and saves its ETag, then inserts the entity and replaces the row
    /// conditioned on that ETag (or inserts the row when there is none). On a concurrency
    /// error it starts again from the read. Returns the entity's ETag.
    ///
    /// **Requests:** 2 (a point read, one transaction; +1 read when the list has overflow
    /// rows), plus 2 per conflict retry. **Consistency:** strong.
    ///
    /// # Errors
    /// Before any request: key, value and size errors, and [`Error::InvalidArgument`] when
    /// the entity's RowKey starts with the list prefix. [`Error::Corrupt`] naming the row
    /// when a row under the list's key is not a list this index wrote (nothing is written);
    /// [`Error::BatchFailed`] with index 0 and [`Error::AlreadyExists`] when the entity
    /// exists; [`Error::PreconditionFailed`] when conflicts outlast the account's
    /// `conflict_retry` attempts.
    pub async fn insert(&self, entity: &T) -> Result<ETag> {
        let keys = self.entity_keys(entity)?;
        let value = self.spec.value_of(entity)?;
        let item = keys.rk().to_owned();
        let row = Entity::new(keys.clone(), entity);
        Operation::insert(&row)?;
        let etag = self
            .retrying(true, || async {
                let lists = self.read(keys.pk(), &value).await?;
                let writes = lists.add(&self.spec, &value, &item)?;
                self.commit(Some(&row), &keys, EntityWrite::Insert, writes)
                    .await
            })
            .await?;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Stores an entity, new or not. Reads it; if new, as [`insert`](Self::insert); if its
    /// value is unchanged, replaces it under its ETag; if its value changed (a new last
    /// name), reads the old and the new list rows and updates all three entities in one
    /// transaction, each under the ETag read. Retried from the reads on a concurrency error.
    ///
    /// **Requests:** new entity 3; unchanged value 2; changed value 4 (the entity read, the
    /// two list reads in parallel, one transaction); +1 per list with overflow rows; the same
    /// again per conflict retry. **Consistency:** strong: the entity and both lists change
    /// together or not at all.
    ///
    /// `put` finds the stored entity by the keys `entity` has now. When the partition value
    /// changed (a new department), that is a new entity in the new partition and the old one
    /// stays, listed: move an entity with [`relocate`](Self::relocate).
    ///
    /// # Errors
    /// As [`insert`](Self::insert); [`Error::Decode`] when the stored entity does not fit
    /// `T`.
    pub async fn upsert(&self, entity: &T) -> Result<ETag> {
        let keys = self.entity_keys(entity)?;
        let value = self.spec.value_of(entity)?;
        let item = keys.rk().to_owned();
        let row = Entity::new(keys.clone(), entity);
        Operation::insert(&row)?;
        let etag = self
            .retrying(false, || async {
                match self.table.get::<T>(&keys).await? {
                    None => {
                        let lists = self.read(keys.pk(), &value).await?;
                        let writes = lists.add(&self.spec, &value, &item)?;
                        self.commit(Some(&row), &keys, EntityWrite::Insert, writes)
                            .await
                    }
                    Some(current) => self.change(&current, &row, &value, &item).await,
                }
            })
            .await?;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    async fn change(
        &self,
        current: &Stored<T>,
        row: &Entity<&T>,
        value: &str,
        item: &String,
    ) -> Result<Option<ETag>> {
        let old_value = self.spec.value_of(&current.value)?;
        let write = EntityWrite::Replace(current.etag.clone());
        if old_value == value {
            return self.commit(Some(row), &row.keys, write, Vec::new()).await;
        }
        let pk = row.keys.pk();
        let (old, new) = futures::try_join!(self.read(pk, &old_value), self.read(pk, value))?;
        let mut writes = old.remove(item);
        writes.extend(new.add(&self.spec, value, item)?);
        self.commit(Some(row), &row.keys, write, writes).await
    }

    /// Replaces an entity the caller has read (`current`) with `entity`, under `current`'s
    /// ETag, moving its RowKey between lists if its value changed — three entities in one
    /// transaction, each conditioned on an ETag. Not retried: any stale ETag fails it whole.
    ///
    /// **Requests:** 1 when the value is unchanged; 3 when it changed (two list reads, one
    /// transaction), +1 per list with overflow rows. **Consistency:** strong.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any request when the keys differ (a move to another
    /// partition is [`relocate`](Self::relocate)) or lie among the list rows; as
    /// [`insert`](Self::insert) for a row that is not a list; [`Error::BatchFailed`] with
    /// [`Error::PreconditionFailed`] when `current` (index 0) or a list row changed since
    /// read; nothing is written then.
    pub async fn replace(&self, current: &Stored<T>, entity: &T) -> Result<ETag> {
        let keys = self.entity_keys(entity)?;
        if keys != current.keys {
            return Err(Error::invalid_argument(
                "entity",
                format!(
                    "replace keeps an entity where it is: {keys} is not {}; move it with \
                     relocate",
                    current.keys
                ),
            ));
        }
        let value = self.spec.value_of(entity)?;
        let row = Entity::new(keys.clone(), entity);
        let etag = self
            .change(current, &row, &value, &keys.rk().to_owned())
            .await?;
        Ok(etag.unwrap_or_else(|| ETag::new("")))
    }

    /// Deletes an entity and removes its RowKey from its list in one transaction: reads the
    /// entity (for its value) and its list, then deletes the entity under its ETag and
    /// rewrites the list under the list's. `keys` are the entity's (`("Sales", "000152")`,
    /// or the entity itself). With [`IfMatch::Any`] a lost race on the entity is retried from
    /// the reads; with an ETag, an entity that has another is refused. Lost races on the list
    /// are retried either way.
    ///
    /// **Requests:** 3 (entity read, list read, one transaction; 1 if the entity does not
    /// exist; +1 with overflow rows), plus 3 per conflict retry. **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors, and [`Error::InvalidArgument`] for a RowKey among the list rows, before any
    /// request; [`Error::NotFound`] when the entity does not exist;
    /// [`Error::PreconditionFailed`] when its ETag is not the one given, or when conflicts
    /// outlast the retries; as [`insert`](Self::insert) for a row that is not a list.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        let keys = keys.into_keys()?;
        self.outside_lists(&keys)?;
        if self.remove(&keys, if_match).await? {
            return Ok(());
        }
        Err(Error::NotFound {
            target: Target::entity(self.table.name(), keys),
        })
    }

    /// Deletes an entity, if it exists, and removes it from its list: as
    /// [`delete`](Self::delete) with [`IfMatch::Any`], returning whether it existed.
    ///
    /// **Requests:** 3 (1 if the entity does not exist; +1 with overflow rows), plus 3 per
    /// conflict retry. **Consistency:** strong.
    ///
    /// # Errors
    /// As [`delete`](Self::delete), but a missing entity is `Ok(false)`.
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        let keys = keys.into_keys()?;
        self.outside_lists(&keys)?;
        self.remove(&keys, IfMatch::Any).await
    }

    async fn remove(&self, keys: &Keys, if_match: IfMatch) -> Result<bool> {
        let expected = match if_match {
            IfMatch::ETag(etag) => Some(etag),
            IfMatch::Any => None,
        };
        let expected = &expected;
        self.retrying(expected.is_some(), || async move {
            let Some(current) = self.table.get::<T>(keys).await? else {
                return Ok(false);
            };
            if expected.as_ref().is_some_and(|etag| *etag != current.etag) {
                return Err(Error::PreconditionFailed {
                    target: Target::entity(self.table.name(), keys.clone()),
                });
            }
            let value = self.spec.value_of(&current.value)?;
            let lists = self.read(keys.pk(), &value).await?;
            let writes = lists.remove(&keys.rk().to_owned());
            self.commit(None, keys, EntityWrite::Delete(current.etag), writes)
                .await?;
            Ok(true)
        })
        .await
        .map_err(own_failure)
    }

    /// The RowKeys listed for `value` in `partition` (`Sales`, `Jones` → `000152`, …), oldest
    /// first.
    ///
    /// **Requests:** 1 (a point read), +1 when the list has overflow rows.
    /// **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors; [`Error::Corrupt`] naming the row when the row under the list's key is
    /// not a list this index wrote.
    pub async fn ids(&self, partition: &str, value: &str) -> Result<Vec<String>> {
        Ok(self.read(partition, value).await?.items())
    }

    /// The entities listed for `value` in `partition`: a lazy [`ListLookup`] — nothing is
    /// sent until a page, the pages, the stream or the entities are asked for. It reads the
    /// list, then the entities of its entries page by page, one point read each, in RowKey
    /// order. An entity deleted between the reads is left out.
    ///
    /// **Requests:** per [`page`](ListLookup::page): the list read as for
    /// [`ids`](Self::ids), plus 1 per entry of the page (100 by default); a stream reads the
    /// list once. **Consistency:** strong for the list.
    ///
    /// # Errors
    /// When read: as [`ids`](Self::ids); [`Error::Decode`] when an entity does not fit `T`.
    pub fn lookup(&self, partition: &str, value: &str) -> ListLookup<T> {
        ListLookup::same_partition(self.clone(), partition, value)
    }
}
