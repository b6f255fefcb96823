//! Resumable backfills: page through a table, write what each page calls for, and checkpoint
//! the continuation token after every page.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tablekit_azure::{ContinuationToken, Progress, ProgressCallback, Query, Table};
use tablekit_core::Properties;
use tablekit_core::{Entity, Keys, Result, Stored};

use crate::spec::CopyId;

/// Where a backfill stands: saved after every page, and returned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BackfillState {
    /// Where the next page starts; `None` before the first page and after the last.
    pub continuation: Option<ContinuationToken>,
    /// Whether the whole table has been done.
    pub done: bool,
    /// Pages completed.
    pub pages: u64,
    /// Rows read.
    pub scanned: u64,
    /// Entities whose copies were written.
    pub written: u64,
    /// Entities left out because a writer changed them during the backfill (that writer
    /// wrote their copies).
    pub skipped: u64,
}

/// Stores a backfill's [`BackfillState`] between pages and between runs.
///
/// Implement it over any durable store; [`TableCheckpoint`] keeps it in an entity,
/// [`MemoryCheckpoint`] in memory (tests, or a run that need not survive a restart).
pub trait Checkpoint: Send + Sync {
    /// The last saved state, if any.
    fn load(&self) -> impl Future<Output = Result<Option<BackfillState>>> + Send;
    /// Saves the state after a page.
    fn save(&self, state: &BackfillState) -> impl Future<Output = Result<()>> + Send;
}

/// A [`Checkpoint`] in memory.
#[derive(Debug, Default)]
pub struct MemoryCheckpoint {
    state: Mutex<Option<BackfillState>>,
}

impl MemoryCheckpoint {
    /// An empty checkpoint: a backfill using it starts from the beginning.
    pub fn new() -> Self {
        Self::default()
    }

    /// The saved state.
    pub fn state(&self) -> Option<BackfillState> {
        self.state.lock().map_or(None, |s| s.clone())
    }
}

impl Checkpoint for MemoryCheckpoint {
    /// **Requests:** 0.
    async fn load(&self) -> Result<Option<BackfillState>> {
        Ok(self.state())
    }

    /// **Requests:** 0.
    async fn save(&self, state: &BackfillState) -> Result<()> {
        if let Ok(mut slot) = self.state.lock() {
            *slot = Some(state.clone());
        }
        Ok(())
    }
}

/// A [`Checkpoint`] kept in one entity (its `State` property holds the state as JSON), so a
/// backfill resumes in another process after a crash.
#[derive(Debug, Clone)]
pub struct TableCheckpoint {
    table: Table,
    keys: Keys,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Saved {
    #[serde(with = "tablekit_core::edm::json")]
    state: BackfillState,
}

impl TableCheckpoint {
    /// A checkpoint stored at `keys` in `table` (a control table, or a row outside the range
    /// being backfilled). No request is sent.
    pub fn new(table: Table, keys: Keys) -> Self {
        Self { table, keys }
    }
}

impl Checkpoint for TableCheckpoint {
    /// **Requests:** 1 (a point read).
    async fn load(&self) -> Result<Option<BackfillState>> {
        Ok(self
            .table
            .get::<Saved>(&self.keys)
            .await?
            .map(|s| s.value.state))
    }

    /// **Requests:** 1 (an upsert).
    async fn save(&self, state: &BackfillState) -> Result<()> {
        let saved = Saved {
            state: state.clone(),
        };
        self.table
            .upsert_replace(&Entity::new(self.keys.clone(), saved))
            .await?;
        Ok(())
    }
}

/// Options of a backfill: set them with the `with_*` methods on
/// `BackfillOptions::default()`.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct BackfillOptions {
    /// The copies to write (default: every secondary copy).
    pub copies: Option<Vec<CopyId>>,
    /// Only this partition (default: the whole table, which is a table scan).
    pub partition: Option<String>,
    /// Rows per page (1 to 1,000; default: the service's 1,000).
    pub page_size: Option<usize>,
    /// Stop after this many pages in this run (the checkpoint lets a later run go on).
    pub max_pages: Option<u64>,
    /// Stop before the next page once this is set (e.g. from a Ctrl-C handler).
    pub stop: Option<Arc<AtomicBool>>,
    /// Transactions in flight (default: the account's `concurrency` setting).
    pub concurrency: Option<usize>,
    /// Called after every page; see [`with_progress`](Self::with_progress).
    pub progress: Option<ProgressCallback>,
}

