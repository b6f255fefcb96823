//! K-way merge of per-bucket query streams into one newest-first stream.
//!
//! Each bucket's query returns its entries in RowKey order, which is newest first. The merge
//! keeps, per bucket, the rest of the page last read and yields the smallest head RowKey
//! across buckets (ties by bucket number, so the order is deterministic). A bucket's next
//! page is requested only once its current page is used up, so at most one page per bucket
//! is held: memory is bounded by `buckets × page size` entities. At the start the first page
//! of every bucket is requested concurrently (bounded by the account's `concurrency`).

use std::collections::VecDeque;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use serde::de::DeserializeOwned;
use tablekit_azure::{Page, Query};
use tablekit_core::{Result, Stored};

struct Cursor<T> {
    pages: BoxStream<'static, Result<Page<Stored<T>>>>,
    buffer: VecDeque<Stored<T>>,
    exhausted: bool,
}

impl<T> Cursor<T> {
    fn needs_page(&self) -> bool {
        self.buffer.is_empty() && !self.exhausted
    }

    /// Reads pages until one has entries or the query ends (an empty page with a
    /// continuation is not the end).
    async fn refill(&mut self) -> Result<()> {
        while self.needs_page() {
            match self.pages.next().await {
                Some(Ok(page)) => self.buffer.extend(page.items),
                Some(Err(e)) => {
                    self.exhausted = true;
                    return Err(e);
                }
                None => self.exhausted = true,
            }
        }
        Ok(())
    }
}

struct Merge<T> {
    cursors: Vec<Cursor<T>>,
    concurrency: usize,
    failed: bool,
}

impl<T: Send + 'static> Merge<T> {
    async fn next(&mut self) -> Option<Result<(u32, Stored<T>)>> {
        if self.failed {
            return None;
        }
        // A plain loop rather than iterator adapters: closures over `&mut Cursor` make the
        // future's `Send` bound unprovable (rustc's higher-ranked lifetime limitation).
        let mut pending = Vec::new();
        for cursor in &mut self.cursors {
            if cursor.needs_page() {
                pending.push(cursor.refill());
            }
        }
        let refills: Vec<Result<()>> = futures::stream::iter(pending)
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        if let Some(error) = refills.into_iter().find_map(Result::err) {
            self.failed = true;
            return Some(Err(error));
        }
        let (_, newest) = self
            .cursors
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.buffer.front().map(|s| (s.keys.rk(), i)))
            .min()?;
        let bucket = u32::try_from(newest).unwrap_or(u32::MAX);
        self.cursors[newest]
            .buffer
            .pop_front()
            .map(|stored| Ok((bucket, stored)))
    }
}

/// Merges the queries' results by RowKey, smallest (newest) first, each with the index of
/// its query (its bucket); equal RowKeys come in bucket order. After an error the stream
/// ends.
pub(crate) fn merge_by_row_key<T>(
    queries: Vec<Query<T>>,
    concurrency: usize,
) -> impl Stream<Item = Result<(u32, Stored<T>)>> + Send + 'static
where
    T: DeserializeOwned + Send + 'static,
{
    let merge = Merge {
        cursors: queries
            .into_iter()
            .map(|q| Cursor {
                pages: q.pages().boxed(),
                buffer: VecDeque::new(),
                exhausted: false,
            })
            .collect(),
        concurrency: concurrency.max(1),
        failed: false,
    };
    futures::stream::unfold(merge, |mut merge| async move {
        let item = merge.next().await?;
        Some((item, merge))
    })
}
