//! Queries: typed filters, projection, limits, pages with resumable continuation tokens.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use azure_core::{Method, Url};
use azure_storage::clients::ServiceType;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tablekit_core::Properties;
use tablekit_core::edm::{field_names, from_properties, parse_page, parse_page_each};
use tablekit_core::filter::Filter;
use tablekit_core::limits::{MAX_PAGE_SIZE, validate_property_identifier};
use tablekit_core::{ETag, Error, ErrorKind, Keys, Limit, QueryShape, Result, Stored, Target};

use super::codec::EntityCheck;
use super::{ACCEPT_MINIMAL, Table};
use crate::governor::{Charge, partition_name};
use crate::metrics::RequestKind;
use crate::settings::ScanAction;

/// A page as received: its body, not yet parsed, and where the next one starts.
struct RawPage {
    body: bytes::Bytes,
    continuation: Option<ContinuationToken>,
}

/// Sends one page request. It is admitted while its partition (when the filter pins one) and
/// the account have budget left; its entities are charged when the page is parsed.
async fn fetch_raw(
    table: Table,
    url: Url,
    shape: QueryShape,
    pinned: Option<String>,
) -> Result<RawPage> {
    let outcome = table
        .account()
        .send_charged(
            ServiceType::Table,
            RequestKind::Query,
            &table.target(),
            &Charge::query(table.name(), pinned.as_deref()),
            || {
                table.request(
                    Method::Get,
                    url.clone(),
                    &[("accept", ACCEPT_MINIMAL)],
                    None,
                )
            },
        )
        .await;
    outcome
        .span
        .record("tablekit.query.shape", tracing::field::debug(shape));
    let response = outcome.result?;
    let continuation = response
        .header("x-ms-continuation-nextpartitionkey")
        .map(|pk| ContinuationToken {
            next_partition_key: pk.to_owned(),
            next_row_key: response
                .header("x-ms-continuation-nextrowkey")
                .map(str::to_owned),
        });
    Ok(RawPage {
        body: response.body,
        continuation,
    })
}

/// Charges a page's entities to the budgets and the meter, by partition (pages come grouped
/// by partition, so runs are counted together). A page without entities costs one: the
/// service did the work of answering it.
fn charge_returned<'a>(metrics: &crate::Metrics, table: &str, pks: impl Iterator<Item = &'a str>) {
    let served = |pk: &str, n| metrics.served(Some(&partition_name(table, pk)), n, true);
    let mut run: Option<(&str, u64)> = None;
    let mut any = false;
    for pk in pks {
        any = true;
        match &mut run {
            Some((current, n)) if *current == pk => *n += 1,
            _ => {
                if let Some((p, n)) = run.take() {
                    served(p, n);
                }
                run = Some((pk, 1));
            }
        }
    }
    if let Some((p, n)) = run {
        served(p, n);
    }
    if !any {
        metrics.served(None, 1, true);
    }
}

/// The next page, requested while the current one is consumed. Dropping it (the stream was
/// dropped, or failed) cancels the request.
struct Prefetch(Option<tokio::task::JoinHandle<Result<RawPage>>>);

impl Prefetch {
    fn spawn(fetch: impl std::future::Future<Output = Result<RawPage>> + Send + 'static) -> Self {
        Self(Some(tokio::spawn(fetch)))
    }

