//! [`LogQuery`]: a lazy, resumable, projectable read of one log-tail partition.

use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_azure::{ContinuationToken, Page, Query, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{Result, Stored};

use crate::entry::LogEntry;
use crate::key::window_filter;
use crate::tail::partition;

/// Which entries of the partition a [`LogQuery`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    /// Every entry.
    All,
    /// The entries whose time is in `[from, to)`.
    Window(DateTime<Utc>, DateTime<Utc>),
}

/// A read of one partition of a [`LogTail`](crate::LogTail), newest first, built by
/// [`LogTail::entries`](crate::LogTail::entries), [`LogTail::window`](crate::LogTail::window)
/// or [`LogTail::latest_query`](crate::LogTail::latest_query). Nothing is sent until a page or
/// the stream is asked for.
///
/// Like [`tablekit_azure::Query`], it can be projected ([`LogQuery::select`]), limited
/// ([`LogQuery::top`]), read page by page ([`LogQuery::pages`]: each a
/// [`Page`]`<`[`LogEntry`]`<T>>`, entries newest first) and resumed — in another process if need
/// be — from a page's [`ContinuationToken`] ([`LogQuery::resume`]). A page may be short — even
/// empty — and still have a continuation: only a missing continuation means the end.
///
/// Requests: one per page (at most the page size, ≤ 1,000 entries; none for an empty window).
/// Memory: at most two pages while streaming (the next page is requested while one is
/// consumed). Consistency: each page is consistent; entries appended during the read may or
/// may not appear.
///
/// Errors (from [`LogQuery::page`], and as the first item of [`LogQuery::pages`] and
/// [`LogQuery::stream`]), before any request: on the Cosmos DB Table API, a read limited by
/// [`LogQuery::top`] (its results are not sorted there; [`tablekit_core::Error::InvalidConfig`]);
/// an invalid partition key, a window whose start
/// is after its end or outside .NET's range, an invalid property name or page size. Then
/// [`tablekit_core::Error::NotFound`] if the table does not exist, and
/// [`tablekit_core::Error::Decode`] for an entity whose RowKey is not a log-tail key or whose
/// properties do not fit `T`.
pub struct LogQuery<T> {
    table: Table,
    partition: String,
    range: Range,
    select: Option<Vec<String>>,
    select_fields: bool,
    top: Option<usize>,
    page_size: Option<usize>,
    start: Option<ContinuationToken>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for LogQuery<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            partition: self.partition.clone(),
            range: self.range,
            select: self.select.clone(),
            select_fields: self.select_fields,
            top: self.top,
            page_size: self.page_size,
            start: self.start.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for LogQuery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogQuery")
            .field("table", &self.table.name())
            .field("partition", &self.partition)
            .field("range", &self.range)
            .field("select", &self.select)
            .field("top", &self.top)
            .field("page_size", &self.page_size)
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl<T> LogQuery<T> {
    pub(crate) fn all(table: Table, partition: &str, page_size: Option<usize>) -> Self {
        Self {
            table,
            partition: partition.to_owned(),
            range: Range::All,
            select: None,
            select_fields: false,
            top: None,
            page_size,
            start: None,
            _t: PhantomData,
        }
    }

    pub(crate) fn window(
        table: Table,
        partition: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        page_size: Option<usize>,
    ) -> Self {
        Self {
            range: Range::Window(from, to),
            ..Self::all(table, partition, page_size)
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> LogQuery<T> {
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

    /// Projection derived from `T`: only the properties `T` reads (see
    /// [`Query::select_fields`]).
    #[must_use]
    pub fn select_fields(mut self) -> Self {
        self.select = None;
        self.select_fields = true;
        self
    }

    /// At most the `n` newest entries in total.
    #[must_use]
    pub fn top(mut self, n: usize) -> Self {
        self.top = Some(n);
        self
    }

    /// At most `n` entries per page (1 to 1,000). Default: the tail's
    /// ([`LogTail::with_page_size`](crate::LogTail::with_page_size)), else 1,000.
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Continues where an earlier page of the same read left off ([`Page::continuation`]).
    #[must_use]
    pub fn resume(mut self, token: ContinuationToken) -> Self {
        self.start = Some(token);
        self
    }

    /// The table query this read sends; `None` for an empty window (nothing to send).
    fn query(&self) -> Result<Option<Query<T>>> {
        if self.top.is_some() {
            // "The n newest" needs results sorted by RowKey, which the Cosmos DB Table API
            // does not promise.
            self.table
                .account()
                .require_sorted_queries("`LogTail::latest` (a log read limited by `top`)")?;
        }
        let pk = partition(&self.partition)?;
        let filter = match self.range {
            Range::All => Filter::partition(pk),
            Range::Window(from, to) => {
                let filter = window_filter(&pk, from, to)?;
                if from == to {
                    return Ok(None);
                }
                filter
            }
        };
        if self.top == Some(0) {
            return Ok(None);
        }
        let mut query = self.table.query::<T>().filter(filter);
        if let Some(properties) = &self.select {
            query = query.select(properties.iter().cloned());
        }
        if self.select_fields {
            query = query.select_fields();
        }
        if let Some(n) = self.top {
            query = query.top(n);
        }
        if let Some(n) = self.page_size {
            query = query.with_page_size(n);
        }
        if let Some(token) = &self.start {
            query = query.resume(token.clone());
        }
        Ok(Some(query))
    }

    /// Fetches one page, starting at the read's start (or its [`LogQuery::resume`] token).
    ///
    /// Requests: 1 (0 for an empty window).
    ///
    /// # Errors
    /// As described on [`LogQuery`].
    pub async fn page(&self) -> Result<Page<LogEntry<T>>> {
        match self.query()? {
            None => Ok(Page::new(Vec::new(), None)),
            Some(query) => entries(query.page().await?),
        }
    }

    /// Every page, following continuation tokens to the end (or `top` entries).
    ///
    /// Requests: one per page (a stream dropped early may have sent one more).
    pub fn pages(self) -> impl Stream<Item = Result<Page<LogEntry<T>>>> + Send + 'static {
        let pages: BoxStream<'static, Result<Page<LogEntry<T>>>> = match self.query() {
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            Ok(None) => futures::stream::empty().boxed(),
            Ok(Some(query)) => query.pages().map(|page| entries(page?)).boxed(),
        };
        pages
    }

    /// Every entry, newest first, page after page (see [`LogQuery::pages`]).
    pub fn stream(self) -> impl Stream<Item = Result<LogEntry<T>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every entry, newest first, collected.
    ///
    /// # Errors
    /// As described on [`LogQuery`].
    pub async fn collect(self) -> Result<Vec<LogEntry<T>>> {
        self.stream().try_collect().await
    }

    /// The newest entry, if any (a `$top=1` read).
    ///
    /// # Errors
    /// As described on [`LogQuery`].
    pub async fn first(self) -> Result<Option<LogEntry<T>>> {
        let mut stream = Box::pin(self.top(1).stream());
        stream.next().await.transpose()
    }
}

/// A page of log entries from a page of stored entities, in order.
fn entries<T>(page: Page<Stored<T>>) -> Result<Page<LogEntry<T>>> {
    let items = page
        .items
        .into_iter()
        .map(LogEntry::from_stored)
        .collect::<Result<_>>()?;
    Ok(Page::new(items, page.continuation))
}
