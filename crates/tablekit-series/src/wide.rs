//! [`WideEntities`]: logical entities beyond 252 properties or 1 MiB, stored as shards of one
//! partition, written in one transaction and read with one range query (§5.10).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{Table, TransactionOutcome};
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::edm::{from_properties, to_properties_unbounded};
use tablekit_core::filter::Filter;
use tablekit_core::{AsEntity, ETag, Error, IfMatch, IntoKeys, Keys, Result, Target};
use tracing::Instrument as _;
use uuid::Uuid;

use crate::split::{
    Joined, MAX_SHARDS, SHARD_COUNT_PROPERTY, WRITE_ID_PROPERTY, WideSplit, join, shard_row_key,
};

/// How often a read that finds shards of two different writes is repeated before it fails.
const TORN_READ_ATTEMPTS: usize = 3;

/// One stored shard of a logical entity.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardRef {
    /// The shard's number, 1-based.
    pub number: usize,
    /// Its keys.
    pub keys: Keys,
    /// Its current ETag.
    pub etag: ETag,
}

/// The stored state of a logical entity: which write produced it and its shards' ETags.
/// Its [`WideVersion::if_match`] makes a [`WideEntities::replace`] or
/// [`WideEntities::delete`] succeed only if nobody wrote since.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WideVersion {
    /// The logical entity's keys (its RowKey is the shards' base).
    pub keys: Keys,
    /// The id every shard of this write carries.
    pub write_id: Uuid,
    /// The shards, in order.
    pub shards: Vec<ShardRef>,
}

impl WideVersion {
    /// The ETag of the first shard. Every write of the logical entity rewrites its first
    /// shard (and a delete removes it), so this ETag changes with every write: it is the
    /// logical entity's ETag.
    pub fn etag(&self) -> &ETag {
        &self.shards[0].etag
    }

    /// The condition that makes a [`WideEntities::replace`] or [`WideEntities::delete`]
    /// succeed only if nobody wrote the logical entity since this version:
    /// `IfMatch::ETag(self.etag())`.
    pub fn if_match(&self) -> IfMatch {
        IfMatch::ETag(self.etag().clone())
    }

    fn etags(&self) -> BTreeMap<usize, ETag> {
        self.shards
            .iter()
            .map(|s| (s.number, s.etag.clone()))
            .collect()
    }
}

/// A logical entity as read.
#[derive(Debug, Clone, PartialEq)]
pub struct WideStored<T> {
    /// Which write it is and its shards.
    pub version: WideVersion,
    /// The joined value.
    pub value: T,
}

impl<T> WideStored<T> {
    /// The condition that makes a [`WideEntities::replace`] or [`WideEntities::delete`]
    /// succeed only if nobody wrote the logical entity since it was read, as
    /// [`Stored::if_match`](tablekit_core::Stored::if_match) is for a plain entity.
    pub fn if_match(&self) -> IfMatch {
        self.version.if_match()
    }
}

/// Logical entities of any size up to one transaction: a value (a [`Properties`] bag or a
/// serde type) with more than 252 properties or more than 1 MiB is split by [`WideSplit`]
/// into shards `{RowKey}_01`, `{RowKey}_02`, … of the same partition.
///
/// - **Writes are one entity group transaction**: new shards, changed shards and the
///   deletion of shards no longer needed commit together or not at all, so a reader never
///   sees a mix of two writes or a stale shard. A value whose shards do not fit one
///   transaction (less than 4 MiB of request body; at most [`MAX_SHARDS`] shards) is
///   **refused before any request** with [`Error::LimitExceeded`] — this crate does not
///   version shards across several transactions.
/// - **Reads are one range query** over `[{RowKey}_01, {RowKey}_99]` (the guide's two point
///   reads become one request). Every shard carries the shard count (`WideShardCount`) and
///   the write id (`WideWriteId`), so a read that still sees an incomplete or mixed set of
///   shards is repeated, then refused. Those two property names are reserved.
/// - **Conditions are [`IfMatch`]es**, as for a plain entity: every write rewrites the first
///   shard, so its ETag is the logical entity's ETag ([`WideStored::if_match`],
///   [`WideVersion::if_match`]). `IfMatch::ETag` writes or deletes only that version;
///   `IfMatch::Any` whatever is stored.
///
/// | operation | requests | consistency |
/// |---|---|---|
/// | [`WideEntities::get`] | 1 | one write's complete shards |
/// | [`WideEntities::insert`] | 1 | fails if the entity exists |
/// | [`WideEntities::replace`] | 2 (1 if absent: `NotFound`; `Any`: +2 per conflict) | `ETag`: fails if anyone wrote since |
/// | [`WideEntities::upsert`] | 2 (+2 per conflict) | last writer wins, never a mix |
/// | [`WideEntities::update_with`] | 2 (+2 per conflict) | no update is lost |
/// | [`WideEntities::delete`] | 2 (1 if absent: `NotFound`; `Any`: +2 per conflict) | all shards or none; `ETag`: fails if anyone wrote since |
/// | [`WideEntities::delete_if_exists`] | 2 (1 if absent; +2 per conflict) | all shards or none |
///
/// Reads and deletes take the logical entity's keys as [`IntoKeys`]; writes take the value
/// with its keys as [`AsEntity`]: a [`tablekit_core::TableEntity`], or an
/// [`Entity`](tablekit_core::Entity) pairing keys with a [`Properties`] bag or any serde
/// value.
#[derive(Clone)]
pub struct WideEntities {
    table: Table,
}