    async fn join(mut self) -> Result<RawPage> {
        match self.0.take() {
            Some(handle) => handle
                .await
                .unwrap_or_else(|e| Err(Error::transport("the page request was cancelled", e))),
            None => Err(Error::transport(
                "the page request was already taken",
                std::io::Error::other("prefetch"),
            )),
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

/// The `$top` of one request: what is left of the total, capped by the page size.
fn per_request(remaining: Option<usize>, page_size: Option<usize>) -> Option<usize> {
    match (remaining, page_size) {
        (Some(r), Some(p)) => Some(r.min(p)),
        (r, p) => r.or(p),
    }
}

/// A query checked and rendered, before its first request.
#[derive(Debug, Clone, Default)]
struct Prepared {
    /// The `$filter` text.
    filter: Option<String>,
    /// The `$select` text.
    select: Option<String>,
    /// What a decoded entity must satisfy, when the codec rewrote the filter.
    check: Option<EntityCheck>,
}

/// The `$select` text for a projection of `properties`.
fn select_param(properties: &[String]) -> String {
    // Azure always returns the system properties with a projection; Azurite does not.
    // Asking for them explicitly keeps `Stored` complete on both.
    let mut all = String::from("PartitionKey,RowKey,Timestamp");
    for name in properties
        .iter()
        .filter(|n| !matches!(n.as_str(), "PartitionKey" | "RowKey" | "Timestamp"))
    {
        all.push(',');
        all.push_str(name);
    }
    all
}

/// Where a query continues: the service's next partition and row keys. Serialize it (serde,
/// or `Display`/`FromStr`) to resume later — in another process if need be — with
/// [`Query::resume`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContinuationToken {
    next_partition_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_row_key: Option<String>,
}

impl fmt::Display for ContinuationToken {
    /// `<next partition key>` or `<next partition key> <next row key>`: the service's opaque
    /// values contain no spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.next_partition_key)?;
        if let Some(rk) = &self.next_row_key {
            write!(f, " {rk}")?;
        }
        Ok(())
    }
}

impl FromStr for ContinuationToken {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let mut parts = s.split(' ');
        let next_partition_key =
            parts
                .next()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| Error::InvalidConfig {
                    part: "continuation token".into(),
                    reason: "empty".into(),
                })?;
        let next_row_key = parts.next().map(str::to_owned);
        if parts.next().is_some() {
            return Err(Error::InvalidConfig {
                part: "continuation token".into(),
                reason: "malformed".into(),
            });
        }
        Ok(Self {
            next_partition_key: next_partition_key.to_owned(),
            next_row_key,
        })
    }
}

/// One page of a multi-entity read: its items, and where to continue.
///
/// Every paged read of every crate returns this shape: a [`Query`] pages of
/// `Page<Stored<T>>`, a [`PerEntity`] read pages of `Page<EntityResult<T>>`, and a pattern
/// whose reads resume differently carries its own token type (`Token`), which converts to and
/// from a string as [`ContinuationToken`] does.
///
/// A page may be short — even empty — and still have a continuation: only a missing
/// continuation means the end.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T, Token = ContinuationToken> {
    /// The items, in the read's order ((PartitionKey, RowKey) for a query).
    pub items: Vec<T>,
    /// Where the next page starts; `None` at the end.
    pub continuation: Option<Token>,
}

impl<T, Token> Page<T, Token> {
    /// A page of `items` continuing at `continuation`.
    pub fn new(items: Vec<T>, continuation: Option<Token>) -> Self {
        Self {
            items,
            continuation,
        }
    }

    /// Whether the read ends with this page.
    pub fn is_last(&self) -> bool {
        self.continuation.is_none()
    }

    /// The same page with each item mapped by `f`.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U, Token> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            continuation: self.continuation,
        }
    }
}

/// A query on a [`Table`], built with [`Table::query`]. Nothing is sent until a page or the
/// stream is asked for. On a handle with a codec ([`Table::with_codec`]), the filter and the
/// projection are checked by the codec before any request and every entity is decoded.
///
/// Requests: one per page (≤ 1,000 entities per page; the service also ends a page after 5 s
/// or at a partition boundary). Consistency: each page is consistent; pages are not a
/// snapshot of the whole table.
pub struct Query<T> {
    table: Table,
    filter: Option<Filter>,
    select: Option<Vec<String>>,
    top: Option<usize>,
    page_size: Option<usize>,
    read_ahead: bool,
    start: Option<ContinuationToken>,
    scan: Option<ScanAction>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Query<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            filter: self.filter.clone(),
            select: self.select.clone(),
            top: self.top,
            page_size: self.page_size,
            read_ahead: self.read_ahead,
            start: self.start.clone(),
            scan: self.scan,
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Query<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Query")
            .field("table", &self.table.name())
            .field("filter", &self.filter.as_ref().map(Filter::render))
            .field("select", &self.select)
            .field("top", &self.top)
            .field("page_size", &self.page_size)
            .field("read_ahead", &self.read_ahead)
            .finish_non_exhaustive()
    }
}

