//! Resumable backfills: page through a table, write what each page calls for, and checkpoint
//! the continuation token after every page.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tablekit_azure::{ContinuationToken, Query, Table};
use tablekit_core::edm::Properties;
use tablekit_core::{Entity, Keys, Result, Stored};

/// Where a backfill stands: saved after every page, reported to the progress callback.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// A progress callback: called with the state saved after each page.
pub type ProgressFn = Arc<dyn Fn(&BackfillState) + Send + Sync>;

/// Options of a backfill.
#[derive(Clone, Default)]
pub struct BackfillOptions {
    /// The copies to write, by name (default: every secondary copy).
    pub indexes: Option<Vec<String>>,
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
    /// Called after every page with the saved state.
    pub on_progress: Option<ProgressFn>,
}

impl fmt::Debug for BackfillOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackfillOptions")
            .field("indexes", &self.indexes)
            .field("partition", &self.partition)
            .field("page_size", &self.page_size)
            .field("max_pages", &self.max_pages)
            .field("stop", &self.stop)
            .field("concurrency", &self.concurrency)
            .field("on_progress", &self.on_progress.is_some())
            .finish()
    }
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
    F: Future<Output = Result<(u64, u64)>>,
{
    let mut state = checkpoint.load().await?.unwrap_or_default();
    let mut pages = 0;
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
        let (written, skipped) = write(page.items).await?;
        state.written += written;
        state.skipped += skipped;
        state.pages += 1;
        state.done = page.continuation.is_none();
        state.continuation = page.continuation;
        checkpoint.save(&state).await?;
        pages += 1;
        tracing::debug!(target: "tablekit", pages = state.pages, scanned = state.scanned, written = state.written, "backfill page done");
        if let Some(progress) = &options.on_progress {
            progress(&state);
        }
    }
    Ok(state)
}
