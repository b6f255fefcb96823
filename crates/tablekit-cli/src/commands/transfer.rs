//! What export, import and copy share: key ranges, page reading that stops on Ctrl-C, and
//! bulk writes whose unknown outcomes are retried before they are reported.

use futures::{Stream, StreamExt as _};
use tablekit::azure::{
    Account, BulkOptions, ContinuationToken, EntityResult, Page, Query, Table, TableService,
};
use tablekit::core::batch::Operation;
use tablekit::core::filter::Filter;
use tablekit::core::limits::cosmos;
use tablekit::core::{Error, ErrorKind, Properties};

use super::Ctx;
use crate::cli::{RangeArgs, ScopeArgs};
use crate::exit::{CliError, CliResult};
use crate::progress::{Reporter, bulk_options};
use crate::ranges::{self, KeyRange};

/// Rounds of re-sending operations whose outcome stayed unknown. Every mode the tool writes
/// with is safe to repeat: upserts are idempotent, and inserts count an identical stored
/// entity as written.
const UNKNOWN_RETRIES: usize = 3;

/// Checks one operation against the limits of the service behind `table` where they are
/// stricter than Azure Table storage's (the Cosmos DB Table API: a RowKey of at most 255
/// bytes, no reserved property names), so that the row is refused on its own before anything
/// is sent instead of failing the whole bulk write.
///
/// # Errors
/// The limit or name the operation breaks.
pub(crate) fn check_for_service(table: &Table, op: &Operation) -> Result<(), Error> {
    if table.account().settings().table_service != TableService::Cosmos {
        return Ok(());
    }
    cosmos::validate_row_key(op.keys().rk())?;
    op.body().map_or(Ok(()), cosmos::validate_entity_body)
}

/// Checks the range options before anything is sent.
///
/// # Errors
/// Usage errors for a page size outside 1–1,000, zero parallelism or `--split 0`.
pub(crate) fn check_range_args(args: &RangeArgs) -> CliResult<()> {
    if !(1..=1000).contains(&args.page_size) {
        return Err(CliError::usage("--page-size must be 1 to 1000"));
    }
    if args.parallel == 0 {
        return Err(CliError::usage("--parallel must be at least 1"));
    }
    if args.split == Some(0) {
        return Err(CliError::usage("--split must be at least 1"));
    }
    Ok(())
}

/// Whether the options ask for several parts.
pub(crate) fn is_multi(args: &RangeArgs) -> bool {
    args.split.is_some_and(|n| n > 1) || args.partitions_from.is_some() || args.partitions.len() > 1
}

/// The range of a single-part transfer: the one `--partition`, else the whole table.
pub(crate) fn single_range(args: &RangeArgs) -> KeyRange {
    match args.partitions.as_slice() {
        [pk] => KeyRange::Partition(pk.clone()),
        _ => KeyRange::All,
    }
}

/// What part of the entities a transfer moves: `--filter` (and `--since`) and `--select`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// Entities must also match this.
    pub(crate) filter: Option<Filter>,
    /// Only these properties.
    pub(crate) select: Option<Vec<String>>,
}

impl Scope {
    /// The scope the options give; `since` is export's `--since`.
    ///
    /// # Errors
    /// Usage errors for a filter `query` would refuse, an empty or key-naming selection, a
    /// malformed time, and `--since` on the Cosmos DB Table API.
    pub(crate) fn new(account: &Account, args: &ScopeArgs, since: Option<&str>) -> CliResult<Self> {
        let mut filter = args
            .filter
            .as_deref()
            .map(|text| {
                let filter = Filter::parse(text)?;
                filter.render()?;
                Ok::<_, Error>(filter)
            })
            .transpose()
            .map_err(|e| CliError::context("--filter", &e))?;
        if let Some(text) = since {
            if account.settings().table_service == TableService::Cosmos {
                return Err(CliError::usage(
                    "--since filters on Timestamp, which the Cosmos DB Table API does not filter on (such a query returns nothing): export the whole table instead",
                ));
            }
            let time = parse_time(text).ok_or_else(|| {
                CliError::usage(format!(
                    "--since {text:?}: not a UTC date (2026-11-01) or RFC 3339 time (2026-11-01T06:00:00Z)"
                ))
            })?;
            let since = Filter::ge("Timestamp", time);
            filter = Some(match filter {
                Some(f) => f.and(since),
                None => since,
            });
        }
        if let Some(names) = &args.select {
            if names.iter().any(|n| n.trim().is_empty()) {
                return Err(CliError::usage("--select: an empty property name"));
            }
            if let Some(key) = names
                .iter()
                .find(|n| matches!(n.as_str(), "PartitionKey" | "RowKey" | "Timestamp"))
            {
                return Err(CliError::usage(format!(
                    "--select {key}: the keys and Timestamp are always kept; name properties only"
                )));
            }
        }
        Ok(Self {
            filter,
            select: args.select.clone(),
        })
    }

