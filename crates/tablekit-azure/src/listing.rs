//! Lazy listings of an account's resources (tables, blobs): one builder for every listing the
//! service pages with an opaque marker.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use tablekit_core::{Error, Result};

use crate::table::Page;

/// Where a listing resumes: the service's marker for the next page, as text that can be
/// stored and parsed again ([`Display`](fmt::Display) / [`FromStr`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListToken(String);

impl fmt::Display for ListToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ListToken {
    type Err = Error;

    /// # Errors
    /// [`Error::InvalidArgument`] for an empty token (a listing that ended has none).
    fn from_str(token: &str) -> Result<Self> {
        if token.is_empty() {
            return Err(Error::invalid_argument(
                "list token",
                "empty: a listing that ended has no token",
            ));
        }
        Ok(Self(token.to_owned()))
    }
}

type PageFuture<T> = Pin<Box<dyn Future<Output = Result<(Vec<T>, Option<String>)>> + Send>>;
/// Reads the page at a marker (`None`: the first), at most a page size of items if one is set.
type FetchPage<T> = Arc<dyn Fn(Option<String>, Option<u32>) -> PageFuture<T> + Send + Sync>;

/// A listing of tables ([`Account::list_tables`](crate::Account::list_tables)) or blobs
/// ([`Container::list`](crate::Container::list)). Nothing is sent until a page is asked for.
///
/// Read it page by page ([`page`](Self::page), [`pages`](Self::pages)), item by item
/// ([`stream`](Self::stream)), or whole ([`collect`](Self::collect), or `.await` on the
/// listing itself); [`resume`](Self::resume) continues a listing from a page's
/// [`ListToken`], in this process or another.
///
/// Requests: one per page (the service's page size: 1,000 tables, 5,000 blobs).
/// Consistency: each page reflects the resources that existed when it was read; pages are
/// not a snapshot.
#[must_use = "a listing sends nothing until a page is asked for or it is awaited"]
pub struct Listing<T> {
    fetch: FetchPage<T>,
    start: Option<String>,
    page_size: Option<u32>,
}

impl<T> fmt::Debug for Listing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listing")
            .field("resume", &self.start)
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

impl<T> Clone for Listing<T> {
    fn clone(&self) -> Self {
        Self {
            fetch: self.fetch.clone(),
            start: self.start.clone(),
            page_size: self.page_size,
        }
    }
}

impl<T: Send + 'static> Listing<T> {
    /// A listing whose pages `fetch` reads, given the marker of the page (`None`: the first).
    pub(crate) fn new<F, Fut>(fetch: F) -> Self
    where
        F: Fn(Option<String>, Option<u32>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(Vec<T>, Option<String>)>> + Send + 'static,
    {
        Self {
            fetch: Arc::new(move |marker, size| Box::pin(fetch(marker, size))),
            start: None,
            page_size: None,
        }
    }

    /// The same listing, asking for at most `size` items per page (the service's maximum,
    /// 1,000 tables or 5,000 blobs, when not set; a larger `size` is capped by the service).
    /// More pages, so more requests: one per `size` items.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a size of 0, before any request.
    pub fn with_page_size(mut self, size: u32) -> Result<Self> {
        if size == 0 {
            return Err(Error::invalid_argument("page size", "must be at least 1"));
        }
        self.page_size = Some(size);
        Ok(self)
    }

    /// The same listing, starting at the page `token` names (from
    /// [`Page::continuation`] of an earlier page).
    pub fn resume(mut self, token: ListToken) -> Self {
        self.start = Some(token.0);
        self
    }

    /// The first page (or the page [`resume`](Self::resume) names). Requests: 1.
    ///
    /// # Errors
    /// Invalid input of the listing (a malformed prefix), before any request; then transport
    /// and service errors ([`Error::NotFound`] for a container that does not exist).
    pub async fn page(&self) -> Result<Page<T, ListToken>> {
        let (items, next) = (self.fetch)(self.start.clone(), self.page_size).await?;
        Ok(Page::new(items, next.map(ListToken)))
    }

    /// Every page, read one after another as the stream is polled; the stream ends after the
    /// page without a continuation, or after the first error.
    pub fn pages(self) -> impl Stream<Item = Result<Page<T, ListToken>>> + Send + 'static {
        // `None`: finished; `Some(marker)`: the marker of the next page to read.
        let size = self.page_size;
        futures::stream::try_unfold(Some(self.start), move |state| {
            let fetch = self.fetch.clone();
            async move {
                let Some(marker) = state else {
                    return Ok(None);
                };
                let (items, next) = fetch(marker, size).await?;
                let page = Page::new(items, next.clone().map(ListToken));
                Ok(Some((page, next.map(Some))))
            }
        })
    }

    /// Every item, in the service's order, page by page.
    pub fn stream(self) -> impl Stream<Item = Result<T>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every item: all pages read, one request each.
    ///
    /// # Errors
    /// As [`page`](Self::page), for any page.
    pub async fn collect(self) -> Result<Vec<T>> {
        let mut items = Vec::new();
        let mut pages = std::pin::pin!(self.pages());
        while let Some(page) = pages.next().await {
            items.extend(page?.items);
        }
        Ok(items)
    }
}

/// Awaiting a listing collects every page, as [`Listing::collect`] does.
impl<T: Send + 'static> IntoFuture for Listing<T> {
    type Output = Result<Vec<T>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Vec<T>>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.collect())
    }
}
