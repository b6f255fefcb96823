//! [`ListLookup`]: the entities a list index holds for one value, read lazily, page by page.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use tablekit_azure::{Page, Table};
use tablekit_core::{Error, Keys, Result, Stored, TableEntity};

use super::eventual::EventualList;
use super::same_partition::SamePartitionList;

/// Entries point-read per page unless [`ListLookup::with_page_size`] says otherwise.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 100;
/// The largest page: as many entries as a query page has entities.
const MAX_PAGE_SIZE: usize = 1000;

/// Where a [`ListLookup`] continues: after the list entry with these keys, in
/// (PartitionKey, RowKey) order.
///
/// Serialize it with serde, or as text with `Display`/`FromStr`: `{PartitionKey}/{RowKey}`
/// (a key never holds a `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LookupToken {
    partition_key: String,
    row_key: String,
}

impl LookupToken {
    fn after(keys: &Keys) -> Self {
        Self {
            partition_key: keys.pk().to_owned(),
            row_key: keys.rk().to_owned(),
        }
    }

    /// Whether the entry at `keys` comes after this token.
    fn precedes(&self, keys: &Keys) -> bool {
        (keys.pk(), keys.rk()) > (self.partition_key.as_str(), self.row_key.as_str())
    }
}

impl fmt::Display for LookupToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.partition_key, self.row_key)
    }
}

impl FromStr for LookupToken {
    type Err = Error;

    /// Parses `{PartitionKey}/{RowKey}`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there is no `/`; key errors for keys that could not
    /// be stored.
    fn from_str(s: &str) -> Result<Self> {
        let (pk, rk) = s.split_once('/').ok_or_else(|| {
            Error::invalid_argument("token", format!("{s:?} is not PartitionKey/RowKey"))
        })?;
        Ok(Self::after(&Keys::new(pk, rk)?))
    }
}

/// The list a lookup reads.
enum Source<T> {
    Same {
        list: SamePartitionList<T>,
        partition: String,
    },
    Eventual(EventualList<T>),
}

impl<T> Clone for Source<T> {
    fn clone(&self) -> Self {
        match self {
            Source::Same { list, partition } => Source::Same {
                list: list.clone(),
                partition: partition.clone(),
            },
            Source::Eventual(list) => Source::Eventual(list.clone()),
        }
    }
}

/// The entities a list index holds for one value, built by
/// [`SamePartitionList::lookup`] or [`EventualList::lookup`]. A lazy builder like
/// [`Query`](tablekit_azure::Query): nothing is sent until [`page`](Self::page),
/// [`pages`](Self::pages), [`stream`](Self::stream), [`collect`](Self::collect) or
/// [`first`](Self::first) is called, and a page's [`LookupToken`] resumes it later — in
/// another process if need be — with [`resume`](Self::resume).
///
/// A lookup reads in two stages: the list (its entries' keys), then the entities, one point
/// read per entry. Entries are taken in (PartitionKey, RowKey) order, `page_size` of them per
/// page (default 100, at most 1,000), and each page's entities are read `concurrency` (the
/// account setting) at a time. An entry whose entity is gone — or, in an [`EventualList`],
/// whose entity no longer has the value (its job is pending) — is left out, so a page may
/// hold fewer entities than its size, even none, and still have a continuation.
///
/// **Requests:** [`page`](Self::page): the list read — 1 (the base row, or the blob), +1 when
/// a table list has overflow rows — plus 1 point read per entry of the page. A stream
/// ([`pages`](Self::pages), [`stream`](Self::stream), [`collect`](Self::collect),
/// [`first`](Self::first)) reads the list once, before its first page, then 1 point read per
/// entry of each page it yields. [`first`](Self::first) stops at the first entity found.
///
/// **Consistency:** that of the list index: strong for a [`SamePartitionList`]'s list,
/// eventual for an [`EventualList`]'s. A stream pages through the list as it was read at its
/// start; entities are read when their page is. A resumed lookup reads the list again and
/// continues after the token's keys, so entries added meanwhile before them are not seen.
///
/// **Errors** (from [`page`](Self::page), and as the first item of the streams), before any
/// request: key errors for the value, [`Error::InvalidArgument`] for a page size of 0 or over
/// 1,000. Then those of the list read ([`Error::Corrupt`] for a list the index did not
/// write) and [`Error::Decode`] when an entity does not fit `T`.
pub struct ListLookup<T> {
    source: Source<T>,
    value: String,
    page_size: usize,
    start: Option<LookupToken>,
}

impl<T> Clone for ListLookup<T> {
    fn clone(&self) -> Self {
        Self {
            source: self.source.clone(),
            value: self.value.clone(),
            page_size: self.page_size,
            start: self.start.clone(),
        }
    }
}

impl<T> fmt::Debug for ListLookup<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ListLookup");
        match &self.source {
            Source::Same { list, partition } => {
                d.field("list", list).field("partition", partition);
            }
            Source::Eventual(list) => {
                d.field("list", list);
            }
        }
        d.field("value", &self.value)
            .field("page_size", &self.page_size)
            .field("start", &self.start)
            .finish()
    }
}

