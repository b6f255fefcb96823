//! [`EntityCodec`]: a transformation of every entity a [`Table`] handle writes and reads, such
//! as client-side encryption, applied below every pattern built on the handle.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation, OperationKind};
use tablekit_core::edm::{from_properties, parse_entity};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, IfMatch, Keys, Result, Stored, Target};

use super::Table;

/// How many entities of one page or plan are encoded or decoded at once: a codec that calls a
/// remote key store overlaps those calls, without one call per entity of a 1,000-entity page
/// in flight.
pub(crate) const CODEC_CONCURRENCY: usize = 16;

/// Operations encoded per task when a bulk write's operations are encoded: large enough that
/// a task's overhead is negligible, small enough that both workers of a small machine get
/// a share of a few thousand operations.
const ENCODE_CHUNK: usize = 250;

/// Encoding tasks, aborted when dropped (the bulk write was dropped, or one chunk failed).
pub(crate) struct Tasks<T>(pub(crate) Vec<tokio::task::JoinHandle<T>>);

impl<T> Drop for Tasks<T> {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The results of `tasks`, in order; the first error, in order, if any. The tasks left are
/// stopped then.
pub(crate) async fn join_all<T>(mut tasks: Tasks<Result<Vec<T>>>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for task in &mut tasks.0 {
        out.extend(join(task.await)?);
    }
    Ok(out)
}

/// What an encoding task returned: a panic in it is resumed here.
fn join<T>(joined: std::result::Result<Result<T>, tokio::task::JoinError>) -> Result<T> {
    match joined {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(tablekit_core::Error::transport("encoding was cancelled", e)),
    }
}

/// Operations encoded one by one, each by its caller index: the operation to send, or why it
/// could not be encoded.
pub(crate) type EncodedEach = Vec<(usize, Result<Operation>)>;

/// What an operation is, without its body: what encoding its properties needs to build the
/// operation to send.
pub(crate) struct Head {
    keys: Keys,
    kind: OperationKind,
    if_match: Option<IfMatch>,
}

impl Head {
    pub(crate) fn of(op: &Operation) -> Self {
        Self {
            keys: op.keys().clone(),
            kind: op.kind(),
            if_match: op.if_match().cloned(),
        }
    }
}

/// An operation of a bulk write through a codec, checked before anything is sent.
pub(crate) enum Prepared {
    /// Sent as it is: it has no properties (a delete), or the handle no codec.
    AsIs,
    /// Encoded already: the codec could not vouch for it without encoding it.
    Encoded(Operation),
    /// Its properties, parsed, to be encoded just before its transaction is sent.
    Later(Properties),
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

    /// The filter to send for a query whose caller asked for `filter`, and what each decoded
    /// entity the service returns must also satisfy: a codec whose stored form the service can
    /// still compare in part (an equality with an encrypted property, rewritten to one with
    /// its beacon) answers with a rewritten filter and a check that drops the entities that
    /// matched only the stored form. Called before any request. The default checks `filter`
    /// with [`check_filter`](Self::check_filter) and sends it as it is.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`](tablekit_core::Error::InvalidFilter) naming what is refused.
    fn prepare_filter(&self, filter: &Filter) -> Result<CodecFilter> {
        self.check_filter(filter)?;
        Ok(CodecFilter::unchanged(filter.clone()))
    }

    /// Checks a write of `kind` of the entity `keys` with `properties` without encoding it:
    /// `Ok(true)` when [`encode`](Self::encode) will accept it (short of a failure of a
    /// service of the codec's own, such as a key store), `Ok(false)` when only encoding can
    /// tell, and the error `encode` would return when it will refuse it. Called before any
    /// request.
    ///
    /// [`Table::bulk_write`] checks every operation before sending anything: it encodes those
    /// answered `false` before its first transaction, and each of the others just before the
    /// transaction that holds it is sent, so that encoding overlaps the writes while a refusal
    /// still leaves nothing written. The default answers `false`: every operation is encoded
    /// before the first transaction.
    ///
    /// # Errors
    /// What [`encode`](Self::encode) would return for this write.
    fn check_encode(
        &self,
        table: &str,
        keys: &Keys,
        properties: &Properties,
        kind: OperationKind,
    ) -> Result<bool> {
        let _ = (table, keys, properties, kind);
        Ok(false)
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

/// A query filter as a codec has it sent ([`EntityCodec::prepare_filter`]): the filter for
/// the service and, when that filter can match more than the caller's, the check each
/// decoded entity must pass to be returned.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CodecFilter {
    /// What the service is sent.
    pub filter: Filter,
    /// What a decoded entity must satisfy to be returned; `None` keeps every one.
    pub check: Option<EntityCheck>,
}

impl CodecFilter {
    /// `filter` sent as it is, every entity it returns kept.
    pub fn unchanged(filter: Filter) -> Self {
        Self {
            filter,
            check: None,
        }
    }

