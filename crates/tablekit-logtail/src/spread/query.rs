//! [`SpreadQuery`]: a lazy, resumable, projectable read across the buckets of a
//! [`SpreadLog`], merged newest first.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit_azure::{Page, Query};
use tablekit_core::filter::Filter;
use tablekit_core::{Error, Result, Stored};

use super::log::SpreadLog;
use super::merge::merge_by_row_key;
use crate::entry::LogEntry;
use crate::key::{window_bounds, window_filter};

/// Entries per merged page, and per request in each bucket, unless set.
const DEFAULT_PAGE_SIZE: usize = 1_000;

/// Where a [`SpreadQuery`] continues: the position of the last entry read — its bucket and
/// RowKey — in the merged order (RowKey, then bucket). Resuming reads, in every bucket, only
/// the entries after that position, so it is meaningful across buckets and processes.
///
/// Serialize it with serde, or as text with `Display`/`FromStr`: `{bucket} {row key}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpreadToken {
    bucket: u32,
    row_key: String,
}

impl SpreadToken {
    /// The bucket of the last entry read.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// The RowKey of the last entry read.
    pub fn row_key(&self) -> &str {
        &self.row_key
    }
}

impl fmt::Display for SpreadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.bucket, self.row_key)
    }
}

impl FromStr for SpreadToken {
    type Err = Error;

    /// Parses `{bucket} {row key}`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for text of another shape.
    fn from_str(s: &str) -> Result<Self> {
        let malformed = || {
            Error::invalid_argument(
                "token",
                format!("{s:?} is not a spread-log token (`{{bucket}} {{row key}}`)"),
            )
        };
        let (bucket, row_key) = s.split_once(' ').ok_or_else(malformed)?;
        let bucket = bucket.parse().map_err(|_| malformed())?;
        Ok(Self {
            bucket,
            row_key: row_key.to_owned(),
        })
    }
}

/// A read across every bucket of a [`SpreadLog`], newest first (a k-way merge of one query
/// per bucket), built by [`SpreadLog::entries`] or [`SpreadLog::window`]. Nothing is sent
/// until a page or the stream is asked for.
///
/// It can be projected ([`SpreadQuery::select`]), limited ([`SpreadQuery::top`]), read page by
/// page ([`SpreadQuery::pages`]: each a [`Page`]`<`[`LogEntry`]`<T>, `[`SpreadToken`]`>`,
/// entries of every bucket merged newest first) and resumed from a page's [`SpreadToken`]
/// ([`SpreadQuery::resume`]) — in another process if need be.
///
/// Requests: one per page per bucket (at least one per bucket; none for an empty window).
/// Memory: at most one page per bucket (buckets × page size entries). Consistency: per page
/// and bucket; entries appended during the read may or may not appear.
///
/// Errors (from [`SpreadQuery::page`], and as the first item of [`SpreadQuery::pages`] and
/// [`SpreadQuery::stream`]), before any request: a window whose start is after its end or
/// outside .NET's range, a token of a bucket this log does not have
/// ([`Error::InvalidArgument`]), an invalid property name or page size. Then service errors;
/// the stream ends after one.
pub struct SpreadQuery<T> {
    log: SpreadLog<T>,
    window: Option<(DateTime<Utc>, DateTime<Utc>)>,
    select: Option<Vec<String>>,
    select_fields: bool,
    top: Option<usize>,
    page_size: Option<usize>,
    start: Option<SpreadToken>,
}

impl<T> Clone for SpreadQuery<T> {
    fn clone(&self) -> Self {
        Self {
            log: self.log.clone(),
            window: self.window,
            select: self.select.clone(),
            select_fields: self.select_fields,
            top: self.top,
            page_size: self.page_size,
            start: self.start.clone(),
        }
    }
}

