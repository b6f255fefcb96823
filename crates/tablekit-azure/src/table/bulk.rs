//! `bulk_write`: plan, split, bounded parallel submission scheduled across partitions, and one
//! outcome per operation — written, failed (not written) or unknown — with unknown outcomes
//! settled by reading back.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tablekit_core::batch::{BatchPlan, Operation, OperationKind};
use tablekit_core::limits::MAX_TRANSACTION_OPERATIONS;
use tablekit_core::wire::{EncodedTransaction, encode};
use tablekit_core::{ETag, Error, ErrorKind, PartitionKey, Properties, Result, Target};

use super::Table;
use super::batch::{ReadBack, clone_error};
use super::codec::{Head, Prepared, Tasks, join_all};
use crate::progress::{Progress, ProgressCallback};

/// What happened to one item of a write that reports per item — an operation of a
/// [`Table::bulk_write`] ([`OperationOutcome`]), an entry of a batch append
/// (`tablekit_logtail::AppendOutcome`): written, failed or unknown. `T` is what a written
/// item carries (an operation's new ETag, an appended entry).
///
/// Only [`Failed`](Self::Failed) means "not written": an item reported
/// [`Unknown`](Self::Unknown) may be stored, so count it neither as written nor as lost. The
/// three variants are a complete case split: a `match` on them is checked.
#[derive(Debug)]
pub enum WriteOutcome<T> {
    /// Written: its effect is stored.
    Written(T),
    /// Not written, for certain, and it will not be: the service refused it (its
    /// transaction was rolled back), or every attempt of its transaction was refused before
    /// any work (503, 429), or it was never sent, or its transaction, read back after no
    /// attempt could land any more, is not there. Sending it again cannot apply it twice.
    Failed(Error),
    /// May or may not be written: its transaction's last attempt ended without an answer —
    /// a broken connection, a timeout, a lost response, a 5xx other than 503 — and the
    /// read-back could not settle it: the read failed, another writer changed the same rows,
    /// or the transaction was not there yet while an attempt could still land. The error is
    /// the transaction's. Send it again only if doing it twice is harmless (an upsert, an
    /// insert with [`BulkOptions::with_accept_identical`], an append under the same id), or
    /// read the entity first.
    Unknown(Error),
}

/// What happened to one operation of a [`Table::bulk_write`]: written (with its new ETag,
/// absent for deletes), failed or unknown (see [`WriteOutcome`]).
pub type OperationOutcome = WriteOutcome<Option<ETag>>;

impl<T> WriteOutcome<T> {
    /// Whether the item was written.
    pub fn is_written(&self) -> bool {
        matches!(self, WriteOutcome::Written(_))
    }

    /// Whether the item was certainly not written.
    pub fn is_failed(&self) -> bool {
        matches!(self, WriteOutcome::Failed(_))
    }

    /// Whether the item may or may not have been written.
    pub fn is_unknown(&self) -> bool {
        matches!(self, WriteOutcome::Unknown(_))
    }

    /// What a written item carries; `None` for a failed or unknown one.
    pub fn value(&self) -> Option<&T> {
        match self {
            WriteOutcome::Written(value) => Some(value),
            WriteOutcome::Failed(_) | WriteOutcome::Unknown(_) => None,
        }
    }

    /// The error of a failed or unknown item; `None` for a written one.
    pub fn error(&self) -> Option<&Error> {
        match self {
            WriteOutcome::Written(_) => None,
            WriteOutcome::Failed(e) | WriteOutcome::Unknown(e) => Some(e),
        }
    }

    /// What a written item carries.
    ///
    /// # Errors
    /// The error of a failed or unknown item.
    pub fn into_result(self) -> Result<T> {
        match self {
            WriteOutcome::Written(value) => Ok(value),
            WriteOutcome::Failed(e) | WriteOutcome::Unknown(e) => Err(e),
        }
    }

    /// The same outcome with a written item's value mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> WriteOutcome<U> {
        match self {
            WriteOutcome::Written(value) => WriteOutcome::Written(f(value)),
            WriteOutcome::Failed(e) => WriteOutcome::Failed(e),
            WriteOutcome::Unknown(e) => WriteOutcome::Unknown(e),
        }
    }
}

/// Options of [`Table::bulk_write`]: [`BulkOptions::default`] and the `with_*` setters.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct BulkOptions {
    /// Transactions in flight (default: the account's `concurrency` setting).
    pub concurrency: Option<usize>,
    /// Transactions in flight in one partition. Default: half of `concurrency` (at least 1)
    /// when the account governs throughput, `concurrency` otherwise. See
    /// [`BulkOptions::with_per_partition_concurrency`].
    pub per_partition_concurrency: Option<usize>,
    /// Called after each transaction with the progress so far. See
    /// [`BulkOptions::with_progress`].
    pub progress: Option<ProgressCallback>,
    /// When a transaction with an open outcome is read back and is not there, wait until no
    /// attempt of it can land any more, then read again, so that it ends written or failed
    /// rather than unknown. Default `false`. See [`BulkOptions::with_wait_to_settle`].
    pub wait_to_settle: bool,
    /// Count an insert refused because its entity exists as written when the stored entity is
    /// exactly the one sent. Default `false`. See [`BulkOptions::with_accept_identical`].
    pub accept_identical: bool,
}

