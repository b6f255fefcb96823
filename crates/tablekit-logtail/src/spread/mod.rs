//! Partition spreading, the fix for the prepend/append anti-pattern (PATTERNS.md §5.12):
//! a log whose entries are spread over N bucket partitions and read back as one
//! newest-first stream.

mod hash;
mod merge;

use std::fmt;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::filter::Filter;
use tablekit_core::{Error, Limit, PartitionKey, Result};
use tracing::Instrument as _;

pub use hash::{bucket_of, stable_hash};

use crate::entry::{AppendReport, Appended, LogEntry};
use crate::key::{AppendId, window_bounds, window_filter};
use crate::tail::LogTail;

/// The most buckets a [`SpreadLog`] may have: every read fans out to all of them.
pub const MAX_BUCKETS: u32 = 1_000;

/// A log spread over `buckets` partitions `{base}-{bucket}` (bucket zero-padded, at least two
/// digits: `netlog-00` … `netlog-15`). An entry's bucket is the stable hash of a value the
/// caller chooses (an employee id, a device id, a message id); its RowKey is the log-tail key
/// (inverted ticks and a unique suffix). Inserts at any moment then go to N partitions
/// instead of one, and readers merge the buckets back into one newest-first stream.
///
/// The bucket count is part of the data layout: keep it for the table's life (a reader with
/// another count reads other partitions). Choose the spread value so that the queries you
/// need stay cheap — all entries of one value are in one bucket.
pub struct SpreadLog<T> {
    tail: LogTail<T>,
    base: String,
    buckets: u32,
    width: usize,
}

impl<T> Clone for SpreadLog<T> {
    fn clone(&self) -> Self {
        Self {
            tail: self.tail.clone(),
            base: self.base.clone(),
            buckets: self.buckets,
            width: self.width,
        }
    }
}

impl<T> fmt::Debug for SpreadLog<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpreadLog")
            .field("table", &self.tail.table().name())
            .field("base", &self.base)
            .field("buckets", &self.buckets)
            .finish_non_exhaustive()
    }
}

impl<T> SpreadLog<T> {
    /// A log over `table` (which must exist) with partitions `{base}-00` … No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 buckets, [`Error::LimitExceeded`] above [`MAX_BUCKETS`],
    /// and the key errors of [`PartitionKey::new`] when `base` makes invalid partition keys.
    pub fn new(table: Table, base: &str, buckets: u32) -> Result<Self> {
        if buckets == 0 {
            return Err(Error::invalid_argument("buckets", "at least one bucket"));
        }
        if buckets > MAX_BUCKETS {
            return Err(Error::LimitExceeded {
                limit: Limit::Custom {
                    what: "buckets of a spread log".into(),
                    max: MAX_BUCKETS as usize,
                },
                actual: buckets as usize,
            });
        }
        let width = (buckets - 1).to_string().len().max(2);
        let log = Self {
            tail: LogTail::new(table),
            base: base.to_owned(),
            buckets,
            width,
        };
        PartitionKey::new(log.partition_of_bucket(buckets - 1))?;
        Ok(log)
    }

    /// Reads fetch at most `n` entries per request and bucket (1 to 1,000; checked when a
    /// read starts). The merge holds at most one page per bucket.
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.tail = self.tail.with_page_size(n);
        self
    }

    /// The number of buckets.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The log tail the buckets are written through (same table, same suffix source).
    pub fn tail(&self) -> &LogTail<T> {
        &self.tail
    }

    /// The bucket of `spread_value`: [`bucket_of`]`(spread_value, buckets)`.
    pub fn bucket_of(&self, spread_value: &str) -> u32 {
        bucket_of(spread_value, self.buckets)
    }

    /// The PartitionKey of bucket `bucket`, e.g. `netlog-07`.
    pub fn partition_of_bucket(&self, bucket: u32) -> String {
        format!("{}-{bucket:0width$}", self.base, width = self.width)
    }

    /// The PartitionKey entries of `spread_value` go to.
    pub fn partition_for(&self, spread_value: &str) -> String {
        self.partition_of_bucket(self.bucket_of(spread_value))
    }

    /// Every bucket's PartitionKey, in bucket order.
    pub fn partitions(&self) -> Vec<String> {
        (0..self.buckets)
            .map(|b| self.partition_of_bucket(b))
            .collect()
    }
}

impl<T: Serialize> SpreadLog<T> {
    /// Appends an entry at the current time to the bucket of `spread_value`.
    ///
    /// Requests: 1. Consistency: strong.
    ///
    /// # Errors
    /// As [`LogTail::append`].
    pub async fn append(&self, spread_value: &str, value: &T) -> Result<Appended> {
        self.append_at(spread_value, Utc::now(), value).await
    }

    /// Appends an entry for `time` to the bucket of `spread_value`.
    ///
    /// Requests: 1. Consistency: strong.
    ///
    /// # Errors
    /// As [`LogTail::append_at`].
    pub async fn append_at(
        &self,
        spread_value: &str,
        time: DateTime<Utc>,
        value: &T,
    ) -> Result<Appended> {
        self.tail
            .append_at(&self.partition_for(spread_value), time, value)
            .await
    }

    /// Appends an entry for `time` to the bucket of `spread_value` under the append id `id`,
    /// once: an entry already there with this id, time and value is returned, not written
    /// again.
    ///
    /// Requests: 1; 2 when the keys are taken. Consistency: strong.
    ///
    /// # Errors
    /// As [`LogTail::append_with_id`].
    pub async fn append_with_id(
        &self,
        spread_value: &str,
        id: &AppendId,
        time: DateTime<Utc>,
        value: &T,
    ) -> Result<Appended> {
        self.tail
            .append_with_id(&self.partition_for(spread_value), id, time, value)
            .await
    }

