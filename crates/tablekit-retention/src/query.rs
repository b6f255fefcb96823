//! [`PeriodQuery`]: a lazy, resumable, projectable read over the tables of a time range.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit_azure::{ContinuationToken, Page, Query, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{Error, Result, Stored};

use crate::tables::PeriodTables;

/// Where a [`PeriodQuery`] continues: the table it stopped in and, within it, the service's
/// continuation (none: from the table's start). It is the continuation of the read's pages,
/// `Page<Stored<T>, PeriodToken>`, and goes back in with [`PeriodQuery::resume`].
///
/// Serialize it with serde, or as text with `Display`/`FromStr`: `{table}` or
/// `{table} {continuation}` (table names and continuation tokens hold no spaces).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeriodToken {
    table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    continuation: Option<ContinuationToken>,
}

impl PeriodToken {
    /// The table the read continues in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Where in that table; `None` from its start.
    pub fn continuation(&self) -> Option<&ContinuationToken> {
        self.continuation.as_ref()
    }
}

impl fmt::Display for PeriodToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table)?;
        if let Some(c) = &self.continuation {
            write!(f, " {c}")?;
        }
        Ok(())
    }
}

impl FromStr for PeriodToken {
    type Err = Error;

    /// Parses `{table}` or `{table} {continuation}`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty table name or a malformed continuation.
    fn from_str(s: &str) -> Result<Self> {
        let (table, continuation) = match s.split_once(' ') {
            Some((table, rest)) => (table, Some(rest.parse::<ContinuationToken>())),
            None => (s, None),
        };
        if table.is_empty() {
            return Err(Error::invalid_argument(
                "token",
                format!("{s:?} names no table"),
            ));
        }
        let continuation = continuation
            .transpose()
            .map_err(|e| Error::invalid_argument("token", e.to_string()))?;
        Ok(Self {
            table: table.to_owned(),
            continuation,
        })
    }
}