impl fmt::Debug for WideEntities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WideEntities")
            .field("table", &self.table.name())
            .finish()
    }
}

impl WideEntities {
    /// Wide entities in `table`. No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use std::collections::BTreeMap;
    ///
    /// use tablekit_azure::Account;
    /// use tablekit_core::Entity;
    /// use tablekit_series::{WideEntities, WideStored};
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// let table = Account::emulator().table("ImCounts")?;
    /// let wide = WideEntities::new(table);
    /// // 365 properties: two shards, written in one transaction.
    /// let days: BTreeMap<String, i64> = (1..=365).map(|d| (format!("D{d:03}"), 0)).collect();
    /// wide.upsert(&Entity::try_new("000223", "DailyIm", days)?).await?; // 2 requests
    /// let year: Option<WideStored<BTreeMap<String, i64>>> =
    ///     wide.get(("000223", "DailyIm")).await?; // 1 request
    /// assert_eq!(year.map(|y| y.value.len()), Some(365));
    /// # Ok(()) }
    /// ```
    pub fn new(table: Table) -> Self {
        Self { table }
    }

    /// The table the shards live in.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Splits `entity` into shards and checks that a write of it fits one transaction
    /// whatever is stored (up to [`MAX_SHARDS`] shards to delete). Every write does this
    /// first, so no request is sent for a value that cannot be written.
    ///
    /// **Requests: 0.**
    ///
    /// # Errors
    /// The entity's key errors; encoding errors (property names, types, 64 KiB per property);
    /// [`Error::InvalidName`] for the bookkeeping property names; [`Error::LimitExceeded`]
    /// for more than [`MAX_SHARDS`] shards, shard RowKeys over 1 KiB, or a transaction body
    /// of 4 MiB or more.
    pub fn split(&self, entity: &impl AsEntity) -> Result<WideSplit> {
        self.split_value(&entity.entity_keys()?, entity.entity_value())
    }

    fn split_value<T: Serialize + ?Sized>(&self, keys: &Keys, value: &T) -> Result<WideSplit> {
        let split = WideSplit::new(keys, to_properties_unbounded(value)?)?;
        // The largest transaction a write of this split can need: every shard replaced with
        // an ETag condition and every other possible shard deleted.
        let long_etag = ETag::new(format!("W/\"datetime'{}'\"", "9".repeat(64)));
        let worst: BTreeMap<usize, ETag> =
            (1..=MAX_SHARDS).map(|n| (n, long_etag.clone())).collect();
        self.encode_check(&split.operations(Uuid::nil(), &worst)?)?;
        Ok(split)
    }

    fn encode_check(&self, ops: &[Operation]) -> Result<()> {
        let service = self.table.account().endpoints().table.as_str();
        let plan = BatchPlan::atomic(ops.iter().cloned())?;
        tablekit_core::wire::encode(&plan, service.trim_end_matches('/'), self.table.name())?;
        Ok(())
    }

