//! [`IndexRange`]: the rows of one copy in one partition, sorted by that copy's value.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_azure::{ContinuationToken, Page, Query, Table};
use tablekit_core::Properties;
use tablekit_core::edm::{field_names, from_properties};
use tablekit_core::filter::Filter;
use tablekit_core::keys::{KeyEncoder, prefix_range};
use tablekit_core::{Keys, QueryShape, Result, Stored};

use crate::spec::key::Part;
use crate::spec::{CopySpec, IndexSpec, Layout};

type RowFilter = Arc<dyn Fn(&Keys) -> bool + Send + Sync>;

/// A range read of one copy: the copies of one partition whose values fall in a range, in
/// value order, read as `R`. A lazy builder like [`Query`]: nothing is sent until a page, the
/// pages, the stream or the rows are asked for, and a [`ContinuationToken`] from a page
/// resumes it later, in another process if need be.
///
/// **Requests:** one per page (up to 1,000 rows). **Consistency:** each page is consistent;
/// pages are not a snapshot. Rows that share the copy's prefix without being copies (a
/// longer key next to a [`with_width`](crate::CopySpec::with_width) copy, such as
/// `empid_000123_2012`) are skipped, so a page may hold fewer rows than its size, even none,
/// and still have a continuation.
pub struct IndexRange<R> {
    query: Query<Properties>,
    rows: RowFilter,
    _r: PhantomData<fn() -> R>,
}

impl<R> fmt::Debug for IndexRange<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexRange")
            .field("query", &self.query)
            .finish_non_exhaustive()
    }
}

impl<R> Clone for IndexRange<R> {
    fn clone(&self) -> Self {
        Self {
            query: self.query.clone(),
            rows: Arc::clone(&self.rows),
            _r: PhantomData,
        }
    }
}

/// Range bounds over encoded values (the key text after the copy's prefix).
pub(crate) type EncodedBounds = (Bound<String>, Bound<String>);

/// The encoded bounds of a range of values of `copy`.
pub(crate) fn value_bounds<T>(
    copy: &CopySpec<T>,
    (start, end): (Bound<Part>, Bound<Part>),
) -> Result<EncodedBounds> {
    let encode = |bound: Bound<Part>| -> Result<Bound<String>> {
        let encoder = KeyEncoder::new();
        Ok(match bound {
            Bound::Included(v) => Bound::Included(encoder.encode(&copy.bound_text(v)?)?),
            Bound::Excluded(v) => Bound::Excluded(encoder.encode(&copy.bound_text(v)?)?),
            Bound::Unbounded => Bound::Unbounded,
        })
    };
    Ok((encode(start)?, encode(end)?))
}

/// The encoded bounds of the values that start with `prefix`.
pub(crate) fn prefix_bounds(prefix: &str) -> Result<EncodedBounds> {
    let range = prefix_range(&KeyEncoder::new().encode(prefix)?);
    Ok((
        Bound::Included(range.start),
        range.end.map_or(Bound::Unbounded, Bound::Excluded),
    ))
}