impl Table {
    /// A query returning entities as `T` (use [`tablekit_core::Properties`] for untyped
    /// access; [`Table::typed`] names `T` once for every call). Without a filter it reads the
    /// whole table (a table scan). Nothing is sent until a page or the stream is asked for.
    ///
    /// # Examples
    /// ```no_run
    /// use futures::TryStreamExt as _;
    /// use tablekit_core::Properties;
    /// use tablekit_core::filter::Filter;
    ///
    /// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// // A partition scan, page by page (≤ 1,000 entities per request).
    /// let mut sales = std::pin::pin!(table
    ///     .query::<Properties>()
    ///     .filter(Filter::partition("Sales").and(Filter::ge("Age", 30)))
    ///     .select(["Email"])
    ///     .stream());
    /// while let Some(employee) = sales.try_next().await? {
    ///     println!("{}: {:?}", employee.keys, employee.value.get_str("Email").unwrap());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn query<T>(&self) -> Query<T> {
        Query {
            table: self.clone(),
            filter: None,
            select: None,
            top: None,
            page_size: None,
            read_ahead: true,
            start: None,
            scan: None,
            _t: PhantomData,
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> Query<T> {
    /// Only entities matching `filter`. Called again, the filters are combined with `and`:
    /// `.filter(Filter::partition("Sales")).filter(Filter::ge("Age", 30))` is the partition
    /// scan `PartitionKey eq 'Sales' and Age ge 30`, the same query as one `filter` of the
    /// two joined with [`Filter::and`].
    ///
    /// Sends nothing; [`Query::shape`] tells how the service will execute the result.
    #[must_use]
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(earlier) => earlier.and(filter),
            None => filter,
        });
        self
    }

    /// Projection (`$select`): only these properties are returned as the value; the keys,
    /// Timestamp and ETag of each [`Stored`] are always filled in.
    ///
    /// Azure returns PartitionKey, RowKey, Timestamp and the ETag with any projection, but
    /// Azurite returns only the ETag; so tablekit adds `PartitionKey,RowKey,Timestamp` to every
    /// `$select` it sends, which keeps `Stored` complete on both and costs a few bytes per
    /// entity.
    #[must_use]
    pub fn select<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.select = Some(properties.into_iter().map(Into::into).collect());
        self
    }

    /// Projection derived from `T`: only the properties `T` reads are returned. Falls back to
    /// all properties when `T` is not a plain struct (maps, enums, flattened fields).
    #[must_use]
    pub fn select_fields(mut self) -> Self {
        self.select =
            field_names::<T>().map(|names| names.iter().map(|n| (*n).to_owned()).collect());
        self
    }

    /// At most `n` entities in total (`$top`, continued across pages when the service
    /// returns fewer).
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

    /// Whether [`Query::pages`] and [`Query::stream`] request the next page as soon as a page
    /// arrives (default: yes; never with [`Query::top`]). Turn it off to hold at most one
    /// page and send no request before the caller needs it — for example when many queries
    /// are consumed side by side and memory matters more than latency.
    #[must_use]
    pub fn with_read_ahead(mut self, on: bool) -> Self {
        self.read_ahead = on;
        self
    }

    /// Continue where an earlier page left off.
    #[must_use]
    pub fn resume(mut self, token: ContinuationToken) -> Self {
        self.start = Some(token);
        self
    }

    /// Send this query even if the account's [`crate::ScanPolicy`] would refuse its shape.
    #[must_use]
    pub fn allow_scan(mut self) -> Self {
        self.scan = Some(ScanAction::Allow);
        self
    }

    /// The query's shape (how the service will execute it).
    pub fn shape(&self) -> QueryShape {
        self.filter
            .as_ref()
            .map_or(QueryShape::TableScan, Filter::shape)
    }

    /// The one partition the filter confines the query to, if any.
    fn pinned(&self) -> Option<String> {
        self.filter
            .as_ref()
            .and_then(Filter::partition_key)
            .map(str::to_owned)
    }

    /// Validates the query (through the handle's codec too) and renders its filter and
    /// projection, applying the scan policy.
    fn prepare(&self) -> Result<Prepared> {
        if let Some(n) = self.page_size {
            if n == 0 || n > MAX_PAGE_SIZE {
                return Err(Error::LimitExceeded {
                    limit: Limit::PageSize,
                    actual: n,
                });
            }
        }
        for name in self.select.iter().flatten() {
            validate_property_identifier(name)?;
        }
        let codec = self.table.codec();
        let (filter, mut check) = match (codec, &self.filter) {
            (Some(codec), Some(filter)) => {
                let prepared = codec.prepare_filter(filter)?;
                (Some(prepared.filter), prepared.check)
            }
            (_, filter) => (filter.clone(), None),
        };
        let select = match (codec, &self.select) {
            (Some(codec), Some(selected)) => {
                // A rewritten filter's check reads properties the caller may not select.
                let mut asked = selected.clone();
                if let Some(c) = check.take() {
                    let (c, extra) = c.for_projection(selected);
                    asked.extend(extra);
                    check = Some(c);
                }
                let requested = codec.projection(&asked)?;
                for name in &requested {
                    validate_property_identifier(name)?;
                }
                Some(select_param(&requested))
            }
            (None, Some(selected)) => Some(select_param(selected)),
            (_, None) => None,
        };
        let rendered = filter.as_ref().map(Filter::render).transpose()?;
        let shape = self.shape();
        let policy = self.table.account().settings().scan_policy;
        let action = self.scan.unwrap_or(match shape {
            QueryShape::TableScan => policy.table_scans,
            QueryShape::PartitionScan => policy.partition_scans,
            QueryShape::Point | QueryShape::Range => ScanAction::Allow,
        });
        let shown = || rendered.clone().unwrap_or_else(|| "(no filter)".into());
        match action {
            ScanAction::Allow => {}
            ScanAction::Warn => {
                // A filter may quote key values: logged only when the account records keys.
                let filter = (self.table.account().settings().telemetry.record_keys).then(shown);
                tracing::warn!(target: "tablekit", table = %self.table.name(), ?shape, filter, "expensive query")
            }
            ScanAction::Deny => {
                return Err(Error::ScanDenied {
                    shape,
                    filter: shown(),
                });
            }
        }
        Ok(Prepared {
            filter: rendered,
            select,
            check,
        })
    }

    /// Fetches one page, starting at the query's start (or its [`Query::resume`] token).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// Before any request: invalid filter or property names, page size out of range,
    /// [`Error::ScanDenied`], a filter or projection the handle's codec refuses
    /// ([`Table::with_codec`]; encryption refuses a filter on an encrypted property with
    /// [`Error::InvalidFilter`]). Then [`Error::NotFound`] for a missing table,
    /// [`Error::Decode`] naming the table, keys and property when an entity does not fit `T`,
    /// and the codec's decoding errors.
    pub async fn page(&self) -> Result<Page<Stored<T>>> {
        let prepared = self.prepare()?;
        self.fetch(
            &prepared,
            self.start.as_ref(),
            per_request(self.top, self.page_size),
        )
        .await
    }

    /// The URL of one page request.
    fn page_url(
        &self,
        prepared: &Prepared,
        start: Option<&ContinuationToken>,
        top: Option<usize>,
    ) -> Url {
        let (filter, select) = (prepared.filter.as_deref(), &prepared.select);
        let top = top.map(|t| t.min(MAX_PAGE_SIZE).to_string());
        let mut query: Vec<(&str, &str)> = Vec::with_capacity(5);
        if let Some(f) = filter {
            query.push(("$filter", f));
        }
        if let Some(s) = &select {
            query.push(("$select", s));
        }
        if let Some(t) = &top {
            query.push(("$top", t));
        }
        if let Some(token) = start {
            query.push(("NextPartitionKey", &token.next_partition_key));
            if let Some(rk) = &token.next_row_key {
                query.push(("NextRowKey", rk));
            }
        }
        self.table.url(&format!("{}()", self.table.name()), &query)
    }

    async fn fetch(
        &self,
        prepared: &Prepared,
        start: Option<&ContinuationToken>,
        top: Option<usize>,
    ) -> Result<Page<Stored<T>>> {
        let raw = fetch_raw(
            self.table.clone(),
            self.page_url(prepared, start, top),
            self.shape(),
            self.pinned(),
        )
        .await?;
        self.parse(raw, prepared.check.as_ref()).await
    }

    /// Reads a page's entities as `T`s, decoded by the handle's codec if it has one (without
    /// one, the page is parsed straight into `T`s, as before codecs existed).
    async fn parse(&self, raw: RawPage, check: Option<&EntityCheck>) -> Result<Page<Stored<T>>> {
        let items = <Stored<T> as Items<T>>::parse(self, check, &raw.body).await?;
        Ok(Page {
            items,
            continuation: raw.continuation,
        })
    }

    /// Reads each entity of a page as `T` on its own: one that does not decode (or, with a
    /// codec, does not decrypt) becomes an [`EntityError`] in its place; a malformed page, or
    /// a codec failure that is not the entity's own (its key service is unreachable, say),
    /// is the page's error.
    async fn parse_each(
        &self,
        check: Option<&EntityCheck>,
        body: &[u8],
    ) -> Result<Vec<EntityResult<T>>> {
        let table = self.table.name();
        let in_table =
            |s: &Stored<Properties>, e: Error| e.with_target(Target::entity(table, s.keys.clone()));
        // `None`: an entity the codec's rewritten filter matched that the caller's does not.
        let items: Vec<Result<Option<EntityResult<T>>>> = match self.table.codec() {
            // Each entity on its own: one whose stored values do not all read as their own
            // EDM types is `T` if `T` reads without them, as a plain query reads it.
            None => parse_page_each::<T>(body)
                .map_err(|e| self.table.in_table(e))?
                .into_iter()
                .map(
                    |(s, direct)| match direct.unwrap_or_else(|| from_properties::<T>(&s.value)) {
                        Ok(value) => Ok(Some(Ok(Stored {
                            keys: s.keys,
                            etag: s.etag,
                            timestamp: s.timestamp,
                            value,
                        }))),
                        Err(e) => {
                            let error = in_table(&s, e);
                            EntityError::of(s, error).map(Some)
                        }
                    },
                )
                .collect(),
            Some(codec) => {
                // The codec decodes bags: an entity that does not read into one is set aside
                // before it, with the properties that read.
                let each =
                    parse_page_each::<Properties>(body).map_err(|e| self.table.in_table(e))?;
                futures::stream::iter(each)
                    .map(|(s, unreadable)| {
                        let codec = codec.clone();
                        async move {
                            if let Some(Err(e)) = unreadable {
                                let error = in_table(&s, e);
                                return EntityError::of(s, error).map(Some);
                            }
                            // Kept to report the entity as stored if it does not decode.
                            let kept = s.clone();
                            let mut decoded =
                                match self.table.decode_properties(codec.as_ref(), s).await {
                                    Ok(decoded) => decoded,
                                    Err(error) => return EntityError::of(kept, error).map(Some),
                                };
                            if check.is_some_and(|c| !c.keep(&mut decoded.value)) {
                                return Ok(None);
                            }
                            match self.table.read_as::<T>(decoded) {
                                Ok(stored) => Ok(Some(Ok(stored))),
                                Err(error) => EntityError::of(kept, error).map(Some),
                            }
                        }
                    })
                    .buffered(super::codec::CODEC_CONCURRENCY)
                    .collect()
                    .await
            }
        };
        items.into_iter().filter_map(Result::transpose).collect()
    }

    /// All pages, following continuation tokens until there is none (an empty page with a
    /// token is followed, not taken for the end) or `top` entities were returned.
    ///
    /// Without `top`, the next page is requested as soon as a page arrives, so the service
    /// works on it while this one is parsed and consumed; dropping the stream cancels it.
    /// [`Query::with_read_ahead`] turns this off.
    ///
    /// Requests: one per page (a stream dropped early may have sent one more). Memory: at
    /// most two pages (one without read-ahead).
    pub fn pages(self) -> impl Stream<Item = Result<Page<Stored<T>>>> + Send + 'static {
        self.pages_of::<Stored<T>>()
            .map_ok(|(items, continuation)| Page {
                items,
                continuation,
            })
    }

    /// Reads every entity on its own instead of failing at the first that does not decode
    /// into `T`: see [`PerEntity`]. Nothing is sent yet.
    #[must_use]
    pub fn per_entity(self) -> PerEntity<T> {
        PerEntity { query: self }
    }

    /// The pages of this query, each entity read as `I` ([`Items`]).
    fn pages_of<I: Items<T>>(
        self,
    ) -> impl Stream<Item = Result<(Vec<I>, Option<ContinuationToken>)>> + Send + 'static {
        struct State<T> {
            query: Query<T>,
            prepared: Prepared,
            next: Option<ContinuationToken>,
            remaining: Option<usize>,
            ahead: Option<Prefetch>,
            done: bool,
        }
        let prepared = self.prepare();
        let state = State {
            next: self.start.clone(),
            remaining: self.top,
            query: self,
            prepared: Prepared::default(),
            ahead: None,
            done: false,
        };
        futures::stream::unfold((state, Some(prepared)), |(mut st, prepared)| async move {
            if let Some(prepared) = prepared {
                match prepared {
                    Ok(prepared) => st.prepared = prepared,
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e), (st, None)));
                    }
                }
            }
            if st.done || st.remaining == Some(0) {
                return None;
            }
            let q = &st.query;
            let raw = match st.ahead.take() {
                Some(ahead) => ahead.join().await,
                None => {
                    let url = q.page_url(
                        &st.prepared,
                        st.next.as_ref(),
                        per_request(st.remaining, q.page_size),
                    );
                    fetch_raw(q.table.clone(), url, q.shape(), q.pinned()).await
                }
            };
            let raw = match raw {
                Ok(raw) => raw,
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), (st, None)));
                }
            };
            st.next = raw.continuation.clone();
            st.done = st.next.is_none();
            // Without a total limit the next page is certainly wanted: request it now, so the
            // service works on it while this page is parsed and consumed. With `top`, the
            // next request's size depends on this page's count, so it waits.
            if let (Some(next), None, true) = (&st.next, st.remaining, q.read_ahead) {
                let url = q.page_url(&st.prepared, Some(next), q.page_size);
                st.ahead = Some(Prefetch::spawn(fetch_raw(
                    q.table.clone(),
                    url,
                    q.shape(),
                    q.pinned(),
                )));
            }
            match I::parse(q, st.prepared.check.as_ref(), &raw.body).await {
                Ok(mut items) => {
                    if let Some(r) = st.remaining.as_mut() {
                        items.truncate(*r);
                        *r -= items.len();
                    }
                    Some((Ok((items, raw.continuation)), (st, None)))
                }
                Err(e) => {
                    st.done = true;
                    st.ahead = None;
                    Some((Err(e), (st, None)))
                }
            }
        })
    }

    /// Every matching entity, page after page (see [`Query::pages`]).
    ///
    /// Requests: one per page (a stream dropped early may have sent one more). Memory: at
    /// most two pages.
    pub fn stream(self) -> impl Stream<Item = Result<Stored<T>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every matching entity, collected.
    ///
    /// # Errors
    /// As [`Query::page`].
    pub async fn collect(self) -> Result<Vec<Stored<T>>> {
        self.stream().try_collect().await
    }

    /// The first matching entity, if any (a `$top=1` query that follows empty pages).
    ///
    /// # Errors
    /// As [`Query::page`].
    pub async fn first(self) -> Result<Option<Stored<T>>> {
        let mut stream = Box::pin(self.top(1).stream());
        stream.next().await.transpose()
    }
}

