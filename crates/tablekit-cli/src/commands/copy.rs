//! `tablekit copy`: pages of the source written to the destination — inserts while it holds
//! none of them, insert-or-replace once it does — in parallel key ranges, resumable; and
//! `--verify`.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tablekit::azure::{Account, BulkOptions, Table};
use tablekit::core::batch::Operation;
use tablekit::core::{Entity, ErrorKind, Properties, Stored};

use super::transfer::{self, Next, Scope};
use super::{Ctx, ended};
use crate::checkpoint::{self, VERSION};
use crate::cli::CopyArgs;
use crate::connect::{self, ConnectOptions};
use crate::exit::{CliError, CliResult, Exit};
use crate::hash::{PartitionSummary, Summarizer};
use crate::progress::Reporter;
use crate::ranges::KeyRange;

/// The progress of one range.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RangeState {
    range: KeyRange,
    /// Where the next page starts (`None` before the first page and once complete).
    continuation: Option<String>,
    /// Entities written.
    copied: u64,
    /// Entities the destination refused.
    refused: u64,
    /// Entities whose outcome stayed unknown.
    unknown: u64,
    complete: bool,
}

/// The checkpoint of a copy: every range's progress.
#[derive(Debug, Serialize, Deserialize)]
struct CopyCheckpoint {
    version: u32,
    /// Hash of the source and destination tables and the page size.
    options: String,
    ranges: Vec<RangeState>,
}

/// The checkpoint shared by the ranges, written whole after each page of any range.
struct Shared {
    path: PathBuf,
    state: Mutex<CopyCheckpoint>,
    /// Whether the destination was found to hold other versions of the source's entities:
    /// from then on every page is written with insert-or-replace (see [`write_page`]).
    replace: AtomicBool,
}

impl Shared {
    fn update(&self, index: usize, f: impl FnOnce(&mut RangeState)) -> CliResult<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state.ranges[index]);
        checkpoint::store(&self.path, &*state)
    }
}

/// Runs `copy`.
///
/// Requests: one query per source page, plus the destination's bulk-write transactions
/// (⌈entities of a partition in the page / 100⌉ each); a transaction whose inserts meet
/// entities already there, one range read more and one transaction for those that differ
/// (see [`write_page`]); `--verify` reads both tables once more, one query per page.
pub(crate) async fn run(ctx: &Ctx, account: &Account, args: CopyArgs) -> CliResult {
    let src = account.table(&args.src_table)?;
    let dst_name = args
        .dst_table
        .clone()
        .or(args.dst_table_flag.clone())
        .unwrap_or_else(|| args.src_table.clone());
    transfer::check_range_args(&args.ranges)?;
    let separate = args.dst_connection_string.is_some()
        || args.dst_sas.is_some()
        || args.dst_table_endpoint.is_some()
        || args.dst_account.is_some();
    let dst_only = [
        ("--dst-endpoint-suffix", args.dst_endpoint_suffix.is_some()),
        ("--dst-token-scope", args.dst_token_scope.is_some()),
        (
            "--dst-root-certificate",
            args.dst_root_certificate.is_some(),
        ),
    ];
    if let (false, Some((flag, _))) = (separate, dst_only.iter().find(|(_, given)| *given)) {
        return Err(CliError::usage(format!(
            "{flag} describes another destination account: give it with --dst-account, --dst-connection-string or --dst-sas/--dst-table-endpoint"
        )));
    }
    let dst_account = if separate {
        let dst = connect::connect(&ConnectOptions {
            connection_string: args.dst_connection_string.clone(),
            sas: args.dst_sas.clone(),
            table_endpoint: args.dst_table_endpoint.clone(),
            account: args.dst_account.clone(),
            endpoint_suffix: args.dst_endpoint_suffix.clone(),
            token_scope: args.dst_token_scope.clone(),
            // The source's extra roots also serve a destination on the same private network,
            // unless the destination has its own.
            root_certificate: args
                .dst_root_certificate
                .clone()
                .or_else(|| ctx.root_certificate.clone()),
            use_env: false,
            retries: ctx.retries,
            max_rate: ctx.max_rate,
            ..ConnectOptions::default()
        })
        .map_err(|e| CliError {
            exit: e.exit,
            // The messages name the source's options; these are the destination's.
            message: format!("destination: {}", e.message.replace("--", "--dst-")),
        })?;
        if ctx.verbose {
            eprintln!("destination: {}", connect::describe(&dst));
        }
        dst
    } else {
        account.clone()
    };
    let dst = dst_account.table(&dst_name)?;
    let scope = Scope::new(account, &args.scope, None)?;
    if args.verify || args.verify_only {
        // Partitions are compared in key order, side by side.
        for side in [account, &dst_account] {
            side.require_sorted_queries("`copy --verify`")
                .map_err(|e| CliError::context("verify", &e))?;
        }
    }
    if args.delete_extra {
        // Extras are found by reading both tables in key order side by side.
        dst_account
            .require_sorted_queries("`copy --delete-extra`")
            .map_err(|e| CliError::context("destination", &e))?;
    }
    let result = if args.dry_run {
        dry_run(ctx, &src, &dst, &scope, &args).await
    } else {
        copy_and_verify(ctx, &src, &dst, &scope, &args).await
    };
    if separate {
        ctx.report_requests("destination", &dst_account);
        ctx.report_throttling("destination_", &dst_account, true);
    }
    result
}

