//! [`SpreadLog`]: a log spread over bucket partitions.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::{Error, Limit, PartitionKey, Result};
use tracing::Instrument as _;

use super::MAX_BUCKETS;
use super::hash::bucket_of;
use super::query::SpreadQuery;

use crate::entry::{AppendReport, Appended, LogEntry};
use crate::id::AppendId;
use crate::tail::LogTail;

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
    /// # Examples
    /// ```no_run
    /// use serde::{Deserialize, Serialize};
    /// use tablekit_azure::Account;
    /// use tablekit_logtail::SpreadLog;
    ///
    /// /// One network access: a value without keys of its own.
    /// #[derive(Serialize, Deserialize)]
    /// #[serde(rename_all = "PascalCase")]
    /// struct Access {
    ///     employee: String,
    ///     resource: String,
    /// }
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// // 16 partitions, netlog-00 … netlog-15: inserts spread over all of them.
    /// let log: SpreadLog<Access> =
    ///     SpreadLog::new(Account::emulator().table("NetworkLog")?, "netlog", 16)?;
    /// let access = Access { employee: "000223".into(), resource: "vpn".into() };
    /// log.append("000223", &access).await?; // 1 request, to the employee's bucket
    /// let newest = log.latest(50).await?; // 16 requests, merged newest first
    /// # let _ = newest; Ok(()) }
    /// ```
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
    /// (written, failed, unknown). Re-append [`AppendReport::pending`] with their ids
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
    /// (run concurrently), merged ([`SpreadLog::entries`] limited to `n`, collected).
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
        let span = tracing::debug_span!("tablekit.spread.latest", table = %self.tail.table().name(), buckets = self.buckets, n);
        self.entries()
            .top(n)
            .with_page_size(n.clamp(1, 1_000))
            .collect()
            .instrument(span)
            .await
    }

    /// Every entry across all buckets, newest first (a k-way merge of one query per
    /// bucket), read page by page. Nothing is sent until it is consumed.
    ///
    /// Requests: one per page per bucket (at least N). Memory: at most one page per bucket
    /// (N × page size entries; 1,000 per page by default). Consistency: per page and bucket;
    /// entries appended during the read may or may not appear.
    ///
    /// The errors of the read: service errors as stream items; the stream ends after one.
    pub fn entries(&self) -> SpreadQuery<T> {
        SpreadQuery::new(self.clone(), None)
    }

    /// The entries across all buckets whose time is in `[from, to)`, newest first: one
    /// RowKey range query per bucket, merged. Nothing is sent until it is consumed.
    ///
    /// Requests: one per page per bucket (at least N; none when `from == to`). Memory: at
    /// most one page per bucket. Consistency: per page and bucket.
    ///
    /// The errors of the read (as the first item of its stream), before any request: `from >
    /// to` or an instant outside .NET's range.
    ///
    /// # Examples
    /// ```no_run
    /// use chrono::{Duration, Utc};
    /// use tablekit_core::Properties;
    /// use tablekit_logtail::{SpreadLog, SpreadToken};
    ///
    /// # async fn run(log: SpreadLog<Properties>) -> tablekit_core::Result<()> {
    /// let (from, to) = (Utc::now() - Duration::minutes(5), Utc::now());
    /// let first = log.window(from, to).with_page_size(100).page().await?;
    /// // The token is the position of the page's last entry: keep it as text, resume later.
    /// if let Some(token) = first.continuation {
    ///     let saved = token.to_string();
    ///     let token: SpreadToken = saved.parse()?;
    ///     let rest = log.window(from, to).resume(token).collect().await?;
    ///     # let _ = rest;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn window(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> SpreadQuery<T> {
        SpreadQuery::new(self.clone(), Some((from, to)))
    }
}