/// How a page's entities are read: all as `Stored<T>` (the first that does not decode fails
/// the page), or each on its own ([`EntityResult`]).
trait Items<T>: Sized + Send + 'static {
    /// The entities of a page body, charged to the meter and the budgets.
    fn parse(
        query: &Query<T>,
        check: Option<&EntityCheck>,
        body: &[u8],
    ) -> impl std::future::Future<Output = Result<Vec<Self>>> + Send;
}

/// Counts a page's entities as read and charges them, by partition, whatever became of them.
fn count_read<'a>(table: &Table, pks: impl ExactSizeIterator<Item = &'a str>) {
    let metrics = table.account().metrics();
    metrics.entities_read(pks.len());
    charge_returned(metrics, table.name(), pks);
}

impl<T: DeserializeOwned + Send + 'static> Items<T> for Stored<T> {
    async fn parse(
        query: &Query<T>,
        check: Option<&EntityCheck>,
        body: &[u8],
    ) -> Result<Vec<Self>> {
        let table = &query.table;
        let items = match table.codec() {
            None => parse_page::<T>(body).map_err(|e| table.in_table(e))?,
            Some(codec) => {
                let stored = parse_page::<Properties>(body).map_err(|e| table.in_table(e))?;
                table.decode_all(codec.as_ref(), stored, check).await?
            }
        };
        count_read(table, items.iter().map(|s| s.keys.pk()));
        Ok(items)
    }
}