impl<T> fmt::Debug for SpreadQuery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpreadQuery")
            .field("log", &self.log)
            .field("window", &self.window)
            .field("select", &self.select)
            .field("top", &self.top)
            .field("page_size", &self.page_size)
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl<T> SpreadQuery<T> {
    pub(crate) fn new(log: SpreadLog<T>, window: Option<(DateTime<Utc>, DateTime<Utc>)>) -> Self {
        let page_size = log.tail().page_size();
        Self {
            log,
            window,
            select: None,
            select_fields: false,
            top: None,
            page_size,
            start: None,
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> SpreadQuery<T> {
    /// Projection (`$select`): only these properties are read into each entry's value; its
    /// keys, time and ETag are always there.
    #[must_use]
    pub fn select<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.select = Some(properties.into_iter().map(Into::into).collect());
        self.select_fields = false;
        self
    }

    /// Projection derived from `T`: only the properties `T` reads.
    #[must_use]
    pub fn select_fields(mut self) -> Self {
        self.select = None;
        self.select_fields = true;
        self
    }

    /// At most the `n` newest entries in total: each bucket is asked for at most `n`.
    #[must_use]
    pub fn top(mut self, n: usize) -> Self {
        self.top = Some(n);
        self
    }

    /// At most `n` entries per merged page and per request in each bucket (1 to 1,000).
    /// Default: the log's ([`SpreadLog::with_page_size`]), else 1,000.
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Continues after the last entry of an earlier page ([`Page::continuation`]).
    #[must_use]
    pub fn resume(mut self, token: SpreadToken) -> Self {
        self.start = Some(token);
        self
    }

    /// One query per bucket, in bucket order; `None` when there is nothing to read.
    fn queries(&self) -> Result<Option<Vec<Query<T>>>> {
        if let Some((from, to)) = self.window {
            window_bounds(from, to)?;
            if from == to {
                return Ok(None);
            }
        }
        if let Some(token) = &self.start {
            if token.bucket >= self.log.buckets() {
                return Err(Error::invalid_argument(
                    "token",
                    format!(
                        "it names bucket {}, and this log has {} buckets",
                        token.bucket,
                        self.log.buckets()
                    ),
                ));
            }
        }
        if self.top == Some(0) {
            return Ok(None);
        }
        let table = self.log.tail().table();
        let mut queries = Vec::with_capacity(self.log.buckets() as usize);
        for (bucket, pk) in (0..).zip(self.log.partitions()) {
            let mut filter = match self.window {
                None => Filter::partition(&pk),
                Some((from, to)) => window_filter(&pk, from, to)?,
            };
            if let Some(token) = &self.start {
                // Equal RowKeys are merged in bucket order: the token's bucket and those
                // before it have yielded theirs, the buckets after it have not.
                filter = filter.and(if bucket <= token.bucket {
                    Filter::gt("RowKey", token.row_key.as_str())
                } else {
                    Filter::ge("RowKey", token.row_key.as_str())
                });
            }
            // The merge asks each bucket for its next page only when it needs it, which
            // keeps memory at one page per bucket; reading ahead would double that.
            let mut query = table
                .query::<T>()
                .filter(filter)
                .with_read_ahead(false)
                .with_page_size(self.page_size.unwrap_or(DEFAULT_PAGE_SIZE));
            if let Some(properties) = &self.select {
                query = query.select(properties.iter().cloned());
            }
            if self.select_fields {
                query = query.select_fields();
            }
            if let Some(n) = self.top {
                query = query.top(n);
            }
            queries.push(query);
        }
        Ok(Some(queries))
    }

    /// Merged pages of at most the page size, newest first, to the end (or `top` entries).
    /// Every page but an empty read's has at least one entry; an empty read has none.
    ///
    /// Requests: one per page per bucket, requested as the merge needs them.
    pub fn pages(
        self,
    ) -> impl Stream<Item = Result<Page<LogEntry<T>, SpreadToken>>> + Send + 'static {
        let queries = match self.queries() {
            Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
            Ok(None) => return futures::stream::empty().boxed(),
            Ok(Some(queries)) => queries,
        };
        let concurrency = self.log.tail().table().account().settings().concurrency;
        let state = Paging {
            merged: merge_by_row_key(queries, concurrency).boxed(),
            peeked: None,
            failed: None,
            remaining: self.top,
            page_size: self.page_size.unwrap_or(DEFAULT_PAGE_SIZE).max(1),
            done: false,
        };
        futures::stream::unfold(state, |mut state| async move {
            let page = state.next_page().await?;
            Some((page, state))
        })
        .boxed()
    }

    /// The first page: the newest entries (or those after the [`SpreadQuery::resume`] token).
    ///
    /// Requests: at least one per bucket.
    ///
    /// # Errors
    /// As described on [`SpreadQuery`].
    pub async fn page(&self) -> Result<Page<LogEntry<T>, SpreadToken>> {
        let mut pages = self.clone().pages();
        pages
            .next()
            .await
            .unwrap_or_else(|| Ok(Page::new(Vec::new(), None)))
    }

    /// Every entry, newest first (see [`SpreadQuery::pages`]).
    pub fn stream(self) -> impl Stream<Item = Result<LogEntry<T>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every entry, newest first, collected.
    ///
    /// # Errors
    /// As described on [`SpreadQuery`].
    pub async fn collect(self) -> Result<Vec<LogEntry<T>>> {
        self.stream().try_collect().await
    }

    /// The newest entry across the buckets, if any (a `$top=1` query per bucket).
    ///
    /// # Errors
    /// As described on [`SpreadQuery`].
    pub async fn first(self) -> Result<Option<LogEntry<T>>> {
        let mut stream = Box::pin(self.top(1).stream());
        stream.next().await.transpose()
    }
}

/// The state of [`SpreadQuery::pages`]: the merge, the entry read to learn whether another
/// page follows, and an error met after a page's first entry (reported after that page).
struct Paging<T> {
    merged: BoxStream<'static, Result<(u32, Stored<T>)>>,
    peeked: Option<(u32, Stored<T>)>,
    failed: Option<Error>,
    remaining: Option<usize>,
    page_size: usize,
    done: bool,
}

impl<T: Send + 'static> Paging<T> {
    async fn next_entry(&mut self) -> Option<Result<(u32, Stored<T>)>> {
        match self.peeked.take() {
            Some(entry) => Some(Ok(entry)),
            None => self.merged.next().await,
        }
    }

    async fn next_page(&mut self) -> Option<Result<Page<LogEntry<T>, SpreadToken>>> {
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Some(Err(e));
        }
        if self.done {
            return None;
        }
        let mut items = Vec::with_capacity(self.page_size.min(DEFAULT_PAGE_SIZE));
        let mut last = None;
        while items.len() < self.page_size && self.remaining != Some(0) {
            let (bucket, stored) = match self.next_entry().await {
                None => {
                    self.done = true;
                    break;
                }
                Some(Err(e)) => {
                    self.failed = Some(e);
                    break;
                }
                Some(Ok(entry)) => entry,
            };
            let position = SpreadToken {
                bucket,
                row_key: stored.keys.rk().to_owned(),
            };
            match LogEntry::from_stored(stored) {
                Ok(entry) => items.push(entry),
                Err(e) => {
                    self.failed = Some(e);
                    break;
                }
            }
            last = Some(position);
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
            }
        }
        if self.remaining == Some(0) {
            self.done = true;
        } else if !self.done && self.failed.is_none() {
            // A full page: read the next entry to know whether another page follows.
            match self.next_entry().await {
                None => self.done = true,
                Some(Err(e)) => self.failed = Some(e),
                Some(Ok(entry)) => self.peeked = Some(entry),
            }
        }
        if items.is_empty() {
            return match self.failed.take() {
                Some(e) => {
                    self.done = true;
                    Some(Err(e))
                }
                None => None,
            };
        }
        let continuation = if self.done { None } else { last };
        Some(Ok(Page::new(items, continuation)))
    }
}