    /// A text that changes with the scope, for checkpoint hashes; empty for no scope (so
    /// that checkpoints of unscoped transfers keep their hash).
    pub(crate) fn fingerprint(&self) -> String {
        let filter = self
            .filter
            .as_ref()
            .and_then(|f| f.render().ok())
            .unwrap_or_default();
        match (&self.filter, &self.select) {
            (None, None) => String::new(),
            _ => format!("filter={filter}\nselect={:?}", self.select),
        }
    }
}

/// A UTC date (`2026-11-01`, midnight) or an RFC 3339 time.
pub(crate) fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
}

/// The key ranges the options ask for: listed, sampled (`--split`), or the whole table.
///
/// Requests: none, or the sampling's (see [`ranges::split`]).
pub(crate) async fn resolve_ranges(
    ctx: &Ctx,
    table: &Table,
    args: &RangeArgs,
) -> CliResult<Vec<KeyRange>> {
    if let Some(path) = &args.partitions_from {
        return ranges::read_partitions_file(path);
    }
    if !args.partitions.is_empty() {
        let mut seen = std::collections::BTreeSet::new();
        return Ok(args
            .partitions
            .iter()
            .filter(|pk| seen.insert(pk.as_str()))
            .map(|pk| KeyRange::Partition(pk.clone()))
            .collect());
    }
    match args.split {
        Some(n) if n > 1 => {
            let ranges = ranges::split(table, n)
                .await
                .map_err(|e| CliError::context("sampling key ranges", &e))?;
            ctx.status(&format!(
                "split {} into {} key ranges",
                table.name(),
                ranges.len()
            ));
            Ok(ranges)
        }
        _ => Ok(vec![KeyRange::All]),
    }
}

/// What [`next_page`] found.
pub(crate) enum Next<P = Page<tablekit::core::Stored<Properties>>> {
    /// A page.
    Page(P),
    /// The range is read to its end.
    End,
    /// A stop was requested; the page in flight (if any) is abandoned.
    Interrupted,
}

/// A query over `range` of `table`, continuing at `start`. Table scans are this command's
/// purpose, so the scan policy is lifted for it.
pub(crate) fn range_pages(
    table: &Table,
    range: &KeyRange,
    scope: &Scope,
    page_size: usize,
    start: Option<ContinuationToken>,
) -> impl Stream<Item = tablekit::core::Result<Page<tablekit::core::Stored<Properties>>>> + Send + 'static
{
    range_query(table, range, scope, page_size, start).pages()
}

/// [`range_pages`], each entity read on its own: one whose stored values do not read (an
/// `Edm.Int64` that is not a number, written by another client) is an [`tablekit::azure::EntityError`] in its
/// place, with its keys, and the read goes on. Requests: exactly those of [`range_pages`].
pub(crate) fn range_pages_each(
    table: &Table,
    range: &KeyRange,
    scope: &Scope,
    page_size: usize,
    start: Option<ContinuationToken>,
) -> impl Stream<Item = tablekit::core::Result<Page<EntityResult<Properties>>>> + Send + 'static {
    range_query(table, range, scope, page_size, start)
        .per_entity()
        .pages()
}

fn range_query(
    table: &Table,
    range: &KeyRange,
    scope: &Scope,
    page_size: usize,
    start: Option<ContinuationToken>,
) -> Query<Properties> {
    let mut query = table
        .query::<Properties>()
        .allow_scan()
        .with_page_size(page_size);
    let filter = match (range.filter(), scope.filter.clone()) {
        (Some(r), Some(s)) => Some(r.and(s)),
        (r, s) => r.or(s),
    };
    if let Some(filter) = filter {
        query = query.filter(filter);
    }
    if let Some(select) = &scope.select {
        query = query.select(select.iter().cloned());
    }
    if let Some(token) = start {
        query = query.resume(token);
    }
    query
}

