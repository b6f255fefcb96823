//! `tablekit import`: JSON Lines into a table through `bulk_write`, chunk by chunk, with a
//! checkpoint after each chunk and a report of every row that was not imported.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufWriter, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tablekit::azure::{Account, BulkOptions, Table};
use tablekit::core::batch::Operation;
use tablekit::core::{Entity, Keys};

use super::transfer::{self, Settled};
use super::{Ctx, ended};
use crate::checkpoint::{self, VERSION};
use crate::cli::{FileFormat, ImportArgs, Mode};
use crate::entity_json::{Row, read_line};
use crate::exit::{CliError, CliResult, Exit};
use crate::files::{Compression, open_lines, open_output};
use crate::progress::Reporter;

/// Where every row before it has a final outcome.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ImportCheckpoint {
    version: u32,
    /// Hash of the table, mode and input files.
    options: String,
    /// Index of the input file in progress.
    file: usize,
    /// Lines of that file done.
    line: u64,
    /// Rows imported so far.
    imported: u64,
    /// Rows refused so far.
    refused: u64,
    /// Rows of unknown outcome so far.
    unknown: u64,
    /// Length of the rejects file that reports them.
    rejects_bytes: u64,
    /// Whether every file is done.
    complete: bool,
}

/// Where a row came from.
#[derive(Debug, Clone)]
struct Origin {
    file: usize,
    line: u64,
    pk: Option<String>,
    rk: Option<String>,
}

/// The report of rows that were not imported.
enum Rejects {
    File {
        out: BufWriter<File>,
        path: PathBuf,
        bytes: u64,
    },
    Stderr,
}

impl Rejects {
    fn report(
        &mut self,
        files: &[PathBuf],
        origin: &Origin,
        outcome: &str,
        reason: &str,
    ) -> CliResult<()> {
        let file = files[origin.file].display().to_string();
        match self {
            Rejects::File { out, path, bytes } => {
                let mut record = serde_json::json!({
                    "file": file,
                    "line": origin.line,
                    "outcome": outcome,
                    "reason": reason,
                });
                if let (Some(pk), Some(rk)) = (&origin.pk, &origin.rk) {
                    record["PartitionKey"] = pk.clone().into();
                    record["RowKey"] = rk.clone().into();
                }
                let mut line = record.to_string();
                line.push('\n');
                out.write_all(line.as_bytes())
                    .map_err(|e| CliError::io(path, &e))?;
                *bytes += line.len() as u64;
            }
            Rejects::Stderr => {
                let keys = match (&origin.pk, &origin.rk) {
                    (Some(pk), Some(rk)) => format!(" ({pk:?}, {rk:?})"),
                    _ => String::new(),
                };
                eprintln!("{outcome}: {file}:{}{keys}: {reason}", origin.line);
            }
        }
        Ok(())
    }

    /// Flushes and syncs; returns the report's length for the checkpoint.
    fn sync(&mut self) -> CliResult<u64> {
        match self {
            Rejects::File { out, path, bytes } => {
                out.flush().map_err(|e| CliError::io(path, &e))?;
                out.get_ref()
                    .sync_data()
                    .map_err(|e| CliError::io(path, &e))?;
                Ok(*bytes)
            }
            Rejects::Stderr => Ok(0),
        }
    }
}

/// The input files: the file, or the directory's `*.jsonl[.gz|.zst]` files by name.
fn input_files(input: &Path) -> CliResult<Vec<PathBuf>> {
    if input.as_os_str() == "-" {
        return Ok(vec![input.to_owned()]);
    }
    if !input.is_dir() {
        if !input.is_file() {
            return Err(CliError::usage(format!(
                "{}: no such file",
                input.display()
            )));
        }
        return Ok(vec![input.to_owned()]);
    }
    let entries = std::fs::read_dir(input)
        .map_err(|e| CliError::usage(format!("{}: {e}", input.display())))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            [
                ".jsonl",
                ".jsonl.gz",
                ".jsonl.zst",
                ".csv",
                ".csv.gz",
                ".csv.zst",
            ]
            .iter()
            .any(|ext| name.ends_with(ext))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(CliError::usage(format!(
            "{}: no *.jsonl or *.csv files (also .gz, .zst)",
            input.display()
        )));
    }
    Ok(files)
}