async fn copy_and_verify(
    ctx: &Ctx,
    src: &Table,
    dst: &Table,
    scope: &Scope,
    args: &CopyArgs,
) -> CliResult {
    if args.verify_only {
        let ranges = transfer::resolve_ranges(ctx, src, &args.ranges).await?;
        return verify(ctx, src, dst, &ranges, scope, args.ranges.page_size).await;
    }
    let path = args.checkpoint.clone().unwrap_or_else(|| {
        PathBuf::from(format!("{}-to-{}.copy-checkpoint", src.name(), dst.name()))
    });
    let page_size = args.ranges.page_size.to_string();
    let fingerprint = scope.fingerprint();
    let mut parts = vec![
        "copy",
        src.account().name(),
        src.name(),
        dst.account().name(),
        dst.name(),
        &page_size,
    ];
    // An unscoped copy keeps the hash of earlier versions' checkpoints.
    if !fingerprint.is_empty() {
        parts.push(&fingerprint);
    }
    let options = checkpoint::options_hash(&parts);
    let earlier: Option<CopyCheckpoint> = if args.resume {
        checkpoint::load(&path)?
    } else {
        None
    };
    let state = match earlier {
        Some(cp) => {
            checkpoint::check_same(&path, cp.version, &cp.options, &options)?;
            cp
        }
        None => {
            let ranges = transfer::resolve_ranges(ctx, src, &args.ranges).await?;
            CopyCheckpoint {
                version: VERSION,
                options,
                ranges: ranges
                    .into_iter()
                    .map(|range| RangeState {
                        range,
                        continuation: None,
                        copied: 0,
                        refused: 0,
                        unknown: 0,
                        complete: false,
                    })
                    .collect(),
            }
        }
    };
    if args.create {
        dst.create_if_not_exists()
            .await
            .map_err(|e| CliError::context(&format!("creating {}", dst.name()), &e))?;
    }
    let ranges: Vec<RangeState> = state.ranges.clone();
    let shared = Shared {
        path,
        state: Mutex::new(state),
        replace: AtomicBool::new(false),
    };
    checkpoint::store(
        &shared.path,
        &*shared.state.lock().unwrap_or_else(|e| e.into_inner()),
    )?;
    let reporter = Reporter::new("copy", None, ctx.quiet);
    let results: Vec<CliResult<()>> =
        futures::stream::iter(ranges.iter().enumerate().map(|(i, r)| {
            copy_range(
                ctx,
                src,
                dst,
                scope,
                i,
                r,
                args.ranges.page_size,
                &shared,
                &reporter,
            )
        }))
        .buffer_unordered(args.ranges.parallel)
        .collect()
        .await;
    reporter.finish();
    for result in results {
        result?;
    }
    let checkpoint_path = shared.path.clone();
    let state = shared.state.into_inner().unwrap_or_else(|e| e.into_inner());
    let (copied, refused, unknown) = state.ranges.iter().fold((0, 0, 0), |(c, r, u), s| {
        (c + s.copied, r + s.refused, u + s.unknown)
    });
    ctx.summary(
        &format!(
            "copied {copied} entities from {} to {}; refused {refused}; unknown {unknown}",
            src.name(),
            dst.name()
        ),
        serde_json::json!({"source": src.name(), "destination": dst.name(),
            "copied": copied, "refused": refused, "unknown": unknown,
            "interrupted": ctx.interrupt.requested()}),
    );
    if ctx.interrupt.requested() {
        ctx.status("interrupted: run the same command with --resume to continue");
        return Ok(Exit::Interrupted);
    }
    let exit = if refused + unknown > 0 {
        Exit::Partial
    } else {
        Exit::Success
    };
    // Every range is copied: nothing is left to resume, so the checkpoint goes (it stays
    // after a failure or an interruption).
    match std::fs::remove_file(&checkpoint_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(CliError::io(&checkpoint_path, &e)),
    }
    let ranges: Vec<KeyRange> = state.ranges.into_iter().map(|s| s.range).collect();
    if args.delete_extra {
        let extra =
            delete_extra(ctx, src, dst, &ranges, scope, args.ranges.page_size, false).await?;
        if ctx.interrupt.requested() {
            return Ok(Exit::Interrupted);
        }
        if extra.failed > 0 {
            return Ok(Exit::Partial);
        }
    }
    if args.verify {
        let verified = verify(ctx, src, dst, &ranges, scope, args.ranges.page_size).await?;
        if verified != Exit::Success {
            return Ok(verified);
        }
    }
    Ok(exit)
}

