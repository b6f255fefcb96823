//! [`EntityCodec`]: a transformation of every entity a [`Table`] handle writes and reads, such
//! as client-side encryption, applied below every pattern built on the handle.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_core::batch::{BatchPlan, Operation, OperationKind};
use tablekit_core::edm::{Properties, from_properties, parse_entity};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, IfMatch, Keys, Result, Stored, Target};

use super::Table;

/// How many entities of one page or plan are encoded or decoded at once: a codec that calls a
/// remote key store overlaps those calls, without one call per entity of a 1,000-entity page
/// in flight.
const CODEC_CONCURRENCY: usize = 16;

/// Operations encoded per task when a bulk write's operations are encoded: large enough that
/// a task's overhead is negligible, small enough that both workers of a small machine get
/// a share of a few thousand operations.
const ENCODE_CHUNK: usize = 250;

/// Encoding tasks, aborted when dropped (the bulk write was dropped, or one chunk failed).
struct Tasks(Vec<tokio::task::JoinHandle<Result<Vec<Operation>>>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// A transformation of entity properties on their way to and from the service, installed on a
/// [`Table`] handle with [`Table::with_codec`]: every write's properties pass through
/// [`encode`](Self::encode), every entity read through [`decode`](Self::decode), every query
/// filter through [`check_filter`](Self::check_filter) and every projection through
/// [`projection`](Self::projection). Client-side encryption is one
/// (`tablekit_encryption::EncryptionPolicy` implements it).
///
/// Keys (PartitionKey, RowKey) are never passed through the codec: they address the entity
/// and are sent as they are. Deletes send no properties and do not call the codec.
///
/// The futures are boxed ([`BoxFuture`]) so that the trait is object safe and a handle holds
/// its codec as `Arc<dyn EntityCodec>`; implement them with `Box::pin(async move { … })`.
pub trait EntityCodec: fmt::Debug + Send + Sync + 'static {
    /// The properties to store for a write of `kind` of the entity `keys` in `table`, given the
    /// properties the caller wrote. Called before any request; an error refuses the write (a
    /// codec that cannot support merges refuses [`OperationKind::Merge`] and
    /// [`OperationKind::UpsertMerge`] here).
    ///
    /// # Errors
    /// Any error; the write (or the whole transaction) is then not sent.
    fn encode<'a>(
        &'a self,
        table: &'a str,
        keys: &'a Keys,
        properties: Properties,
        kind: OperationKind,
    ) -> BoxFuture<'a, Result<Properties>>;

    /// The properties the caller reads, given the properties stored for the entity `keys` in
    /// `table` (all of them, or those a projection asked for).
    ///
    /// # Errors
    /// Any error; the read fails with it. Stored data the codec cannot read should be
    /// [`Error::Corrupt`](tablekit_core::Error::Corrupt) naming the entity.
    fn decode<'a>(
        &'a self,
        table: &'a str,
        keys: &'a Keys,
        properties: Properties,
    ) -> BoxFuture<'a, Result<Properties>>;

    /// Refuses a query filter that cannot mean what it says on stored data, such as a
    /// comparison with an encrypted property. Called before any request. The default accepts
    /// every filter.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`](tablekit_core::Error::InvalidFilter) naming what is refused.
    fn check_filter(&self, filter: &Filter) -> Result<()> {
        let _ = filter;
        Ok(())
    }

    /// The properties to ask the service for when a query projects (`$select`) `selected`:
    /// `selected` plus whatever [`decode`](Self::decode) needs to read them. Called before any
    /// request. The default asks for `selected` alone.
    ///
    /// # Errors
    /// Any error refusing the projection.
    fn projection(&self, selected: &[String]) -> Result<Vec<String>> {
        Ok(selected.to_vec())
    }
}

impl Table {
    /// This table through `codec`: a handle whose every entity write (insert, replace, merge,
    /// the upserts, and each operation of [`Table::submit`] and [`Table::bulk_write`]) stores
    /// what `codec` encodes, whose every read ([`Table::get`], queries, [`Table::update_with`],
    /// [`TypedTable`](super::TypedTable) reads) returns what it decodes, and whose every query
    /// filter and projection it checks. No request is sent.
    ///
    /// The codec is a property of the handle, not of the table: handles cloned from this one
    /// (and everything built on them — a pattern given this handle uses it without knowing)
    /// carry it; a handle made by [`Account::table`](crate::Account::table) has none, and
    /// reads the stored form as it is. A codec set here replaces one the handle had.
    ///
    /// Requests: none of its own — every operation sends exactly the requests it sends
    /// without a codec (the codec may call services of its own, such as a key store).
    #[must_use]
    pub fn with_codec(&self, codec: Arc<dyn EntityCodec>) -> Table {
        Table {
            codec: Some(codec),
            ..self.clone()
        }
    }

    /// This table without a codec: reads return the stored properties as they are, writes
    /// store what they are given. No request is sent.
    #[must_use]
    pub fn without_codec(&self) -> Table {
        Table {
            codec: None,
            ..self.clone()
        }
    }

    /// The codec this handle writes and reads through, if any ([`Table::with_codec`]).
    pub fn codec(&self) -> Option<&Arc<dyn EntityCodec>> {
        self.codec.as_ref()
    }

