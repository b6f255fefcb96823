//! Workload 10: the `tablekit` tool, run as a process against the bench's emulator. Export
//! throughput is paired with tablekit's scan of the same partition, copy throughput with
//! tablekit's bulk load of the same entities (workload 1's inserts) into the same destination,
//! run by run; peak memory of an export is compared at two table sizes. The throughput tables hold `Sizes::tool` entities in quick
//! runs too: at a tenth of that, the process's start-up and the first requests' connection
//! set-up would be a large part of what is measured.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use serde::Serialize;
use tablekit_azure::{Account, BulkOptions, Table};
use tablekit_core::filter::Filter;

use tablekit_testkit::Azurite;

use crate::data::Record;
use crate::measure::{Figure, timed};
use crate::workloads::{RUNS, Result, Sizes, err, fresh_table, operations};

/// The options `tablekit copy` runs with in the copy workloads.
pub(crate) const COPY_OPTIONS: &str = "--create";

/// Peak memory of one export.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct ExportMemory {
    pub(crate) entities: usize,
    /// The process's peak resident set (`VmHWM`), sampled every few milliseconds until it
    /// exits.
    pub(crate) peak_rss: u64,
}

/// What workload 10 measured.
#[derive(Debug, Serialize)]
pub(crate) struct Tool {
    /// Entities exported and copied per run.
    pub(crate) entities: usize,
    /// Partitions the copied table has.
    pub(crate) partitions: usize,
    /// `tablekit export` of the scan table, wall time of the process.
    pub(crate) export: Figure,
    /// tablekit's scan of the same partition, run by run beside the export.
    pub(crate) scan: Figure,
    /// `tablekit copy` of a table loaded like the bulk load, wall time of the process.
    pub(crate) copy: Figure,
    /// tablekit's bulk load of the same entities (inserts, as workload 1), run by run beside
    /// the copy.
    pub(crate) bulk: Figure,
    /// What tablekit reads and writes per second when it does both in turn, run by run: from
    /// the same run's scan and bulk write, `1 / (1/scan + 1/bulk)`. A copy does both on one
    /// emulator, which serves them one after the other; this is its ceiling there.
    pub(crate) read_write: Figure,
    /// `tablekit copy` of the same table to another account (a second emulator, as a copy
    /// between two storage accounts reads from one service and writes to another).
    pub(crate) copy_between: Figure,
    /// tablekit's bulk load of the same entities into that other account, run by run beside
    /// the copy.
    pub(crate) bulk_between: Figure,
    pub(crate) copy_options: &'static str,
    pub(crate) memory_small: ExportMemory,
    pub(crate) memory_large: ExportMemory,
}

/// The `tablekit` binary built beside this one (`cargo xtask bench` builds both in release).
fn binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(err)?;
    let tool = exe.with_file_name(format!("tablekit{}", std::env::consts::EXE_SUFFIX));
    if tool.is_file() {
        Ok(tool)
    } else {
        Err(format!(
            "{} not found: run the bench through `cargo xtask bench`, which builds it",
            tool.display()
        ))
    }
}

/// Starts `tablekit --quiet ARGS` against `cs`, its stderr in `log`.
fn spawn(tool: &Path, cs: &str, args: &[&str], log: &Path) -> Result<Child> {
    let log_file = std::fs::File::create(log).map_err(err)?;
    Command::new(tool)
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .arg("--connection-string")
        .arg(cs)
        .arg("--quiet")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .map_err(|e| format!("{}: {e}", tool.display()))
}

fn finished(mut child: Child, log: &Path, args: &[&str]) -> Result<()> {
    let status = child.wait().map_err(err)?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "tablekit {} failed ({status}): {}",
            args.join(" "),
            std::fs::read_to_string(log).unwrap_or_default()
        ))
    }
}