impl<T: DeserializeOwned + Send + 'static> Items<T> for EntityResult<T> {
    async fn parse(
        query: &Query<T>,
        check: Option<&EntityCheck>,
        body: &[u8],
    ) -> Result<Vec<Self>> {
        let items = query.parse_each(check, body).await?;
        count_read(
            &query.table,
            items.iter().map(|item| match item {
                Ok(stored) => stored.keys.pk(),
                Err(bad) => bad.keys.pk(),
            }),
        );
        Ok(items)
    }
}

/// One entity of a [`PerEntity`] read: the entity as `T`, or why it could not be read.
pub type EntityResult<T> = std::result::Result<Stored<T>, EntityError>;

/// An entity a [`PerEntity`] read returned but could not read as `T`: its keys, its ETag and
/// timestamp, its properties as stored, and the error — [`Error::Decode`] naming the
/// property that does not fit, or, through a codec, the codec's own (client-side encryption
/// reports an entity that does not decrypt or authenticate as [`Error::Corrupt`]).
///
/// `Display` is the error's, which names the table and the keys. `?` turns it into that
/// [`Error`].
#[derive(Debug)]
#[non_exhaustive]
pub struct EntityError {
    /// The entity's keys.
    pub keys: Keys,
    /// Its ETag: a conditional repair or delete of exactly this version can follow.
    pub etag: ETag,
    /// Its last-modified time, when the response carried one.
    pub timestamp: Option<chrono::DateTime<chrono::Utc>>,
    /// Its properties as the service returned them, before any codec (ciphertext, for an
    /// encrypted entity); only those of the projection when the query has one.
    pub properties: Properties,
    /// Why it could not be read: its [`ErrorKind`] is [`Decode`](ErrorKind::Decode) or
    /// [`Corrupt`](ErrorKind::Corrupt).
    pub error: Error,
}