    /// Appends many `(spread value, time, value)` entries, each under a new append id:
    /// grouped by bucket, in transactions of up to 100 per bucket, sent with the account's
    /// bounded concurrency.
    ///
    /// Requests: Σ over buckets of ⌈entries in the bucket / 100⌉ (about items / 100 + N),
    /// plus the reads that settle transactions whose outcome a failure left open.
    /// Consistency: each transaction is atomic; see the report's per-item outcomes
    /// (appended, failed, unknown). Re-append [`AppendReport::pending`] with their ids
    /// ([`SpreadLog::append_batch_with_ids`]): nothing is stored twice.
    ///
    /// # Errors
    /// Before any request: an invalid time or value (nothing is written).
    pub async fn append_batch<S: AsRef<str>>(
        &self,
        items: &[(S, DateTime<Utc>, T)],
    ) -> Result<AppendReport> {
        let planned = items
            .iter()
            .map(|(spread, time, value)| {
                let id = self.tail.append_id();
                (self.partition_for(spread.as_ref()), id, *time, value)
            })
            .collect();
        self.tail.insert_all(planned).await
    }

    /// Appends many `(spread value, append id, time, value)` entries, as
    /// [`SpreadLog::append_batch`]; an entry already there with its id, time and value counts
    /// as appended and is not written again.
    ///
    /// Requests: as [`SpreadLog::append_batch`], plus one range read per transaction that
    /// meets entries already there.
    ///
    /// # Errors
    /// As [`LogTail::append_batch_with_ids`].
    pub async fn append_batch_with_ids<S: AsRef<str>>(
        &self,
        items: &[(S, AppendId, DateTime<Utc>, T)],
    ) -> Result<AppendReport> {
        let planned = items
            .iter()
            .map(|(spread, id, time, value)| {
                (
                    self.partition_for(spread.as_ref()),
                    id.clone(),
                    *time,
                    value,
                )
            })
            .collect();
        self.tail.insert_all(planned).await
    }
}

impl<T: DeserializeOwned + Send + 'static> SpreadLog<T> {
    /// The `n` newest entries across all buckets, newest first: a `$top=n` query per bucket
    /// (run concurrently), merged.
    ///
    /// Requests: N (one per bucket) for `n` ≤ 1,000; more only if the service splits a
    /// bucket's page (see [`LogTail::latest`]). 0 for `n` = 0. Memory: N × `n` entries.
    /// Consistency: each bucket's page is consistent; the buckets are read concurrently, not
    /// as one snapshot.
    ///
    /// # Errors
    /// As [`LogTail::latest`].
    pub async fn latest(&self, n: usize) -> Result<Vec<LogEntry<T>>> {
        self.tail
            .table()
            .account()
            .require_sorted_queries("`SpreadLog::latest`")?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let queries = self
            .partitions()
            .into_iter()
            .map(|pk| {
                self.tail
                    .table()
                    .query::<T>()
                    .filter(Filter::partition(pk))
                    .top(n)
            })
            .collect();
        let span = tracing::debug_span!("tablekit.spread.latest", table = %self.tail.table().name(), base = %self.base, buckets = self.buckets, n);
        merge::merge_by_row_key(queries, self.concurrency())
            .take(n)
            .map(|r| r.and_then(LogEntry::from_stored))
            .try_collect()
            .instrument(span)
            .await
    }

    /// Every entry across all buckets as one stream, newest first (a k-way merge).
    ///
    /// Requests: one per page per bucket (at least N). Memory: at most one page per bucket
    /// (N × page size entries; 1,000 per page by default). Consistency: per page and bucket;
    /// entries appended during the read may or may not appear.
    ///
    /// # Errors
    /// Service errors as stream items; the stream ends after one.
    pub fn entries(&self) -> BoxStream<'static, Result<LogEntry<T>>> {
        self.merged(|pk| Ok(Filter::partition(pk)))
    }

    /// The entries across all buckets whose time is in `[from, to)`, newest first: one
    /// RowKey range query per bucket, merged.
    ///
    /// Requests: one per page per bucket (at least N; none when `from == to`). Memory: at
    /// most one page per bucket. Consistency: per page and bucket.
    ///
    /// # Errors
    /// As the first item, before any request: `from > to` or an instant outside .NET's range.
    pub fn window(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxStream<'static, Result<LogEntry<T>>> {
        match window_bounds(from, to) {
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            Ok(_) if from == to => futures::stream::empty().boxed(),
            Ok(_) => self.merged(|pk| window_filter(pk, from, to)),
        }
    }

    fn merged(
        &self,
        filter: impl Fn(&str) -> Result<Filter>,
    ) -> BoxStream<'static, Result<LogEntry<T>>> {
        let queries: Result<Vec<_>> = self
            .partitions()
            .iter()
            // The merge asks each bucket for its next page only when it needs it, which keeps
            // memory at one page per bucket; reading ahead in every bucket would double that.
            .map(|pk| filter(pk).map(|f| self.tail.query(f).with_read_ahead(false)))
            .collect();
        match queries {
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            Ok(queries) => merge::merge_by_row_key(queries, self.concurrency())
                .map(|r| r.and_then(LogEntry::from_stored))
                .boxed(),
        }
    }

    fn concurrency(&self) -> usize {
        self.tail.table().account().settings().concurrency
    }
}
