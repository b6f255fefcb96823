//! `tablekit index verify | repair | backfill`: an index declared in a spec file, over
//! entities read as [`Properties`]. Every use of `tablekit::index` is in this module.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use tablekit::azure::Account;
use tablekit::core::filter::Property;
use tablekit::core::{Error, Properties};
use tablekit::index::{
    BackfillOptions, BackfillState, Checkpoint, CopyId, CopyIssue, CopySpec, IndexSpec,
    InterPartitionIndex, IntraPartitionIndex, RepairReport, VerifyReport,
};

use super::{Ctx, confirm, ended};
use crate::checkpoint::{self, VERSION};
use crate::cli::{BackfillArgs, IndexArgs, IndexCommand};
use crate::exit::{CliError, CliResult, Exit};
use crate::progress::Reporter;

/// The spec file: what the index crate's declaration takes, by property name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    /// `intra` (copies in the entity's partition) or `inter` (copies in partitions, or
    /// tables, of their own, kept by queued jobs).
    layout: Layout,
    /// The property whose value is the partition (`Department`).
    partition: String,
    /// The entity's identity copy.
    primary: CopyFile,
    /// Alternative keys.
    #[serde(default)]
    secondaries: Vec<CopyFile>,
    /// `inter` only: the job queue.
    #[serde(default)]
    queue: Option<String>,
    /// `inter` only: copy name → the table holding that copy (default: the index's table).
    #[serde(default)]
    tables: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Layout {
    Intra,
    Inter,
}

/// One copy of the spec file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CopyFile {
    /// The copy's name (`email`); its keys start with `name_` unless `prefix` is given.
    name: String,
    /// The property holding its value (`Email`): text, or an integer padded to `width`.
    property: String,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    width: Option<usize>,
    /// Secondary copies only: the properties stored in the copy.
    #[serde(default)]
    projection: Option<Vec<String>>,
}

/// The index a spec file declares, on its table.
enum Index {
    Intra(IntraPartitionIndex<Properties>),
    Inter(InterPartitionIndex<Properties>),
}

/// A spec file made into an index, with the ids of its secondary copies by name.
struct Declared {
    index: Index,
    copies: BTreeMap<String, CopyId>,
}

/// A key source reading the property `name` of the entity as the index crate reads a
/// `Property` constant: text as text, Int32 and Int64 as integers (padded to the copy's
/// width), a missing property refused with `Encode` before any request. A closure over
/// `Properties` could return only one type and could not refuse a missing property.
///
/// `Property` takes a `&'static str`; the few names of one spec file are leaked once per
/// run of the tool.
fn source(name: &str) -> Property<String> {
    Property::new(Box::leak(name.to_owned().into_boxed_str()))
}

fn copy_spec(copy: &CopyFile) -> CopySpec<Properties> {
    let mut spec = CopySpec::new(copy.name.clone(), source(&copy.property));
    if let Some(prefix) = &copy.prefix {
        spec = spec.with_prefix(prefix.clone());
    }
    if let Some(width) = copy.width {
        spec = spec.with_width(width);
    }
    if let Some(projection) = &copy.projection {
        spec = spec.with_projection(projection.clone());
    }
    spec
}