    /// Reads a logical entity: one range query over its shards.
    ///
    /// **Requests: 1** (a read that meets shards of two writes is repeated, at most
    /// 3 requests). **Consistency:** the complete shards of one write. `None` when no shard
    /// exists.
    ///
    /// # Errors
    /// Invalid keys, before any request. [`Error::Corrupt`] when the shards still do not form
    /// one write after repeated reads (damaged data) or when a row in the shard range was not
    /// written as a shard; [`Error::Decode`] when the joined properties do not fit `T`;
    /// [`Error::NotFound`] if the table does not exist.
    pub async fn get<T: DeserializeOwned>(
        &self,
        keys: impl IntoKeys,
    ) -> Result<Option<WideStored<T>>> {
        let keys = &keys.into_keys()?;
        let span = tracing::debug_span!("tablekit.wide.read", table = %self.table.name());
        let Some((version, properties)) = self.read_rows(keys, false).instrument(span).await?
        else {
            return Ok(None);
        };
        Ok(Some(WideStored {
            value: from_properties(&properties)
                .map_err(|e| e.with_target(Target::entity(self.table.name(), keys.clone())))?,
            version,
        }))
    }

    /// The shards' version and, unless `version_only`, their joined properties.
    async fn read_rows(
        &self,
        keys: &Keys,
        version_only: bool,
    ) -> Result<Option<(WideVersion, Properties)>> {
        let first = shard_row_key(keys.rk(), 1);
        let last = shard_row_key(keys.rk(), MAX_SHARDS);
        let filter = Filter::row_range(keys.pk(), Bound::Included(&first), Bound::Included(&last));
        let mut torn = String::new();
        for _ in 0..TORN_READ_ATTEMPTS {
            let mut query = self.table.query::<Properties>().filter(filter.clone());
            if version_only {
                query = query.select([SHARD_COUNT_PROPERTY, WRITE_ID_PROPERTY]);
            }
            let joined = join(keys, query.collect().await?)
                .map_err(|e| e.with_target(Target::table(self.table.name())))?;
            match joined {
                Joined::Absent => return Ok(None),
                Joined::Whole {
                    write_id,
                    shards,
                    properties,
                } => {
                    let shards = shards
                        .into_iter()
                        .map(|(number, (keys, etag))| ShardRef { number, keys, etag })
                        .collect();
                    let version = WideVersion {
                        keys: keys.clone(),
                        write_id,
                        shards,
                    };
                    return Ok(Some((version, properties)));
                }
                Joined::Torn(why) => {
                    // `why` names the entity: not for telemetry.
                    tracing::debug!(target: "tablekit", "wide entity read between writes; reading again");
                    torn = why;
                }
            }
        }
        Err(Error::corrupt(
            Target::entity(self.table.name(), keys.clone()),
            format!("{WRITE_ID_PROPERTY}: {torn}"),
        ))
    }

    /// Creates a logical entity; fails if it exists.
    ///
    /// **Requests: 1** (one transaction inserting every shard). **Consistency:** atomic.
    ///
    /// # Errors
    /// Before any request: as [`WideEntities::split`]. [`Error::AlreadyExists`] if the
    /// entity exists (nothing is written).
    pub async fn insert(&self, entity: &impl AsEntity) -> Result<WideVersion> {
        let split = self.split(entity)?;
        self.commit(&split, None).await.map_err(unwrap_batch)
    }

    /// Rewrites a logical entity that exists, under `if_match`: reads its shards' ETags (a
    /// projection of the bookkeeping properties only), then one transaction replaces its
    /// shards under those ETags, inserts the new ones and deletes those no longer needed
    /// (3 shards → 1 leaves no stale shard). With `IfMatch::ETag` (from
    /// [`WideStored::if_match`] or [`WideVersion::if_match`]) the first shard is held to that
    /// ETag, so the write succeeds only if nobody wrote since that version; with
    /// `IfMatch::Any` it replaces whatever is stored, starting again from the read on a
    /// conflict.
    ///
    /// **Requests: 2** (a projection read, then one transaction; 1 when absent; with
    /// `IfMatch::Any`, +2 per conflict). **Consistency:** atomic and conditional on every
    /// shard.
    ///
    /// # Errors
    /// Before any request: as [`WideEntities::split`]. [`Error::NotFound`] naming the logical
    /// entity when it has no shard; [`Error::PreconditionFailed`] naming the logical entity
    /// when, under `IfMatch::ETag`, anyone wrote it since that version, or, under
    /// `IfMatch::Any`, conflicts outlast the account's conflict-retry limit (nothing is
    /// written).
    pub async fn replace(&self, entity: &impl AsEntity, if_match: IfMatch) -> Result<WideVersion> {
        let split = &self.split(entity)?;
        let keys = split.keys();
        let span = tracing::debug_span!("tablekit.wide.replace", table = %self.table.name(), shards = split.len());
        let if_match = &if_match;
        self.conditional(if_match, |_| async move {
            let Some((mut current, _)) = self.read_rows(keys, true).await? else {
                return Err(self.not_found(keys));
            };
            hold(&mut current, if_match);
            self.commit(split, Some(&current))
                .await
                .map_err(|e| self.as_conflict(keys, e))
        })
        .instrument(span)
        .await
    }