impl fmt::Debug for BulkOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkOptions")
            .field("concurrency", &self.concurrency)
            .field("per_partition_concurrency", &self.per_partition_concurrency)
            .field("progress", &self.progress.is_some())
            .field("wait_to_settle", &self.wait_to_settle)
            .field("accept_identical", &self.accept_identical)
            .finish()
    }
}

impl BulkOptions {
    /// Sets the number of transactions in flight.
    #[must_use]
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Sets the number of transactions in flight in one partition.
    ///
    /// A partition whose budget is spent (see [`ThroughputPolicy`](crate::ThroughputPolicy))
    /// holds its transactions until it has budget again; this bound keeps it from holding
    /// every slot meanwhile, so the other partitions' transactions go on.
    #[must_use]
    pub fn with_per_partition_concurrency(mut self, n: usize) -> Self {
        self.per_partition_concurrency = Some(n);
        self
    }

    /// Sets the progress callback, called after each transaction (with its read-backs) with
    /// the totals so far: [`Progress::done`] operations with an outcome, of which
    /// [`Progress::failed`] failed and [`Progress::unknown`] unknown, out of
    /// [`Progress::total`] (always known for a bulk write), and [`Progress::requests`] —
    /// transactions and read-backs sent.
    #[must_use]
    pub fn with_progress(mut self, f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// Waits out attempts that may still land before reporting a transaction failed.
    ///
    /// A transaction whose last attempt timed out may be applied after the client stopped
    /// waiting for it, so a read-back that finds nothing proves nothing yet. With this set,
    /// such a transaction waits until every attempt of it has landed or never will — its
    /// send instant plus [`Settings::late_landing`](crate::Settings::late_landing), the
    /// request timeout and the server timeout — and is read once more: its operations end
    /// written or failed. This costs up to one `late_landing` per such transaction (60 s by
    /// default) and one more read. Without it they are reported [unknown](WriteOutcome::Unknown).
    #[must_use]
    pub fn with_wait_to_settle(mut self, wait: bool) -> Self {
        self.wait_to_settle = wait;
        self
    }

    /// Counts an insert the service refuses with 409 as written when the entity stored under
    /// its keys is exactly the one it sends.
    ///
    /// For writers whose keys name their content — an append id, an event id — so that
    /// sending a batch again after an unknown outcome does not turn the part that did land
    /// into failures. When a transaction meets 409 on an insert, its range is read once: the
    /// inserts whose identical entity is there are written, those whose keys hold another
    /// entity are failed ([`Error::AlreadyExists`]), and the rest is sent again. An identical
    /// entity that another writer inserted is taken for this one.
    #[must_use]
    pub fn with_accept_identical(mut self, accept: bool) -> Self {
        self.accept_identical = accept;
        self
    }
}

/// The outcome of a write that reports per item — a [`Table::bulk_write`] ([`BulkReport`]), a
/// batch append (`tablekit_logtail::AppendReport`, which adds each item's append id): one
/// [`WriteOutcome`] per item, by the caller's index, and the requests it took.
///
/// The counts ([`written`](Self::written), [`failed`](Self::failed),
/// [`unknown`](Self::unknown)) add up to the number of items; [`failures`](Self::failures) and
/// [`unknowns`](Self::unknowns) list the items that are not known to be stored, with their
/// errors; [`into_result`](Self::into_result) turns a report into every item's value or the
/// first item that is not written.
#[derive(Debug)]
#[non_exhaustive]
pub struct WriteReport<T> {
    /// Outcome of each item, indexed like the input.
    pub outcomes: Vec<WriteOutcome<T>>,
    /// Transactions sent (including re-submissions after a failed operation was taken out).
    pub transactions: usize,
    /// Range reads sent to settle outcomes: read-backs of transactions left open and, with
    /// [`BulkOptions::with_accept_identical`], checks of refused inserts.
    pub read_backs: usize,
}

/// The outcome of a [`Table::bulk_write`]: one [`OperationOutcome`] per operation, by the
/// caller's index (see [`WriteReport`]).
pub type BulkReport = WriteReport<Option<ETag>>;

/// The report of writing nothing: no items, no requests.
impl<T> Default for WriteReport<T> {
    fn default() -> Self {
        Self {
            outcomes: Vec::new(),
            transactions: 0,
            read_backs: 0,
        }
    }
}

impl<T> WriteReport<T> {
    /// Items written.
    pub fn written(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_written()).count()
    }

