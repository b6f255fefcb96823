//! Per-account behaviour: retries, scan policy, concurrency, timeouts.

use std::time::Duration;

use crate::retry::{ConflictRetry, RetryPolicy};

/// What to do with a query of an expensive shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanAction {
    /// Send it.
    Allow,
    /// Send it and log a warning (`tracing`, target `tablekit`).
    Warn,
    /// Refuse it before sending, with [`tablekit_core::Error::ScanDenied`].
    Deny,
}

/// Which query shapes are allowed (PATTERNS.md §2.1). Point and range queries always are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScanPolicy {
    /// Queries that do not fix the PartitionKey (they read every partition).
    pub table_scans: ScanAction,
    /// Queries that fix the PartitionKey but filter on other properties.
    pub partition_scans: ScanAction,
}

impl Default for ScanPolicy {
    /// Warn on table scans, allow partition scans.
    fn default() -> Self {
        Self {
            table_scans: ScanAction::Warn,
            partition_scans: ScanAction::Allow,
        }
    }
}

impl ScanPolicy {
    /// Allow every shape silently.
    pub fn allow_all() -> Self {
        Self {
            table_scans: ScanAction::Allow,
            partition_scans: ScanAction::Allow,
        }
    }

    /// Refuse table scans, allow partition scans.
    pub fn deny_table_scans() -> Self {
        Self {
            table_scans: ScanAction::Deny,
            partition_scans: ScanAction::Allow,
        }
    }
}

/// Settings shared by every handle of an [`Account`](crate::Account).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Retries of transient failures (throttling, timeouts, connection errors).
    pub retry: RetryPolicy,
    /// Retries of optimistic-concurrency conflicts in ETag loops (`update_with` and patterns).
    pub conflict_retry: ConflictRetry,
    /// Expensive query shapes: allow, warn or deny.
    pub scan_policy: ScanPolicy,
    /// Requests in flight for bulk operations (`bulk_write`, fan-out readers). Default 8.
    pub concurrency: usize,
    /// Time limit of one HTTP request attempt. Default 30 s.
    pub request_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            conflict_retry: ConflictRetry::default(),
            scan_policy: ScanPolicy::default(),
            concurrency: 8,
            request_timeout: Duration::from_secs(30),
        }
    }
}
