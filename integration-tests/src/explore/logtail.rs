//! `tablekit-logtail`: log-tail appends (one at a time and in batches), spread-log appends,
//! the blob log writer's flush, and the reads of both table layouts under page splits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, ContinuationToken};
use tablekit_core::{Error, ErrorKind};
use tablekit_logtail::{
    AppendId, AppendOutcome, AppendReport, BlobLogWriter, FlushPolicy, Flushed, Level, LogEntry,
    LogRecord, LogTail, SpreadLog, SpreadToken,
};
use tablekit_testkit::explore::{Entry, Scenario};
use tablekit_testkit::unique_container_name;

use super::model::{ensure, new_table};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry::new(Append),
        Entry::new(AppendBatch),
        Entry::new(SpreadAppend),
        Entry::new(BlobFlush),
        Entry::new(ReadLatest),
        Entry::new(ReadEntries),
        Entry::new(SpreadRead),
    ]
}

/// The partition of the log-tail scenarios.
const PK: &str = "p";
/// The base of the spread log's partitions.
const BASE: &str = "spr";
/// The spread log's buckets.
const BUCKETS: u32 = 4;

/// What the scenarios append: who appended it, its number, and the value it is spread by
/// (empty in a plain log tail).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Item {
    by: String,
    n: i64,
    spread: String,
}

impl Item {
    fn label(&self) -> String {
        format!("{}-{}", self.by, self.n)
    }
}

/// An item with the id and time it is appended under, kept before appending it (as the
/// documentation asks of a caller who may retry).
#[derive(Debug, Clone)]
pub struct Planned {
    id: AppendId,
    time: DateTime<Utc>,
    value: Item,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tail(account: &Account, table: &str) -> LogTail<Item> {
    LogTail::new(account.table(table).expect("table name"))
}

fn spread_log(account: &Account, table: &str) -> SpreadLog<Item> {
    SpreadLog::new(account.table(table).expect("table name"), BASE, BUCKETS).expect("spread log")
}

/// `count` items of `by`, one millisecond apart from `start`, under ids `tail` mints.
fn plan(
    tail: &LogTail<Item>,
    by: &str,
    count: i64,
    spread: impl Fn(i64) -> String,
) -> Vec<Planned> {
    let start = Utc::now();
    (0..count)
        .map(|n| Planned {
            id: tail.append_id(),
            time: start + TimeDelta::milliseconds(n),
            value: Item {
                by: by.to_owned(),
                n,
                spread: spread(n),
            },
        })
        .collect()
}

/// Entries read back must be newest first: RowKeys ascending (equal only across the buckets
/// of a spread log) and times never increasing.
fn newest_first(entries: &[LogEntry<Item>], strict: bool) -> Result<(), String> {
    for w in entries.windows(2) {
        let keys_ok = if strict {
            w[0].keys.rk() < w[1].keys.rk()
        } else {
            w[0].keys.rk() <= w[1].keys.rk()
        };
        ensure(keys_ok && w[0].time >= w[1].time, || {
            format!(
                "not newest first: {:?} ({}) then {:?} ({})",
                w[0].keys, w[0].time, w[1].keys, w[1].time
            )
        })?;
    }
    Ok(())
}

/// How often an item must be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Once,
    Absent,
}

/// Checks the entries read back against what was appended: each item of `expected` stored
/// as often as it says, under the keys of its id and time in partition `pk_of(item)`, and no
/// entry that nobody appended.
fn check_stored(
    entries: &[LogEntry<Item>],
    expected: &[(&Planned, Expect)],
    pk_of: impl Fn(&Item) -> String,
) -> Result<(), String> {
    let mut copies: BTreeMap<String, Vec<&LogEntry<Item>>> = BTreeMap::new();
    for e in entries {
        copies.entry(e.value.label()).or_default().push(e);
    }
    for (planned, expect) in expected {
        let label = planned.value.label();
        let found = copies.remove(&label).unwrap_or_default();
        match expect {
            Expect::Absent => ensure(found.is_empty(), || {
                format!("{label} was reported refused, but it is stored: {found:?}")
            })?,
            Expect::Once => {
                ensure(found.len() == 1, || {
                    format!("{label} is stored {} times: {found:?}", found.len())
                })?;
                let e = found[0];
                let rk_ok = e.keys.rk().ends_with(&format!("_{}", planned.id));
                let pk = pk_of(&planned.value);
                ensure(
                    rk_ok && e.keys.pk() == pk && e.value == planned.value,
                    || {
                        format!(
                            "{label} is stored as {e:?}, not under partition {pk} with its id {}",
                            planned.id
                        )
                    },
                )?;
                let time = tablekit_logtail::key::truncate_to_tick(planned.time)
                    .map_err(|x| x.to_string())?;
                ensure(e.time == time, || {
                    format!("{label} has time {}, appended at {time}", e.time)
                })?;
            }
        }
    }
    ensure(copies.is_empty(), || {
        format!("entries nobody appended: {copies:?}")
    })
}