/// The source entities of a page as operations — inserts, or insert-or-replace when
/// `replace` — with the entities they write, and those that cannot be sent, with why.
#[allow(clippy::type_complexity)]
fn operations(
    dst: &Table,
    items: Vec<Stored<Properties>>,
    replace: bool,
) -> (
    Vec<Operation>,
    Vec<Entity<Properties>>,
    Vec<(String, String, String)>,
) {
    let mut ops = Vec::with_capacity(items.len());
    let mut entities = Vec::with_capacity(items.len());
    let mut refused = Vec::new();
    for stored in items {
        let entity = Entity::new(stored.keys, stored.value);
        let op = if replace {
            Operation::upsert_replace(&entity)
        } else {
            Operation::insert(&entity)
        }
        .and_then(|op| transfer::check_for_service(dst, &op).map(|()| op));
        match op {
            Ok(op) => {
                ops.push(op);
                entities.push(entity);
            }
            Err(e) => refused.push((
                entity.keys.pk().to_owned(),
                entity.keys.rk().to_owned(),
                e.to_string(),
            )),
        }
    }
    (ops, entities, refused)
}

/// Pages of one range written at once. Two keep the destination busy across a page's end:
/// the next page's transactions start while the last ones of the page before finish, and
/// the query stream reads the page after them meanwhile.
const PAGES_IN_FLIGHT: usize = 2;

/// What writing one page gave, for its checkpoint.
struct PageWritten {
    settled: transfer::Settled,
    /// The page's entities the destination could not be sent (invalid), with why.
    invalid: Vec<(String, String, String)>,
    /// The keys of the operations sent, in order (what `settled`'s indices refer to).
    sent: Vec<(String, String)>,
    continuation: Option<String>,
}