    /// `filter` sent instead of the caller's, and only the decoded entities that satisfy
    /// `check` returned. `check` reads the properties named in `reads`: a query that projects
    /// asks for them too, and removes those it did not select once the check has run.
    pub fn rewritten<I, S>(
        filter: Filter,
        reads: I,
        check: impl Fn(&Properties) -> bool + Send + Sync + 'static,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            filter,
            check: Some(EntityCheck {
                check: Arc::new(check),
                reads: reads.into_iter().map(Into::into).collect(),
                strip: Vec::new(),
            }),
        }
    }
}

/// What a decoded entity must satisfy for a rewritten query to return it
/// ([`CodecFilter::rewritten`]).
#[derive(Clone)]
pub struct EntityCheck {
    check: Arc<dyn Fn(&Properties) -> bool + Send + Sync>,
    reads: Vec<String>,
    /// Properties read for the check only: removed once it has run.
    strip: Vec<String>,
}

impl EntityCheck {
    /// Whether the decoded `properties` pass.
    pub fn holds(&self, properties: &Properties) -> bool {
        (self.check)(properties)
    }

    /// The properties the check reads.
    pub fn reads(&self) -> &[String] {
        &self.reads
    }

    /// This check on a query that selected `selected`: the properties it reads that were not
    /// selected, to be asked for and then removed.
    pub(crate) fn for_projection(mut self, selected: &[String]) -> (Self, Vec<String>) {
        let extra: Vec<String> = self
            .reads
            .iter()
            .filter(|r| !selected.contains(r))
            .cloned()
            .collect();
        self.strip.clone_from(&extra);
        (self, extra)
    }