/// Whether an append's error says it stored nothing and never will: the keys hold another
/// entity, or it was refused before any request.
fn refused(outcome: &Outcome) -> bool {
    [
        ErrorKind::AlreadyExists,
        ErrorKind::InvalidInput,
        ErrorKind::InvalidArgument,
        ErrorKind::Encode,
        ErrorKind::LimitExceeded,
    ]
    .into_iter()
    .any(|kind| outcome.is(kind))
}

// ---------------------------------------------------------------------------------------
// logtail.append

/// The table, the items the operation appends, and the actor's items that were appended.
pub struct AppendCtx {
    table: String,
    items: Vec<Planned>,
    actor: Mutex<Vec<Planned>>,
}

/// Another appender appends an entry of its own to the same partition (or the same
/// spread log), and records it once it is stored.
async fn actor_appends(direct: &Account, table: &str, spread: bool, actor: &Mutex<Vec<Planned>>) {
    let n = lock(actor).len() as i64;
    let tail = self::tail(direct, table);
    let planned = Planned {
        id: tail.append_id(),
        time: Utc::now(),
        value: Item {
            by: "actor".into(),
            n,
            spread: if spread {
                format!("actor{n}")
            } else {
                String::new()
            },
        },
    };
    let appended = if spread {
        spread_log(direct, table)
            .append_with_id(
                &planned.value.spread,
                &planned.id,
                planned.time,
                &planned.value,
            )
            .await
    } else {
        tail.append_with_id(PK, &planned.id, planned.time, &planned.value)
            .await
    };
    if appended.is_ok() {
        lock(actor).push(planned);
    }
}

/// `LogTail::append_with_id` of three entries, one after another.
pub struct Append;

impl Scenario for Append {
    type Ctx = AppendCtx;
    type Report = Vec<Outcome>;

    fn name(&self) -> &'static str {
        "logtail.append"
    }

    fn invariant(&self) -> &'static str {
        "after retrying every append that returned an error with its id and time, every appended entry (the concurrent appender's too) is stored exactly once under its id, newest first, and nothing is stored for an append reported refused"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<AppendCtx, String> {
        let table = new_table(direct, "xlogappend").await?;
        let items = plan(&tail(direct, &table), "op", 3, |_| String::new());
        Ok(AppendCtx {
            table,
            items,
            actor: Mutex::new(Vec::new()),
        })
    }

    async fn operate(&self, ctx: &AppendCtx, account: &Account) -> Vec<Outcome> {
        let tail = tail(account, &ctx.table);
        let mut outcomes = Vec::new();
        for p in &ctx.items {
            let appended = tail.append_with_id(PK, &p.id, p.time, &p.value).await;
            outcomes.push(Outcome::of(&appended));
        }
        outcomes
    }

    /// The documented recovery: an append that returned an error (other than a refusal)
    /// is appended again with the same id and time.
    async fn recover(
        &self,
        ctx: &AppendCtx,
        account: &Account,
        report: Option<&Vec<Outcome>>,
    ) -> Result<(), String> {
        let tail = tail(account, &ctx.table);
        for (i, p) in ctx.items.iter().enumerate() {
            let again = match report.and_then(|r| r.get(i)) {
                None => true,
                Some(o) => *o != Outcome::Ok && !refused(o),
            };
            if again {
                tail.append_with_id(PK, &p.id, p.time, &p.value)
                    .await
                    .map_err(|e| format!("appending {} again: {e}", p.value.label()))?;
            }
        }
        Ok(())
    }

    async fn act(&self, ctx: &AppendCtx, direct: &Account, _actor: u8) {
        actor_appends(direct, &ctx.table, false, &ctx.actor).await;
    }

    async fn check(
        &self,
        ctx: &AppendCtx,
        direct: &Account,
        report: Option<&Vec<Outcome>>,
        _baseline: Option<&Vec<Outcome>>,
    ) -> Result<(), String> {
        let entries = tail(direct, &ctx.table)
            .entries(PK)
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        newest_first(&entries, true)?;
        let actor = lock(&ctx.actor).clone();
        let mut expected: Vec<(&Planned, Expect)> = ctx
            .items
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let refusal = report.and_then(|r| r.get(i)).is_some_and(refused);
                (
                    p,
                    if refusal {
                        Expect::Absent
                    } else {
                        Expect::Once
                    },
                )
            })
            .collect();
        expected.extend(actor.iter().map(|p| (p, Expect::Once)));
        check_stored(&entries, &expected, |_| PK.to_owned())
    }
}

// ---------------------------------------------------------------------------------------
// logtail.append_batch and logtail.spread.append

