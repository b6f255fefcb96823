//! `tablekit export`: pages streamed to JSON Lines (optionally compressed), a checkpoint after
//! every page, parts in parallel over key ranges.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tablekit::azure::{Account, Table};

use super::transfer::{self, Next, Scope};
use super::{Ctx, ended};
use crate::checkpoint::{self, VERSION};
use crate::cli::ExportArgs;
use crate::entity_json::write_line;
use crate::exit::{CliError, CliResult, Exit};
use crate::files::{Compression, open_output};
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
    let compression = if multi {
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
    let parts = if multi {
        plan_parts(ctx, &table, &args, compression).await?
    } else {
        vec![Part {
            range: transfer::single_range(&args.ranges),
            path: args.out.clone(),
        }]
    };
    if !args.resume && !args.overwrite {
        for part in &parts {
            for path in [
                part.path.clone(),
                checkpoint::beside(&part.path, ".checkpoint"),
            ] {
                if path.exists() {
                    return Err(CliError::usage(format!(
                        "{} exists: pass --resume to continue that export or --overwrite to replace it",
                        path.display()
                    )));
                }
            }
        }
    }
    let reporter = Reporter::new("export", None, ctx.quiet);
    let results: Vec<CliResult<u64>> = futures::stream::iter(parts.iter().map(|part| {
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
    let mut total = 0;
    for result in results {
        total += result?;
    }
    let exit = ended(ctx, Exit::Success);
    if exit == Exit::Interrupted {
        ctx.status(&format!(
            "interrupted after {total} entities: run the same command with --resume to continue"
        ));
    } else {
        ctx.status(&format!(
            "exported {total} entities from {} to {}",
            args.table,
            args.out.display()
        ));
    }
    Ok(exit)
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
        })
        .collect())
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

/// Exports one part; returns the entities it holds (also those of earlier runs).
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
) -> CliResult<u64> {
    let path = &part.path;
    let checkpoint_path = checkpoint::beside(path, ".checkpoint");
    let options = options_hash(table, &part.range, scope, compression, page_size);
    let earlier: Option<ExportCheckpoint> = if resume {
        checkpoint::load(&checkpoint_path)?
    } else {
        None
    };
    let (start, mut entities, keep) = match &earlier {
        Some(cp) => {
            checkpoint::check_same(&checkpoint_path, cp.version, &cp.options, &options)?;
            if cp.complete {
                reporter.add(cp.entities);
                return Ok(cp.entities);
            }
            (
                transfer::parse_token(cp.continuation.as_deref())?,
                cp.entities,
                Some(cp.bytes),
            )
        }
        None => (None, 0, None),
    };
    reporter.add(entities);
    if start.is_none() && keep.is_some() {
        return Err(CliError::failure(format!(
            "{}: an incomplete checkpoint without a continuation",
            checkpoint_path.display()
        )));
    }
    let mut file = open_output(path, keep).map_err(io_error(path))?;
    let mut bytes = keep.unwrap_or(0);
    let mut pages = Box::pin(transfer::range_pages(
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
            Next::End | Next::Interrupted => return Ok(entities),
        };
        let mut lines = Vec::with_capacity(512 * page.items.len());
        for stored in &page.items {
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
        entities += page.items.len() as u64;
        bytes += frame.len() as u64;
        let complete = page.continuation.is_none();
        checkpoint::store(
            &checkpoint_path,
            &ExportCheckpoint {
                version: VERSION,
                options: options.clone(),
                continuation: page.continuation.as_ref().map(ToString::to_string),
                entities,
                bytes,
                complete,
            },
        )?;
        reporter.add(page.items.len() as u64);
        ctx.interrupt.unit_done();
        if complete {
            return Ok(entities);
        }
    }
}