/// Reads and checks the spec file and declares the index on `table`. No request is sent.
///
/// # Errors
/// A usage error (exit 2) naming the file and the problem.
fn declare(account: &Account, table: &str, path: &Path) -> CliResult<Declared> {
    let bad = |why: String| CliError::usage(format!("spec {}: {why}", path.display()));
    let text = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let file: SpecFile = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    for (what, name) in std::iter::once(("partition", &file.partition))
        .chain(std::iter::once((
            "primary.property",
            &file.primary.property,
        )))
        .chain(
            file.secondaries
                .iter()
                .map(|c| ("secondaries[].property", &c.property)),
        )
    {
        if name.trim().is_empty() {
            return Err(bad(format!("{what} is empty: name a property")));
        }
    }
    if file.primary.projection.is_some() {
        return Err(bad(format!(
            "primary {:?} has a projection: the primary copy holds the whole entity",
            file.primary.name
        )));
    }
    match file.layout {
        Layout::Intra if file.queue.is_some() || !file.tables.is_empty() => {
            return Err(bad(
                "\"queue\" and \"tables\" belong to an \"inter\" layout".into(),
            ));
        }
        Layout::Inter if file.queue.is_none() => {
            return Err(bad(
                "an \"inter\" layout needs \"queue\": the job queue that keeps its copies".into(),
            ));
        }
        _ => {}
    }
    let mut builder = IndexSpec::<Properties>::builder(source(&file.partition));
    builder.primary(copy_spec(&file.primary));
    let mut handles = BTreeMap::new();
    for copy in &file.secondaries {
        handles.insert(copy.name.clone(), builder.secondary(copy_spec(copy)));
    }
    let spec = builder.build().map_err(|e| bad(e.to_string()))?;
    let table = account.table(table)?;
    let index = match file.layout {
        Layout::Intra => Index::Intra(IntraPartitionIndex::new(table, spec)),
        Layout::Inter => {
            let queue_name = file.queue.as_deref().unwrap_or_default();
            let queue = account
                .queue(queue_name)
                .map_err(|e| bad(format!("queue: {e}")))?;
            let mut inter = InterPartitionIndex::builder(table, spec, queue);
            for (copy, table) in &file.tables {
                let handle = handles.get(copy).ok_or_else(|| {
                    bad(format!(
                        "tables names {copy:?}, which is not a secondary copy"
                    ))
                })?;
                let table = account
                    .table(table)
                    .map_err(|e| bad(format!("tables.{copy}: {e}")))?;
                inter = inter.with_copy_table(handle, table);
            }
            Index::Inter(inter.build().map_err(|e| bad(e.to_string()))?)
        }
    };
    Ok(Declared {
        index,
        copies: handles
            .into_iter()
            .map(|(name, handle)| (name, CopyId::from(handle)))
            .collect(),
    })
}

impl Index {
    async fn verify(&self, partition: &str) -> tablekit::core::Result<VerifyReport> {
        match self {
            Index::Intra(i) => i.verify(partition).await,
            Index::Inter(i) => i.verify(partition).await,
        }
    }

    async fn repair(&self, partition: &str) -> tablekit::core::Result<RepairReport> {
        match self {
            Index::Intra(i) => i.repair(partition).await,
            Index::Inter(i) => i.repair(partition).await,
        }
    }

    async fn backfill(
        &self,
        checkpoint: &FileCheckpoint,
        options: BackfillOptions,
    ) -> tablekit::core::Result<BackfillState> {
        match self {
            Index::Intra(i) => i.backfill(checkpoint, options).await,
            Index::Inter(i) => i.backfill(checkpoint, options).await,
        }
    }
}

/// Runs an `index` subcommand.
///
/// Requests: `verify` per partition, the audit's (intra: one range query per copy per page;
/// inter: one query of the primary partition and one of each copy's partition, per page);
/// `repair` the audit's plus its fixes (see the book); `backfill` per page one query and
/// the transactions writing its copies; the checkpoint is a local file.
pub(crate) async fn run(ctx: &Ctx, account: &Account, command: IndexCommand) -> CliResult {
    match command {
        IndexCommand::Verify(args) => verify(ctx, account, &args).await,
        IndexCommand::Repair { index, yes } => repair(ctx, account, &index, yes).await,
        IndexCommand::Backfill(args) => backfill(ctx, account, &args).await,
    }
}

async fn verify(ctx: &Ctx, account: &Account, args: &IndexArgs) -> CliResult {
    let declared = declare(account, &args.table, &args.spec)?;
    let mut issues = 0;
    let mut out = std::io::stdout().lock();
    for partition in &args.partition {
        let report = declared
            .index
            .verify(partition)
            .await
            .map_err(|e| CliError::context(&format!("verifying {partition}"), &e))?;
        for line in issue_lines(&report) {
            writeln!(out, "{line}").map_err(|e| CliError::failure(e.to_string()))?;
        }
        issues += report.issues();
        ctx.stdout_carries_data();
        ctx.summary(
            &format!(
                "{partition}: {} entities, {} copies checked, {} issue(s)",
                report.primaries,
                report.checked,
                report.issues()
            ),
            serde_json::json!({ format!("partition {partition}"): {
                "entities": report.primaries, "checked": report.checked,
                "issues": report.issues()}}),
        );
    }
    Ok(if issues == 0 {
        Exit::Success
    } else {
        Exit::Failure
    })
}