    /// Items certainly not written.
    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_failed()).count()
    }

    /// Items that may or may not have been written.
    pub fn unknown(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_unknown()).count()
    }

    /// The written items and what each carries, by caller index.
    pub fn successes(&self) -> impl Iterator<Item = (usize, &T)> {
        self.outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.value().map(|v| (i, v)))
    }

    /// The failed items (certainly not written) and why, by caller index.
    pub fn failures(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o {
                WriteOutcome::Failed(e) => Some((i, e)),
                _ => None,
            })
    }

    /// The items whose outcome is unknown and their transaction's error, by caller index.
    pub fn unknowns(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o {
                WriteOutcome::Unknown(e) => Some((i, e)),
                _ => None,
            })
    }

    /// Whether every item was written.
    pub fn is_complete(&self) -> bool {
        self.outcomes.iter().all(WriteOutcome::is_written)
    }

    /// The same report with each written item's value mapped by `f`, given its caller index:
    /// how a pattern that writes through a bulk write reports its own items.
    pub fn map_written<U>(self, mut f: impl FnMut(usize, T) -> U) -> WriteReport<U> {
        WriteReport {
            outcomes: self
                .outcomes
                .into_iter()
                .enumerate()
                .map(|(i, o)| o.map(|v| f(i, v)))
                .collect(),
            transactions: self.transactions,
            read_backs: self.read_backs,
        }
    }

    /// Every item's value, in input order, or the first item that is not written.
    ///
    /// # Errors
    /// The first failed or unknown item's error, as [`Error::BatchFailed`] naming its
    /// caller index.
    pub fn into_result(self) -> Result<Vec<T>> {
        self.outcomes
            .into_iter()
            .enumerate()
            .map(|(index, o)| {
                o.into_result().map_err(|e| Error::BatchFailed {
                    index,
                    source: Box::new(e),
                })
            })
            .collect()
    }
}

/// One transaction's worth of a bulk write, as queued.
enum Unit {
    /// A transaction encoded before the bulk write sent anything.
    Ready(EncodedTransaction),
    /// Up to 100 operations of one partition, by caller index, sent through the handle's
    /// codec: those with properties are encoded just before the unit is sent (the others are
    /// encoded already, or have nothing to encode). One transaction, or more when they outgrow
    /// the body limit once encoded.
    Deferred {
        partition_key: PartitionKey,
        operations: Vec<(usize, Option<Properties>)>,
    },
}

impl Unit {
    fn partition_key(&self) -> &PartitionKey {
        match self {
            Unit::Ready(tx) => &tx.partition_key,
            Unit::Deferred { partition_key, .. } => partition_key,
        }
    }

    /// Entities the unit writes, which its partition's budget is charged.
    fn cost(&self) -> usize {
        match self {
            Unit::Ready(tx) => tx.indices.len(),
            Unit::Deferred { operations, .. } => operations.len(),
        }
    }
}

/// What a bulk write sends for each caller index: the caller's operation, or its encoded form
/// once the handle's codec encoded it.
struct Sendable<'a> {
    plan: &'a BatchPlan,
    /// By caller index; empty without a codec.
    encoded: Vec<OnceLock<Operation>>,
}

impl Sendable<'_> {
    fn operation(&self, index: usize) -> Option<&Operation> {
        self.encoded
            .get(index)
            .and_then(OnceLock::get)
            .or_else(|| self.plan.operation(index))
    }
}

/// The units of a bulk write, queued by partition in plan order, handed out so that no
/// partition has more than a bound in flight and partitions with budget go first.
struct PartitionQueues {
    queues: Vec<(VecDeque<Unit>, usize)>,
    /// Where the round-robin search for the next partition starts.
    cursor: usize,
}

impl PartitionQueues {
    fn new(units: Vec<Unit>) -> Self {
        let mut queues: Vec<(VecDeque<Unit>, usize)> = Vec::new();
        let mut slot_of = std::collections::HashMap::new();
        for unit in units {
            let slot = *slot_of
                .entry(unit.partition_key().to_string())
                .or_insert_with(|| {
                    queues.push((VecDeque::new(), 0));
                    queues.len() - 1
                });
            queues[slot].0.push_back(unit);
        }
        Self { queues, cursor: 0 }
    }

    /// The next unit to start, and its partition's slot: from the first partition in
    /// round-robin order that has work, fewer than `bound` in flight, and budget now (by
    /// `ready_in`, asked about every partition at one instant); failing that, the one whose
    /// budget is ready soonest, the first in that order of those that tie. `None` when no
    /// partition may start one.
    fn next(
        &mut self,
        bound: usize,
        ready_in: impl Fn(&str, u32, Instant) -> Duration,
    ) -> Option<(usize, Unit)> {
        // One instant for the whole search: partitions that all wait for the account's budget
        // then tie, and the turn goes round. Asked at successive instants, a later partition
        // waits a little less, so the search's end wins — a search over many partitions lasts
        // long enough for that to happen at random, which hands one partition several
        // transactions within a second, more than its own budget at the service pays for.
        let now = Instant::now();
        let n = self.queues.len();
        let mut best: Option<(usize, Duration)> = None;
        for step in 0..n {
            let slot = (self.cursor + step) % n;
            let (queue, in_flight) = &self.queues[slot];
            let Some(unit) = queue.front() else { continue };
            if *in_flight >= bound {
                continue;
            }
            let wait = ready_in(unit.partition_key().as_str(), unit.cost() as u32, now);
            if wait.is_zero() {
                best = Some((slot, wait));
                break;
            }
            if best.is_none_or(|(_, w)| wait < w) {
                best = Some((slot, wait));
            }
        }
        let (slot, _) = best?;
        self.cursor = (slot + 1) % n;
        let (queue, in_flight) = &mut self.queues[slot];
        *in_flight += 1;
        queue.pop_front().map(|unit| (slot, unit))
    }

