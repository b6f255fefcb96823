//! What appends return and what reads yield.

use chrono::{DateTime, Utc};
use tablekit_azure::BulkReport;
use tablekit_azure::OperationOutcome;
use tablekit_core::{ETag, Error, Keys, Result, Stored, Target};

use crate::key::{AppendId, time_of};

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

/// What happened to one item of a batch append.
#[derive(Debug)]
pub enum AppendOutcome {
    /// Stored: written now, or found already there from an earlier append with the same id.
    Appended(Appended),
    /// Not stored, and it will not be: its transaction was refused, or never sent, or known
    /// not to have been applied. Append it again with the same id and time (see
    /// [`AppendReport::pending`]). An [`Error::AlreadyExists`] here means that a different
    /// entity holds the keys: the id is taken, and re-appending under it fails again.
    Failed {
        /// The item's append id.
        id: AppendId,
        /// Why it was not stored.
        error: Error,
    },
    /// May or may not be stored: its transaction ended without an answer (a broken
    /// connection, a timeout, a lost response) and reading it back did not settle it — or an
    /// attempt the client gave up on may still land. Append it again with the same id and
    /// time: if it is there, the re-append finds it ("already appended"); if it lands later,
    /// that late attempt finds the re-append. Either way it is stored once.
    Unknown {
        /// The item's append id.
        id: AppendId,
        /// The transaction's error.
        error: Error,
    },
}

impl AppendOutcome {
    /// The item's append id.
    pub fn id(&self) -> &AppendId {
        match self {
            AppendOutcome::Appended(a) => &a.id,
            AppendOutcome::Failed { id, .. } | AppendOutcome::Unknown { id, .. } => id,
        }
    }

    /// The entry, when it is stored.
    pub fn appended(&self) -> Option<&Appended> {
        match self {
            AppendOutcome::Appended(a) => Some(a),
            _ => None,
        }
    }

    /// Whether the entry is stored.
    pub fn is_appended(&self) -> bool {
        matches!(self, AppendOutcome::Appended(_))
    }

    /// Whether the entry is certainly not stored.
    pub fn is_failed(&self) -> bool {
        matches!(self, AppendOutcome::Failed { .. })
    }

    /// Whether the entry may or may not be stored.
    pub fn is_unknown(&self) -> bool {
        matches!(self, AppendOutcome::Unknown { .. })
    }

    /// Why the entry is not known to be stored.
    pub fn error(&self) -> Option<&Error> {
        match self {
            AppendOutcome::Appended(_) => None,
            AppendOutcome::Failed { error, .. } | AppendOutcome::Unknown { error, .. } => {
                Some(error)
            }
        }
    }
}

/// The outcome of a batch append: one outcome per input item, in input order.
///
/// An item is [appended](AppendOutcome::Appended), [failed](AppendOutcome::Failed) (certainly
/// not stored) or [unknown](AppendOutcome::Unknown). Re-append the last two with their ids —
/// [`AppendReport::pending`] lists them — and nothing is stored twice.
#[derive(Debug)]
#[non_exhaustive]
pub struct AppendReport {
    /// Each item's outcome, in input order.
    pub outcomes: Vec<AppendOutcome>,
    /// Transactions sent.
    pub transactions: usize,
    /// Range reads sent to settle outcomes (see [`tablekit_azure::BulkReport::read_backs`]).
    pub read_backs: usize,
}

impl AppendReport {
    /// Whether every item is stored.
    pub fn is_complete(&self) -> bool {
        self.outcomes.iter().all(AppendOutcome::is_appended)
    }

    /// The entries stored, in input order.
    pub fn appended(&self) -> impl Iterator<Item = &Appended> {
        self.outcomes.iter().filter_map(AppendOutcome::appended)
    }

    /// Items certainly not stored.
    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_failed()).count()
    }

    /// Items that may or may not be stored.
    pub fn unknown(&self) -> usize {
        self.outcomes.iter().filter(|o| o.is_unknown()).count()
    }

    /// What to append again: the input index and append id of every item not known to be
    /// stored (failed or unknown). Re-append each with its id and its original time (e.g.
    /// with [`LogTail::append_batch_with_ids`](crate::LogTail::append_batch_with_ids)).
    pub fn pending(&self) -> impl Iterator<Item = (usize, &AppendId)> {
        self.outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| !o.is_appended())
            .map(|(i, o)| (i, o.id()))
    }

    /// Every entry, or the first item not known to be stored.
    ///
    /// # Errors
    /// The first failed or unknown item's error, as [`Error::BatchFailed`] naming its input
    /// index.
    pub fn into_result(self) -> Result<Vec<Appended>> {
        self.outcomes
            .into_iter()
            .enumerate()
            .map(|(index, o)| match o {
                AppendOutcome::Appended(a) => Ok(a),
                AppendOutcome::Failed { error, .. } | AppendOutcome::Unknown { error, .. } => {
                    Err(Error::BatchFailed {
                        index,
                        source: Box::new(error),
                    })
                }
            })
            .collect()
    }

    /// Pairs a bulk write's outcomes with the entries that were sent.
    pub(crate) fn from_bulk(
        planned: Vec<(Keys, DateTime<Utc>, AppendId)>,
        report: BulkReport,
    ) -> Self {
        let outcomes = planned
            .into_iter()
            .zip(report.outcomes)
            .map(|((keys, time, id), outcome)| match outcome {
                OperationOutcome::Written(etag) => AppendOutcome::Appended(Appended {
                    keys,
                    id,
                    time,
                    etag: etag.unwrap_or_else(|| ETag::new("")),
                }),
                OperationOutcome::Failed(error) => AppendOutcome::Failed { id, error },
                OperationOutcome::Unknown(error) => AppendOutcome::Unknown { id, error },
            })
            .collect();
        Self {
            outcomes,
            transactions: report.transactions,
            read_backs: report.read_backs,
        }
    }
}
