//! `tablekit query`: a typed filter, its shape, and four output formats.

use std::io::{BufWriter, IsTerminal as _, Write};

use futures::StreamExt as _;
use tablekit::azure::{Account, Page};
use tablekit::core::filter::Filter;
use tablekit::core::{Properties, QueryShape};

use super::{Ctx, ended};
use crate::cli::{Format, QueryArgs};
use crate::entity_json::write_line;
use crate::exit::{CliError, CliResult, Exit};
use crate::render;

/// How the service executes a query of this shape, for stderr.
pub(crate) fn describe_shape(shape: QueryShape, filter: Option<&Filter>) -> String {
    let what = match shape {
        QueryShape::Point => "point query (one entity, one index seek)",
        QueryShape::Range => "range query (one partition, a RowKey range)",
        QueryShape::PartitionScan => "partition scan (reads every entity of one partition)",
        QueryShape::TableScan if filter.is_some_and(Filter::has_partition_key_range) => {
            "table scan over a PartitionKey range (reads every partition in the range)"
        }
        QueryShape::TableScan => "table scan (reads every partition)",
    };
    format!("query shape: {what}")
}

/// Runs `query`.
///
/// Requests: one per page of up to 1,000 entities; none when the filter, the selection or
/// the shape is refused.
pub(crate) async fn run(ctx: &Ctx, account: &Account, args: QueryArgs) -> CliResult {
    let table = account.table(&args.table)?;
    let filter = args
        .filter
        .as_deref()
        .map(|text| {
            let filter = Filter::parse(text)?;
            filter.render()?;
            Ok::<_, tablekit::core::Error>(filter)
        })
        .transpose()
        .map_err(|e| CliError::context("--filter", &e))?;
    let shape = filter.as_ref().map_or(QueryShape::TableScan, Filter::shape);
    ctx.status(&describe_shape(shape, filter.as_ref()));
    if shape == QueryShape::TableScan && !args.allow_scan {
        return Err(CliError::usage(
            "this query reads every partition (no `PartitionKey eq '…'` in the filter): pass --allow-scan to run it",
        ));
    }
    let mut query = table.query::<Properties>();
    if let Some(f) = filter {
        query = query.filter(f);
    }
    if let Some(select) = &args.select {
        query = query.select(select.iter().cloned());
    }
    if let Some(top) = args.top {
        query = query.top(top);
    }
    if args.allow_scan {
        query = query.allow_scan();
    }
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        Format::Table
    } else {
        Format::Jsonl
    });
    ctx.stdout_carries_data();
    let mut out = Output::new(format, args.select);
    let mut pages = Box::pin(query.pages());
    loop {
        let page = tokio::select! {
            page = pages.next() => page,
            () = ctx.interrupt.wait() => break,
        };
        let Some(page) = page else { break };
        let page = page.map_err(|e| CliError::context(&format!("querying {}", args.table), &e))?;
        match out.page(&page) {
            Ok(()) => {}
            // The reader went away (`| head`): that is where the output ends.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(Exit::Success),
            Err(e) => return Err(CliError::failure(format!("writing the output: {e}"))),
        }
    }
    match out.finish() {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(CliError::failure(format!("writing the output: {e}"))),
    }
    if let Some(note) = out.dropped_note() {
        ctx.status(&note);
    }
    ctx.summary(
        "",
        serde_json::json!({"table": args.table, "entities": out.entities}),
    );
    Ok(ended(ctx, Exit::Success))
}

/// Writes pages in one format to stdout, streaming.
struct Output {
    format: Format,
    select: Option<Vec<String>>,
    out: BufWriter<std::io::Stdout>,
    columns: Option<(Vec<String>, Vec<usize>)>,
    entities: u64,
    dropped: std::collections::BTreeSet<String>,
}

impl Output {
    fn new(format: Format, select: Option<Vec<String>>) -> Self {
        Self {
            format,
            select,
            out: BufWriter::new(std::io::stdout()),
            columns: None,
            entities: 0,
            dropped: Default::default(),
        }
    }

    fn page(&mut self, page: &Page<tablekit::core::Stored<Properties>>) -> std::io::Result<()> {
        match self.format {
            Format::Jsonl | Format::Json => {
                let mut buf = Vec::with_capacity(256 * page.items.len());
                for stored in &page.items {
                    if self.format == Format::Json {
                        buf.extend_from_slice(if self.entities == 0 { b"[\n" } else { b",\n" });
                    }
                    write_line(
                        &mut buf,
                        stored.keys.pk(),
                        stored.keys.rk(),
                        stored.timestamp.as_ref(),
                        &stored.value,
                    );
                    if self.format == Format::Json {
                        buf.pop();
                    }
                    self.entities += 1;
                }
                self.out.write_all(&buf)
            }
            Format::Table | Format::Csv => self.rows(page),
        }
    }

    fn rows(&mut self, page: &Page<tablekit::core::Stored<Properties>>) -> std::io::Result<()> {
        if self.columns.is_none() {
            if page.items.is_empty() {
                return Ok(());
            }
            let names =
                render::columns(self.select.as_deref(), page.items.iter().map(|s| &s.value));
            let widths = if self.format == Format::Table {
                let rows: Vec<Vec<String>> =
                    page.items.iter().map(|s| self.cells(&names, s)).collect();
                let widths = render::widths(&names, &rows);
                writeln!(self.out, "{}", render::aligned(&widths, &names))?;
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                writeln!(self.out, "{}", render::aligned(&widths, &rule))?;
                widths
            } else {
                self.out.write_all(render::csv_record(&names).as_bytes())?;
                Vec::new()
            };
            self.columns = Some((names, widths));
        }
        let Some((names, widths)) = self.columns.take() else {
            return Ok(());
        };
        for stored in &page.items {
            for (name, _) in stored.value.iter() {
                if !names.iter().any(|n| n == name) {
                    self.dropped.insert(name.to_owned());
                }
            }
            let cells = self.cells(&names, stored);
            let line = if self.format == Format::Table {
                let fitted: Vec<String> =
                    cells.iter().zip(&widths).map(|(c, w)| fit(c, *w)).collect();
                format!("{}\n", render::aligned(&widths, &fitted))
            } else {
                render::csv_record(&cells)
            };
            self.out.write_all(line.as_bytes())?;
            self.entities += 1;
        }
        self.columns = Some((names, widths));
        Ok(())
    }

    fn cells(&self, names: &[String], stored: &tablekit::core::Stored<Properties>) -> Vec<String> {
        let cells = render::cells(
            names,
            stored.keys.pk(),
            stored.keys.rk(),
            stored.timestamp.as_ref(),
            &stored.value,
        );
        if self.format == Format::Table {
            cells.iter().map(|c| render::terminal_cell(c)).collect()
        } else {
            cells
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        if self.format == Format::Json {
            self.out.write_all(if self.entities == 0 {
                b"[]\n"
            } else {
                b"\n]\n"
            })?;
        }
        self.out.flush()
    }

    fn dropped_note(&self) -> Option<String> {
        (!self.dropped.is_empty()).then(|| {
            format!(
                "note: properties not in the first page's columns were not shown: {} (use --select or --format jsonl)",
                self.dropped.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// A cell cut to `width` characters (with `…`) so later pages keep the first page's columns.
fn fit(cell: &str, width: usize) -> String {
    if cell.chars().count() <= width || width == 0 {
        cell.to_owned()
    } else {
        let mut cut: String = cell.chars().take(width - 1).collect();
        cut.push('…');
        cut
    }
}