impl EntityError {
    /// `stored` as a bad entity when `error` is the entity's own (decoding, or a codec's
    /// verdict on its data); any other error (the codec's key service failed, say) is the
    /// page's, and ends the read.
    fn of<T>(stored: Stored<Properties>, error: Error) -> Result<EntityResult<T>> {
        match error.kind() {
            ErrorKind::Decode | ErrorKind::Corrupt => Ok(Err(EntityError {
                keys: stored.keys,
                etag: stored.etag,
                timestamp: stored.timestamp,
                properties: stored.value,
                error,
            })),
            _ => Err(error),
        }
    }
}

impl fmt::Display for EntityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for EntityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<EntityError> for Error {
    fn from(bad: EntityError) -> Self {
        bad.error
    }
}

impl<T, Token> Page<EntityResult<T>, Token> {
    /// The entities of a [`PerEntity`] page that could not be read.
    pub fn errors(&self) -> impl Iterator<Item = &EntityError> {
        self.items.iter().filter_map(|item| item.as_ref().err())
    }
}

/// A [`Query`] that reads each entity on its own ([`Query::per_entity`]): an entity that does
/// not decode into `T` — or, on a handle with a codec, does not decrypt or authenticate — is
/// an [`EntityError`] carrying its keys, ETag, stored properties and error, in its place in
/// the results, and the read goes on. A plain [`Query`] stops at the first such entity
/// (fail-fast, the default).
///
/// Only the entity's own failures are set aside ([`ErrorKind::Decode`] and
/// [`ErrorKind::Corrupt`]); a failed request, a malformed response, or a codec that cannot
/// reach its keys ends the read with that error, as a plain query does.
///
/// Requests: exactly those of the same [`Query`] — one per page, the same pages and
/// continuation tokens; bad entities cost no request of their own. Every entity returned,
/// bad ones included, counts toward [`Query::top`], the metrics and the throughput budgets.
/// Consistency: as a plain query — each page is consistent, pages are not a snapshot of the
/// table. Cost: each entity is read into [`Properties`] first and then into `T` (the plain
/// query reads straight into `T`), and, on a handle with a codec, its stored properties are
/// copied before decoding in case it fails.
///
/// ```no_run
/// use futures::TryStreamExt as _;
/// use tablekit_core::filter::Filter;
///
/// #[derive(serde::Deserialize)]
/// struct Order { #[serde(rename = "Total")] total: i64 }
///
/// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
/// let mut orders = std::pin::pin!(table
///     .query::<Order>()
///     .filter(Filter::partition("2026-11"))
///     .per_entity()
///     .stream());
/// while let Some(order) = orders.try_next().await? {
///     match order {
///         Ok(order) => println!("{}: {}", order.keys, order.value.total),
///         Err(bad) => eprintln!("skipped {}: {}", bad.keys, bad.error),
///     }
/// }
/// # Ok(()) }
/// ```
pub struct PerEntity<T> {
    query: Query<T>,
}