/// A read of the tables of the periods a time range touches, oldest table first, each in key
/// order, built by [`PeriodTables::query`]. Nothing is sent until a page or the stream is
/// asked for. Missing tables (periods without data, or already dropped) are skipped.
///
/// It can be filtered, projected, limited, read page by page and resumed — in another
/// process if need be — from a page's [`PeriodToken`], which names the table it stopped in.
///
/// Requests: one per page per table read (at least one per table: a missing table costs the
/// one request that finds it missing). Memory: at most two pages while streaming.
/// Consistency: each page is consistent; tables are read one after the other.
///
/// Without a filter it reads whole tables deliberately, so the scan policy is not applied;
/// a filter is subject to the account's scan policy.
///
/// Errors (from [`PeriodQuery::page`], and as the first item of [`PeriodQuery::pages`] and
/// [`PeriodQuery::stream`]), before any request: `from > to`, a time outside the years 1 to
/// 9999, a token naming a table outside the range ([`Error::InvalidArgument`]), an invalid
/// filter, property name or page size. Then query errors.
pub struct PeriodQuery<T> {
    set: PeriodTables,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    filter: Option<Filter>,
    select: Option<Vec<String>>,
    select_fields: bool,
    top: Option<usize>,
    page_size: Option<usize>,
    start: Option<PeriodToken>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for PeriodQuery<T> {
    fn clone(&self) -> Self {
        Self {
            set: self.set.clone(),
            from: self.from,
            to: self.to,
            filter: self.filter.clone(),
            select: self.select.clone(),
            select_fields: self.select_fields,
            top: self.top,
            page_size: self.page_size,
            start: self.start.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for PeriodQuery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeriodQuery")
            .field("prefix", &self.set.prefix())
            .field("from", &self.from)
            .field("to", &self.to)
            .field("filter", &self.filter.as_ref().map(Filter::render))
            .field("select", &self.select)
            .field("top", &self.top)
            .field("page_size", &self.page_size)
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl<T> PeriodQuery<T> {
    pub(crate) fn new(set: PeriodTables, from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        Self {
            set,
            from,
            to,
            filter: None,
            select: None,
            select_fields: false,
            top: None,
            page_size: None,
            start: None,
            _t: PhantomData,
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> PeriodQuery<T> {
    /// Only entities matching `filter`, in every table; called again, the filters are
    /// combined with `and` (`.filter(partition).filter(amount)` reads one partition). The
    /// range selects tables, not entities: put the time in the filter (a RowKey range, say)
    /// to trim a table whose period is partly outside it.
    #[must_use]
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(earlier) => earlier.and(filter),
            None => filter,
        });
        self
    }

    /// Projection (`$select`): only these properties are read into each entity's value; its
    /// keys, Timestamp and ETag are always there.
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

    /// At most `n` entities in total, across the tables.
    #[must_use]
    pub fn top(mut self, n: usize) -> Self {
        self.top = Some(n);
        self
    }

    /// At most `n` entities per page (1 to 1,000).
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Continues where an earlier page of a read over the same range left off (the page's
    /// [`Page::continuation`]).
    #[must_use]
    pub fn resume(mut self, token: PeriodToken) -> Self {
        self.start = Some(token);
        self
    }

    /// The tables to read, from the one the read starts in, and where in the first one.
    fn plan(&self) -> Result<(Vec<Table>, Option<ContinuationToken>)> {
        let tables = self.set.tables_between(self.from, self.to)?;
        let Some(token) = &self.start else {
            return Ok((tables, None));
        };
        let Some(at) = tables.iter().position(|t| t.name() == token.table) else {
            return Err(Error::invalid_argument(
                "token",
                format!(
                    "it names table {}, which is not one of the tables of [{}, {})",
                    token.table, self.from, self.to
                ),
            ));
        };
        Ok((tables[at..].to_vec(), token.continuation.clone()))
    }

    /// The query of one table, with at most `remaining` entities.
    fn table_query(
        &self,
        table: &Table,
        start: Option<ContinuationToken>,
        remaining: Option<usize>,
    ) -> Query<T> {
        let mut query = match &self.filter {
            Some(f) => table.query::<T>().filter(f.clone()),
            None => table.query::<T>().allow_scan(),
        };
        if let Some(properties) = &self.select {
            query = query.select(properties.iter().cloned());
        }
        if self.select_fields {
            query = query.select_fields();
        }
        if let Some(n) = remaining {
            query = query.top(n);
        }
        if let Some(n) = self.page_size {
            query = query.with_page_size(n);
        }
        if let Some(token) = start {
            query = query.resume(token);
        }
        query
    }

    /// Every page, table after table, to the end of the last table (or `top` entities). Each
    /// page holds entities of one table; its continuation names the table the next page
    /// starts in. A page may be short — even empty — and still have a continuation: only a
    /// missing continuation ([`Page::is_last`]) means the end.
    ///
    /// Requests: one per page (a stream dropped early may have sent one more).
    pub fn pages(
        self,
    ) -> impl Stream<Item = Result<Page<Stored<T>, PeriodToken>>> + Send + 'static {
        let (tables, start) = match self.plan() {
            Ok(plan) => plan,
            Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
        };
        let state = Reading {
            remaining: self.top,
            query: self,
            tables: tables.into_iter().collect(),
            start,
            current: None,
        };
        futures::stream::unfold(state, |mut state| async move {
            let page = state.next_page().await?;
            Some((page, state))
        })
        .boxed()
    }

    /// Fetches one page, starting at the read's start (or its [`PeriodQuery::resume`]
    /// token).
    ///
    /// Requests: 1, plus one per missing table met before it.
    ///
    /// # Errors
    /// As described on [`PeriodQuery`].
    pub async fn page(&self) -> Result<Page<Stored<T>, PeriodToken>> {
        let mut pages = self.clone().pages();
        pages
            .next()
            .await
            .unwrap_or_else(|| Ok(Page::new(Vec::new(), None)))
    }

    /// Every entity, table after table (see [`PeriodQuery::pages`]).
    pub fn stream(self) -> impl Stream<Item = Result<Stored<T>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every entity, collected.
    ///
    /// # Errors
    /// As described on [`PeriodQuery`].
    pub async fn collect(self) -> Result<Vec<Stored<T>>> {
        self.stream().try_collect().await
    }

    /// The first entity, if any.
    ///
    /// # Errors
    /// As described on [`PeriodQuery`].
    pub async fn first(self) -> Result<Option<Stored<T>>> {
        let mut stream = Box::pin(self.top(1).stream());
        stream.next().await.transpose()
    }
}

/// The pages of the table being read.
type TablePages<T> = BoxStream<'static, Result<Page<Stored<T>>>>;

/// The state of [`PeriodQuery::pages`]: the tables left, where the first one starts, and
/// the pages of the table being read.
struct Reading<T> {
    query: PeriodQuery<T>,
    tables: std::collections::VecDeque<Table>,
    start: Option<ContinuationToken>,
    current: Option<(String, TablePages<T>)>,
    remaining: Option<usize>,
}

impl<T: DeserializeOwned + Send + 'static> Reading<T> {
    async fn next_page(&mut self) -> Option<Result<Page<Stored<T>, PeriodToken>>> {
        loop {
            if self.remaining == Some(0) {
                return None;
            }
            if self.current.is_none() {
                let table = self.tables.pop_front()?;
                let pages = self
                    .query
                    .table_query(&table, self.start.take(), self.remaining)
                    .pages()
                    .boxed();
                self.current = Some((table.name().to_owned(), pages));
            }
            let (name, pages) = self.current.as_mut()?;
            match pages.next().await {
                // This table is done: on to the next.
                None => self.current = None,
                // A period without a table: nothing to read there.
                Some(Err(Error::NotFound { target })) if target.keys.is_none() => {
                    self.current = None;
                }
                Some(Err(e)) => {
                    self.tables.clear();
                    self.current = None;
                    return Some(Err(e));
                }
                Some(Ok(page)) => {
                    if let Some(r) = self.remaining.as_mut() {
                        *r = r.saturating_sub(page.items.len());
                    }
                    let continuation = match page.continuation {
                        Some(c) => Some(PeriodToken {
                            table: name.clone(),
                            continuation: Some(c),
                        }),
                        None => {
                            self.current = None;
                            self.tables.front().map(|next| PeriodToken {
                                table: next.name().to_owned(),
                                continuation: None,
                            })
                        }
                    };
                    let continuation = continuation.filter(|_| self.remaining != Some(0));
                    return Some(Ok(Page::new(page.items, continuation)));
                }
            }
        }
    }
}