/// Writes one page of the source to `dst`.
///
/// A copy into a table that holds none of the source's keys — a new table, the usual case —
/// writes inserts, which the service stores without first looking for an entity to replace
/// (on the emulator, a quarter faster than insert-or-replace). An insert that meets an
/// entity already there — a resumed copy repeating the page it was writing, a response lost
/// on the way back, a destination holding older versions — is settled by the bulk write
/// reading the transaction's range once: what is there already identical counts as written;
/// what differs is written again with insert-or-replace, and so is every later page (the
/// destination evidently holds data), so such a destination costs at most the pages in
/// flight their extra requests.
async fn write_page(
    dst: &Table,
    page: tablekit::azure::Page<Stored<Properties>>,
    replace: &AtomicBool,
    reporter: &Reporter,
) -> CliResult<PageWritten> {
    let continuation = page.continuation.as_ref().map(ToString::to_string);
    let (ops, entities, invalid) = operations(dst, page.items, replace.load(Ordering::Relaxed));
    let sent = ops
        .iter()
        .map(|op| (op.keys().pk().to_owned(), op.keys().rk().to_owned()))
        .collect();
    let options = BulkOptions::default().with_accept_identical(true);
    let mut settled = transfer::write_settled(dst, ops, options, Some(reporter))
        .await
        .map_err(|e| transfer::write_error(dst, &e))?;
    let (existing, failed): (Vec<_>, Vec<_>) = std::mem::take(&mut settled.failed)
        .into_iter()
        .partition(|(_, e)| e.kind() == ErrorKind::AlreadyExists);
    settled.failed = failed;
    if !existing.is_empty() {
        replace.store(true, Ordering::Relaxed);
        let indices: Vec<usize> = existing.iter().map(|(i, _)| *i).collect();
        let mut again = Vec::with_capacity(indices.len());
        for &i in &indices {
            again.push(
                Operation::upsert_replace(&entities[i])
                    .map_err(|e| CliError::context("re-encoding an entity", &e))?,
            );
        }
        let replaced = transfer::write_settled(dst, again, BulkOptions::default(), None)
            .await
            .map_err(|e| transfer::write_error(dst, &e))?;
        settled.written += replaced.written;
        settled
            .failed
            .extend(replaced.failed.into_iter().map(|(j, e)| (indices[j], e)));
        settled
            .unknown
            .extend(replaced.unknown.into_iter().map(|(j, e)| (indices[j], e)));
        settled.failed.sort_by_key(|(i, _)| *i);
    }
    Ok(PageWritten {
        settled,
        invalid,
        sent,
        continuation,
    })
}

/// Copies one range: its pages are read in order and written [`PAGES_IN_FLIGHT`] at a time;
/// the checkpoint moves past a page once it and every page before it are written, so a
/// resumed copy starts after the last page known written.
#[allow(clippy::too_many_arguments)]
async fn copy_range(
    ctx: &Ctx,
    src: &Table,
    dst: &Table,
    scope: &Scope,
    index: usize,
    state: &RangeState,
    page_size: usize,
    shared: &Shared,
    reporter: &Reporter,
) -> CliResult<()> {
    reporter.add(state.copied + state.refused + state.unknown);
    if state.complete {
        return Ok(());
    }
    let start = transfer::parse_token(state.continuation.as_deref())?;
    if start.is_none() && state.copied + state.refused + state.unknown > 0 {
        return Err(CliError::failure(format!(
            "{}: an incomplete range without a continuation",
            shared.path.display()
        )));
    }
    let mut pages = Box::pin(transfer::range_pages(
        src,
        &state.range,
        scope,
        page_size,
        start,
    ));
    let what = format!("reading {} ({})", src.name(), state.range.describe());
    let mut writing = futures::stream::FuturesOrdered::new();
    let mut reading = true;
    // A failed read stops the reading; the pages read before it are still written and
    // checkpointed, so that a resumed copy does not repeat them.
    let mut read_error = None;
    loop {
        tokio::select! {
            next = transfer::next_page(ctx, &mut pages, &what),
                if reading && writing.len() < PAGES_IN_FLIGHT =>
            {
                match next {
                    Ok(Next::Page(page)) => {
                        writing.push_back(write_page(dst, page, &shared.replace, reporter));
                    }
                    Ok(Next::End | Next::Interrupted) => reading = false,
                    Err(e) => {
                        reading = false;
                        read_error = Some(e);
                    }
                }
            }
            Some(written) = writing.next(), if !writing.is_empty() => {
                if record_page(ctx, index, written?, shared, reporter)? {
                    return Ok(());
                }
            }
            else => return read_error.map_or(Ok(()), Err),
        }
    }
}