impl<T: TableEntity + Send + Sync + 'static> ListLookup<T> {
    pub(crate) fn same_partition(list: SamePartitionList<T>, partition: &str, value: &str) -> Self {
        Self::new(
            Source::Same {
                list,
                partition: partition.to_owned(),
            },
            value,
        )
    }

    pub(crate) fn eventual(list: EventualList<T>, value: &str) -> Self {
        Self::new(Source::Eventual(list), value)
    }

    fn new(source: Source<T>, value: &str) -> Self {
        Self {
            source,
            value: value.to_owned(),
            page_size: DEFAULT_PAGE_SIZE,
            start: None,
        }
    }

    /// Reads up to `n` list entries per page (1 to 1,000; default 100): each is a point read,
    /// so this bounds the requests of a page. No request is sent.
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = n;
        self
    }

    /// Starts after the entry a page's [`continuation`](Page::continuation) names. No
    /// request is sent.
    #[must_use]
    pub fn resume(mut self, token: LookupToken) -> Self {
        self.start = Some(token);
        self
    }

    fn check(&self) -> Result<()> {
        if self.page_size == 0 || self.page_size > MAX_PAGE_SIZE {
            return Err(Error::invalid_argument(
                "page_size",
                format!(
                    "{} list entries per page; a lookup page holds 1 to {MAX_PAGE_SIZE}",
                    self.page_size
                ),
            ));
        }
        Ok(())
    }

    /// The table the entities are read from.
    fn entities(&self) -> &Table {
        match &self.source {
            Source::Same { list, .. } => list.table(),
            Source::Eventual(list) => list.table(),
        }
    }

    /// Stage one: the list's entries after the start, in key order.
    async fn entries(&self) -> Result<VecDeque<Keys>> {
        self.check()?;
        let mut keys = match &self.source {
            Source::Same { list, partition } => list
                .ids(partition, &self.value)
                .await?
                .into_iter()
                .map(|rk| Keys::new(partition.as_str(), rk))
                .collect::<Result<Vec<_>>>()?,
            Source::Eventual(list) => list
                .ids(&self.value)
                .await?
                .into_iter()
                .map(|(pk, rk)| Keys::new(pk, rk))
                .collect::<Result<Vec<_>>>()?,
        };
        keys.sort();
        keys.dedup();
        Ok(keys
            .into_iter()
            .filter(|k| self.start.as_ref().is_none_or(|t| t.precedes(k)))
            .collect())
    }

    /// Stage two: the next page of `entries`, taken off the front.
    async fn next_page(
        &self,
        entries: &mut VecDeque<Keys>,
    ) -> Result<Page<Stored<T>, LookupToken>> {
        let taken: Vec<Keys> = entries.drain(..self.page_size.min(entries.len())).collect();
        let continuation = match (taken.last(), entries.is_empty()) {
            (Some(last), false) => Some(LookupToken::after(last)),
            _ => None,
        };
        let table = self.entities();
        let concurrency = table.account().settings().concurrency.max(1);
        let found: Vec<Option<Stored<T>>> = futures::stream::iter(taken)
            .map(|keys| async move { table.get::<T>(keys).await })
            .buffered(concurrency)
            .try_collect()
            .await?;
        let items = found
            .into_iter()
            .flatten()
            .filter(|stored| match &self.source {
                Source::Same { .. } => true,
                Source::Eventual(list) => list.spec().has_value(&stored.value, &self.value),
            })
            .collect();
        Ok(Page::new(items, continuation))
    }

    /// Reads one page: the list, then the entities of up to `page_size` of its entries from
    /// the start (or the [`resume`](Self::resume) token).
    ///
    /// **Requests:** the list read (1, +1 for overflow rows) + 1 per entry of the page.
    ///
    /// # Errors
    /// As the [type](Self)'s.
    pub async fn page(&self) -> Result<Page<Stored<T>, LookupToken>> {
        // Boxed: the list read and the point reads are large futures, and a caller's future
        // holding them inline grows by their size.
        let mut entries = Box::pin(self.entries()).await?;
        Box::pin(self.next_page(&mut entries)).await
    }

    /// The pages, one after the other, from one read of the list; the last page has no
    /// continuation. At least one page (perhaps empty) is yielded.
    ///
    /// **Requests:** the list read (1, +1 for overflow rows) before the first page, then 1
    /// per entry of each page. A stream dropped early sends nothing more.
    pub fn pages(
        self,
    ) -> impl Stream<Item = Result<Page<Stored<T>, LookupToken>>> + Send + 'static {
        futures::stream::try_unfold(
            (self, None::<VecDeque<Keys>>),
            |(lookup, entries)| async move {
                let mut entries = match entries {
                    None => Box::pin(lookup.entries()).await?,
                    Some(entries) if entries.is_empty() => return Ok(None),
                    Some(entries) => entries,
                };
                let page = Box::pin(lookup.next_page(&mut entries)).await?;
                Ok(Some((page, (lookup, Some(entries)))))
            },
        )
    }

    /// Every entity found, page after page (see [`pages`](Self::pages)).
    ///
    /// **Requests:** as [`pages`](Self::pages).
    pub fn stream(self) -> impl Stream<Item = Result<Stored<T>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every entity found, collected.
    ///
    /// **Requests:** the list read + 1 per entry.
    ///
    /// # Errors
    /// As the [type](Self)'s.
    pub async fn collect(self) -> Result<Vec<Stored<T>>> {
        self.stream().try_collect().await
    }

    /// The first entity found, if any: entries are read one at a time until one is found.
    ///
    /// **Requests:** the list read + 1 per entry tried.
    ///
    /// # Errors
    /// As the [type](Self)'s.
    pub async fn first(self) -> Result<Option<Stored<T>>> {
        let mut stream = Box::pin(self.with_page_size(1).stream());
        stream.next().await.transpose()
    }
}