/// A row as the operation `mode` writes.
fn operation(
    mode: Mode,
    keys: Keys,
    row: tablekit::core::Properties,
) -> tablekit::core::Result<Operation> {
    let entity = Entity::new(keys, row);
    match mode {
        Mode::Upsert => Operation::upsert_replace(&entity),
        Mode::Insert => Operation::insert(&entity),
        Mode::Merge => Operation::upsert_merge(&entity),
    }
}

/// The import in progress: counts, the chunk being filled and where the input stands.
struct Import<'a> {
    ctx: &'a Ctx,
    table: &'a Table,
    files: &'a [PathBuf],
    options: BulkOptions,
    reporter: Reporter,
    rejects: Rejects,
    state: ImportCheckpoint,
    /// `None` for stdin, which cannot be resumed.
    checkpoint_path: Option<PathBuf>,
    chunk: Vec<(Operation, Origin)>,
    keys_in_chunk: HashSet<(String, String)>,
    /// `--dry-run`: chunks are counted, not sent.
    dry_run: bool,
}

impl Import<'_> {
    /// Sends the chunk, reports what was not imported, and moves the checkpoint to
    /// `(file, line)`: every row before it now has its outcome.
    async fn flush(&mut self, file: usize, line: u64) -> CliResult<()> {
        let chunk = std::mem::take(&mut self.chunk);
        let sent = !chunk.is_empty();
        self.keys_in_chunk.clear();
        if self.dry_run {
            self.state.imported += chunk.len() as u64;
            self.reporter.add(chunk.len() as u64);
            if sent {
                self.ctx.interrupt.unit_done();
            }
            return Ok(());
        }
        let (operations, origins): (Vec<Operation>, Vec<Origin>) = chunk.into_iter().unzip();
        let settled: Settled = transfer::write_settled(
            self.table,
            operations,
            self.options.clone(),
            Some(&self.reporter),
        )
        .await
        .map_err(|e| transfer::write_error(self.table, &e))?;
        self.state.imported += settled.written;
        for (i, error) in &settled.failed {
            self.state.refused += 1;
            self.rejects
                .report(self.files, &origins[*i], "refused", &error.to_string())?;
        }
        for (i, error) in &settled.unknown {
            self.state.unknown += 1;
            self.rejects.report(
                self.files,
                &origins[*i],
                "unknown",
                &format!("outcome unknown after retries: {error}"),
            )?;
        }
        self.state.file = file;
        self.state.line = line;
        self.state.rejects_bytes = self.rejects.sync()?;
        if let Some(path) = &self.checkpoint_path {
            checkpoint::store(path, &self.state)?;
        }
        if sent {
            self.ctx.interrupt.unit_done();
        }
        Ok(())
    }

    /// A row refused before sending.
    fn refuse(&mut self, origin: &Origin, reason: &str) -> CliResult<()> {
        self.state.refused += 1;
        self.reporter.add(1);
        self.rejects.report(self.files, origin, "refused", reason)
    }
}

