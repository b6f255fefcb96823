//! [`LogTail`]: entries of a partition under inverted-tick RowKeys, read newest first.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{BulkOptions, Table};
use tablekit_core::batch::Operation;
use tablekit_core::{Entity, ErrorKind, Keys, PartitionKey, Properties, Result};
use tracing::Instrument as _;

use crate::entry::{AppendReport, Appended, LogEntry};
use crate::id::AppendId;
use crate::key::{SuffixSource, row_key, truncate_to_tick};
use crate::query::LogQuery;

/// The log tail pattern: entries of a partition keyed by inverted ticks
/// plus a unique suffix, so `$top=n` returns the *n* newest.
///
/// Cheap to clone; clones share the suffix source, so entries appended through any clone
/// never collide. `T` is the entries' value type (any serde type; use
/// [`tablekit_core::Properties`] for untyped entries).
pub struct LogTail<T> {
    table: Table,
    suffixes: Arc<SuffixSource>,
    page_size: Option<usize>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for LogTail<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            suffixes: Arc::clone(&self.suffixes),
            page_size: self.page_size,
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for LogTail<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogTail")
            .field("table", &self.table.name())
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

pub(crate) fn partition(partition: &str) -> Result<PartitionKey> {
    PartitionKey::new(partition)
}

impl<T> LogTail<T> {
    /// A log tail over `table` (which must exist). No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use serde::{Deserialize, Serialize};
    /// use tablekit_azure::Account;
    /// use tablekit_logtail::LogTail;
    ///
    /// /// One expense claim: a value without keys of its own — the employee's partition and
    /// /// the time make the entry's keys.
    /// #[derive(Serialize, Deserialize)]
    /// #[serde(rename_all = "PascalCase")]
    /// struct Expense {
    ///     amount: f64,
    ///     description: String,
    /// }
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// let claims: LogTail<Expense> = LogTail::new(Account::emulator().table("Expenses")?);
    /// let lunch = Expense { amount: 12.5, description: "lunch".into() };
    /// claims.append("000223", &lunch).await?; // 1 request
    /// let newest = claims.latest("000223", 10).await?; // 1 request, newest first
    /// # let _ = newest; Ok(()) }
    /// ```
    pub fn new(table: Table) -> Self {
        Self {
            table,
            suffixes: Arc::new(SuffixSource::new()),
            page_size: None,
            _t: PhantomData,
        }
    }

    /// Reads ([`LogTail::window`], [`LogTail::entries`]) fetch at most `n` entries per
    /// request (1 to 1,000; checked when a read starts). Default: the service's 1,000.
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The page size of reads, when set ([`LogTail::with_page_size`]).
    pub(crate) fn page_size(&self) -> Option<usize> {
        self.page_size
    }

    /// A new append id, unique to this tail and its clones. No request is sent. Keep it with
    /// an item (and its time) before appending it, and an append repeated after a crash or
    /// an unknown outcome finds the entry instead of writing it twice.
    pub fn append_id(&self) -> AppendId {
        self.suffixes.next_id()
    }

    /// A new entity for `partition` at `time` with a RowKey no other entry has (inverted
    /// ticks, `_`, 32 hex digits), for writing it yourself — e.g. in one transaction with a
    /// summary row of the same partition. No request is sent.
    ///
    /// # Errors
    /// [`tablekit_core::Error::InvalidKey`] for a bad partition key,
    /// [`tablekit_core::Error::Encode`] for a time outside .NET's range.
    pub fn entity<V>(&self, partition: &str, time: DateTime<Utc>, value: V) -> Result<Entity<V>> {
        self.entity_with_id(partition, &self.append_id(), time, value)
    }

    /// The entity an append of `value` for `partition` at `time` with `id` writes. No request
    /// is sent.
    ///
    /// # Errors
    /// As [`LogTail::entity`].
    pub fn entity_with_id<V>(
        &self,
        partition: &str,
        id: &AppendId,
        time: DateTime<Utc>,
        value: V,
    ) -> Result<Entity<V>> {
        let pk = self::partition(partition)?;
        let rk = row_key(time, Some(id.as_str()))?;
        Ok(Entity::new(Keys::from_parts(pk, rk), value))
    }
}

impl<T: Serialize> LogTail<T> {
    /// Appends an entry stamped with the current time ([`Utc::now`]) under a new append id.
    ///
    /// Requests: 1. Consistency: strong; the entry is the newest of its partition (unless a
    /// clock elsewhere is ahead) and readable when this returns.
    ///
    /// # Errors
    /// Before any request: invalid partition key, a value that cannot be stored (names,
    /// sizes). [`tablekit_core::Error::NotFound`] if the table does not exist. A transport
    /// error or timeout that outlasts the retries leaves it open whether the entry is stored;
    /// the time and id are this call's own, so calling again appends a second entry if the
    /// first did land. To be able to retry without that risk, use
    /// [`LogTail::append_with_id`].
    pub async fn append(&self, partition: &str, value: &T) -> Result<Appended> {
        self.append_at(partition, Utc::now(), value).await
    }

