//! `tablekit export`: pages streamed to JSON Lines (optionally compressed), a checkpoint after
//! every page, parts in parallel over key ranges.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tablekit::azure::{Account, EntityResult, Page, Table};
use tablekit::core::{Properties, Stored};

use super::transfer::{self, Next, Scope};
use super::{Ctx, ended};
use crate::checkpoint::{self, VERSION};
use crate::cli::{ExportArgs, FileFormat};
use crate::entity_json::{read_line, write_line};
use crate::exit::{CliError, CliResult, Exit};
use crate::files::{Compression, open_lines, open_output};
use crate::progress::Reporter;
use crate::ranges::KeyRange;

/// What is written beside each output file after every page.
#[derive(Debug, Serialize, Deserialize)]
struct ExportCheckpoint {
    version: u32,
    /// Hash of the table, range, page size and compression.
    options: String,
    /// Where the next page starts (`None` once complete).
    continuation: Option<String>,
    /// Entities written so far.
    entities: u64,
    /// Bytes of the output file that hold them; anything after is cut off on resume.
    bytes: u64,
    /// Whether the part is finished.
    complete: bool,
    /// Entities so far that could not be read and are not in the file (absent from
    /// checkpoints of earlier versions: none).
    #[serde(default)]
    unreadable: u64,
}

/// What an export (or one part of it) read.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    /// Entities written to the output.
    entities: u64,
    /// Entities that could not be read, reported and left out.
    unreadable: u64,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Self) {
        self.entities += other.entities;
        self.unreadable += other.unreadable;
    }
}

/// Reports the entities of `page` that could not be read — on stderr, with the table, keys
/// and property the error names — and returns the others, and how many were left out.
fn readable(page: Page<EntityResult<Properties>>) -> (Vec<Stored<Properties>>, u64) {
    let mut good = Vec::with_capacity(page.items.len());
    let mut bad = 0;
    for item in page.items {
        match item {
            Ok(stored) => good.push(stored),
            Err(unreadable) => {
                bad += 1;
                eprintln!("unreadable, left out of the export: {unreadable}");
            }
        }
    }
    (good, bad)
}

/// The ranges of a split export, kept in the output directory so that a resumed export
/// reads the same parts even if sampling would now draw other boundaries.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    table: String,
    compression: Compression,
    ranges: Vec<KeyRange>,
}

const MANIFEST: &str = "export-manifest.json";

/// One part: a key range and its output file.
struct Part {
    range: KeyRange,
    path: PathBuf,
    /// The only part: `--resume` without its checkpoint means the export completed (or
    /// never checkpointed a page), not that this part of a split export is yet to start.
    single: bool,
}

