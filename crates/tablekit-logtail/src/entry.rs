//! What appends return and what reads yield.

use chrono::{DateTime, Utc};
use tablekit_azure::{BulkReport, WriteOutcome, WriteReport};
use tablekit_core::{ETag, Error, Keys, Result, Stored, Target};

use crate::id::AppendId;
use crate::key::time_of;

/// An entry that was written: where it is, the time its key stands for and its append id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Appended {
    /// The entry's keys (its RowKey is the inverted ticks of `time`, `_` and `id`).
    pub keys: Keys,
    /// The entry's append id: appending the same item with it again writes nothing new.
    pub id: AppendId,
    /// The entry's time, truncated to the 100 ns tick (exactly what [`time_of`] recovers).
    pub time: DateTime<Utc>,
    /// The new entity's ETag.
    pub etag: ETag,
}

/// An entry as read back, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry<T> {
    /// The entry's keys.
    pub keys: Keys,
    /// The time recovered from the RowKey (100 ns resolution).
    pub time: DateTime<Utc>,
    /// The entity's ETag.
    pub etag: ETag,
    /// The entry's properties.
    pub value: T,
}

impl<T> LogEntry<T> {
    /// An entry from a stored entity whose RowKey is a log-tail key.
    ///
    /// # Errors
    /// [`Error::Decode`] naming the entity when the RowKey does not start with inverted ticks.
    pub fn from_stored(stored: Stored<T>) -> Result<Self> {
        let time = time_of(stored.keys.rk()).map_err(|e| match e {
            Error::Decode {
                property, reason, ..
            } => Error::decode(Target::entity("", stored.keys.clone()), property, reason),
            other => other,
        })?;
        Ok(Self {
            time,
            keys: stored.keys,
            etag: stored.etag,
            value: stored.value,
        })
    }
}

/// What happened to one item of a batch append: [`Written`](WriteOutcome::Written) — stored,
/// now or by an earlier append with the same id —, [`Failed`](WriteOutcome::Failed) or
/// [`Unknown`](WriteOutcome::Unknown): the [`WriteOutcome`] of a bulk write, whose written
/// value is the entry.
///
/// - `Written(Appended)`: stored, written now or found already there from an earlier append
///   with the same id.
/// - `Failed(error)`: not stored, and it will not be: its transaction was refused, or never
///   sent, or known not to have been applied. Append it again with the same id and time (see
///   [`AppendReport::pending`]). An [`Error::AlreadyExists`] here means that a different
///   entity holds the keys: the id is taken, and re-appending under it fails again.
/// - `Unknown(error)`: may or may not be stored: its transaction ended without an answer (a
///   broken connection, a timeout, a lost response) and reading it back did not settle it — or
///   an attempt the client gave up on may still land. Append it again with the same id and
///   time: if it is there, the re-append finds it ("already appended"); if it lands later,
///   that late attempt finds the re-append. Either way it is stored once.
///
/// The item's append id is in [`AppendReport::ids`] at its index (and in
/// [`Appended::id`] when it is written).
pub type AppendOutcome = WriteOutcome<Appended>;

/// The outcome of a batch append: a bulk write's [`WriteReport`] whose written items are the
/// entries ([`AppendOutcome`] per input item, in input order), plus each item's append id.
///
/// It dereferences to the [`WriteReport`], so it has the same fields and methods with the same
/// meanings — [`outcomes`](WriteReport::outcomes), [`written`](WriteReport::written),
/// [`failures`](WriteReport::failures), [`into_result`](WriteReport::into_result), … — plus
/// what re-appending needs: [`ids`](Self::ids) and [`pending`](Self::pending). An item is
/// written, failed (certainly not stored) or unknown. Re-append the last two with their ids —
/// [`AppendReport::pending`] lists them — and nothing is stored twice.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct AppendReport {
    /// Each item's append id, in input order (whatever its outcome).
    pub ids: Vec<AppendId>,
    report: WriteReport<Appended>,
}

impl std::ops::Deref for AppendReport {
    type Target = WriteReport<Appended>;

    fn deref(&self) -> &WriteReport<Appended> {
        &self.report
    }
}

impl AppendReport {
    /// What to append again: the input index and append id of every item not known to be
    /// stored (failed or unknown). Re-append each with its id and its original time (e.g.
    /// with [`LogTail::append_batch_with_ids`](crate::LogTail::append_batch_with_ids)).
    pub fn pending(&self) -> impl Iterator<Item = (usize, &AppendId)> {
        self.outcomes
            .iter()
            .zip(&self.ids)
            .enumerate()
            .filter(|(_, (o, _))| !o.is_written())
            .map(|(i, (_, id))| (i, id))
    }

    /// Every entry, in input order, or the first item not known to be stored.
    ///
    /// # Errors
    /// The first failed or unknown item's error, as [`Error::BatchFailed`] naming its input
    /// index.
    pub fn into_result(self) -> Result<Vec<Appended>> {
        self.report.into_result()
    }

    /// Pairs a bulk write's outcomes with the entries that were sent.
    pub(crate) fn from_bulk(
        planned: Vec<(Keys, DateTime<Utc>, AppendId)>,
        report: BulkReport,
    ) -> Self {
        let ids: Vec<AppendId> = planned.iter().map(|(_, _, id)| id.clone()).collect();
        let report = report.map_written(|i, etag| {
            let (keys, time, id) = planned[i].clone();
            Appended {
                keys,
                id,
                time,
                etag: etag.unwrap_or_else(|| ETag::new("")),
            }
        });
        Self { ids, report }
    }
}