/// Runs `import`.
///
/// Requests: those of `bulk_write` for each chunk — ⌈rows of a partition / 100⌉
/// transactions per partition and chunk, plus re-sends of refused and unknown operations.
pub(crate) async fn run(ctx: &Ctx, account: &Account, args: ImportArgs) -> CliResult {
    let table = account.table(&args.table)?;
    if args.chunk == 0 {
        return Err(CliError::usage("--chunk must be at least 1"));
    }
    if args.parallel == Some(0) {
        return Err(CliError::usage("--parallel must be at least 1"));
    }
    let files = input_files(&args.input)?;
    let stdin = args.input.as_os_str() == "-";
    if stdin && args.resume {
        return Err(CliError::usage(
            "--resume needs an input file: an import from stdin cannot be resumed",
        ));
    }
    if !stdin && args.compress.is_some() {
        return Err(CliError::usage(
            "--compress applies to stdin; files are decompressed by their extension",
        ));
    }
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let options = checkpoint::options_hash(&[
        "import",
        account.name(),
        &args.table,
        &format!("{:?}", args.mode),
        &names.join("\n"),
    ]);
    let checkpoint_path = (!stdin && !args.dry_run)
        .then(|| checkpoint::beside(args.input.components().as_path(), ".import-checkpoint"));
    let earlier: Option<ImportCheckpoint> = if args.resume {
        checkpoint_path
            .as_deref()
            .map(checkpoint::load::<ImportCheckpoint>)
            .transpose()?
            .flatten()
    } else {
        None
    };
    if let Some(cp) = &earlier {
        if let Some(path) = &checkpoint_path {
            checkpoint::check_same(path, cp.version, &cp.options, &options)?;
        }
        if cp.complete {
            ctx.status("the import is already complete");
            return Ok(summary(ctx, cp, false));
        }
    }
    let rejects = match &args.rejects {
        Some(path) => {
            let keep = earlier.as_ref().map(|cp| cp.rejects_bytes);
            let file = open_output(path, keep).map_err(|e| CliError::io(path, &e))?;
            Rejects::File {
                out: BufWriter::new(file),
                path: path.clone(),
                bytes: keep.unwrap_or(0),
            }
        }
        None => Rejects::Stderr,
    };
    if args.create {
        table
            .create_if_not_exists()
            .await
            .map_err(|e| CliError::context(&format!("creating {}", args.table), &e))?;
    }
    let mut options_bulk = BulkOptions::default();
    if let Some(n) = args.parallel {
        options_bulk = options_bulk.with_concurrency(n);
    }
    if args.mode == Mode::Insert {
        // A row sent again after an unknown outcome or an aborted run finds its own entity:
        // identical means imported, not refused.
        options_bulk = options_bulk.with_accept_identical(true);
    }
    let state = earlier.unwrap_or(ImportCheckpoint {
        version: VERSION,
        options,
        ..ImportCheckpoint::default()
    });
    let reporter = Reporter::new("import", None, ctx.quiet);
    reporter.add(state.imported + state.refused + state.unknown);
    let mut import = Import {
        ctx,
        table: &table,
        files: &files,
        options: options_bulk,
        reporter,
        rejects,
        state,
        checkpoint_path,
        chunk: Vec::with_capacity(args.chunk),
        keys_in_chunk: HashSet::new(),
        dry_run: args.dry_run,
    };
    let result = read_all(&mut import, &files, &args).await;
    import.reporter.finish();
    result?;
    if ctx.interrupt.requested() {
        ctx.status("interrupted: run the same command with --resume to continue");
        summary(ctx, &import.state, args.dry_run);
        return Ok(ended(ctx, Exit::Interrupted));
    }
    import.state.complete = true;
    // Every row has its outcome: nothing is left to resume, so the checkpoint goes (it stays
    // after a failure or an interruption). The rejects file keeps the rows not imported.
    if let Some(path) = &import.checkpoint_path {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CliError::io(path, &e)),
        }
    }
    Ok(summary(ctx, &import.state, args.dry_run))
}

/// The rows of one input, JSON Lines or CSV.
enum Source {
    Lines {
        lines: std::io::Lines<Box<dyn BufRead + Send>>,
        line: u64,
    },
    Csv {
        records: crate::csv::Records<Box<dyn BufRead + Send>>,
        columns: crate::csv::Columns,
        width: usize,
    },
}

impl Source {
    fn open(path: &Path, args: &ImportArgs) -> CliResult<Self> {
        let stdin = path.as_os_str() == "-";
        let reader: Box<dyn BufRead + Send> = if stdin {
            open_stdin(args.compress.unwrap_or(Compression::None))
        } else {
            open_lines(path).map_err(|e| CliError::io(path, &e))?
        };
        let format = match (args.format, stdin) {
            (Some(f), _) => f,
            (None, true) => FileFormat::Jsonl,
            (None, false) => FileFormat::from_path(path),
        };
        Ok(match format {
            FileFormat::Jsonl => Source::Lines {
                lines: reader.lines(),
                line: 0,
            },
            FileFormat::Csv => {
                let mut records = crate::csv::Records::new(reader);
                let header = records
                    .next_record()
                    .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?
                    .map(|(_, h)| h)
                    .unwrap_or_default();
                if header.is_empty() {
                    return Err(CliError::usage(format!(
                        "{}: no CSV header",
                        path.display()
                    )));
                }
                let columns = crate::csv::Columns::parse(&header)
                    .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
                Source::Csv {
                    records,
                    columns,
                    width: header.len(),
                }
            }
        })
    }