/// What a batch append reported for one item.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemOutcome {
    /// Stored.
    Appended,
    /// Certainly not stored.
    Failed(String),
    /// Maybe stored.
    Unknown(String),
}

fn item_outcomes(report: &Result<AppendReport, Error>) -> Result<Vec<ItemOutcome>, String> {
    match report {
        Err(e) => Err(e.to_string()),
        Ok(r) => Ok(r
            .outcomes
            .iter()
            .map(|o| match o {
                AppendOutcome::Written(_) => ItemOutcome::Appended,
                AppendOutcome::Failed(error) => ItemOutcome::Failed(error.to_string()),
                AppendOutcome::Unknown(error) => ItemOutcome::Unknown(error.to_string()),
            })
            .collect()),
    }
}

/// A batch append's table and items, the state it was found in before the recovery, and
/// the actor's items.
pub struct BatchCtx {
    table: String,
    spread: bool,
    items: Vec<Planned>,
    /// An account the proxies do not see, to read what the operation left before the
    /// recovery appends again.
    direct: Account,
    late_landing: Duration,
    /// Whether the state before the recovery was read (only the first recovery round does).
    inspected: AtomicBool,
    /// What that read found wrong.
    before_recovery: Mutex<Vec<String>>,
    actor: Mutex<Vec<Planned>>,
}

impl BatchCtx {
    async fn prepare(
        direct: &Account,
        spread: bool,
        late_landing: Duration,
    ) -> Result<Self, String> {
        let table = new_table(direct, if spread { "xspreadappend" } else { "xlogbatch" }).await?;
        let tail = tail(direct, &table);
        let items = if spread {
            // Three values of three different buckets: three transactions.
            let log = spread_log(direct, &table);
            let mut values: Vec<String> = Vec::new();
            for n in 0.. {
                let v = format!("user{n}");
                if values.iter().all(|w| log.bucket_of(w) != log.bucket_of(&v)) {
                    values.push(v);
                }
                if values.len() == 3 {
                    break;
                }
            }
            plan(&tail, "op", 3, |n| values[n as usize].clone())
        } else {
            plan(&tail, "op", 3, |_| String::new())
        };
        Ok(Self {
            table,
            spread,
            items,
            direct: direct.clone(),
            late_landing,
            inspected: AtomicBool::new(false),
            before_recovery: Mutex::new(Vec::new()),
            actor: Mutex::new(Vec::new()),
        })
    }

    async fn append(&self, account: &Account, items: &[&Planned]) -> Result<AppendReport, Error> {
        if self.spread {
            let batch: Vec<(String, AppendId, DateTime<Utc>, Item)> = items
                .iter()
                .map(|p| {
                    (
                        p.value.spread.clone(),
                        p.id.clone(),
                        p.time,
                        p.value.clone(),
                    )
                })
                .collect();
            spread_log(account, &self.table)
                .append_batch_with_ids(&batch)
                .await
        } else {
            let batch: Vec<(AppendId, DateTime<Utc>, Item)> = items
                .iter()
                .map(|p| (p.id.clone(), p.time, p.value.clone()))
                .collect();
            tail(account, &self.table)
                .append_batch_with_ids(PK, &batch)
                .await
        }
    }

    /// Every entry stored, read directly: the partition, or the spread log's merged read.
    async fn stored(&self, direct: &Account) -> Result<Vec<LogEntry<Item>>, String> {
        let entries = if self.spread {
            spread_log(direct, &self.table).entries().collect().await
        } else {
            tail(direct, &self.table).entries(PK).collect().await
        };
        let entries = entries.map_err(|e| e.to_string())?;
        newest_first(&entries, !self.spread)?;
        Ok(entries)
    }

    fn pk_of(&self, item: &Item) -> String {
        if self.spread {
            spread_log(&self.direct, &self.table).partition_for(&item.spread)
        } else {
            PK.to_owned()
        }
    }

    async fn operate(&self, account: &Account) -> Result<Vec<ItemOutcome>, String> {
        let items: Vec<&Planned> = self.items.iter().collect();
        item_outcomes(&self.append(account, &items).await)
    }