impl fmt::Debug for BackfillOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackfillOptions")
            .field("copies", &self.copies)
            .field("partition", &self.partition)
            .field("page_size", &self.page_size)
            .field("max_pages", &self.max_pages)
            .field("stop", &self.stop)
            .field("concurrency", &self.concurrency)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl BackfillOptions {
    /// Writes this copy (call once per copy); without any, every secondary copy is written.
    #[must_use]
    pub fn with_copy(mut self, copy: impl Into<CopyId>) -> Self {
        self.copies.get_or_insert_with(Vec::new).push(copy.into());
        self
    }

    /// Backfills only this partition.
    #[must_use]
    pub fn with_partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Reads `n` rows per page (1 to 1,000).
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Stops after `n` pages in this run.
    #[must_use]
    pub fn with_max_pages(mut self, n: u64) -> Self {
        self.max_pages = Some(n);
        self
    }

    /// Stops before the next page once `flag` is set.
    #[must_use]
    pub fn with_stop(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Keeps `n` transactions in flight.
    #[must_use]
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Sets the progress callback, called after each page (once its checkpoint is saved) with
    /// the totals of this run: [`Progress::done`] entities whose copies were written or left
    /// to a concurrent writer, [`Progress::requests`] pages and transactions sent (the
    /// checkpoint's own requests not counted). [`Progress::total`] is `None`: a backfill
    /// finds its entities as it goes. A backfill ends at its first failure, so
    /// [`Progress::failed`] and [`Progress::unknown`] stay 0.
    #[must_use]
    pub fn with_progress(mut self, f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
}

/// What writing one page did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageOutcome {
    /// Entities whose copies were written.
    pub(crate) written: u64,
    /// Entities left out because a writer changed them.
    pub(crate) skipped: u64,
    /// Requests sent.
    pub(crate) requests: usize,
}

/// Runs a backfill: loads the checkpoint, then page by page calls `write` (which returns the
/// entities written and left out) and saves the state.
pub(crate) async fn run<C, W, F>(
    checkpoint: &C,
    options: &BackfillOptions,
    query: Query<Properties>,
    mut write: W,
) -> Result<BackfillState>
where
    C: Checkpoint,
    W: FnMut(Vec<Stored<Properties>>) -> F,
    F: Future<Output = Result<PageOutcome>>,
{
    let mut state = checkpoint.load().await?.unwrap_or_default();
    let mut pages = 0;
    let mut progress = Progress::default();
    while !state.done {
        let stopped = options
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed));
        if stopped || options.max_pages.is_some_and(|max| pages >= max) {
            break;
        }
        let mut page_query = query.clone();
        if let Some(token) = &state.continuation {
            page_query = page_query.resume(token.clone());
        }
        let page = page_query.page().await?;
        state.scanned += page.items.len() as u64;
        let outcome = write(page.items).await?;
        state.written += outcome.written;
        state.skipped += outcome.skipped;
        progress.done += usize::try_from(outcome.written + outcome.skipped).unwrap_or(usize::MAX);
        progress.requests += 1 + outcome.requests;
        state.pages += 1;
        state.done = page.continuation.is_none();
        state.continuation = page.continuation;
        checkpoint.save(&state).await?;
        pages += 1;
        tracing::debug!(target: "tablekit", pages = state.pages, scanned = state.scanned, written = state.written, "backfill page done");
        if let Some(report) = &options.progress {
            report(&progress);
        }
    }
    Ok(state)
}