    /// The next row and the line it starts on: `None` at the end; an inner `None` for a
    /// blank line or record.
    #[allow(clippy::type_complexity)]
    fn next(&mut self) -> std::io::Result<Option<(u64, Option<Result<Row, String>>)>> {
        match self {
            Source::Lines { lines, line } => {
                let Some(text) = lines.next().transpose()? else {
                    return Ok(None);
                };
                *line += 1;
                if text.trim().is_empty() {
                    return Ok(Some((*line, None)));
                }
                Ok(Some((*line, Some(read_line(&text)))))
            }
            Source::Csv {
                records,
                columns,
                width,
            } => {
                let Some((line, record)) = records.next_record()? else {
                    return Ok(None);
                };
                if record.len() == 1 && record[0].is_empty() {
                    return Ok(Some((line, None)));
                }
                Ok(Some((line, Some(columns.row(&record, *width)))))
            }
        }
    }
}

/// Stdin, decompressed as `--compress` says.
fn open_stdin(compression: Compression) -> Box<dyn BufRead + Send> {
    let stdin = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
    crate::files::decompressing(Box::new(stdin), compression)
}

/// Reads every file from the checkpoint on, sending a chunk whenever it is full.
async fn read_all(import: &mut Import<'_>, files: &[PathBuf], args: &ImportArgs) -> CliResult<()> {
    let (mode, chunk) = (args.mode, args.chunk);
    let (first_file, skip) = (import.state.file, import.state.line);
    for (index, path) in files.iter().enumerate().skip(first_file) {
        let mut source = Source::open(path, args)?;
        loop {
            let next = source.next().map_err(|e| CliError::io(path, &e))?;
            let Some((line_no, row)) = next else { break };
            if index == first_file && line_no <= skip {
                continue;
            }
            let Some(row) = row else { continue };
            let mut origin = Origin {
                file: index,
                line: line_no,
                pk: None,
                rk: None,
            };
            let row = match row {
                Ok(row) => row,
                Err(reason) => {
                    import.refuse(&origin, &reason)?;
                    continue;
                }
            };
            origin.pk = Some(row.pk.clone());
            origin.rk = Some(row.rk.clone());
            let op = Keys::new(row.pk.clone(), row.rk.clone())
                .and_then(|keys| operation(mode, keys, row.properties))
                .and_then(|op| transfer::check_for_service(import.table, &op).map(|()| op));
            let op = match op {
                Ok(op) => op,
                Err(e) => {
                    import.refuse(&origin, &e.to_string())?;
                    continue;
                }
            };
            // A transaction may touch an entity once: a repeated key waits for the next chunk.
            if !import.keys_in_chunk.insert((row.pk, row.rk)) {
                import.flush(index, line_no - 1).await?;
                import.keys_in_chunk.insert((
                    origin.pk.clone().unwrap_or_default(),
                    origin.rk.clone().unwrap_or_default(),
                ));
            }
            import.chunk.push((op, origin));
            if import.chunk.len() >= chunk {
                import.flush(index, line_no).await?;
                if import.ctx.interrupt.requested() {
                    return Ok(());
                }
            }
        }
        import.flush(index + 1, 0).await?;
        if import.ctx.interrupt.requested() {
            return Ok(());
        }
    }
    Ok(())
}

/// Prints the counts; partial when any row was refused or is unknown.
fn summary(ctx: &Ctx, state: &ImportCheckpoint, dry_run: bool) -> Exit {
    if dry_run {
        ctx.summary(
            &format!(
                "dry run: would import {} rows; {} would be refused; nothing written",
                state.imported, state.refused
            ),
            serde_json::json!({"dry_run": true, "would_import": state.imported,
                "would_refuse": state.refused}),
        );
    } else {
        ctx.summary(
            &format!(
                "imported {} rows; refused {}; unknown {}",
                state.imported, state.refused, state.unknown
            ),
            serde_json::json!({"imported": state.imported, "refused": state.refused,
                "unknown": state.unknown}),
        );
    }
    if state.refused + state.unknown > 0 {
        Exit::Partial
    } else {
        Exit::Success
    }
}
