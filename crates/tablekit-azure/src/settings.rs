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

/// Which query shapes are allowed. Point and range queries always are.
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

impl Settings {
    /// The longest a single write may take to land after it is started, by these settings:
    /// every attempt running into [`request_timeout`](Self::request_timeout), every retry
    /// delay at the top of its jitter, and one more `request_timeout` for an attempt the
    /// service received but applied after the client stopped waiting for it.
    ///
    /// After this long a write that has not landed never will. Code that must tell "not yet
    /// written" from "not written" (queued jobs following a write, sweepers of orphaned
    /// blobs) waits this long before it decides. It depends only on the settings, not on the
    /// clocks of the machines involved; callers that compare times taken on different
    /// machines add an allowance for clock skew.
    pub fn write_settles_within(&self) -> Duration {
        let attempts = self.retry.max_attempts().saturating_add(1);
        self.request_timeout
            .saturating_mul(attempts)
            .saturating_add(self.retry.max_total_delay())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_settles_within_every_attempt_plus_one_late_apply_and_the_delays() {
        let s = Settings::default();
        // 6 attempts + 1 late apply, 30 s each, and 46 s of delays at +20 %.
        let expected = 7.0 * 30.0 + 46.0 * 1.2;
        assert!((s.write_settles_within().as_secs_f64() - expected).abs() < 1e-6);
        let fast = Settings {
            retry: RetryPolicy::none(),
            request_timeout: Duration::from_secs(2),
            ..Settings::default()
        };
        assert_eq!(fast.write_settles_within(), Duration::from_secs(4));
    }
}