    /// Appends an entry for `time` (e.g. when the event happened rather than when it is
    /// written) under a new append id. Entries of the same 100 ns tick never collide: the
    /// key's suffix differs.
    ///
    /// Requests: 1. Consistency: strong.
    ///
    /// # Errors
    /// As [`LogTail::append`], plus [`tablekit_core::Error::Encode`] for a time outside
    /// .NET's range (0001-01-01 to 9999-12-31), before any request.
    pub async fn append_at(
        &self,
        partition: &str,
        time: DateTime<Utc>,
        value: &T,
    ) -> Result<Appended> {
        self.append_with_id(partition, &self.append_id(), time, value)
            .await
    }

    /// Appends an entry for `time` under the append id `id`, once: if an entry with this id
    /// and time is already there with exactly this value — an earlier append whose outcome
    /// was unknown, or one made before a crash — it is returned ("already appended") and
    /// nothing new is written.
    ///
    /// Requests: 1; 2 when the keys are taken (the entry there is read and compared).
    /// Consistency: strong.
    ///
    /// # Errors
    /// As [`LogTail::append_at`]; [`tablekit_core::Error::AlreadyExists`] when the keys hold
    /// a different entity (the id was used for another item).
    pub async fn append_with_id(
        &self,
        partition: &str,
        id: &AppendId,
        time: DateTime<Utc>,
        value: &T,
    ) -> Result<Appended> {
        let entity = self.entity_with_id(partition, id, time, value)?;
        let time = truncate_to_tick(time)?;
        let etag = match self.table.insert(&entity).await {
            Ok(etag) => etag,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let op = Operation::insert(&entity)?;
                match self.table.get::<Properties>(&entity.keys).await? {
                    Some(stored) if op.is_in_place(Some(&stored.value)) => stored.etag,
                    _ => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        Ok(Appended {
            time,
            keys: entity.keys,
            id: id.clone(),
            etag,
        })
    }

    /// Appends many entries to one partition, each under a new append id, in entity group
    /// transactions of up to 100, sent with the account's bounded concurrency.
    ///
    /// Requests: ⌈items / 100⌉ (more only if a body reaches 4 MiB or an item is refused), plus
    /// the reads of [`Table::bulk_write`] that settle transactions whose outcome a failure
    /// left open. Consistency: each transaction is atomic; the batch as a whole is not — see
    /// the report's per-item outcomes: written (stored), failed (not stored) or unknown.
    ///
    /// To retry, append [`AppendReport::pending`] again with their ids and original times
    /// ([`LogTail::append_batch_with_ids`]): nothing is stored twice.
    ///
    /// # Errors
    /// Before any request: an invalid partition key, time or value (nothing is written).
    /// Per-item failures are in the report.
    pub async fn append_batch(
        &self,
        partition: &str,
        items: &[(DateTime<Utc>, T)],
    ) -> Result<AppendReport> {
        self::partition(partition)?;
        let planned = items
            .iter()
            .map(|(time, value)| (partition.to_owned(), self.append_id(), *time, value))
            .collect();
        self.insert_all(planned).await
    }

    /// Appends many entries to one partition under the given append ids, as
    /// [`LogTail::append_batch`]. An item whose entry is already there with this id, time
    /// and value — from an append whose outcome was unknown, or from before a crash — is
    /// reported appended without being written again.
    ///
    /// Requests: as [`LogTail::append_batch`], plus one range read per transaction that meets
    /// entries already there (then the rest of it is sent again).
    ///
    /// # Errors
    /// Before any request: an invalid partition key, time or value, or one id given twice
    /// for the same time ([`tablekit_core::Error::DuplicateInTransaction`]). Per-item
    /// failures are in the report; an item whose keys hold a different entity fails with
    /// [`tablekit_core::Error::AlreadyExists`].
    pub async fn append_batch_with_ids(
        &self,
        partition: &str,
        items: &[(AppendId, DateTime<Utc>, T)],
    ) -> Result<AppendReport> {
        self::partition(partition)?;
        let planned = items
            .iter()
            .map(|(id, time, value)| (partition.to_owned(), id.clone(), *time, value))
            .collect();
        self.insert_all(planned).await
    }

    /// Inserts entries of any partitions with bulk transactions; an entry already there with
    /// the same content counts as appended.
    pub(crate) async fn insert_all(
        &self,
        items: Vec<(String, AppendId, DateTime<Utc>, &T)>,
    ) -> Result<AppendReport> {
        let mut planned = Vec::with_capacity(items.len());
        let mut operations = Vec::with_capacity(items.len());
        for (pk, id, time, value) in items {
            let entity = self.entity_with_id(&pk, &id, time, value)?;
            operations.push(Operation::insert(&entity)?);
            planned.push((entity.keys, truncate_to_tick(time)?, id));
        }
        if operations.is_empty() {
            return Ok(AppendReport::default());
        }
        let options = BulkOptions::default().with_accept_identical(true);
        let report = self.table.bulk_write(operations, options).await?;
        Ok(AppendReport::from_bulk(planned, report))
    }
}

impl<T: DeserializeOwned + Send + 'static> LogTail<T> {
    /// The `n` newest entries of `partition`, newest first: one `$top=n` query
    /// ([`LogTail::latest_query`] collected).
    ///
    /// Requests: 1 for `n` ≤ 1,000 (0 for `n` = 0). More only if the service splits the
    /// page: it may return fewer than `$top` entities with a continuation token (after 5 s of
    /// work, for instance), and then the token is followed until `n` entries are read or the
    /// partition ends. Above 1,000, ⌈n / 1,000⌉ (the service's page limit).
    /// Consistency: strong for each page.
    ///
    /// # Errors
    /// Before any request: an invalid partition key. [`tablekit_core::Error::NotFound`] if
    /// the table does not exist; [`tablekit_core::Error::Decode`] for an entity whose
    /// RowKey is not a log-tail key or whose properties do not fit `T`.
    pub async fn latest(&self, partition: &str, n: usize) -> Result<Vec<LogEntry<T>>> {
        let span = tracing::debug_span!("tablekit.logtail.latest", table = %self.table.name(), n);
        self.latest_query(partition, n)
            .collect()
            .instrument(span)
            .await
    }

    /// The read [`LogTail::latest`] sends — [`LogTail::entries`] limited to `n`, in pages of
    /// up to `n` (at most 1,000) — for callers who want pages or a projection. Nothing is
    /// sent until it is consumed.
    pub fn latest_query(&self, partition: &str, n: usize) -> LogQuery<T> {
        self.entries(partition)
            .top(n)
            .with_page_size(n.clamp(1, 1_000))
    }

    /// The entries of `partition` whose time (at 100 ns resolution) is in `[from, to)`,
    /// newest first: one RowKey range query, read page by page. Nothing is sent until it is
    /// consumed.
    ///
    /// Requests: one per page (1,000 entries, or the page size; none when `from == to`).
    /// Memory: at most two pages while streaming. Consistency: each page is consistent;
    /// entries appended meanwhile may or may not appear.
    ///
    /// The errors of the read (as the first item of its stream), before any request: an
    /// invalid partition key, `from > to`, or an instant outside .NET's range. Then as
    /// [`LogTail::latest`].
    ///
    /// # Examples
    /// ```no_run
    /// use chrono::{Duration, Utc};
    /// use tablekit_core::Properties;
    /// use tablekit_logtail::LogTail;
    ///
    /// # async fn run(tail: LogTail<Properties>) -> tablekit_core::Result<()> {
    /// let now = Utc::now();
    /// // The last hour, 100 entries per request, only the `Amount` property.
    /// let page = tail
    ///     .window("000223", now - Duration::hours(1), now)
    ///     .select(["Amount"])
    ///     .with_page_size(100)
    ///     .page()
    ///     .await?;
    /// // Later, in another process: the rest, from where the page ended.
    /// if let Some(token) = page.continuation {
    ///     let rest = tail.window("000223", now - Duration::hours(1), now).resume(token);
    ///     let _ = rest.collect().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn window(&self, partition: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> LogQuery<T> {
        LogQuery::window(self.table.clone(), partition, from, to, self.page_size)
    }

    /// Every entry of `partition`, newest first, read page by page. Nothing is sent until it
    /// is consumed.
    ///
    /// Requests: one per page. Memory: at most two pages while streaming. Consistency: each
    /// page is consistent; the whole read is not a snapshot.
    ///
    /// The errors of the read: as [`LogTail::window`].
    pub fn entries(&self, partition: &str) -> LogQuery<T> {
        LogQuery::all(self.table.clone(), partition, self.page_size)
    }
}
