//! [`IndexRange`]: the rows of one copy in one partition, sorted by that copy's value.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use futures::{Stream, TryStreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_azure::{Query, Table};
use tablekit_core::edm::{Properties, from_properties};
use tablekit_core::filter::Filter;
use tablekit_core::keys::{KeyEncoder, prefix_range};
use tablekit_core::{Keys, QueryShape, Result, Stored};

use crate::spec::{IndexSpec, Layout};

type RowFilter = Arc<dyn Fn(&Keys) -> bool + Send + Sync>;

/// A range read of one index: the copies of one partition whose values fall in a range, in
/// value order. Nothing is sent until [`IndexRange::stream`] or [`IndexRange::collect`].
///
/// **Requests:** one per page (up to 1,000 rows). **Consistency:** each page is consistent;
/// pages are not a snapshot. Rows that share the copy's prefix without being copies (a
/// longer key next to a [`fixed_width`](crate::CopySpec::fixed_width) copy, such as
/// `empid_000123_2012`) are skipped.
pub struct IndexRange<U> {
    query: Query<Properties>,
    rows: RowFilter,
    _u: PhantomData<fn() -> U>,
}

impl<U> fmt::Debug for IndexRange<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexRange")
            .field("query", &self.query)
            .finish_non_exhaustive()
    }
}

/// Range bounds over encoded values (the key text after the copy's prefix).
pub(crate) type EncodedBounds = (Bound<String>, Bound<String>);

fn encode_bound(bound: Bound<&str>) -> Result<Bound<String>> {
    let encoder = KeyEncoder::new();
    Ok(match bound {
        Bound::Included(v) => Bound::Included(encoder.encode(v)?),
        Bound::Excluded(v) => Bound::Excluded(encoder.encode(v)?),
        Bound::Unbounded => Bound::Unbounded,
    })
}

/// The encoded bounds of a range of plain values.
pub(crate) fn value_bounds<'r>(range: &impl RangeBounds<&'r str>) -> Result<EncodedBounds> {
    Ok((
        encode_bound(range.start_bound().map(|s| *s))?,
        encode_bound(range.end_bound().map(|s| *s))?,
    ))
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

impl<U: DeserializeOwned + Send + 'static> IndexRange<U> {
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
            _u: PhantomData,
        }
    }

    /// At most `n` rows per page (1 to 1,000).
    #[must_use]
    pub fn page_size(mut self, n: usize) -> Self {
        self.query = self.query.with_page_size(n);
        self
    }

    /// Reads the rows as `V` instead (e.g. the projection a copy holds).
    pub fn as_type<V>(self) -> IndexRange<V> {
        IndexRange {
            query: self.query,
            rows: self.rows,
            _u: PhantomData,
        }
    }

    /// How the service executes the read: always [`QueryShape::Range`].
    pub fn shape(&self) -> QueryShape {
        self.query.shape()
    }

    /// The copies, page after page, in value order.
    ///
    /// **Requests:** one per page.
    pub fn stream(self) -> impl Stream<Item = Result<Stored<U>>> + Send + 'static {
        let rows = self.rows;
        self.query
            .stream()
            .try_filter(move |stored| futures::future::ready(rows(&stored.keys)))
            .and_then(|stored| {
                futures::future::ready(from_properties::<U>(&stored.value).map(|value| Stored {
                    keys: stored.keys,
                    etag: stored.etag,
                    timestamp: stored.timestamp,
                    value,
                }))
            })
    }

    /// Every copy in the range.
    ///
    /// **Requests:** one per page.
    ///
    /// # Errors
    /// [`tablekit_core::Error::Decode`] when a row does not fit `U` (read a projected
    /// copy with [`IndexRange::as_type`]); transport and service errors.
    pub async fn collect(self) -> Result<Vec<Stored<U>>> {
        self.stream().try_collect().await
    }
}