/// Runs the tool to its end; returns its wall time.
fn run(tool: &Path, cs: &str, args: &[&str], log: &Path) -> Result<Duration> {
    let start = Instant::now();
    let child = spawn(tool, cs, args, log)?;
    finished(child, log, args)?;
    Ok(start.elapsed())
}

/// Runs the tool to its end, sampling its peak resident set from `/proc` every 5 ms (the
/// high-water mark only grows, so the last sample before exit is the peak but for the final
/// few milliseconds).
fn run_sampled(tool: &Path, cs: &str, args: &[&str], log: &Path) -> Result<u64> {
    let mut child = spawn(tool, cs, args, log)?;
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    while child.try_wait().map_err(err)?.is_none() {
        let hwm = std::fs::read_to_string(&status)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        peak = peak.max(hwm * 1024);
        std::thread::sleep(Duration::from_millis(5));
    }
    finished(child, log, args)?;
    if peak == 0 {
        return Err("no memory sample of the tool".into());
    }
    Ok(peak)
}

/// Workload 10. `large` is a table of `s.tool_memory_large` entities in partitions of 1,000
/// if one is loaded already (the memory workload's).
pub(crate) async fn tool(
    account: &Account,
    cs: &str,
    large: Option<&Table>,
    s: Sizes,
    scratch: &Path,
) -> Result<Tool> {
    let tool = binary()?;
    std::fs::create_dir_all(scratch).map_err(err)?;
    let log = scratch.join("tablekit.log");
    let n = s.tool;
    // One partition, as the scan workload's.
    let scan_table = crate::workloads::scan_table(account, n).await?;
    let (mut export, mut scan) = (vec![], vec![]);
    for run_no in 0..=RUNS {
        let out = scratch.join(format!("export-{run_no}.jsonl"));
        let args = ["export", scan_table.name(), "--out", path(&out)?];
        let export_took = run(&tool, cs, &args, &log)?;
        remove_export(&out);
        let (count, scan_took) = timed(
            scan_table
                .query::<Record>()
                .filter(Filter::partition("scan"))
                .stream()
                .try_fold(0usize, |n, _| async move { Ok(n + 1) }),
        )
        .await;
        if count.map_err(err)? != n {
            return Err("scan beside the export returned a wrong count".into());
        }
        if run_no > 0 {
            export.push(n as f64 / export_took.as_secs_f64());
            scan.push(n as f64 / scan_took.as_secs_f64());
        }
    }
    scan_table.delete_table().await.map_err(err)?;

    let source = fresh_table(account, "benchcopysrc").await?;
    load(&source, s).await?;
    // The other account: a second emulator, so the copy's reads and writes are served by two
    // processes, as by two storage accounts.
    let other = Azurite::start().map_err(err)?;
    let other_cs = other.connection_string();
    let other_account = crate::unlimited_account(&other_cs)?;
    let (mut copy, mut bulk, mut copy_between, mut bulk_between) = (vec![], vec![], vec![], vec![]);
    for run_no in 0..=RUNS {
        for (dst_account, dst_cs) in [(account, None), (&other_account, Some(other_cs.as_str()))] {
            let dst = tablekit_testkit::unique_table_name("benchcopydst");
            let checkpoint = scratch.join(format!("copy-{run_no}.checkpoint"));
            let mut args = vec!["copy", source.name(), &dst];
            args.extend(COPY_OPTIONS.split(' '));
            args.extend(["--checkpoint", path(&checkpoint)?]);
            if let Some(dst_cs) = dst_cs {
                args.extend(["--dst-connection-string", dst_cs]);
            }
            let copy_took = run(&tool, cs, &args, &log)?;
            let _ = std::fs::remove_file(&checkpoint);
            let copied = dst_account.table(&dst).map_err(err)?;
            let count = copied
                .query::<Record>()
                .allow_scan()
                .stream()
                .try_fold(0usize, |n, _| async move { Ok(n + 1) })
                .await
                .map_err(err)?;
            if count != n {
                return Err(format!("copy to {dst} holds {count} entities, not {n}"));
            }
            copied.delete_table().await.map_err(err)?;
            let target = fresh_table(dst_account, "benchcopybulk").await?;
            let (loaded, bulk_took) = timed(load(&target, s)).await;
            loaded?;
            target.delete_table().await.map_err(err)?;
            if run_no > 0 {
                let (copy_rate, bulk_rate) = (
                    n as f64 / copy_took.as_secs_f64(),
                    n as f64 / bulk_took.as_secs_f64(),
                );
                if dst_cs.is_some() {
                    copy_between.push(copy_rate);
                    bulk_between.push(bulk_rate);
                } else {
                    copy.push(copy_rate);
                    bulk.push(bulk_rate);
                }
            }
        }
    }
    drop(other);
    source.delete_table().await.map_err(err)?;
    let read_write = scan
        .iter()
        .zip(&bulk)
        .map(|(r, w)| 1.0 / (1.0 / r + 1.0 / w))
        .collect();

    let small = crate::memory::load(account, s.tool_memory_small).await?;
    let memory_small = export_memory(&tool, cs, &small, s.tool_memory_small, scratch)?;
    small.delete_table().await.map_err(err)?;
    let memory_large = match large {
        Some(table) => export_memory(&tool, cs, table, s.tool_memory_large, scratch)?,
        None => {
            let table = crate::memory::load(account, s.tool_memory_large).await?;
            let measured = export_memory(&tool, cs, &table, s.tool_memory_large, scratch);
            table.delete_table().await.map_err(err)?;
            measured?
        }
    };
    let _ = std::fs::remove_dir_all(scratch);
    Ok(Tool {
        entities: n,
        partitions: s.bulk_partitions,
        export: Figure::of(export, "entities/s"),
        scan: Figure::of(scan, "entities/s"),
        copy: Figure::of(copy, "entities/s"),
        bulk: Figure::of(bulk, "entities/s"),
        read_write: Figure::of(read_write, "entities/s"),
        copy_between: Figure::of(copy_between, "entities/s"),
        bulk_between: Figure::of(bulk_between, "entities/s"),
        copy_options: COPY_OPTIONS,
        memory_small,
        memory_large,
    })
}