impl<T> Clone for PerEntity<T> {
    fn clone(&self) -> Self {
        Self {
            query: self.query.clone(),
        }
    }
}

impl<T> fmt::Debug for PerEntity<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PerEntity").field(&self.query).finish()
    }
}

impl<T: DeserializeOwned + Send + 'static> PerEntity<T> {
    /// The query this reads.
    pub fn query(&self) -> &Query<T> {
        &self.query
    }

    /// Fetches one page, starting at the query's start (or its [`Query::resume`] token).
    ///
    /// Requests: 1.
    ///
    /// # Errors
    /// As [`Query::page`], except that an entity that does not decode is an [`EntityError`]
    /// in the page.
    pub async fn page(&self) -> Result<Page<EntityResult<T>>> {
        let q = &self.query;
        let prepared = q.prepare()?;
        let url = q.page_url(&prepared, q.start.as_ref(), per_request(q.top, q.page_size));
        let raw = fetch_raw(q.table.clone(), url, q.shape(), q.pinned()).await?;
        let items =
            <EntityResult<T> as Items<T>>::parse(q, prepared.check.as_ref(), &raw.body).await?;
        Ok(Page {
            items,
            continuation: raw.continuation,
        })
    }

    /// All pages (see [`Query::pages`]: the same requests, read-ahead and memory).
    pub fn pages(self) -> impl Stream<Item = Result<Page<EntityResult<T>>>> + Send + 'static {
        self.query
            .pages_of::<EntityResult<T>>()
            .map_ok(|(items, continuation)| Page {
                items,
                continuation,
            })
    }

    /// Every matching entity, each as `T` or as an [`EntityError`] (see [`Query::stream`]).
    /// The stream's own error (`Err` of the outer `Result`) ends it.
    pub fn stream(self) -> impl Stream<Item = Result<EntityResult<T>>> + Send + 'static {
        self.pages()
            .map_ok(|page| futures::stream::iter(page.items.into_iter().map(Ok)))
            .try_flatten()
    }

    /// Every matching entity, collected: the entities read and, apart, those that could not
    /// be, both in (PartitionKey, RowKey) order.
    ///
    /// # Errors
    /// As [`Query::page`], but never for an entity that does not decode.
    pub async fn collect(self) -> Result<(Vec<Stored<T>>, Vec<EntityError>)> {
        let mut good = Vec::new();
        let mut bad = Vec::new();
        let mut stream = std::pin::pin!(self.stream());
        while let Some(item) = stream.try_next().await? {
            match item {
                Ok(stored) => good.push(stored),
                Err(error) => bad.push(error),
            }
        }
        Ok((good, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Account;
    use tablekit_core::Properties;

    fn sent_select(query: &Query<Properties>) -> Option<String> {
        query
            .page_url(&query.prepare().unwrap(), None, None)
            .query_pairs()
            .find(|(k, _)| k == "$select")
            .map(|(_, v)| v.into_owned())
    }

    #[test]
    fn a_projection_asks_for_the_system_properties_once_and_first() {
        let table = Account::emulator().table("Projection").unwrap();
        let query = table.query::<Properties>();
        assert_eq!(sent_select(&query), None, "no projection, no $select");
        assert_eq!(
            sent_select(&query.clone().select(["Email"])).as_deref(),
            Some("PartitionKey,RowKey,Timestamp,Email")
        );
        assert_eq!(
            sent_select(&query.select(["RowKey", "Email", "Timestamp"])).as_deref(),
            Some("PartitionKey,RowKey,Timestamp,Email"),
            "system properties the caller names are not repeated"
        );
    }
}