/// Runs `export`.
///
/// Requests: one per page of each part (plus the sampling's with `--split`). Memory: two
/// pages per part in flight.
pub(crate) async fn run(ctx: &Ctx, account: &Account, args: ExportArgs) -> CliResult {
    let table = account.table(&args.table)?;
    transfer::check_range_args(&args.ranges)?;
    let scope = Scope::new(account, &args.scope, args.since.as_deref())?;
    let multi = transfer::is_multi(&args.ranges);
    let to_stdout = args.out.as_os_str() == "-";
    let format = args
        .format
        .unwrap_or_else(|| FileFormat::from_path(&args.out));
    if multi && (to_stdout || format == FileFormat::Csv) {
        return Err(CliError::usage(
            "parts (--split, --partitions-from, several --partition) are written to a directory as JSON Lines: not to stdout, not as CSV",
        ));
    }
    if to_stdout && args.resume {
        return Err(CliError::usage(
            "--resume needs an output file: an export to stdout cannot be resumed",
        ));
    }
    let compression = if multi || to_stdout {
        args.compress.unwrap_or(Compression::None)
    } else {
        let implied = Compression::from_path(&args.out);
        match args.compress {
            Some(c) if implied != Compression::None && c != implied => {
                return Err(CliError::usage(format!(
                    "--compress {c:?} contradicts the extension of {}",
                    args.out.display()
                )));
            }
            Some(c) => c,
            None => implied,
        }
    };
    if to_stdout {
        ctx.stdout_carries_data();
    }
    if format == FileFormat::Csv {
        return export_csv(ctx, &table, &args, &scope, compression, to_stdout).await;
    }
    if to_stdout {
        let reporter = Reporter::new("export", None, ctx.quiet);
        let range = transfer::single_range(&args.ranges);
        let result =
            stream_to_stdout(ctx, &table, &range, &scope, &args, compression, &reporter).await;
        reporter.finish();
        return finish(ctx, &args, FileFormat::Jsonl, result?);
    }
    let parts = if multi {
        plan_parts(ctx, &table, &args, compression).await?
    } else {
        vec![Part {
            range: transfer::single_range(&args.ranges),
            path: args.out.clone(),
            single: true,
        }]
    };
    if !args.resume && !args.overwrite {
        for part in &parts {
            refuse_existing(&[
                part.path.clone(),
                checkpoint::beside(&part.path, ".checkpoint"),
            ])?;
        }
    }
    let reporter = Reporter::new("export", None, ctx.quiet);
    let results: Vec<CliResult<Counts>> = futures::stream::iter(parts.iter().map(|part| {
        export_part(
            ctx,
            &table,
            part,
            &scope,
            compression,
            args.ranges.page_size,
            args.resume,
            &reporter,
        )
    }))
    .buffer_unordered(args.ranges.parallel)
    .collect()
    .await;
    reporter.finish();
    let mut total = Counts::default();
    for result in results {
        total += result?;
    }
    if !ctx.interrupt.requested() {
        // Complete: nothing is left to resume, so the checkpoints (and a split export's
        // manifest) go. They stay after a failure or an interruption.
        for part in &parts {
            remove_if_present(&checkpoint::beside(&part.path, ".checkpoint"))?;
        }
        if multi {
            remove_if_present(&args.out.join(MANIFEST))?;
        }
    }
    finish(ctx, &args, FileFormat::Jsonl, total)
}

/// Removes a file; one that is not there is fine.
fn remove_if_present(path: &Path) -> CliResult<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CliError::io(path, &e)),
    }
}