    /// The documented recovery: the failed and unknown items (every item when the process
    /// stopped or the call failed as a whole) are appended again with their ids and times.
    /// First, once, the items reported failed are read directly, after every attempt of the
    /// operation has landed: they must not be there.
    async fn recover(
        &self,
        account: &Account,
        report: Option<&Result<Vec<ItemOutcome>, String>>,
    ) -> Result<(), String> {
        let outcomes = match report {
            Some(Ok(outcomes)) => Some(outcomes),
            _ => None,
        };
        let failed: Vec<&Planned> = self
            .items
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                matches!(
                    outcomes.and_then(|o| o.get(*i)),
                    Some(ItemOutcome::Failed(_))
                )
            })
            .map(|(_, p)| p)
            .collect();
        if !failed.is_empty() && !self.inspected.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(self.late_landing).await;
            let stored = self.stored(&self.direct).await?;
            for p in failed {
                let label = p.value.label();
                if stored.iter().any(|e| e.value.label() == label) {
                    lock(&self.before_recovery).push(format!(
                        "{label} was reported failed, but it was stored before the re-append"
                    ));
                }
            }
        }
        let again: Vec<&Planned> = self
            .items
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                outcomes
                    .and_then(|o| o.get(*i))
                    .is_none_or(|o| *o != ItemOutcome::Appended)
            })
            .map(|(_, p)| p)
            .collect();
        if again.is_empty() {
            return Ok(());
        }
        let report = self
            .append(account, &again)
            .await
            .map_err(|e| format!("appending again: {e}"))?;
        ensure(report.is_complete(), || {
            format!("appending again left items open: {:?}", report.outcomes)
        })
    }

    async fn check(
        &self,
        direct: &Account,
        report: Option<&Result<Vec<ItemOutcome>, String>>,
    ) -> Result<(), String> {
        let found = lock(&self.before_recovery).clone();
        ensure(found.is_empty(), || found.join("; "))?;
        let entries = self.stored(direct).await?;
        let actor = lock(&self.actor).clone();
        // Every item is stored once after the recovery, whatever was reported; an item
        // reported appended is not appended again, so it must have been stored by then.
        let mut expected: Vec<(&Planned, Expect)> =
            self.items.iter().map(|p| (p, Expect::Once)).collect();
        expected.extend(actor.iter().map(|p| (p, Expect::Once)));
        if let Some(Ok(outcomes)) = report {
            ensure(outcomes.len() == self.items.len(), || {
                format!("{} outcomes for {} items", outcomes.len(), self.items.len())
            })?;
        }
        check_stored(&entries, &expected, |item| self.pk_of(item))
    }
}

/// `LogTail::append_batch_with_ids` of three entries of one partition (one transaction).
pub struct AppendBatch;

impl Scenario for AppendBatch {
    type Ctx = BatchCtx;
    type Report = Result<Vec<ItemOutcome>, String>;

    fn name(&self) -> &'static str {
        "logtail.append_batch"
    }

    fn invariant(&self) -> &'static str {
        "an item reported failed is not stored (read once every attempt has landed); after appending the failed and unknown items again with their ids, every item (the concurrent appender's too) is stored exactly once under its id, newest first"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<BatchCtx, String> {
        BatchCtx::prepare(direct, false, self.settings().late_landing()).await
    }

    async fn operate(&self, ctx: &BatchCtx, account: &Account) -> Self::Report {
        ctx.operate(account).await
    }

    async fn recover(
        &self,
        ctx: &BatchCtx,
        account: &Account,
        report: Option<&Self::Report>,
    ) -> Result<(), String> {
        ctx.recover(account, report).await
    }

    async fn act(&self, ctx: &BatchCtx, direct: &Account, _actor: u8) {
        actor_appends(direct, &ctx.table, false, &ctx.actor).await;
    }

    async fn check(
        &self,
        ctx: &BatchCtx,
        direct: &Account,
        report: Option<&Self::Report>,
        _baseline: Option<&Self::Report>,
    ) -> Result<(), String> {
        ctx.check(direct, report).await
    }
}

/// `SpreadLog::append_batch_with_ids` of three entries of three buckets (three
/// transactions).
pub struct SpreadAppend;

impl Scenario for SpreadAppend {
    type Ctx = BatchCtx;
    type Report = Result<Vec<ItemOutcome>, String>;

    fn name(&self) -> &'static str {
        "logtail.spread.append"
    }

    fn invariant(&self) -> &'static str {
        "an item reported failed is not stored (read once every attempt has landed); after appending the failed and unknown items again with their ids, every entry (the concurrent appender's too) is stored exactly once, in its value's bucket, and the merged read is newest first"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<BatchCtx, String> {
        BatchCtx::prepare(direct, true, self.settings().late_landing()).await
    }

    async fn operate(&self, ctx: &BatchCtx, account: &Account) -> Self::Report {
        ctx.operate(account).await
    }

    async fn recover(
        &self,
        ctx: &BatchCtx,
        account: &Account,
        report: Option<&Self::Report>,
    ) -> Result<(), String> {
        ctx.recover(account, report).await
    }

    async fn act(&self, ctx: &BatchCtx, direct: &Account, _actor: u8) {
        actor_appends(direct, &ctx.table, true, &ctx.actor).await;
    }

    async fn check(
        &self,
        ctx: &BatchCtx,
        direct: &Account,
        report: Option<&Self::Report>,
        _baseline: Option<&Self::Report>,
    ) -> Result<(), String> {
        ctx.check(direct, report).await
    }
}