    /// Runs `attempt` once under `IfMatch::ETag` (a conflict is the answer), and in the
    /// account's conflict loop under `IfMatch::Any` (a conflict is a lost race).
    async fn conditional<T, F, Fut>(&self, if_match: &IfMatch, mut attempt: F) -> Result<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match if_match {
            IfMatch::Any => self.table.account().conflict_loop().run(attempt).await,
            IfMatch::ETag(_) => attempt(1).await,
        }
    }

    fn not_found(&self, keys: &Keys) -> Error {
        Error::NotFound {
            target: Target::entity(self.table.name(), keys.clone()),
        }
    }

    /// Writes a logical entity whatever is stored: reads the shards' ETags (a projection of
    /// the bookkeeping properties only), then [`WideEntities::replace`]s — or inserts when
    /// absent — retrying from the read on a conflict.
    ///
    /// **Requests: 2 per attempt.** **Consistency:** last writer wins; readers see the old or
    /// the new value, never a mix.
    ///
    /// # Errors
    /// Before any request: as [`WideEntities::split`]. [`Error::PreconditionFailed`] when
    /// conflicts outlast the account's conflict-retry limit; transport and service errors.
    pub async fn upsert(&self, entity: &impl AsEntity) -> Result<WideVersion> {
        let split = self.split(entity)?;
        let keys = split.keys();
        let span = tracing::debug_span!("tablekit.wide.write", table = %self.table.name(), shards = split.len());
        let split = &split;
        self.table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let current = self.read_rows(keys, true).await?.map(|(v, _)| v);
                self.commit(split, current.as_ref())
                    .await
                    .map_err(|e| self.as_conflict(keys, e))
            })
            .instrument(span)
            .await
    }

    /// Reads a logical entity, computes its new value with `change` (`None` when absent) and
    /// writes it conditionally; on a conflict starts again from the read. `change` may run
    /// several times and must be a pure function of its input.
    ///
    /// **Requests: 2 per attempt** (the full read, then one transaction).
    /// **Consistency:** linearizable per logical entity: no update is lost.
    ///
    /// # Errors
    /// Invalid keys, before any request. As [`WideEntities::split`] for the new value (not
    /// retried), and as [`WideEntities::upsert`].
    pub async fn update_with<T, F>(&self, keys: impl IntoKeys, change: F) -> Result<WideStored<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> T,
    {
        let keys = &keys.into_keys()?;
        let span = tracing::debug_span!("tablekit.wide.update_with", table = %self.table.name());
        // `change` is called from each attempt in turn; the lock is never held across an
        // await.
        let change = &Mutex::new(change);
        self.table
            .account()
            .conflict_loop()
            .run(|_| async move {
                let current = self.get::<T>(keys).await?;
                let (old, version) = match current {
                    Some(stored) => (Some(stored.value), Some(stored.version)),
                    None => (None, None),
                };
                let value = (*change.lock().unwrap_or_else(PoisonError::into_inner))(old);
                let split = self.split_value(keys, &value)?;
                let version = self
                    .commit(&split, version.as_ref())
                    .await
                    .map_err(|e| self.as_conflict(keys, e))?;
                Ok(WideStored { version, value })
            })
            .instrument(span)
            .await
    }

    /// Deletes a logical entity under `if_match`: reads its shards' ETags, then deletes every
    /// shard in one transaction under those ETags. With `IfMatch::ETag` (from
    /// [`WideStored::if_match`] or [`WideVersion::if_match`]) the first shard is held to that
    /// ETag, so only that version is deleted; with `IfMatch::Any` whatever is stored is
    /// deleted, starting again from the read on a conflict (a write between the read and
    /// the transaction is deleted too).
    ///
    /// **Requests: 2** (a projection read, then one transaction; 1 when absent; with
    /// `IfMatch::Any`, +2 per conflict). **Consistency:** all shards or none — never a torn
    /// value.
    ///
    /// # Errors
    /// Invalid keys, before any request. [`Error::NotFound`] naming the logical entity when
    /// it has no shard; [`Error::PreconditionFailed`] naming the logical entity when, under
    /// `IfMatch::ETag`, anyone wrote it since that version, or, under `IfMatch::Any`,
    /// conflicts outlast the account's conflict-retry limit (nothing is deleted); transport
    /// and service errors.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        let keys = keys.into_keys()?;
        let span = tracing::debug_span!("tablekit.wide.delete", table = %self.table.name());
        if self.delete_under(&keys, &if_match).instrument(span).await? {
            Ok(())
        } else {
            Err(self.not_found(&keys))
        }
    }

    /// Deletes a logical entity if it exists, whatever is stored (as [`WideEntities::delete`]
    /// with `IfMatch::Any`). Returns whether it existed.
    ///
    /// **Requests: 2** (1 when absent; +2 per conflict). **Consistency:** as
    /// [`WideEntities::delete`].
    ///
    /// # Errors
    /// As [`WideEntities::delete`], without the `NotFound` for an absent entity.
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        let keys = &keys.into_keys()?;
        let span = tracing::debug_span!("tablekit.wide.delete", table = %self.table.name());
        self.delete_under(keys, &IfMatch::Any)
            .instrument(span)
            .await
    }

    /// Deletes every shard under `if_match`; `false` when there is none.
    async fn delete_under(&self, keys: &Keys, if_match: &IfMatch) -> Result<bool> {
        self.conditional(if_match, |_| async move {
            let Some((mut current, _)) = self.read_rows(keys, true).await? else {
                return Ok(false);
            };
            hold(&mut current, if_match);
            let ops = current
                .shards
                .iter()
                .map(|s| Operation::delete(s.keys.clone(), s.etag.clone().into()))
                .collect::<Result<Vec<_>>>()?;
            self.table
                .submit(&BatchPlan::atomic(ops)?)
                .await
                .map_err(|e| self.as_conflict(keys, e))?;
            Ok(true)
        })
        .await
    }

    /// Sends the transaction that makes `split` the stored state (over `current`, if any).
    async fn commit(
        &self,
        split: &WideSplit,
        current: Option<&WideVersion>,
    ) -> Result<WideVersion> {
        let write_id = Uuid::new_v4();
        let etags = current.map(WideVersion::etags).unwrap_or_default();
        let plan = BatchPlan::atomic(split.operations(write_id, &etags)?)?;
        let span = tracing::debug_span!("tablekit.wide.commit", table = %self.table.name(), shards = split.len(), stored = etags.len());
        let outcomes = self.table.submit(&plan).instrument(span).await?;
        Ok(version_of(split, write_id, &outcomes))
    }

    /// A shard that changed, appeared (409) or vanished (404) since the read means that the
    /// logical entity was written by someone else: reported as the logical entity's conflict,
    /// not the shard's.
    fn as_conflict(&self, keys: &Keys, error: Error) -> Error {
        match error.not_found_as_conflict() {
            e @ Error::BatchFailed { .. } if e.is_conflict() => Error::PreconditionFailed {
                target: Target::entity(self.table.name(), keys.clone()),
            },
            other => other,
        }
    }
}