    /// Whether `properties` pass; those read for the check alone are then removed.
    pub(crate) fn keep(&self, properties: &mut Properties) -> bool {
        if !self.holds(properties) {
            return false;
        }
        for name in &self.strip {
            properties.remove(name);
        }
        true
    }
}

impl fmt::Debug for EntityCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EntityCheck(..)")
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
        let (Some(_), Some(body)) = (&self.codec, op.body()) else {
            return Ok(None);
        };
        let written = parse_entity::<Properties>(body, Some("*"))?;
        self.encode_parsed(&Head::of(op), written.value)
            .await
            .map(Some)
    }

    /// The operation `head` names, with `properties` (its own, parsed) encoded by the
    /// handle's codec (as they are without one).
    pub(crate) async fn encode_parsed(
        &self,
        head: &Head,
        properties: Properties,
    ) -> Result<Operation> {
        let Head {
            keys,
            kind,
            if_match,
        } = head;
        let properties = match &self.codec {
            Some(codec) => codec.encode(self.name(), keys, properties, *kind).await?,
            None => properties,
        };
        let entity = Entity::new(keys.clone(), properties);
        let if_match = || if_match.clone().unwrap_or(IfMatch::Any);
        match kind {
            OperationKind::Insert => Operation::insert(&entity),
            OperationKind::Replace => Operation::replace(&entity, if_match()),
            OperationKind::Merge => Operation::merge(&entity, if_match()),
            OperationKind::UpsertReplace => Operation::upsert_replace(&entity),
            OperationKind::UpsertMerge => Operation::upsert_merge(&entity),
            OperationKind::Delete => Operation::delete(keys.clone(), if_match()),
        }
    }

    /// `operations` with their properties encoded, in order (themselves without a codec).
    pub(crate) async fn encode_operations(
        &self,
        operations: Vec<Operation>,
    ) -> Result<Vec<Operation>> {
        if self.codec.is_none() {
            return Ok(operations);
        }
        let tasks = self.spawn_on_workers(operations, |table, op| async move {
            Ok(match table.encode_operation(&op).await? {
                Some(sent) => sent,
                None => op,
            })
        });
        join_all(tasks).await
    }

    /// Starts checking the operations of `plan` (a bulk write's, by caller index) with the
    /// handle's codec on the workers, before the bulk write sends anything: each is encoded
    /// right away when the codec cannot vouch for it without encoding it
    /// ([`EntityCodec::check_encode`]), else kept for later with its properties parsed.
    /// [`join_all`] waits for the results, in caller order, the first refusal in caller order
    /// being the error. The tasks share the plan: no operation is copied for them.
    pub(crate) fn spawn_prepare(&self, plan: Arc<BatchPlan>) -> Tasks<Result<Vec<Prepared>>> {
        let indices = (0..plan.len()).collect();
        self.spawn_on_workers(indices, move |table, i| {
            let plan = Arc::clone(&plan);
            async move {
                let Some(op) = plan.operation(i) else {
                    return Ok(Prepared::AsIs);
                };
                let (Some(codec), Some(body)) = (&table.codec, op.body()) else {
                    return Ok(Prepared::AsIs);
                };
                let written = parse_entity::<Properties>(body, Some("*"))?;
                if codec.check_encode(table.name(), op.keys(), &written.value, op.kind())? {
                    Ok(Prepared::Later(written.value))
                } else {
                    table
                        .encode_parsed(&Head::of(op), written.value)
                        .await
                        .map(Prepared::Encoded)
                }
            }
        })
    }

    /// Encodes `operations` (caller index, what the operation is, its properties parsed) on a
    /// task of their own, so that the encoding (CPU work) overlaps what the calling task waits
    /// for, with up to [`CODEC_CONCURRENCY`] at once for codecs that call a key store. Each
    /// result is that operation's, in order. Dropping the returned task stops the encoding.
    pub(crate) fn spawn_encode(
        &self,
        operations: Vec<(usize, Head, Properties)>,
    ) -> Tasks<Result<EncodedEach>> {
        let table = self.clone();
        Tasks(vec![tokio::spawn(async move {
            Ok(futures::stream::iter(operations)
                .map(|(i, head, properties)| {
                    let table = &table;
                    async move { (i, table.encode_parsed(&head, properties).await) }
                })
                .buffered(CODEC_CONCURRENCY)
                .collect()
                .await)
        })])
    }

    /// Runs `each` over `items` (operations, or their indices in a plan), in chunks of
    /// [`ENCODE_CHUNK`] on tasks of their own — encoding is CPU work (encryption), which a
    /// multi-threaded runtime then spreads over its workers — with up to [`CODEC_CONCURRENCY`]
    /// at once in a chunk, so that a codec calling a remote key store overlaps its calls. The
    /// tasks start now; [`join_all`] collects their results in order, and dropping them stops
    /// them.
    fn spawn_on_workers<I, T, F, Fut>(&self, items: Vec<I>, each: F) -> Tasks<Result<Vec<T>>>
    where
        I: Send + 'static,
        T: Send + 'static,
        F: Fn(Table, I) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let mut tasks = Tasks(Vec::with_capacity(items.len().div_ceil(ENCODE_CHUNK)));
        let mut rest = items.into_iter().peekable();
        while rest.peek().is_some() {
            let part: Vec<I> = rest.by_ref().take(ENCODE_CHUNK).collect();
            let (table, each) = (self.clone(), each.clone());
            tasks.0.push(tokio::spawn(async move {
                futures::stream::iter(part)
                    .map(|op| each(table.clone(), op))
                    .buffered(CODEC_CONCURRENCY)
                    .try_collect()
                    .await
            }));
        }
        tasks
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
        let decoded = self.decode_properties(codec, stored).await?;
        self.read_as(decoded)
    }

    /// A stored entity read as properties, decoded: still properties.
    pub(crate) async fn decode_properties(
        &self,
        codec: &dyn EntityCodec,
        stored: Stored<Properties>,
    ) -> Result<Stored<Properties>> {
        let Stored {
            keys,
            etag,
            timestamp,
            value,
        } = stored;
        let value = codec.decode(self.name(), &keys, value).await?;
        Ok(Stored {
            keys,
            etag,
            timestamp,
            value,
        })
    }

    /// A decoded entity read as `T`.
    pub(crate) fn read_as<T: DeserializeOwned>(
        &self,
        decoded: Stored<Properties>,
    ) -> Result<Stored<T>> {
        let Stored {
            keys,
            etag,
            timestamp,
            value,
        } = decoded;
        let value = from_properties::<T>(&value)
            .map_err(|e| e.with_target(Target::entity(self.name(), keys.clone())))?;
        Ok(Stored {
            keys,
            etag,
            timestamp,
            value,
        })
    }

    /// Decodes the entities of a page, in order, leaving out those that fail `check`.
    pub(crate) async fn decode_all<T: DeserializeOwned>(
        &self,
        codec: &dyn EntityCodec,
        stored: Vec<Stored<Properties>>,
        check: Option<&EntityCheck>,
    ) -> Result<Vec<Stored<T>>> {
        let decoded: Vec<Stored<Properties>> = futures::stream::iter(stored)
            .map(|s| self.decode_properties(codec, s))
            .buffered(CODEC_CONCURRENCY)
            .try_collect()
            .await?;
        decoded
            .into_iter()
            .filter_map(|mut d| check.is_none_or(|c| c.keep(&mut d.value)).then_some(d))
            .map(|d| self.read_as(d))
            .collect()
    }
}