/// Refuses to start over an existing output or checkpoint without --resume or --overwrite.
fn refuse_existing(paths: &[PathBuf]) -> CliResult<()> {
    for path in paths {
        if path.exists() {
            return Err(CliError::usage(format!(
                "{} exists: pass --resume to continue that export or --overwrite to replace it",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The end of an export: the summary, and how the tool exits — partial (3) when entities
/// could not be read, unless `--skip-unreadable` accepts the export without them.
fn finish(ctx: &Ctx, args: &ExportArgs, format: FileFormat, counts: Counts) -> CliResult {
    let Counts {
        entities: total,
        unreadable,
    } = counts;
    let done = if unreadable > 0 && !args.skip_unreadable {
        Exit::Partial
    } else {
        Exit::Success
    };
    let exit = ended(ctx, done);
    let left_out = match unreadable {
        0 => String::new(),
        n if args.skip_unreadable => format!("; {n} unreadable entities skipped (listed above)"),
        n => format!(
            "; {n} entities could not be read and are not in the output (listed above): pass --skip-unreadable to accept the export without them"
        ),
    };
    let text = if exit == Exit::Interrupted {
        if args.out.as_os_str() == "-" {
            format!("interrupted after {total} entities")
        } else {
            format!(
                "interrupted after {total} entities: run the same command with --resume to continue"
            )
        }
    } else {
        format!(
            "exported {total} entities from {} to {}{left_out}",
            args.table,
            args.out.display()
        )
    };
    ctx.summary(
        &text,
        serde_json::json!({
            "table": args.table, "out": args.out.display().to_string(),
            "format": format!("{format:?}").to_lowercase(), "entities": total,
            "unreadable": unreadable, "interrupted": exit == Exit::Interrupted,
        }),
    );
    Ok(exit)
}

/// An export to stdout: each page as a frame, no checkpoint.
async fn stream_to_stdout(
    ctx: &Ctx,
    table: &Table,
    range: &KeyRange,
    scope: &Scope,
    args: &ExportArgs,
    compression: Compression,
    reporter: &Reporter,
) -> CliResult<Counts> {
    let mut pages = Box::pin(transfer::range_pages_each(
        table,
        range,
        scope,
        args.ranges.page_size,
        None,
    ));
    let what = format!("reading {}", table.name());
    let mut counts = Counts::default();
    let mut out = std::io::stdout().lock();
    while let Next::Page(page) = transfer::next_page(ctx, &mut pages, &what).await? {
        let (items, unreadable) = readable(page);
        counts.unreadable += unreadable;
        let mut lines = Vec::with_capacity(512 * items.len());
        for stored in &items {
            write_line(
                &mut lines,
                stored.keys.pk(),
                stored.keys.rk(),
                stored.timestamp.as_ref(),
                &stored.value,
            );
        }
        if !lines.is_empty() {
            let frame = compression
                .frame(lines)
                .map_err(|e| CliError::failure(format!("compressing: {e}")))?;
            out.write_all(&frame)
                .and_then(|()| out.flush())
                .map_err(|e| CliError::failure(format!("writing to stdout: {e}")))?;
        }
        counts.entities += items.len() as u64;
        reporter.add(items.len() as u64);
        ctx.interrupt.unit_done();
    }
    Ok(counts)
}

/// A CSV export: the entities go to a JSON Lines file first (resumable, with its checkpoint,
/// beside the output; in the temporary directory for stdout) while the property names are
/// not all known; once complete, it is written out as CSV under the header of every name, and
/// removed. Requests as a JSON Lines export; the conversion reads the local file twice.
async fn export_csv(
    ctx: &Ctx,
    table: &Table,
    args: &ExportArgs,
    scope: &Scope,
    compression: Compression,
    to_stdout: bool,
) -> CliResult {
    let staging = if to_stdout {
        std::env::temp_dir().join(format!(
            "tablekit-export-{}-{}.jsonl",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    } else {
        checkpoint::beside(&args.out, ".partial.jsonl")
    };
    let staging_checkpoint = checkpoint::beside(&staging, ".checkpoint");
    if !to_stdout && !args.resume && !args.overwrite {
        refuse_existing(&[
            args.out.clone(),
            staging.clone(),
            staging_checkpoint.clone(),
        ])?;
    }
    if !to_stdout && args.resume && !staging_checkpoint.exists() && args.out.exists() {
        return Err(CliError::usage(format!(
            "{}: no checkpoint to resume from — the export completed (its staging file and checkpoint are removed then); pass --overwrite to export again",
            args.out.display()
        )));
    }
    let part = Part {
        range: transfer::single_range(&args.ranges),
        path: staging.clone(),
        single: true,
    };
    let reporter = Reporter::new("export", None, ctx.quiet);
    let result = export_part(
        ctx,
        table,
        &part,
        scope,
        Compression::None,
        args.ranges.page_size,
        args.resume && !to_stdout,
        &reporter,
    )
    .await;
    reporter.finish();
    let total = match result {
        Ok(counts) if !ctx.interrupt.requested() => counts,
        other => {
            if to_stdout {
                let _ = std::fs::remove_file(&staging);
                let _ = std::fs::remove_file(&staging_checkpoint);
            }
            return finish(ctx, args, FileFormat::Csv, other?);
        }
    };
    let names = match &scope.select {
        Some(names) => names.clone(),
        None => staged_names(&staging)?,
    };
    if to_stdout {
        let mut out = std::io::stdout().lock();
        write_csv(&staging, &names, compression, &mut out)?;
    } else {
        let tmp = checkpoint::beside(&args.out, ".tmp");
        let mut file = std::fs::File::create(&tmp).map_err(io_error(&tmp))?;
        write_csv(&staging, &names, compression, &mut file)?;
        file.sync_all().map_err(io_error(&tmp))?;
        std::fs::rename(&tmp, &args.out).map_err(io_error(&args.out))?;
    }
    let _ = std::fs::remove_file(&staging);
    let _ = std::fs::remove_file(&staging_checkpoint);
    finish(ctx, args, FileFormat::Csv, total)
}

/// Every property name of a staged export, sorted.
fn staged_names(staging: &Path) -> CliResult<Vec<String>> {
    let mut names = std::collections::BTreeSet::new();
    let reader = open_lines(staging).map_err(io_error(staging))?;
    for line in reader.lines() {
        let line = line.map_err(io_error(staging))?;
        if line.trim().is_empty() {
            continue;
        }
        let row = read_line(&line)
            .map_err(|e| CliError::failure(format!("{}: {e}", staging.display())))?;
        for (name, _) in row.properties.iter() {
            if !names.contains(name) {
                names.insert(name.to_owned());
            }
        }
    }
    Ok(names.into_iter().collect())
}

/// Writes a staged export as CSV to `out`, in frames of up to 1,000 records.
fn write_csv(
    staging: &Path,
    names: &[String],
    compression: Compression,
    out: &mut dyn std::io::Write,
) -> CliResult<()> {
    let write_err = |e: std::io::Error| CliError::failure(format!("writing the CSV: {e}"));
    let mut chunk = crate::csv::header(names).into_bytes();
    let mut in_chunk = 0;
    let reader = open_lines(staging).map_err(io_error(staging))?;
    for line in reader.lines() {
        let line = line.map_err(io_error(staging))?;
        if line.trim().is_empty() {
            continue;
        }
        let row = read_line(&line)
            .map_err(|e| CliError::failure(format!("{}: {e}", staging.display())))?;
        let timestamp = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| {
                v["Timestamp"]
                    .as_str()
                    .and_then(tablekit::core::edm::parse_datetime)
            });
        chunk.extend_from_slice(
            crate::csv::record(names, &row.pk, &row.rk, timestamp.as_ref(), &row.properties)
                .as_bytes(),
        );
        in_chunk += 1;
        if in_chunk == 1000 {
            out.write_all(
                &compression
                    .frame(std::mem::take(&mut chunk))
                    .map_err(write_err)?,
            )
            .map_err(write_err)?;
            in_chunk = 0;
        }
    }
    if !chunk.is_empty() {
        out.write_all(&compression.frame(chunk).map_err(write_err)?)
            .map_err(write_err)?;
    }
    out.flush().map_err(write_err)
}

/// The parts of a split export, and the manifest that keeps them for `--resume`.
async fn plan_parts(
    ctx: &Ctx,
    table: &Table,
    args: &ExportArgs,
    compression: Compression,
) -> CliResult<Vec<Part>> {
    let dir = &args.out;
    let manifest_path = dir.join(MANIFEST);
    let existing: Option<Manifest> = if args.resume {
        checkpoint::load(&manifest_path)?
    } else {
        None
    };
    let ranges = match existing {
        Some(m) => {
            if m.version != VERSION || m.table != args.table || m.compression != compression {
                return Err(CliError::usage(format!(
                    "{} describes another export (table or compression); resume with the same options",
                    manifest_path.display()
                )));
            }
            m.ranges
        }
        None => {
            if args.resume && has_parts(dir) {
                return Err(CliError::usage(format!(
                    "{}: no manifest to resume from — the export completed (its manifest and checkpoints are removed then) or never started; pass --overwrite to export again",
                    dir.display()
                )));
            }
            if dir.join(MANIFEST).exists() && !args.overwrite && !args.resume {
                return Err(CliError::usage(format!(
                    "{} holds an export: pass --resume to continue it or --overwrite to replace it",
                    dir.display()
                )));
            }
            let ranges = transfer::resolve_ranges(ctx, table, &args.ranges).await?;
            std::fs::create_dir_all(dir).map_err(|e| CliError::io(dir, &e))?;
            if args.overwrite {
                remove_parts(dir)?;
            }
            checkpoint::store(
                &manifest_path,
                &Manifest {
                    version: VERSION,
                    table: args.table.clone(),
                    compression,
                    ranges: ranges.clone(),
                },
            )?;
            ranges
        }
    };
    Ok(ranges
        .into_iter()
        .enumerate()
        .map(|(i, range)| Part {
            range,
            path: dir.join(format!(
                "part-{:05}.{}",
                i + 1,
                compression.part_extension()
            )),
            single: false,
        })
        .collect())
}

/// Whether `dir` holds parts of an export.
fn has_parts(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("part-"))
    })
}

/// Removes the parts (and their checkpoints) of an earlier export in `dir`, so that an
/// import of the directory does not read stale parts.
fn remove_parts(dir: &Path) -> CliResult<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| CliError::io(dir, &e))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("part-") {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| CliError::io(&path, &e))?;
        }
    }
    Ok(())
}

