//! [`Progress`]: how far a long-running operation has got, in one shape for every operation
//! that reports it (bulk writes, purges).

use std::sync::Arc;

/// How far a long-running operation has got. Operations that take a `with_progress` option
/// (`BulkOptions`, `tablekit_retention::PurgeOptions`) call it after each step — a
/// transaction, a page of keys — with the totals so far.
///
/// An *item* is what the operation works through: an operation of a bulk write, an entity of
/// a purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Progress {
    /// Items with a final outcome so far: done, failed or unknown.
    pub done: usize,
    /// Items that failed — certainly not done — so far.
    pub failed: usize,
    /// Items whose outcome is unknown so far: they may or may not have been done.
    pub unknown: usize,
    /// Items in the whole operation, when known before it starts; `None` for open-ended work
    /// (a purge finds its entities as it goes).
    pub total: Option<usize>,
    /// Requests sent so far. A request retried after a transient failure counts once.
    pub requests: usize,
}

impl Progress {
    /// Items done successfully so far: `done − failed − unknown`.
    pub fn succeeded(&self) -> usize {
        self.done - self.failed - self.unknown
    }
}

/// A progress callback, as the options that report [`Progress`] store it.
pub type ProgressCallback = Arc<dyn Fn(&Progress) + Send + Sync>;