/// Holds the first shard of `current` (just read) to the caller's ETag: the transaction then
/// commits only if `current` is the caller's version, since every write rewrites the first
/// shard. The service compares the ETags, so a caller's ETag that differs only in encoding
/// from the one read is still judged correctly.
fn hold(current: &mut WideVersion, if_match: &IfMatch) {
    if let IfMatch::ETag(etag) = if_match {
        // A complete read has shards 1..=count in order.
        current.shards[0].etag = etag.clone();
    }
}

/// A transaction failure as its cause (the caller did not ask for a transaction).
fn unwrap_batch(error: Error) -> Error {
    match error {
        Error::BatchFailed { source, .. } => *source,
        other => other,
    }
}

fn version_of(split: &WideSplit, write_id: Uuid, outcomes: &[TransactionOutcome]) -> WideVersion {
    // Operations are planned shards first, in order, so the first etags are the shards'.
    let etags = outcomes.iter().flat_map(|o| o.etags.iter());
    let shards = split
        .shards()
        .iter()
        .zip(etags)
        .map(|(shard, etag)| ShardRef {
            number: shard.number,
            keys: shard.keys.clone(),
            etag: etag.clone().unwrap_or_else(|| ETag::new("")),
        })
        .collect();
    WideVersion {
        keys: split.keys().clone(),
        write_id,
        shards,
    }
}