fn options_hash(
    table: &Table,
    range: &KeyRange,
    scope: &Scope,
    compression: Compression,
    page_size: usize,
) -> String {
    let range = serde_json::to_string(range).unwrap_or_default();
    let fingerprint = scope.fingerprint();
    let mut parts = vec!["export", table.account().name(), table.name(), &range];
    let compression = format!("{compression:?}");
    let page_size = page_size.to_string();
    parts.extend([compression.as_str(), page_size.as_str()]);
    // An unscoped export keeps the hash of earlier versions' checkpoints.
    if !fingerprint.is_empty() {
        parts.push(&fingerprint);
    }
    checkpoint::options_hash(&parts)
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::io(path, &e)
}

/// Exports one part; returns the entities it holds and those it left out (also those of
/// earlier runs).
#[allow(clippy::too_many_arguments)]
async fn export_part(
    ctx: &Ctx,
    table: &Table,
    part: &Part,
    scope: &Scope,
    compression: Compression,
    page_size: usize,
    resume: bool,
    reporter: &Reporter,
) -> CliResult<Counts> {
    let path = &part.path;
    let checkpoint_path = checkpoint::beside(path, ".checkpoint");
    let options = options_hash(table, &part.range, scope, compression, page_size);
    let earlier: Option<ExportCheckpoint> = if resume {
        checkpoint::load(&checkpoint_path)?
    } else {
        None
    };
    if resume && part.single && earlier.is_none() && path.exists() {
        return Err(CliError::usage(format!(
            "{}: no checkpoint to resume from — the export either completed (its checkpoint is removed then) or stopped before its first page; pass --overwrite to export again",
            path.display()
        )));
    }
    let (start, mut counts, keep) = match &earlier {
        Some(cp) => {
            checkpoint::check_same(&checkpoint_path, cp.version, &cp.options, &options)?;
            let counts = Counts {
                entities: cp.entities,
                unreadable: cp.unreadable,
            };
            if cp.complete {
                reporter.add(cp.entities);
                return Ok(counts);
            }
            (
                transfer::parse_token(cp.continuation.as_deref())?,
                counts,
                Some(cp.bytes),
            )
        }
        None => (None, Counts::default(), None),
    };
    reporter.add(counts.entities);
    if start.is_none() && keep.is_some() {
        return Err(CliError::failure(format!(
            "{}: an incomplete checkpoint without a continuation",
            checkpoint_path.display()
        )));
    }
    let mut file = open_output(path, keep).map_err(io_error(path))?;
    let mut bytes = keep.unwrap_or(0);
    let mut pages = Box::pin(transfer::range_pages_each(
        table,
        &part.range,
        scope,
        page_size,
        start,
    ));
    let what = format!("reading {} ({})", table.name(), part.range.describe());
    loop {
        let page = match transfer::next_page(ctx, &mut pages, &what).await? {
            Next::Page(page) => page,
            Next::End | Next::Interrupted => return Ok(counts),
        };
        let continuation = page.continuation.clone();
        let (items, unreadable) = readable(page);
        let mut lines = Vec::with_capacity(512 * items.len());
        for stored in &items {
            write_line(
                &mut lines,
                stored.keys.pk(),
                stored.keys.rk(),
                stored.timestamp.as_ref(),
                &stored.value,
            );
        }
        let frame = if lines.is_empty() {
            lines
        } else {
            compression.frame(lines).map_err(io_error(path))?
        };
        file.write_all(&frame).map_err(io_error(path))?;
        // The checkpoint may only claim bytes that are on disk.
        file.sync_data().map_err(io_error(path))?;
        counts.entities += items.len() as u64;
        counts.unreadable += unreadable;
        bytes += frame.len() as u64;
        let complete = continuation.is_none();
        checkpoint::store(
            &checkpoint_path,
            &ExportCheckpoint {
                version: VERSION,
                options: options.clone(),
                continuation: continuation.as_ref().map(ToString::to_string),
                entities: counts.entities,
                bytes,
                complete,
                unreadable: counts.unreadable,
            },
        )?;
        reporter.add(items.len() as u64);
        ctx.interrupt.unit_done();
        if complete {
            return Ok(counts);
        }
    }
}
