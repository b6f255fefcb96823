//! Request metrics per account: what tests use to prove request counts, and what operators
//! watch (throttling, conflicts, bytes).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! kinds {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        /// The kind of one HTTP request, as counted by [`Metrics`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum RequestKind {
            $(#[doc = $doc] $variant,)*
        }

        impl RequestKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [RequestKind] = &[$(RequestKind::$variant,)*];

            /// A stable, dotted name (`table.get`, `queue.put`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $(RequestKind::$variant => $name,)*
                }
            }
        }
    };
}

kinds! {
    TableCreate => "table.create", "Create a table.";
    TableDelete => "table.delete", "Delete a table.";
    TableList => "table.list", "List tables.";
    Get => "entity.get", "Read one entity.";
    Insert => "entity.insert", "Insert one entity.";
    Replace => "entity.replace", "Replace one entity.";
    Merge => "entity.merge", "Merge into one entity.";
    UpsertReplace => "entity.upsert_replace", "Insert or replace one entity.";
    UpsertMerge => "entity.upsert_merge", "Insert or merge one entity.";
    Delete => "entity.delete", "Delete one entity.";
    Query => "entity.query", "One page of a query.";
    Transaction => "entity.transaction", "One entity group transaction.";
    QueueCreate => "queue.create", "Create a queue.";
    QueueDelete => "queue.delete", "Delete a queue.";
    QueuePut => "queue.put", "Put a message.";
    QueueGet => "queue.get", "Get (dequeue) messages.";
    QueuePeek => "queue.peek", "Peek at messages.";
    QueueUpdate => "queue.update", "Update a message (visibility, text).";
    QueueDeleteMessage => "queue.delete_message", "Delete a message.";
    QueueMetadata => "queue.metadata", "Read queue metadata (approximate count).";
    ContainerCreate => "blob.container_create", "Create a blob container.";
    ContainerDelete => "blob.container_delete", "Delete a blob container.";
    BlobPut => "blob.put", "Upload a blob.";
    BlobGet => "blob.get", "Download a blob.";
    BlobProperties => "blob.properties", "Read a blob's properties and metadata.";
    BlobDelete => "blob.delete", "Delete a blob.";
    BlobList => "blob.list", "List blobs (one page).";
    BlobAppend => "blob.append", "Append a block to an append blob.";
    BlobMetadata => "blob.set_metadata", "Set a blob's metadata.";
    Other => "other", "Anything else.";
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Default)]
struct Counters {
    by_kind: Vec<AtomicU64>,
    entities_read: AtomicU64,
    entities_written: AtomicU64,
    retries: AtomicU64,
    conflicts_409: AtomicU64,
    conflicts_412: AtomicU64,
    conflict_retries: AtomicU64,
    throttled: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

/// Live counters of one account, shared by all its handles (cheap to clone).
#[derive(Clone)]
pub struct Metrics {
    counters: Arc<Counters>,
}

impl Default for Metrics {
    fn default() -> Self {
        let counters = Counters {
            by_kind: RequestKind::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            ..Counters::default()
        };
        Self {
            counters: Arc::new(counters),
        }
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// A copy of the current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            requests_by_kind: RequestKind::ALL
                .iter()
                .zip(&c.by_kind)
                .map(|(k, v)| (*k, load(v)))
                .collect(),
            entities_read: load(&c.entities_read),
            entities_written: load(&c.entities_written),
            retries: load(&c.retries),
            conflicts_409: load(&c.conflicts_409),
            conflicts_412: load(&c.conflicts_412),
            conflict_retries: load(&c.conflict_retries),
            throttled: load(&c.throttled),
            bytes_sent: load(&c.bytes_sent),
            bytes_received: load(&c.bytes_received),
        }
    }

    /// Sets every counter to zero.
    pub fn reset(&self) {
        let c = &self.counters;
        for v in c.by_kind.iter().chain([
            &c.entities_read,
            &c.entities_written,
            &c.retries,
            &c.conflicts_409,
            &c.conflicts_412,
            &c.conflict_retries,
            &c.throttled,
            &c.bytes_sent,
            &c.bytes_received,
        ]) {
            v.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn request(&self, kind: RequestKind, bytes_sent: usize) {
        if let Some(slot) = RequestKind::ALL.iter().position(|k| *k == kind) {
            add(&self.counters.by_kind[slot], 1);
        }
        add(&self.counters.bytes_sent, bytes_sent as u64);
    }

    pub(crate) fn received(&self, bytes: usize) {
        add(&self.counters.bytes_received, bytes as u64);
    }

    pub(crate) fn entities_read(&self, n: usize) {
        add(&self.counters.entities_read, n as u64);
    }

    pub(crate) fn entities_written(&self, n: usize) {
        add(&self.counters.entities_written, n as u64);
    }

    pub(crate) fn retry(&self) {
        add(&self.counters.retries, 1);
    }

    pub(crate) fn conflict_retry(&self) {
        add(&self.counters.conflict_retries, 1);
    }

    pub(crate) fn error(&self, error: &tablekit_core::Error) {
        match error.status() {
            Some(409) => add(&self.counters.conflicts_409, 1),
            Some(412) => add(&self.counters.conflicts_412, 1),
            _ => {}
        }
        if error.kind() == tablekit_core::ErrorKind::Throttled {
            add(&self.counters.throttled, 1);
        }
    }
}

/// Counter values at one moment. Subtract two snapshots to measure an operation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// HTTP requests sent (every attempt counts), by kind.
    pub requests_by_kind: Vec<(RequestKind, u64)>,
    /// Entities returned by reads and queries.
    pub entities_read: u64,
    /// Entities written successfully (each operation of a transaction counts).
    pub entities_written: u64,
    /// Transient-failure retries.
    pub retries: u64,
    /// 409 Conflict responses.
    pub conflicts_409: u64,
    /// 412 Precondition Failed responses.
    pub conflicts_412: u64,
    /// Optimistic-concurrency retries made by ETag loops.
    pub conflict_retries: u64,
    /// Throttling responses (503, 500 timeouts, 429).
    pub throttled: u64,
    /// Request bytes sent (bodies).
    pub bytes_sent: u64,
    /// Response bytes received (bodies).
    pub bytes_received: u64,
}

impl MetricsSnapshot {
    /// Requests of one kind.
    pub fn requests_of(&self, kind: RequestKind) -> u64 {
        self.requests_by_kind
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }

    /// All requests.
    pub fn requests(&self) -> u64 {
        self.requests_by_kind.iter().map(|(_, n)| n).sum()
    }

    /// The counts accumulated since `earlier`.
    pub fn since(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        MetricsSnapshot {
            requests_by_kind: self
                .requests_by_kind
                .iter()
                .map(|(k, n)| (*k, n.saturating_sub(earlier.requests_of(*k))))
                .collect(),
            entities_read: self.entities_read.saturating_sub(earlier.entities_read),
            entities_written: self
                .entities_written
                .saturating_sub(earlier.entities_written),
            retries: self.retries.saturating_sub(earlier.retries),
            conflicts_409: self.conflicts_409.saturating_sub(earlier.conflicts_409),
            conflicts_412: self.conflicts_412.saturating_sub(earlier.conflicts_412),
            conflict_retries: self
                .conflict_retries
                .saturating_sub(earlier.conflict_retries),
            throttled: self.throttled.saturating_sub(earlier.throttled),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
        }
    }
}