/// Reports a written page's refusals and moves the range's checkpoint past it; whether it was
/// the range's last page.
fn record_page(
    ctx: &Ctx,
    index: usize,
    page: PageWritten,
    shared: &Shared,
    reporter: &Reporter,
) -> CliResult<bool> {
    let PageWritten {
        settled,
        invalid,
        sent,
        continuation,
    } = page;
    for (pk, rk, reason) in &invalid {
        reporter.note(&format!("refused: ({pk:?}, {rk:?}): {reason}"));
    }
    for (i, e) in &settled.failed {
        let (pk, rk) = &sent[*i];
        reporter.note(&format!("refused: ({pk:?}, {rk:?}): {e}"));
    }
    for (i, e) in &settled.unknown {
        let (pk, rk) = &sent[*i];
        reporter.note(&format!(
            "unknown: ({pk:?}, {rk:?}): outcome unknown after retries: {e}"
        ));
    }
    let complete = continuation.is_none();
    shared.update(index, |s| {
        s.copied += settled.written;
        s.refused += (invalid.len() + settled.failed.len()) as u64;
        s.unknown += settled.unknown.len() as u64;
        s.continuation = continuation;
        s.complete = complete;
    })?;
    reporter.add(invalid.len() as u64);
    ctx.interrupt.unit_done();
    Ok(complete)
}

/// Reads one side of a range as partition summaries, in PartitionKey order.
struct Summaries<S> {
    pages: S,
    items: std::collections::VecDeque<Stored<Properties>>,
    summarizer: Summarizer,
    done: bool,
    what: String,
}

impl<S> Summaries<S>
where
    S: futures::Stream<Item = tablekit::core::Result<tablekit::azure::Page<Stored<Properties>>>>
        + Unpin,
{
    async fn next(&mut self, ctx: &Ctx) -> CliResult<Option<PartitionSummary>> {
        loop {
            if let Some(s) = self.items.pop_front() {
                if let Some(summary) = self.summarizer.add(s.keys.pk(), s.keys.rk(), &s.value) {
                    return Ok(Some(summary));
                }
                continue;
            }
            if self.done {
                return Ok(self.summarizer.finish());
            }
            match transfer::next_page(ctx, &mut self.pages, &self.what).await? {
                Next::Page(page) => self.items.extend(page.items),
                Next::End => self.done = true,
                Next::Interrupted => return Ok(None),
            }
        }
    }
}

type PageStream = std::pin::Pin<
    Box<
        dyn futures::Stream<
                Item = tablekit::core::Result<tablekit::azure::Page<Stored<Properties>>>,
            > + Send,
    >,
>;

fn summaries(
    table: &Table,
    range: &KeyRange,
    scope: &Scope,
    page_size: usize,
) -> Summaries<PageStream> {
    Summaries {
        pages: Box::pin(transfer::range_pages(table, range, scope, page_size, None)),
        items: Default::default(),
        summarizer: Summarizer::default(),
        done: false,
        what: format!("verifying {} ({})", table.name(), range.describe()),
    }
}

