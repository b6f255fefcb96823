//! Partition spreading, the fix for the prepend/append anti-pattern:
//! a log whose entries are spread over N bucket partitions and read back as one
//! newest-first stream ([`SpreadLog`](crate::SpreadLog), at the crate root).
//!
//! This module is the home of the bucket layout: the hash that places a value in a bucket,
//! which a reader in another language computes the same way, and the bucket limit.

mod hash;
pub(crate) mod log;
mod merge;
pub(crate) mod query;

pub use hash::{bucket_of, stable_hash};

/// The most buckets a [`SpreadLog`](crate::SpreadLog) may have: every read fans out to all of them.
pub const MAX_BUCKETS: u32 = 1_000;