/// `PARTITION<TAB>KIND<TAB>COPY<TAB>PK/RK of the copy<TAB>PK/RK of its entity (- for none)`.
fn issue_lines(report: &VerifyReport) -> Vec<String> {
    let line = |kind: &str, issue: &CopyIssue| {
        let primary = issue
            .primary
            .as_ref()
            .map_or_else(|| "-".to_owned(), |k| format!("{}/{}", k.pk(), k.rk()));
        format!(
            "{}\t{kind}\t{}\t{}/{}\t{primary}",
            report.partition,
            issue.index,
            issue.keys.pk(),
            issue.keys.rk()
        )
    };
    [
        ("missing", &report.missing),
        ("stale", &report.stale),
        ("orphaned", &report.orphaned),
        ("contested", &report.contested),
    ]
    .into_iter()
    .flat_map(|(kind, issues)| issues.iter().map(move |i| line(kind, i)))
    .collect()
}

async fn repair(ctx: &Ctx, account: &Account, args: &IndexArgs, yes: bool) -> CliResult {
    let declared = declare(account, &args.table, &args.spec)?;
    confirm(
        yes,
        &format!(
            "repair the index of {} in {} partition(s)? (orphaned copies are deleted)",
            args.table,
            args.partition.len()
        ),
        &format!(
            "repairing the index of {} deletes orphaned copies",
            args.table
        ),
    )?;
    let mut contested = 0;
    let mut out = std::io::stdout().lock();
    for partition in &args.partition {
        let report = declared
            .index
            .repair(partition)
            .await
            .map_err(|e| CliError::context(&format!("repairing {partition}"), &e))?;
        for line in issue_lines(&report.found) {
            writeln!(out, "{line}").map_err(|e| CliError::failure(e.to_string()))?;
        }
        contested += report.found.contested.len();
        ctx.stdout_carries_data();
        ctx.summary(
            "",
            serde_json::json!({ format!("partition {partition}"): {
                "issues": report.found.issues(), "rewritten": report.rewritten,
                "deleted": report.deleted, "skipped": report.skipped,
                "contested": report.found.contested.len()}}),
        );
        ctx.status(&format!(
            "{partition}: {} issue(s) found; {} entities' copies rewritten, {} orphans deleted, {} left to concurrent writers, {} contested (left to the application)",
            report.found.issues(),
            report.rewritten,
            report.deleted,
            report.skipped,
            report.found.contested.len()
        ));
    }
    Ok(if contested == 0 {
        Exit::Success
    } else {
        Exit::Partial
    })
}

/// The checkpoint file of a backfill.
#[derive(Serialize, Deserialize)]
struct Saved {
    version: u32,
    options: String,
    state: BackfillState,
}

/// The index crate's [`Checkpoint`] on a local file, replaced atomically after every page
/// and tied to the options of the run that wrote it.
struct FileCheckpoint {
    path: PathBuf,
    options: String,
    /// The file's state when the run started (`None`: start from the beginning).
    start: Option<BackfillState>,
    /// The last failure to write the file, reported instead of the error the index crate
    /// passes on (which can only say that the checkpoint failed).
    failure: Mutex<Option<CliError>>,
}

impl Checkpoint for FileCheckpoint {
    /// **Requests:** 0.
    async fn load(&self) -> tablekit::core::Result<Option<BackfillState>> {
        Ok(self.start.clone())
    }

    /// **Requests:** 0.
    async fn save(&self, state: &BackfillState) -> tablekit::core::Result<()> {
        let saved = Saved {
            version: VERSION,
            options: self.options.clone(),
            state: state.clone(),
        };
        checkpoint::store(&self.path, &saved).map_err(|e| {
            let error = Error::transport(
                format!("writing the checkpoint: {e}"),
                std::io::Error::other(e.message.clone()),
            );
            if let Ok(mut slot) = self.failure.lock() {
                *slot = Some(e);
            }
            error
        })
    }
}