fn short(digest: &[u8; 32]) -> String {
    checkpoint::hex(&digest[..8])
}

/// Compares both tables range by range: per partition, the entity count and the digest of
/// its entities (see the `hash` module). Prints each partition that differs on stdout.
///
/// Requests: one query per page of each table.
async fn verify(
    ctx: &Ctx,
    src: &Table,
    dst: &Table,
    ranges: &[KeyRange],
    scope: &Scope,
    page_size: usize,
) -> CliResult {
    let reporter = Reporter::new("verify", None, ctx.quiet);
    // The differences, for the JSON summary (printed as they come otherwise).
    let lines = std::sync::Mutex::new(Vec::<String>::new());
    let lines = &lines;
    let results: Vec<CliResult<(u64, u64, u64)>> =
        futures::stream::iter(ranges.iter().map(|range| {
            let reporter = reporter.clone();
            async move {
                let (mut a, mut b) = (
                    summaries(src, range, scope, page_size),
                    summaries(dst, range, scope, page_size),
                );
                let (mut partitions, mut entities, mut differ) = (0, 0, 0);
                let (mut x, mut y) = (a.next(ctx).await?, b.next(ctx).await?);
                loop {
                    let order = match (&x, &y) {
                        (None, None) => break,
                        (Some(_), None) => std::cmp::Ordering::Less,
                        (None, Some(_)) => std::cmp::Ordering::Greater,
                        (Some(s), Some(d)) => s.pk.cmp(&d.pk),
                    };
                    let line = match (order, x.take(), y.take()) {
                        (std::cmp::Ordering::Equal, Some(s), Some(d)) => {
                            entities += s.count;
                            reporter.add(s.count);
                            x = a.next(ctx).await?;
                            y = b.next(ctx).await?;
                            (s.count != d.count || s.digest != d.digest).then(|| {
                            format!(
                                "differs\t{}\tsource {} entities {}\tdestination {} entities {}",
                                s.pk, s.count, short(&s.digest), d.count, short(&d.digest)
                            )
                        })
                        }
                        (std::cmp::Ordering::Less, Some(s), d) => {
                            entities += s.count;
                            reporter.add(s.count);
                            y = d;
                            x = a.next(ctx).await?;
                            Some(format!(
                                "missing\t{}\tsource {} entities, none in the destination",
                                s.pk, s.count
                            ))
                        }
                        (_, s, Some(d)) => {
                            x = s;
                            y = b.next(ctx).await?;
                            Some(format!(
                                "extra\t{}\tdestination {} entities, none in the source",
                                d.pk, d.count
                            ))
                        }
                        // Not reachable: the order was computed from these two.
                        _ => break,
                    };
                    partitions += 1;
                    if let Some(line) = line {
                        differ += 1;
                        if ctx.json() {
                            lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                        } else {
                            println!("{line}");
                        }
                    }
                    if ctx.interrupt.requested() {
                        break;
                    }
                }
                Ok((partitions, entities, differ))
            }
        }))
        .buffer_unordered(4)
        .collect()
        .await;
    reporter.finish();
    let (mut partitions, mut entities, mut differ) = (0, 0, 0);
    for r in results {
        let (p, e, d) = r?;
        partitions += p;
        entities += e;
        differ += d;
    }
    if ctx.interrupt.requested() {
        return Ok(ended(ctx, Exit::Interrupted));
    }
    let lines = std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
    ctx.summary(
        &format!("verified {partitions} partitions ({entities} source entities): {differ} differ"),
        serde_json::json!({"verify": {"partitions": partitions, "entities": entities,
            "differ": differ, "differences": lines}}),
    );
    Ok(if differ == 0 {
        Exit::Success
    } else {
        Exit::Differences
    })
}