    fn finished(&mut self, slot: usize) {
        if let Some((_, in_flight)) = self.queues.get_mut(slot) {
            *in_flight = in_flight.saturating_sub(1);
        }
    }
}

/// What one unit of a bulk write came to, after its re-submissions.
#[derive(Default)]
struct Resolved {
    outcomes: Vec<(usize, OperationOutcome)>,
    transactions: usize,
    read_backs: usize,
}

impl Resolved {
    /// Gives each of `indices` an outcome built by `outcome` (one each: errors do not clone).
    fn settle_all(&mut self, indices: &[usize], outcome: impl Fn() -> OperationOutcome) {
        self.outcomes
            .extend(indices.iter().map(|&i| (i, outcome())));
    }

    fn absorb(&mut self, other: Resolved) {
        self.outcomes.extend(other.outcomes);
        self.transactions += other.transactions;
        self.read_backs += other.read_backs;
    }
}

impl Table {
    /// Writes many operations: grouped by partition, split into transactions of at most 100
    /// operations and less than 4 MiB, sent with bounded concurrency. Every operation gets an
    /// outcome: [written](WriteOutcome::Written), [failed](WriteOutcome::Failed) —
    /// certainly not written — or [unknown](WriteOutcome::Unknown).
    ///
    /// An operation the service refuses is taken out and the rest of its transaction is sent
    /// again, so one bad operation does not block the others. A transaction that still fails
    /// after its retries is failed when no attempt can have been applied (every one refused
    /// with 503 or 429); otherwise its outcome is open, and its rows are read back: all its
    /// effects there → written (with the stored ETags). Not there → unknown, because an
    /// attempt the client gave up on may still be applied; with
    /// [`BulkOptions::with_wait_to_settle`] the read is repeated once no attempt can land any
    /// more, and then not there → failed. A read that fails, or rows that another writer
    /// changed, leave it unknown.
    ///
    /// Requests: ⌈operations per partition / 100⌉ transactions per partition (more when a
    /// body reaches 4 MiB), plus one per refused operation; plus one range read per
    /// transaction whose outcome was left open (two with `wait_to_settle` when the first finds
    /// it not there), and one per transaction retried after an attempt that may have been
    /// applied and then refused the way that attempt would make it (409, 412, 404). Each
    /// request may be retried on transient failures. [`BulkReport::transactions`] and
    /// [`BulkReport::read_backs`] count them. Consistency: each transaction is atomic; the
    /// bulk write as a whole is not.
    ///
    /// With a codec ([`Table::with_codec`]), every operation is checked before the first
    /// transaction is sent ([`EntityCodec::check_encode`](crate::EntityCodec::check_encode)),
    /// so that what the codec refuses leaves nothing written; the operations it vouches for are
    /// encoded just before their transaction is sent, on a task of their own, so that
    /// encrypting overlaps the writes in flight, and the others right away (the checks run in
    /// chunks of 250 on the runtime's workers). The transactions are the plan's, cut again
    /// where encoded operations outgrow the body limit. A codec that fails while encoding a
    /// transaction — its key store unreachable — fails that transaction's operations; the
    /// others go on. Read-backs compare what the caller wrote with the stored entities
    /// decoded.
    ///
    /// Scheduling: transactions are queued per partition, in plan order within each. A free
    /// slot goes, round-robin, to the next partition with fewer than
    /// [`BulkOptions::with_per_partition_concurrency`] transactions in flight whose
    /// throughput budget can pay for its next transaction now (see
    /// [`ThroughputPolicy`](crate::ThroughputPolicy)); when none can, to the one whose budget
    /// is ready soonest. So a partition that has spent its budget waits with at most that
    /// many slots while the others' transactions go on. Waiting for budget is not an error;
    /// it makes the bulk write take as long as its hottest partition's share needs at the
    /// partition's rate. On the Cosmos DB Table API a transaction body over 2 MB is split in
    /// halves until it fits (each half a transaction of its own).
    ///
    /// # Errors
    /// Before any request: [`Error::DuplicateInTransaction`] for two operations on one entity,
    /// [`Error::InvalidArgument`] for an empty list, an operation the handle's codec refuses
    /// (encryption refuses merges); on the Cosmos DB Table API,
    /// [`Error::LimitExceeded`] for a RowKey over 255 bytes or a single operation over 2 MB,
    /// [`Error::InvalidName`] for a reserved property name. Per-operation failures are in the
    /// report.
    pub async fn bulk_write(
        &self,
        operations: Vec<Operation>,
        options: BulkOptions,
    ) -> Result<BulkReport> {
        let total = operations.len();
        let plan = Arc::new(BatchPlan::best_effort(operations)?);
        // A codec checks the operations on the workers, reading them from the plan: copying
        // every body for the tasks cost more than planning first.
        let prepared = (self.codec.is_some()).then(|| self.spawn_prepare(Arc::clone(&plan)));
        // `plan` is what outcomes are named and read-backs compared by; `sending` what goes
        // out, which a codec encodes. Limits apply to what is sent.
        let (sending, units) = self.units(&plan, prepared).await?;
        let concurrency = options
            .concurrency
            .unwrap_or(self.account.settings().concurrency)
            .max(1);
        let governed = self.account.settings().throughput.is_governed();
        let per_partition = options
            .per_partition_concurrency
            .unwrap_or(if governed {
                concurrency / 2
            } else {
                concurrency
            })
            .clamp(1, concurrency);
        let mut outcomes: Vec<Option<OperationOutcome>> = (0..total).map(|_| None).collect();
        let mut progress = Progress {
            total: Some(total),
            ..Progress::default()
        };
        let (mut sent, mut read_backs) = (0, 0);
        let mut queues = PartitionQueues::new(units);
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < concurrency {
                let governor = self.account.metrics().governor();
                let Some((slot, unit)) = queues.next(per_partition, |pk, cost, now| {
                    if governed {
                        governor.ready_in_at(self.name(), pk, cost, now)
                    } else {
                        Duration::ZERO
                    }
                }) else {
                    break;
                };
                let (sending, options) = (&sending, &options);
                running.push(async move {
                    let resolved = match unit {
                        Unit::Ready(tx) => self.write_resilient(sending, tx, options).await,
                        Unit::Deferred { operations, .. } => {
                            self.write_deferred(sending, operations, options).await
                        }
                    };
                    (slot, resolved)
                });
            }
            let Some((slot, resolved)) = running.next().await else {
                break;
            };
            queues.finished(slot);
            sent += resolved.transactions;
            read_backs += resolved.read_backs;
            progress.requests += resolved.transactions + resolved.read_backs;
            for (index, outcome) in resolved.outcomes {
                progress.done += 1;
                progress.failed += usize::from(outcome.is_failed());
                progress.unknown += usize::from(outcome.is_unknown());
                outcomes[index] = Some(outcome);
            }
            if let Some(callback) = &options.progress {
                callback(&progress);
            }
        }
        let outcomes = outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    // Every transaction reports each of its operations; this is a guard.
                    OperationOutcome::Failed(Error::Transport {
                        message: "the operation was not sent".into(),
                        source: None,
                    })
                })
            })
            .collect();
        Ok(BulkReport {
            outcomes,
            transactions: sent,
            read_backs,
        })
    }

    /// What a bulk write of `plan` sends, and its units. Without a codec (no `prepared`
    /// checks): the plan's transactions, encoded now. With one: once every operation is
    /// checked — and encoded, when the codec cannot vouch for it otherwise
    /// ([`EntityCodec::check_encode`](crate::EntityCodec::check_encode)) — the units are the
    /// plan's partitions in runs of 100 operations, each encoded just before it is sent.
    ///
    /// # Errors
    /// Before any request: what the codec refuses; on the Cosmos DB Table API, what the
    /// service's limits refuse.
    async fn units<'p>(
        &self,
        plan: &'p BatchPlan,
        prepared: Option<Tasks<Result<Vec<Prepared>>>>,
    ) -> Result<(Sendable<'p>, Vec<Unit>)> {
        let Some(prepared) = prepared else {
            self.check_plan(plan)?;
            let sending = Sendable {
                plan,
                encoded: Vec::new(),
            };
            let transactions =
                self.fit_body_limit(&sending, encode(plan, &self.service_url(), self.name())?)?;
            return Ok((sending, transactions.into_iter().map(Unit::Ready).collect()));
        };
        let encoded: Vec<OnceLock<Operation>> = (0..plan.len()).map(|_| OnceLock::new()).collect();
        let mut later: Vec<Option<Properties>> = Vec::with_capacity(plan.len());
        for (i, prepared) in join_all(prepared).await?.into_iter().enumerate() {
            match prepared {
                Prepared::AsIs => later.push(None),
                Prepared::Encoded(op) => {
                    let _ = encoded[i].set(op);
                    later.push(None);
                }
                Prepared::Later(properties) => later.push(Some(properties)),
            }
        }
        let sending = Sendable { plan, encoded };
        // The operations encoded later are checked again once they are.
        for i in 0..plan.len() {
            if let Some(op) = sending.operation(i) {
                self.check_operation(op)?;
            }
        }
        let mut units = Vec::new();
        for (partition_key, ops) in plan.groups() {
            for run in ops.chunks(MAX_TRANSACTION_OPERATIONS) {
                units.push(Unit::Deferred {
                    partition_key: partition_key.clone(),
                    operations: run
                        .iter()
                        .map(|p| (p.index, later[p.index].take()))
                        .collect(),
                });
            }
        }
        Ok((sending, units))
    }

    /// Sends a deferred unit: the operations with properties are encoded (on a task of their
    /// own, so that the encoding overlaps the transactions in flight), then all are sent as
    /// one transaction, or more when they outgrow the body limit once encoded. An operation
    /// the codec fails to encode — its key store unreachable, say — is failed, not sent.
    async fn write_deferred(
        &self,
        sending: &Sendable<'_>,
        operations: Vec<(usize, Option<Properties>)>,
        options: &BulkOptions,
    ) -> Resolved {
        let mut r = Resolved::default();
        let mut indices = Vec::with_capacity(operations.len());
        let mut work = Vec::new();
        for (i, properties) in operations {
            indices.push(i);
            if let (Some(properties), Some(op)) = (properties, sending.plan.operation(i)) {
                work.push((i, Head::of(op), properties));
            }
        }
        if !work.is_empty() {
            let results = match join_all(self.spawn_encode(work)).await {
                Ok(results) => results,
                Err(e) => indices.iter().map(|&i| (i, Err(clone_error(&e)))).collect(),
            };
            let mut failed = std::collections::HashSet::new();
            for (i, result) in results {
                match result.and_then(|op| self.check_operation(&op).map(|()| op)) {
                    Ok(op) => {
                        let _ = sending.encoded[i].set(op);
                    }
                    Err(e) => {
                        failed.insert(i);
                        r.outcomes.push((i, OperationOutcome::Failed(e)));
                    }
                }
            }
            indices.retain(|i| !failed.contains(i));
        }
        if indices.is_empty() {
            return r;
        }
        match self.transactions_of(sending, &indices) {
            Ok(transactions) => {
                for tx in transactions {
                    let resolved = self.write_resilient(sending, tx, options).await;
                    r.absorb(resolved);
                }
            }
            Err(e) => r.settle_all(&indices, || OperationOutcome::Failed(clone_error(&e))),
        }
        r
    }

    /// The transactions of the given operations of one partition as they are sent, with their
    /// caller indices: one, or more where the body would reach the service's limit.
    fn transactions_of(
        &self,
        sending: &Sendable<'_>,
        indices: &[usize],
    ) -> Result<Vec<EncodedTransaction>> {
        let transactions = self.encode_indices(sending, indices, false)?;
        self.fit_body_limit(sending, transactions)
    }

    /// Splits transactions whose body exceeds the service's limit when it is below Azure Table
    /// storage's (the Cosmos DB Table API's 2 MB), halving them until they fit.
    fn fit_body_limit(
        &self,
        sending: &Sendable<'_>,
        transactions: Vec<EncodedTransaction>,
    ) -> Result<Vec<EncodedTransaction>> {
        let Some(max) = self.max_transaction_bytes() else {
            return Ok(transactions);
        };
        let mut fitted = Vec::with_capacity(transactions.len());
        let mut stack: Vec<EncodedTransaction> = transactions.into_iter().rev().collect();
        while let Some(tx) = stack.pop() {
            if tx.body.len() <= max || tx.indices.len() == 1 {
                // A single operation over the limit is refused here, before any request.
                self.check_transactions(std::slice::from_ref(&tx))?;
                fitted.push(tx);
                continue;
            }
            let (a, b) = tx.indices.split_at(tx.indices.len() / 2);
            for half in [b, a] {
                if let Some(part) = self.reencode(sending, half)? {
                    stack.push(part);
                }
            }
        }
        Ok(fitted)
    }

    /// Sends a transaction; when one operation is refused, records it and resends the rest;
    /// when the transaction's outcome is left open, settles it by reading back.
    async fn write_resilient(
        &self,
        sending: &Sendable<'_>,
        first: EncodedTransaction,
        options: &BulkOptions,
    ) -> Resolved {
        let plan = sending.plan;
        let mut r = Resolved {
            outcomes: Vec::with_capacity(first.indices.len()),
            transactions: 0,
            read_backs: 0,
        };
        let mut pending = Some(first);
        while let Some(tx) = pending.take() {
            r.transactions += 1;
            let sent = self.send_tracked(plan, &tx).await;
            let rest = match sent.result {
                Ok(outcome) => {
                    r.outcomes.extend(
                        outcome
                            .indices
                            .into_iter()
                            .zip(outcome.etags)
                            .map(|(i, e)| (i, OperationOutcome::Written(e))),
                    );
                    continue;
                }
                Err(e) if sent.open => {
                    self.settle_open(plan, &tx, e, sent.lands_by, options, &mut r)
                        .await;
                    continue;
                }
                Err(Error::BatchFailed { index, source }) => {
                    self.take_out_refused(plan, &tx, index, *source, options, &mut r)
                        .await
                }
                // Refused as a whole before any work, or never sent.
                Err(e) => {
                    r.settle_all(&tx.indices, || OperationOutcome::Failed(clone_error(&e)));
                    continue;
                }
            };
            match self.reencode(sending, &rest) {
                Ok(next) => pending = next,
                Err(e) => r.settle_all(&rest, || OperationOutcome::Failed(clone_error(&e))),
            }
        }
        r
    }

    /// Records the operation the service refused and returns the caller indices to send
    /// again. With `accept_identical`, a refused insert first has its transaction's range read:
    /// inserts whose identical entity is stored are written, and are not sent again.
    async fn take_out_refused(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
        index: usize,
        source: Error,
        options: &BulkOptions,
        r: &mut Resolved,
    ) -> Vec<usize> {
        let refused_insert = source.kind() == ErrorKind::AlreadyExists
            && plan
                .operation(index)
                .is_some_and(|op| op.kind() == OperationKind::Insert);
        if !(options.accept_identical && refused_insert) {
            r.outcomes.push((index, OperationOutcome::Failed(source)));
            return tx.indices.iter().copied().filter(|&i| i != index).collect();
        }
        r.read_backs += 1;
        let rows = match self.read_rows(plan, tx).await {
            Ok(rows) => rows,
            // Something is stored under the refused insert's keys; whether it is this entry
            // could not be read.
            Err(_) => {
                r.outcomes.push((index, OperationOutcome::Unknown(source)));
                return tx.indices.iter().copied().filter(|&i| i != index).collect();
            }
        };
        let mut rest = Vec::with_capacity(tx.indices.len());
        for &i in &tx.indices {
            let Some(op) = plan.operation(i) else {
                continue;
            };
            let row = rows.get(op.keys().rk());
            match row {
                Some(row) if op.kind() == OperationKind::Insert => {
                    let outcome = if op.is_in_place(Some(&row.value)) {
                        OperationOutcome::Written(Some(row.etag.clone()))
                    } else {
                        // Another entity holds the keys: the insert would only be refused.
                        OperationOutcome::Failed(Error::AlreadyExists {
                            target: Target::entity(self.name(), op.keys().clone()),
                        })
                    };
                    r.outcomes.push((i, outcome));
                }
                _ => rest.push(i),
            }
        }
        if rest.contains(&index) {
            // The refused insert's entity was deleted since the refusal: report the refusal
            // rather than race another writer on these keys.
            rest.retain(|&i| i != index);
            r.outcomes.push((index, OperationOutcome::Failed(source)));
        }
        rest
    }

    /// Settles a transaction whose failure left its outcome open, by reading its rows back.
    async fn settle_open(
        &self,
        plan: &BatchPlan,
        tx: &EncodedTransaction,
        error: Error,
        lands_by: Option<std::time::Instant>,
        options: &BulkOptions,
        r: &mut Resolved,
    ) {
        r.read_backs += 1;
        let mut read = self.read_back(plan, tx).await;
        let mut settled = false;
        if options.wait_to_settle && matches!(read, Ok(ReadBack::NotApplied)) {
            // Once every attempt has landed or never will, what is not there never will be.
            if let Some(lands_by) = lands_by {
                tokio::time::sleep_until(lands_by.into()).await;
            }
            r.read_backs += 1;
            read = self.read_back(plan, tx).await;
            settled = true;
        }
        match read {
            Ok(ReadBack::Applied(etags)) => r.outcomes.extend(
                tx.indices
                    .iter()
                    .zip(etags)
                    .map(|(&i, e)| (i, OperationOutcome::Written(e))),
            ),
            Ok(ReadBack::NotApplied) if settled => {
                r.settle_all(&tx.indices, || {
                    OperationOutcome::Failed(clone_error(&error))
                });
            }
            _ => r.settle_all(&tx.indices, || {
                OperationOutcome::Unknown(clone_error(&error))
            }),
        }
    }

    /// A transaction of the given operations as they are sent (keeping their caller
    /// indices), or `None` when there are none.
    fn reencode(
        &self,
        sending: &Sendable<'_>,
        indices: &[usize],
    ) -> Result<Option<EncodedTransaction>> {
        if indices.is_empty() {
            return Ok(None);
        }
        Ok(self.encode_indices(sending, indices, true)?.pop())
    }

    /// The given operations of one partition as they are sent, encoded with their caller
    /// indices: one transaction when `atomic` (refused at the body limit), else as many as the
    /// limits need.
    fn encode_indices(
        &self,
        sending: &Sendable<'_>,
        indices: &[usize],
        atomic: bool,
    ) -> Result<Vec<EncodedTransaction>> {
        let ops: Vec<Operation> = indices
            .iter()
            .filter_map(|&i| sending.operation(i).cloned())
            .collect();
        let plan = if atomic {
            BatchPlan::atomic(ops)?
        } else {
            BatchPlan::best_effort(ops)?
        };
        let mut transactions = encode(&plan, &self.service_url(), self.name())?;
        for tx in &mut transactions {
            tx.indices = tx.indices.iter().map(|&j| indices[j]).collect();
        }
        Ok(transactions)
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;

    fn etag(s: &str) -> Option<ETag> {
        Some(ETag::new(s))
    }

    fn report() -> BulkReport {
        BulkReport {
            outcomes: vec![
                OperationOutcome::Written(etag("a")),
                OperationOutcome::Unknown(Error::Transport {
                    message: "reset".into(),
                    source: None,
                }),
                OperationOutcome::Written(None),
                OperationOutcome::Failed(Error::invalid_argument("op", "refused")),
            ],
            transactions: 2,
            read_backs: 1,
        }
    }

    #[test]
    fn counts_and_lists_by_caller_index() {
        let r = report();
        assert_eq!((r.written(), r.failed(), r.unknown()), (2, 1, 1));
        assert!(!r.is_complete());
        let failures: Vec<_> = r.failures().map(|(i, e)| (i, e.kind())).collect();
        assert_eq!(failures, vec![(3, ErrorKind::InvalidArgument)]);
        let unknowns: Vec<_> = r.unknowns().map(|(i, e)| (i, e.kind())).collect();
        assert_eq!(unknowns, vec![(1, ErrorKind::Transport)]);
        let successes: Vec<_> = r.successes().map(|(i, v)| (i, v.clone())).collect();
        assert_eq!(successes, vec![(0, etag("a")), (2, None)]);
    }

    #[test]
    fn map_written_maps_written_values_by_caller_index_and_keeps_the_rest() {
        let mapped = report().map_written(|i, etag| (i, etag.is_some()));
        let successes: Vec<_> = mapped.successes().map(|(_, v)| *v).collect();
        assert_eq!(successes, vec![(0, true), (2, false)]);
        assert_eq!((mapped.failed(), mapped.unknown()), (1, 1));
        assert_eq!((mapped.transactions, mapped.read_backs), (2, 1));
        let empty = WriteReport::<()>::default();
        assert!(empty.is_complete() && empty.outcomes.is_empty() && empty.transactions == 0);
    }

    #[test]
    fn into_result_names_the_first_item_not_written() {
        match report().into_result() {
            Err(Error::BatchFailed { index, source }) => {
                assert_eq!(index, 1);
                assert_eq!(source.kind(), ErrorKind::Transport);
            }
            other => panic!("expected BatchFailed, got {other:?}"),
        }
        let complete = BulkReport {
            outcomes: vec![
                WriteOutcome::Written(etag("x")),
                WriteOutcome::Written(None),
            ],
            transactions: 1,
            read_backs: 0,
        };
        assert!(complete.is_complete());
        assert_eq!(complete.into_result().unwrap(), vec![etag("x"), None]);
    }

    #[test]
    fn an_outcome_answers_the_same_questions() {
        let [written, unknown, _, failed] =
            <[OperationOutcome; 4]>::try_from(report().outcomes).unwrap_or_else(|_| unreachable!());
        assert!(written.is_written() && !written.is_failed() && !written.is_unknown());
        assert!(written.error().is_none());
        assert_eq!(written.value(), Some(&etag("a")));
        assert!(unknown.is_unknown() && unknown.value().is_none());
        assert_eq!(unknown.error().map(Error::kind), Some(ErrorKind::Transport));
        assert!(failed.is_failed());
        assert_eq!(
            failed
                .map(|e| e.is_some())
                .into_result()
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        assert!(written.map(|e| e.is_some()).into_result().unwrap());
    }
}

#[cfg(test)]
mod scheduling_tests {
    use super::*;
    use crate::ThroughputPolicy;
    use crate::governor::{Charge, Governor};

    /// 100 operations of partition `pk` (caller indices from `first`).
    fn unit(pk: &str, first: usize) -> Unit {
        Unit::Deferred {
            partition_key: PartitionKey::new(pk).unwrap(),
            operations: (first..first + 100).map(|i| (i, None)).collect(),
        }
    }

    #[tokio::test]
    async fn partitions_that_wait_for_the_account_take_turns() {
        // 300 partitions of 2 transactions each; the account's budget is spent for minutes,
        // so every partition waits as long as the others: the turn must go round.
        let partitions = 300;
        let units = (0..2)
            .flat_map(|round| {
                (0..partitions)
                    .map(move |p| unit(&format!("p{p:03}"), 100 * (round * partitions + p)))
            })
            .collect();
        let mut queues = PartitionQueues::new(units);
        let g = Governor::new(ThroughputPolicy::default().with_targets(1e6, 1_000.0));
        g.admit(&Charge::partition("t", "other", 1_000_000), None)
            .await;
        let mut order = Vec::new();
        for _ in 0..2 * partitions {
            let (slot, unit) = queues
                .next(8, |pk, cost, now| g.ready_in_at("t", pk, cost, now))
                .unwrap();
            // Still waiting for the account: every turn was taken among equals.
            let key = unit.partition_key().as_str();
            assert!(g.ready_in_at("t", key, 100, Instant::now()) > Duration::from_secs(60));
            order.push(unit.partition_key().as_str().to_owned());
            queues.finished(slot);
        }
        let expected: Vec<String> = (0..2)
            .flat_map(|_| (0..partitions).map(|p| format!("p{p:03}")))
            .collect();
        assert_eq!(order, expected);
    }
}