    /// The operation to send for `op`: `None` when it is sent as it is (no codec, or a
    /// delete), else `op` with its properties encoded.
    pub(crate) async fn encode_operation(&self, op: &Operation) -> Result<Option<Operation>> {
        let (Some(codec), Some(body)) = (&self.codec, op.body()) else {
            return Ok(None);
        };
        let written = parse_entity::<Properties>(body, Some("*"))?;
        let keys = op.keys();
        let encoded = codec
            .encode(self.name(), keys, written.value, op.kind())
            .await?;
        let entity = Entity::new(keys.clone(), encoded);
        let if_match = || op.if_match().cloned().unwrap_or(IfMatch::Any);
        let sent = match op.kind() {
            OperationKind::Insert => Operation::insert(&entity)?,
            OperationKind::Replace => Operation::replace(&entity, if_match())?,
            OperationKind::Merge => Operation::merge(&entity, if_match())?,
            OperationKind::UpsertReplace => Operation::upsert_replace(&entity)?,
            OperationKind::UpsertMerge => Operation::upsert_merge(&entity)?,
            OperationKind::Delete => return Ok(None),
        };
        Ok(Some(sent))
    }

    /// `operations` with their properties encoded, in order (themselves without a codec).
    ///
    /// Encoding is CPU work (encryption) done before anything is sent, so operations beyond
    /// one chunk are encoded in chunks on tasks of their own: a multi-threaded runtime spreads
    /// them over its workers. Dropping the future stops them.
    pub(crate) async fn encode_operations(
        &self,
        operations: Vec<Operation>,
    ) -> Result<Vec<Operation>> {
        if self.codec.is_none() {
            return Ok(operations);
        }
        if operations.len() <= ENCODE_CHUNK {
            return self.encode_chunk(operations).await;
        }
        let mut chunks = Vec::with_capacity(operations.len().div_ceil(ENCODE_CHUNK));
        let mut rest = operations.into_iter();
        loop {
            let chunk: Vec<Operation> = rest.by_ref().take(ENCODE_CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            chunks.push(chunk);
        }
        let mut tasks = Tasks(Vec::with_capacity(chunks.len()));
        for chunk in chunks {
            let table = self.clone();
            tasks
                .0
                .push(tokio::spawn(async move { table.encode_chunk(chunk).await }));
        }
        let mut encoded = Vec::new();
        for task in &mut tasks.0 {
            match task.await {
                Ok(chunk) => encoded.extend(chunk?),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => return Err(tablekit_core::Error::transport("encoding was cancelled", e)),
            }
        }
        Ok(encoded)
    }

    /// One chunk of [`Table::encode_operations`], on the calling task: up to
    /// [`CODEC_CONCURRENCY`] operations at once, so that a codec calling a remote key store
    /// overlaps its calls.
    async fn encode_chunk(&self, operations: Vec<Operation>) -> Result<Vec<Operation>> {
        futures::stream::iter(operations)
            .map(|op| async move {
                Ok(match self.encode_operation(&op).await? {
                    Some(sent) => sent,
                    None => op,
                })
            })
            .buffered(CODEC_CONCURRENCY)
            .try_collect()
            .await
    }

    /// The plan to send for `plan`: itself without a codec, else the same plan (same
    /// transactions, same caller indices) of encoded operations.
    pub(crate) async fn encode_plan<'p>(&self, plan: &'p BatchPlan) -> Result<Cow<'p, BatchPlan>> {
        if self.codec.is_none() {
            return Ok(Cow::Borrowed(plan));
        }
        // Planning numbers operations by their position, so listing them by caller index
        // rebuilds the same groups under the same indices.
        let operations = (0..plan.len())
            .filter_map(|i| plan.operation(i).cloned())
            .collect();
        let encoded = self.encode_operations(operations).await?;
        let sent = if plan.is_atomic() {
            BatchPlan::atomic(encoded)?
        } else {
            BatchPlan::best_effort(encoded)?
        };
        Ok(Cow::Owned(sent))
    }

    /// Decodes a stored entity read as properties, then reads it as `T`.
    pub(crate) async fn decode_stored<T: DeserializeOwned>(
        &self,
        codec: &dyn EntityCodec,
        stored: Stored<Properties>,
    ) -> Result<Stored<T>> {
        let Stored {
            keys,
            etag,
            timestamp,
            value,
        } = stored;
        let decoded = codec.decode(self.name(), &keys, value).await?;
        let value = from_properties::<T>(&decoded)
            .map_err(|e| e.with_target(Target::entity(self.name(), keys.clone())))?;
        Ok(Stored {
            keys,
            etag,
            timestamp,
            value,
        })
    }

    /// Decodes the entities of a page, in order.
    pub(crate) async fn decode_all<T: DeserializeOwned>(
        &self,
        codec: &dyn EntityCodec,
        stored: Vec<Stored<Properties>>,
    ) -> Result<Vec<Stored<T>>> {
        futures::stream::iter(stored)
            .map(|s| self.decode_stored::<T>(codec, s))
            .buffered(CODEC_CONCURRENCY)
            .try_collect()
            .await
    }
}