/// `copy --dry-run`: reads the source as a copy would and checks every entity as it would be
/// sent; with `--delete-extra`, lists the destination's extra entities. Writes nothing.
///
/// Requests: one query per source page; with `--delete-extra`, one per page of keys of each
/// table.
async fn dry_run(ctx: &Ctx, src: &Table, dst: &Table, scope: &Scope, args: &CopyArgs) -> CliResult {
    let ranges = transfer::resolve_ranges(ctx, src, &args.ranges).await?;
    let reporter = Reporter::new("dry run", None, ctx.quiet);
    let results: Vec<CliResult<(u64, u64)>> = futures::stream::iter(ranges.iter().map(|range| {
        let reporter = reporter.clone();
        async move {
            let mut pages = Box::pin(transfer::range_pages(
                src,
                range,
                scope,
                args.ranges.page_size,
                None,
            ));
            let what = format!("reading {} ({})", src.name(), range.describe());
            let (mut valid, mut invalid) = (0, 0);
            while let Next::Page(page) = transfer::next_page(ctx, &mut pages, &what).await? {
                let n = page.items.len() as u64;
                let (ops, _, refused) = operations(dst, page.items, false);
                for (pk, rk, reason) in &refused {
                    reporter.note(&format!("would be refused: ({pk:?}, {rk:?}): {reason}"));
                }
                valid += ops.len() as u64;
                invalid += refused.len() as u64;
                reporter.add(n);
            }
            Ok((valid, invalid))
        }
    }))
    .buffer_unordered(args.ranges.parallel)
    .collect()
    .await;
    reporter.finish();
    let (mut valid, mut invalid) = (0, 0);
    for r in results {
        let (v, i) = r?;
        valid += v;
        invalid += i;
    }
    if ctx.interrupt.requested() {
        return Ok(Exit::Interrupted);
    }
    ctx.summary(
        &format!(
            "dry run: would copy {valid} entities from {} to {}; {invalid} would be refused; nothing written",
            src.name(),
            dst.name()
        ),
        serde_json::json!({"source": src.name(), "destination": dst.name(), "dry_run": true,
            "would_copy": valid, "would_refuse": invalid}),
    );
    if args.delete_extra {
        delete_extra(ctx, src, dst, &ranges, scope, args.ranges.page_size, true).await?;
    }
    Ok(ended(
        ctx,
        if invalid > 0 {
            Exit::Partial
        } else {
            Exit::Success
        },
    ))
}

/// What [`delete_extra`] did.
#[derive(Debug, Default)]
struct Extras {
    found: u64,
    deleted: u64,
    failed: u64,
}

/// The keys of one side of a range, in key order.
struct KeyStream {
    pages: PageStream,
    items: std::collections::VecDeque<(String, String)>,
    done: bool,
    what: String,
    /// A missing table holds nothing.
    missing_is_empty: bool,
}

impl KeyStream {
    fn new(table: &Table, range: &KeyRange, scope: &Scope, page_size: usize, dst: bool) -> Self {
        // Keys only: an empty projection (tablekit always adds the keys).
        let keys_only = Scope {
            filter: scope.filter.clone(),
            select: Some(Vec::new()),
        };
        Self {
            pages: Box::pin(transfer::range_pages(
                table, range, &keys_only, page_size, None,
            )),
            items: Default::default(),
            done: false,
            what: format!(
                "reading the keys of {} ({})",
                table.name(),
                range.describe()
            ),
            missing_is_empty: dst,
        }
    }

    async fn next(&mut self, ctx: &Ctx) -> CliResult<Option<(String, String)>> {
        loop {
            if let Some(keys) = self.items.pop_front() {
                return Ok(Some(keys));
            }
            if self.done {
                return Ok(None);
            }
            if ctx.interrupt.requested() {
                return Ok(None);
            }
            match self.pages.next().await {
                Some(Ok(page)) => self.items.extend(
                    page.items
                        .into_iter()
                        .map(|s| (s.keys.pk().to_owned(), s.keys.rk().to_owned())),
                ),
                Some(Err(e)) if self.missing_is_empty && e.kind() == ErrorKind::NotFound => {
                    self.done = true;
                }
                Some(Err(e)) => return Err(CliError::context(&self.what, &e)),
                None => self.done = true,
            }
        }
    }
}