// ---------------------------------------------------------------------------------------
// logtail.blob.flush

/// The blob log's prefix.
const PREFIX: &str = "app";

/// A policy that never flushes by itself: only `flush` writes.
fn never() -> FlushPolicy {
    FlushPolicy::default()
        .with_max_bytes(1 << 20)
        .with_max_age(Duration::from_secs(3_600))
}

/// The hour the records are of.
fn log_hour() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2014-07-31T18:00:00Z")
        .expect("RFC 3339")
        .to_utc()
}

fn op_record(n: usize) -> LogRecord {
    LogRecord::new(
        log_hour() + TimeDelta::seconds(n as i64),
        Level::Information,
        format!("op-{n}"),
    )
}

/// Where each of the operation's records is, as the writer's results say.
#[derive(Debug, Default)]
pub struct Track {
    /// Buffered by the writer, not yet in a file it reported.
    buffered: Vec<usize>,
    /// In a file a flush reported written.
    flushed: Vec<usize>,
    /// An append returned an error: the record was not buffered.
    refused: Vec<usize>,
}

impl Track {
    fn appended(&mut self, n: usize, result: &Result<Option<Flushed>, Error>) {
        match result {
            Ok(flushed) => {
                if flushed.is_some() {
                    self.flushed.append(&mut self.buffered);
                }
                self.refused.retain(|r| *r != n);
                self.buffered.push(n);
            }
            Err(_) => {
                if !self.refused.contains(&n) {
                    self.refused.push(n);
                }
            }
        }
    }

    fn flushed(&mut self, result: &Result<Option<Flushed>, Error>) {
        if let Ok(Some(_)) = result {
            self.flushed.append(&mut self.buffered);
        }
    }
}

/// The writer's container, what it and the actor reported, and whether the writer's
/// process is gone.
pub struct BlobCtx {
    container: String,
    track: Mutex<Track>,
    /// The actor's records that its flush reported written.
    actor: Mutex<Vec<String>>,
    actor_runs: AtomicUsize,
    /// A recovery round failed: the next runs in a new process, without the buffer.
    lost: AtomicBool,
}

/// The writer (kept for the recovery: its buffer is the process's memory) and what each step
/// returned.
#[derive(Debug)]
pub struct BlobReport {
    writer: Arc<BlobLogWriter>,
    steps: Vec<String>,
}

/// The operation's steps: records 0 and 1 buffered, a flush, record 2, a flush.
enum BlobStep {
    Append(usize),
    Flush,
}

const BLOB_STEPS: [BlobStep; 5] = [
    BlobStep::Append(0),
    BlobStep::Append(1),
    BlobStep::Flush,
    BlobStep::Append(2),
    BlobStep::Flush,
];

/// The records of one file, by message, and whether the file is whole: its `entries`,
/// `first` and `last` metadata agree with its lines.
fn file_messages(
    name: &str,
    data: &[u8],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("{name}: {e}"))?;
    let mut messages = Vec::new();
    let mut times = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.splitn(4, ';').collect();
        ensure(fields.len() == 4 && fields[0] == "1.0", || {
            format!("{name}: malformed line {line:?}")
        })?;
        times.push(fields[1].to_owned());
        messages.push(fields[3].to_owned());
    }
    let count = messages.len().to_string();
    let first = times.iter().min().cloned().unwrap_or_default();
    let last = times.iter().max().cloned().unwrap_or_default();
    let meta = |k: &str| metadata.get(k).cloned().unwrap_or_default();
    ensure(
        text.ends_with('\n')
            && meta("entries") == count
            && meta("first") == first
            && meta("last") == last,
        || {
            format!(
                "{name} is not whole: {count} lines from {first} to {last}, metadata {metadata:?}"
            )
        },
    )?;
    Ok(messages)
}

/// `BlobLogWriter::flush`: two records flushed, one more, flushed again.
pub struct BlobFlush;

impl Scenario for BlobFlush {
    type Ctx = BlobCtx;
    type Report = BlobReport;