fn prefixed(bound: &Bound<String>, prefix: &str) -> Bound<String> {
    match bound {
        Bound::Included(s) => Bound::Included(format!("{prefix}{s}")),
        Bound::Excluded(s) => Bound::Excluded(format!("{prefix}{s}")),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn as_str(bound: &Bound<String>) -> Bound<&str> {
    match bound {
        Bound::Included(s) => Bound::Included(s),
        Bound::Excluded(s) => Bound::Excluded(s),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The filter that selects copy `copy`'s rows of `partition` with values in `range`.
pub(crate) fn range_filter<T>(
    spec: &IndexSpec<T>,
    layout: Layout,
    copy: usize,
    partition: &str,
    range: &EncodedBounds,
) -> Filter {
    let prefix = spec.copies()[copy].prefix();
    match layout {
        Layout::Intra => {
            let mut lower = prefixed(&range.0, prefix);
            let mut upper = prefixed(&range.1, prefix);
            if lower == Bound::Unbounded {
                lower = Bound::Included(prefix.to_owned());
            }
            if upper == Bound::Unbounded {
                upper = prefix_range(prefix)
                    .end
                    .map_or(Bound::Unbounded, Bound::Excluded);
            }
            Filter::row_range(partition, as_str(&lower), as_str(&upper))
        }
        Layout::Inter => Filter::row_range(
            format!("{prefix}{partition}"),
            as_str(&range.0),
            as_str(&range.1),
        ),
    }
}

/// A page of rows as read, without the rows that are not the copy's, each decoded as `R`.
fn decode_page<R: DeserializeOwned>(
    rows: &RowFilter,
    page: Page<Stored<Properties>>,
) -> Result<Page<Stored<R>>> {
    let items = page
        .items
        .into_iter()
        .filter(|stored| rows(&stored.keys))
        .map(|stored| {
            from_properties::<R>(&stored.value).map(|value| Stored {
                keys: stored.keys,
                etag: stored.etag,
                timestamp: stored.timestamp,
                value,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Page {
        items,
        continuation: page.continuation,
    })
}

impl<R: DeserializeOwned + Send + 'static> IndexRange<R> {
    pub(crate) fn new<T: Send + Sync + 'static>(
        table: &Table,
        spec: Arc<IndexSpec<T>>,
        layout: Layout,
        copy: usize,
        filter: Filter,
    ) -> Self {
        Self {
            query: table.query::<Properties>().filter(filter),
            rows: Arc::new(move |keys| spec.value_in(layout, copy, keys).is_some()),
            _r: PhantomData,
        }
    }

    /// At most `n` rows per page (1 to 1,000).
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.query = self.query.with_page_size(n);
        self
    }

    /// Continues where an earlier page (of the same range) left off.
    #[must_use]
    pub fn resume(mut self, token: ContinuationToken) -> Self {
        self.query = self.query.resume(token);
        self
    }

    /// Projection (`$select`): only these properties are read into each row (the keys are
    /// always read). Read the rows as a type that needs no more with
    /// [`as_type`](Self::as_type).
    #[must_use]
    pub fn select<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.query = self.query.select(properties);
        self
    }

    /// Projection derived from `R`: only the properties `R` reads (all of them when `R` is
    /// not a plain struct).
    #[must_use]
    pub fn select_fields(mut self) -> Self {
        if let Some(names) = field_names::<R>() {
            self.query = self.query.select(names.iter().copied());
        }
        self
    }

    /// Reads the rows as `V` instead (e.g. a projection).
    pub fn as_type<V>(self) -> IndexRange<V> {
        IndexRange {
            query: self.query,
            rows: self.rows,
            _r: PhantomData,
        }
    }

    /// How the service executes the read: always [`QueryShape::Range`].
    pub fn shape(&self) -> QueryShape {
        self.query.shape()
    }

    /// One page, from the start of the range or where [`resume`](Self::resume) says.
    ///
    /// **Requests:** 1.
    ///
    /// # Errors
    /// [`tablekit_core::Error::Decode`] when a row does not fit `R`; as
    /// [`Query::page`].
    pub async fn page(&self) -> Result<Page<Stored<R>>> {
        decode_page(&self.rows, self.query.page().await?)
    }

    /// Every page, following continuation tokens to the end of the range.
    ///
    /// **Requests:** one per page.
    pub fn pages(self) -> impl Stream<Item = Result<Page<Stored<R>>>> + Send + 'static {
        let rows = self.rows;
        self.query
            .pages()
            .map(move |page| page.and_then(|page| decode_page(&rows, page)))
    }

    /// The copies, page after page, in value order.
    ///
    /// **Requests:** one per page.
    pub fn stream(self) -> impl Stream<Item = Result<Stored<R>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every copy in the range.
    ///
    /// **Requests:** one per page.
    ///
    /// # Errors
    /// [`tablekit_core::Error::Decode`] when a row does not fit `R`; transport and service
    /// errors.
    pub async fn collect(self) -> Result<Vec<Stored<R>>> {
        self.stream().try_collect().await
    }

    /// The first copy in the range, if any.
    ///
    /// **Requests:** one per page read until a copy is found (usually 1).
    ///
    /// # Errors
    /// As [`collect`](Self::collect).
    pub async fn first(mut self) -> Result<Option<Stored<R>>> {
        self.query = self.query.with_read_ahead(false);
        let mut rows = std::pin::pin!(self.stream());
        rows.next().await.transpose()
    }
}