/// Deletes (or with `dry_run` lists, as `extra\tPK\tRK` on stdout) the entities of `dst` in
/// `ranges` and the scope's filter that `src` does not hold. Both tables are read in key order
/// side by side, keys only; deletes go in transactions of up to 100 per partition,
/// unconditional (an entity already gone counts as deleted).
///
/// Requests: one query per page of keys of each table, plus the delete transactions.
async fn delete_extra(
    ctx: &Ctx,
    src: &Table,
    dst: &Table,
    ranges: &[KeyRange],
    scope: &Scope,
    page_size: usize,
    dry_run: bool,
) -> CliResult<Extras> {
    let mut total = Extras::default();
    for range in ranges {
        let mut a = KeyStream::new(src, range, scope, page_size, false);
        let mut b = KeyStream::new(dst, range, scope, page_size, true);
        let (mut x, mut y) = (a.next(ctx).await?, b.next(ctx).await?);
        let mut batch: Vec<(String, String)> = Vec::new();
        while let Some(d) = y.take() {
            match &x {
                Some(s) if *s < d => {
                    x = a.next(ctx).await?;
                    y = Some(d);
                }
                Some(s) if *s == d => {
                    x = a.next(ctx).await?;
                    y = b.next(ctx).await?;
                }
                _ => {
                    total.found += 1;
                    if dry_run && !ctx.json() {
                        println!("extra\t{}\t{}", d.0, d.1);
                    } else {
                        batch.push(d);
                        if batch.len() >= 1000 {
                            delete_keys(dst, std::mem::take(&mut batch), &mut total).await?;
                        }
                    }
                    y = b.next(ctx).await?;
                }
            }
        }
        if !batch.is_empty() {
            delete_keys(dst, batch, &mut total).await?;
        }
        if ctx.interrupt.requested() {
            break;
        }
    }
    let text = if dry_run {
        format!(
            "dry run: {} entities only in {} would be deleted",
            total.found,
            dst.name()
        )
    } else {
        format!(
            "deleted {} entities only in {}; failed {}",
            total.deleted,
            dst.name(),
            total.failed
        )
    };
    ctx.summary(
        &text,
        serde_json::json!({"extra": {"found": total.found, "deleted": total.deleted,
            "failed": total.failed}}),
    );
    Ok(total)
}

async fn delete_keys(
    dst: &Table,
    keys: Vec<(String, String)>,
    total: &mut Extras,
) -> CliResult<()> {
    let mut ops = Vec::with_capacity(keys.len());
    for (pk, rk) in &keys {
        let keys = tablekit::core::Keys::new(pk.clone(), rk.clone())
            .map_err(|e| CliError::context("deleting an extra entity", &e))?;
        ops.push(
            Operation::delete(keys, tablekit::core::IfMatch::Any)
                .map_err(|e| CliError::context("deleting an extra entity", &e))?,
        );
    }
    let report = dst
        .bulk_write(ops, BulkOptions::default())
        .await
        .map_err(|e| CliError::context(&format!("deleting from {}", dst.name()), &e))?;
    for ((pk, rk), outcome) in keys.iter().zip(report.outcomes) {
        match outcome {
            tablekit::azure::OperationOutcome::Written(_) => total.deleted += 1,
            tablekit::azure::OperationOutcome::Failed(e) if e.kind() == ErrorKind::NotFound => {
                total.deleted += 1;
            }
            tablekit::azure::OperationOutcome::Failed(e)
            | tablekit::azure::OperationOutcome::Unknown(e) => {
                total.failed += 1;
                eprintln!("not deleted: ({pk:?}, {rk:?}): {e}");
            }
        }
    }
    Ok(())
}