async fn backfill(ctx: &Ctx, account: &Account, args: &BackfillArgs) -> CliResult {
    let declared = declare(account, &args.table, &args.spec)?;
    if !(1..=1000).contains(&args.page_size) {
        return Err(CliError::usage(format!(
            "--page-size {}: 1 to 1000 entities",
            args.page_size
        )));
    }
    let mut options = BackfillOptions::default().with_page_size(args.page_size);
    for name in &args.copies {
        let id = declared.copies.get(name).ok_or_else(|| {
            CliError::usage(format!(
                "--copy {name}: the spec declares no secondary copy of that name (it has: {})",
                declared
                    .copies
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        options = options.with_copy(*id);
    }
    if let Some(partition) = &args.partition {
        options = options.with_partition(partition.clone());
    }
    let spec_text = std::fs::read(&args.spec).map_err(|e| CliError::io(&args.spec, &e))?;
    let hash = checkpoint::options_hash(&[
        "index backfill",
        account.name(),
        &args.table,
        // The declaration itself: a changed spec never resumes an older run.
        &String::from_utf8_lossy(&spec_text),
        args.partition.as_deref().unwrap_or(""),
        &args.copies.join(","),
        &args.page_size.to_string(),
    ]);
    let path = args
        .checkpoint
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.backfill-checkpoint", args.table)));
    let earlier: Option<Saved> = checkpoint::load(&path)?;
    let start = match earlier {
        Some(saved) if args.resume => {
            checkpoint::check_same(&path, saved.version, &saved.options, &hash)?;
            Some(saved.state)
        }
        Some(_) if !args.overwrite => {
            return Err(CliError::usage(format!(
                "{} exists: continue with --resume, or start over with --overwrite",
                path.display()
            )));
        }
        _ => None,
    };
    if let Some(state) = &start {
        ctx.status(&format!(
            "resuming after {} page(s), {} entities written",
            state.pages, state.written
        ));
    }
    let checkpoint = FileCheckpoint {
        path,
        options: hash,
        start,
        failure: Mutex::new(None),
    };

    // Ctrl-C (or the testing hook) stops the backfill before its next page.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        let interrupt = ctx.interrupt.clone();
        tokio::spawn(async move {
            interrupt.wait().await;
            stop.store(true, Ordering::SeqCst);
        })
    };
    let reporter = Reporter::new("backfill", None, ctx.quiet);
    let progress = {
        let reporter = reporter.clone();
        let interrupt = ctx.interrupt.clone();
        let stop = Arc::clone(&stop);
        let seen = AtomicUsize::new(0);
        move |p: &tablekit::azure::Progress| {
            let before = seen.swap(p.done, Ordering::Relaxed);
            reporter.add(p.done.saturating_sub(before) as u64);
            // A page and its checkpoint are done.
            interrupt.unit_done();
            if interrupt.requested() {
                stop.store(true, Ordering::SeqCst);
            }
        }
    };
    let options = options.with_stop(Arc::clone(&stop)).with_progress(progress);
    let result = declared.index.backfill(&checkpoint, options).await;
    watcher.abort();
    reporter.finish();
    let state = match result {
        Ok(state) => state,
        Err(e) => {
            let failure = checkpoint.failure.lock().ok().and_then(|mut f| f.take());
            return Err(failure.unwrap_or_else(|| CliError::context("backfill", &e)));
        }
    };
    ctx.summary(
        "",
        serde_json::json!({"pages": state.pages, "scanned": state.scanned,
            "written": state.written, "skipped": state.skipped, "done": state.done}),
    );
    ctx.status(&format!(
        "{} page(s), {} rows read, {} entities' copies written, {} left to concurrent writers{}",
        state.pages,
        state.scanned,
        state.written,
        state.skipped,
        if state.done { "" } else { " so far" }
    ));
    if state.done {
        Ok(Exit::Success)
    } else {
        ctx.status("interrupted: run the same command with --resume to continue");
        Ok(ended(ctx, Exit::Interrupted))
    }
}
