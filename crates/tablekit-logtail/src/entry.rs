//! What appends return and what reads yield.

use chrono::{DateTime, Utc};
use tablekit_azure::BulkReport;
use tablekit_azure::OperationOutcome;
use tablekit_core::{ETag, Error, Keys, Result, Stored};

use crate::key::time_of;

/// An entry that was written: where it is and the time its key stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The entry's keys (its RowKey starts with the inverted ticks of `time`).
    pub keys: Keys,
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
    /// [`Error::InvalidValue`] when the RowKey does not start with inverted ticks.
    pub fn from_stored(stored: Stored<T>) -> Result<Self> {
        Ok(Self {
            time: time_of(stored.keys.rk())?,
            keys: stored.keys,
            etag: stored.etag,
            value: stored.value,
        })
    }
}

/// The outcome of a batch append: one result per input item, in input order.
#[derive(Debug)]
pub struct AppendReport {
    /// Each item's outcome. A failed item was not written (its whole transaction was rolled
    /// back and the rest re-sent), so appending it again does not duplicate it.
    pub outcomes: Vec<Result<Appended>>,
    /// Transactions sent.
    pub transactions: usize,
}

impl AppendReport {
    /// Whether every item was written.
    pub fn is_complete(&self) -> bool {
        self.outcomes.iter().all(Result::is_ok)
    }

    /// The entries written, in input order.
    pub fn appended(&self) -> impl Iterator<Item = &Appended> {
        self.outcomes.iter().filter_map(|o| o.as_ref().ok())
    }

    /// Every entry, or the first failure.
    ///
    /// # Errors
    /// The first failed item's error, as [`Error::BatchFailed`] naming its input index.
    pub fn into_result(self) -> Result<Vec<Appended>> {
        self.outcomes
            .into_iter()
            .enumerate()
            .map(|(index, o)| {
                o.map_err(|e| Error::BatchFailed {
                    index,
                    source: Box::new(e),
                })
            })
            .collect()
    }

    /// Pairs a bulk write's outcomes with the entries that were sent.
    pub(crate) fn from_bulk(planned: Vec<(Keys, DateTime<Utc>)>, report: BulkReport) -> Self {
        let outcomes = planned
            .into_iter()
            .zip(report.outcomes)
            .map(|((keys, time), outcome)| match outcome {
                OperationOutcome::Written(etag) => Ok(Appended {
                    keys,
                    time,
                    etag: etag.unwrap_or_else(|| ETag::new("")),
                }),
                OperationOutcome::Failed(e) => Err(e),
            })
            .collect();
        Self {
            outcomes,
            transactions: report.transactions,
        }
    }
}