/// Exports `table` (of `entities` entities) once, sampling the tool's memory, and checks the
/// file holds every entity.
fn export_memory(
    tool: &Path,
    cs: &str,
    table: &Table,
    entities: usize,
    scratch: &Path,
) -> Result<ExportMemory> {
    let out = scratch.join(format!("memory-{entities}.jsonl"));
    let args = ["export", table.name(), "--out", path(&out)?];
    let peak_rss = run_sampled(tool, cs, &args, &scratch.join("tablekit.log"))?;
    let lines = std::fs::read_to_string(&out)
        .map_err(err)?
        .lines()
        .filter(|l| !l.is_empty())
        .count();
    remove_export(&out);
    if lines != entities {
        return Err(format!("export of {entities} entities wrote {lines} lines"));
    }
    Ok(ExportMemory { entities, peak_rss })
}

/// Loads `s.tool` entities over `s.bulk_partitions` partitions into `table`, as the bulk
/// workload does.
async fn load(table: &Table, s: Sizes) -> Result<()> {
    let ops = operations(s.tool, s.bulk_partitions);
    let report = table
        .bulk_write(ops, BulkOptions::default().with_concurrency(s.concurrency))
        .await
        .map_err(err)?;
    if report.is_complete() {
        Ok(())
    } else {
        Err(format!("bulk load into {} incomplete", table.name()))
    }
}

fn remove_export(out: &Path) {
    let _ = std::fs::remove_file(out);
    let mut checkpoint = out.as_os_str().to_owned();
    checkpoint.push(".checkpoint");
    let _ = std::fs::remove_file(PathBuf::from(checkpoint));
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| format!("{}: not UTF-8", p.display()))
}