    fn name(&self) -> &'static str {
        "logtail.blob.flush"
    }

    fn invariant(&self) -> &'static str {
        "every record of a flush reported written — after a failed one, of the flush that the documented recovery (flush again) makes succeed — is in exactly one file, no record is in two files (the other writer's neither), and every file is whole"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<BlobCtx, String> {
        let name = unique_container_name("xbloblog");
        direct
            .container(&name)
            .map_err(|e| e.to_string())?
            .create()
            .await
            .map_err(|e| e.to_string())?;
        Ok(BlobCtx {
            container: name,
            track: Mutex::new(Track::default()),
            actor: Mutex::new(Vec::new()),
            actor_runs: AtomicUsize::new(0),
            lost: AtomicBool::new(false),
        })
    }

    async fn operate(&self, ctx: &BlobCtx, account: &Account) -> BlobReport {
        let container = account.container(&ctx.container).expect("container name");
        let writer = Arc::new(BlobLogWriter::new(container, PREFIX, never()).expect("writer"));
        let mut steps = Vec::new();
        for step in &BLOB_STEPS {
            match step {
                BlobStep::Append(n) => {
                    let result = writer.append(&op_record(*n)).await;
                    lock(&ctx.track).appended(*n, &result);
                    steps.push(format!("append {n}: {:?}", Outcome::of(&result)));
                }
                BlobStep::Flush => {
                    let result = writer.flush().await;
                    lock(&ctx.track).flushed(&result);
                    steps.push(format!("flush: {:?}", result.map(|f| f.map(|f| f.name))));
                }
            }
        }
        BlobReport { writer, steps }
    }

    /// The documented recovery, in the same process: append again what an append refused,
    /// then flush until a flush succeeds. After a stop, or in a later round (a new
    /// process), the buffer is gone: nothing to do.
    async fn recover(
        &self,
        ctx: &BlobCtx,
        _account: &Account,
        report: Option<&BlobReport>,
    ) -> Result<(), String> {
        let Some(report) = report else {
            return Ok(());
        };
        if ctx.lost.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut last = String::new();
        for _ in 0..6 {
            let refused = lock(&ctx.track).refused.clone();
            let mut appended = true;
            for n in refused {
                let result = report.writer.append(&op_record(n)).await;
                lock(&ctx.track).appended(n, &result);
                if let Err(e) = result {
                    last = format!("append {n}: {e}");
                    appended = false;
                    break;
                }
            }
            if appended {
                let result = report.writer.flush().await;
                lock(&ctx.track).flushed(&result);
                match result {
                    Ok(_) => return Ok(()),
                    Err(e) => last = format!("flush: {e}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        ctx.lost.store(true, Ordering::SeqCst);
        Err(last)
    }

    /// Another writer with the same prefix writes a file of its own.
    async fn act(&self, ctx: &BlobCtx, direct: &Account, _actor: u8) {
        let n = ctx.actor_runs.fetch_add(1, Ordering::SeqCst);
        let Ok(container) = direct.container(&ctx.container) else {
            return;
        };
        let Ok(writer) = BlobLogWriter::new(container, PREFIX, never()) else {
            return;
        };
        let message = format!("actor-{n}");
        let record = LogRecord::new(
            log_hour() + TimeDelta::minutes(30) + TimeDelta::seconds(n as i64),
            Level::Warning,
            message.clone(),
        );
        if writer.append(&record).await.is_ok() && matches!(writer.flush().await, Ok(Some(_))) {
            lock(&ctx.actor).push(message);
        }
    }

    async fn check(
        &self,
        ctx: &BlobCtx,
        direct: &Account,
        report: Option<&BlobReport>,
        _baseline: Option<&BlobReport>,
    ) -> Result<(), String> {
        let container = direct
            .container(&ctx.container)
            .map_err(|e| e.to_string())?;
        let listed = container
            .list(&format!("{PREFIX}/"))
            .await
            .map_err(|e| e.to_string())?;
        let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for info in &listed {
            let blob = container
                .download(&info.name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{} listed, then missing", info.name))?;
            let messages = file_messages(&info.name, &blob.data, &blob.info.metadata)?;
            for m in messages {
                files.entry(m).or_default().push(info.name.clone());
            }
        }
        if let Some(report) = report {
            ensure(report.steps.len() == BLOB_STEPS.len(), || {
                format!("the operation ran only {:?}", report.steps)
            })?;
        }
        let track = lock(&ctx.track);
        let recovered = report.is_some() && !ctx.lost.load(Ordering::SeqCst);
        ensure(
            !recovered || (track.buffered.is_empty() && track.refused.is_empty()),
            || format!("the recovery ended with records not flushed: {track:?}"),
        )?;
        let mut must: Vec<String> = track.flushed.iter().map(|n| format!("op-{n}")).collect();
        must.extend(lock(&ctx.actor).iter().cloned());
        for m in &must {
            ensure(files.contains_key(m), || {
                format!("{m} was reported flushed, but no file holds it: {files:?}")
            })?;
        }
        let actor_runs = ctx.actor_runs.load(Ordering::SeqCst);
        for (m, in_files) in &files {
            ensure(in_files.len() == 1, || format!("{m} is in {in_files:?}"))?;
            let known = (0..3).any(|n| *m == format!("op-{n}"))
                || (0..actor_runs).any(|n| *m == format!("actor-{n}"));
            ensure(known, || {
                format!("a record nobody wrote: {m} in {in_files:?}")
            })?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Reads: logtail.read.latest, logtail.read.entries, logtail.spread.read

/// A read's result: the entries as `partition/row key/label`, newest first, or the error.
type Read = Result<Vec<String>, Outcome>;

fn rows(entries: &[LogEntry<Item>]) -> Vec<String> {
    entries
        .iter()
        .map(|e| format!("{}/{}/{}", e.keys.pk(), e.keys.rk(), e.value.label()))
        .collect()
}

/// The errors a faulted read may end with: the transport's and the service's, never one
/// that says something about the data.
fn typed_read_error(outcome: &Outcome) -> bool {
    [
        ErrorKind::Transport,
        ErrorKind::Throttled,
        ErrorKind::Service,
    ]
    .into_iter()
    .any(|kind| outcome.is(kind))
}

/// Checks each read of a run: the expected entries, or an error a fault explains.
fn check_reads(
    reads: &[(&str, &Read)],
    expected: &[String],
    baseline: Option<&[Read]>,
) -> Result<(), String> {
    for (i, (what, read)) in reads.iter().enumerate() {
        match read {
            Ok(rows) => {
                ensure(rows.as_slice() == expected, || {
                    format!("{what} returned {rows:?}, not {expected:?}")
                })?;
                // Each run has a table of its own, appended at its own times: the fault-free
                // run's entries are compared by partition and item, in order.
                let shape = |rows: &[String]| -> Vec<String> {
                    rows.iter()
                        .map(|r| {
                            let mut parts = r.split('/');
                            let pk = parts.next().unwrap_or_default();
                            format!("{pk}/{}", parts.nth(1).unwrap_or_default())
                        })
                        .collect()
                };
                if let Some(Some(Ok(base))) = baseline.map(|b| b.get(i)) {
                    ensure(shape(rows) == shape(base), || {
                        format!("{what} returned {rows:?}, the fault-free run {base:?}")
                    })?;
                }
            }
            Err(outcome) => ensure(typed_read_error(outcome), || {
                format!("{what} failed with {outcome:?}, an error no fault explains")
            })?,
        }
    }
    Ok(())
}

/// A table of prepared entries, and what a full read returns (newest first).
pub struct ReadCtx {
    table: String,
    expected: Vec<String>,
}

/// Seven entries in partition `p`, appended directly.
async fn prepare_tail(direct: &Account, prefix: &str) -> Result<ReadCtx, String> {
    let table = new_table(direct, prefix).await?;
    let tail = tail(direct, &table);
    let items = plan(&tail, "e", 7, |_| String::new());
    let batch: Vec<(AppendId, DateTime<Utc>, Item)> = items
        .iter()
        .map(|p| (p.id.clone(), p.time, p.value.clone()))
        .collect();
    let report = tail
        .append_batch_with_ids(PK, &batch)
        .await
        .map_err(|e| e.to_string())?;
    ensure(report.is_complete(), || format!("{:?}", report.outcomes))?;
    let all = tail
        .entries(PK)
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    ensure(all.len() == items.len(), || format!("prepared {all:?}"))?;
    newest_first(&all, true)?;
    Ok(ReadCtx {
        table,
        expected: rows(&all),
    })
}

/// `LogTail::latest(p, 5)` of seven entries.
pub struct ReadLatest;

impl Scenario for ReadLatest {
    type Ctx = ReadCtx;
    type Report = Read;

    fn name(&self) -> &'static str {
        "logtail.read.latest"
    }

    fn invariant(&self) -> &'static str {
        "latest(n) returns exactly the n newest entries, newest first — what the fault-free run returned — however the service splits its pages (empty ones included), or a transport or service error"
    }

    async fn prepare(&self, direct: &Account) -> Result<ReadCtx, String> {
        prepare_tail(direct, "xloglatest").await
    }

    async fn operate(&self, ctx: &ReadCtx, account: &Account) -> Read {
        let result = tail(account, &ctx.table).latest(PK, 5).await;
        result
            .map(|e| rows(&e))
            .map_err(|e| Outcome::of::<()>(&Err(e)))
    }

    async fn check(
        &self,
        ctx: &ReadCtx,
        _direct: &Account,
        report: Option<&Read>,
        baseline: Option<&Read>,
    ) -> Result<(), String> {
        let Some(read) = report else {
            return Ok(());
        };
        let baseline = baseline.map(std::slice::from_ref);
        check_reads(&[("latest(5)", read)], &ctx.expected[..5], baseline)
    }
}

/// `LogTail::entries(p)` of seven entries in pages of three: read whole, and read as a first
/// page followed by a read resumed from the page's token (through its text).
pub struct ReadEntries;

impl Scenario for ReadEntries {
    type Ctx = ReadCtx;
    type Report = [Read; 2];

    fn name(&self) -> &'static str {
        "logtail.read.entries"
    }

    fn invariant(&self) -> &'static str {
        "a paged read, whole or resumed from a page's continuation token, returns every entry once, newest first — what the fault-free run returned — however the service splits its pages (empty ones included), or a transport or service error"
    }

    async fn prepare(&self, direct: &Account) -> Result<ReadCtx, String> {
        prepare_tail(direct, "xlogentries").await
    }

    async fn operate(&self, ctx: &ReadCtx, account: &Account) -> [Read; 2] {
        let tail = tail(account, &ctx.table);
        let read = || tail.entries(PK).with_page_size(3);
        let whole = read().collect().await;
        let resumed = async {
            let first = read().page().await?;
            let mut entries = first.items;
            if let Some(token) = first.continuation {
                let token: ContinuationToken = token.to_string().parse()?;
                entries.extend(read().resume(token).collect().await?);
            }
            Ok::<_, Error>(entries)
        }
        .await;
        [whole, resumed].map(|r| r.map(|e| rows(&e)).map_err(|e| Outcome::of::<()>(&Err(e))))
    }

    async fn check(
        &self,
        ctx: &ReadCtx,
        _direct: &Account,
        report: Option<&[Read; 2]>,
        baseline: Option<&[Read; 2]>,
    ) -> Result<(), String> {
        let Some([whole, resumed]) = report else {
            return Ok(());
        };
        check_reads(
            &[("the whole read", whole), ("the resumed read", resumed)],
            &ctx.expected,
            baseline.map(|b| b.as_slice()),
        )
    }
}

/// `SpreadLog::entries()` over four buckets in pages of two: read whole, and read as a first
/// page followed by a read resumed from its `SpreadToken` (through its text). Two entries of
/// one tick share a RowKey in two buckets.
pub struct SpreadRead;

impl Scenario for SpreadRead {
    type Ctx = ReadCtx;
    type Report = [Read; 2];

    fn name(&self) -> &'static str {
        "logtail.spread.read"
    }

    fn invariant(&self) -> &'static str {
        "the merged read of a spread log, whole or resumed from a page's token, returns every entry once in merged order — what the fault-free run returned — however the service splits each bucket's pages (empty ones included), or a transport or service error"
    }

    async fn prepare(&self, direct: &Account) -> Result<ReadCtx, String> {
        let table = new_table(direct, "xspreadread").await?;
        let log = spread_log(direct, &table);
        let items = plan(log.tail(), "e", 8, |n| format!("user{n}"));
        let mut batch: Vec<(String, AppendId, DateTime<Utc>, Item)> = items
            .iter()
            .map(|p| {
                (
                    p.value.spread.clone(),
                    p.id.clone(),
                    p.time,
                    p.value.clone(),
                )
            })
            .collect();
        // An entry with the same id and time as entry 3, in another bucket: equal RowKeys.
        let twin = &items[3];
        let other = (0..)
            .map(|n| format!("twin{n}"))
            .find(|v| log.bucket_of(v) != log.bucket_of(&twin.value.spread))
            .expect("another bucket");
        batch.push((
            other.clone(),
            twin.id.clone(),
            twin.time,
            Item {
                by: "twin".into(),
                n: 3,
                spread: other,
            },
        ));
        let report = log
            .append_batch_with_ids(&batch)
            .await
            .map_err(|e| e.to_string())?;
        ensure(report.is_complete(), || format!("{:?}", report.outcomes))?;
        let all = log.entries().collect().await.map_err(|e| e.to_string())?;
        ensure(all.len() == batch.len(), || format!("prepared {all:?}"))?;
        newest_first(&all, false)?;
        let buckets: std::collections::BTreeSet<&str> = all.iter().map(|e| e.keys.pk()).collect();
        ensure(buckets.len() >= 3, || format!("only buckets {buckets:?}"))?;
        Ok(ReadCtx {
            table,
            expected: rows(&all),
        })
    }

    async fn operate(&self, ctx: &ReadCtx, account: &Account) -> [Read; 2] {
        let log = spread_log(account, &ctx.table);
        let read = || log.entries().with_page_size(2);
        let whole = read().collect().await;
        let resumed = async {
            let first = read().page().await?;
            let mut entries = first.items;
            if let Some(token) = first.continuation {
                let token: SpreadToken = token.to_string().parse()?;
                entries.extend(read().resume(token).collect().await?);
            }
            Ok::<_, Error>(entries)
        }
        .await;
        [whole, resumed].map(|r| r.map(|e| rows(&e)).map_err(|e| Outcome::of::<()>(&Err(e))))
    }

    async fn check(
        &self,
        ctx: &ReadCtx,
        _direct: &Account,
        report: Option<&[Read; 2]>,
        baseline: Option<&[Read; 2]>,
    ) -> Result<(), String> {
        let Some([whole, resumed]) = report else {
            return Ok(());
        };
        check_reads(
            &[("the whole read", whole), ("the resumed read", resumed)],
            &ctx.expected,
            baseline.map(|b| b.as_slice()),
        )
    }
}