/// The next page of `pages`, unless a stop is requested first.
pub(crate) async fn next_page<S, P>(ctx: &Ctx, pages: &mut S, what: &str) -> CliResult<Next<P>>
where
    S: Stream<Item = tablekit::core::Result<P>> + Unpin,
{
    if ctx.interrupt.requested() {
        return Ok(Next::Interrupted);
    }
    tokio::select! {
        page = pages.next() => match page {
            Some(Ok(page)) => Ok(Next::Page(page)),
            Some(Err(e)) => Err(CliError::context(what, &e)),
            None => Ok(Next::End),
        },
        () = ctx.interrupt.wait() => Ok(Next::Interrupted),
    }
}

/// Parses a checkpoint's continuation token.
pub(crate) fn parse_token(text: Option<&str>) -> CliResult<Option<ContinuationToken>> {
    text.map(|t| {
        t.parse::<ContinuationToken>()
            .map_err(|e| CliError::failure(format!("checkpoint: {e}")))
    })
    .transpose()
}

/// The final outcome of each operation of [`write_settled`], by input index.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Operations written.
    pub(crate) written: u64,
    /// Operations certainly not written, and why.
    pub(crate) failed: Vec<(usize, Error)>,
    /// Operations whose outcome stayed unknown after the retries, and the last error.
    pub(crate) unknown: Vec<(usize, Error)>,
}

/// Whether `error` says the table is missing. The tool writes only inserts and upserts,
/// which the service never refuses with 404 for the entity: a 404 is the table's.
fn is_missing_table(error: &Error) -> bool {
    error.kind() == ErrorKind::NotFound
}

/// The error of a [`write_settled`] call, for the command to report.
pub(crate) fn write_error(table: &Table, error: &Error) -> CliError {
    if is_missing_table(error) {
        CliError::failure(format!(
            "table {} does not exist: pass --create to create it",
            table.name()
        ))
    } else {
        CliError::context(&format!("writing to {}", table.name()), error)
    }
}

/// Writes `operations` with [`Table::bulk_write`]; operations whose outcome is unknown are
/// sent again (up to three rounds) so that they end written or failed if at all possible.
///
/// Operations settled by the first bulk write count towards `reporter`'s progress; `None`
/// for operations already counted (written again after a first attempt).
///
/// Requests: those of each bulk write (see [`Table::bulk_write`]).
///
/// # Errors
/// Errors of the whole call, and a missing table (every operation would fail the same way;
/// see [`write_error`]).
pub(crate) async fn write_settled(
    table: &Table,
    operations: Vec<Operation>,
    options: BulkOptions,
    reporter: Option<&Reporter>,
) -> Result<Settled, Error> {
    let mut settled = Settled::default();
    if operations.is_empty() {
        return Ok(settled);
    }
    let first = match reporter {
        Some(reporter) => bulk_options(reporter, options.clone()),
        None => options.clone(),
    };
    let report = table.bulk_write(operations.clone(), first).await?;
    let mut open: Vec<(usize, Error)> = Vec::new();
    for (i, outcome) in report.outcomes.into_iter().enumerate() {
        match outcome {
            tablekit::azure::OperationOutcome::Written(_) => settled.written += 1,
            tablekit::azure::OperationOutcome::Failed(e) => {
                if is_missing_table(&e) {
                    return Err(e);
                }
                settled.failed.push((i, e));
            }
            tablekit::azure::OperationOutcome::Unknown(e) => open.push((i, e)),
        }
    }
    for _ in 0..UNKNOWN_RETRIES {
        if open.is_empty() {
            break;
        }
        let indices: Vec<usize> = open.iter().map(|(i, _)| *i).collect();
        let again: Vec<Operation> = indices.iter().map(|&i| operations[i].clone()).collect();
        let report = table.bulk_write(again, options.clone()).await?;
        let mut still = Vec::new();
        for (j, outcome) in report.outcomes.into_iter().enumerate() {
            let i = indices[j];
            match outcome {
                tablekit::azure::OperationOutcome::Written(_) => settled.written += 1,
                tablekit::azure::OperationOutcome::Failed(e) => settled.failed.push((i, e)),
                tablekit::azure::OperationOutcome::Unknown(e) => still.push((i, e)),
            }
        }
        open = still;
    }
    settled.unknown = open;
    settled.failed.sort_by_key(|(i, _)| *i);
    Ok(settled)
}
