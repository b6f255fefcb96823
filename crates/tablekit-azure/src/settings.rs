//! Per-account behaviour: retries, scan policy, concurrency, timeouts, throughput budgets and
//! the kind of table service.

use std::time::Duration;

use tablekit_core::{Error, Result};

use crate::governor::ThroughputPolicy;
use crate::retry::{ConflictRetry, RetryPolicy};
use crate::telemetry::Telemetry;

/// Which service answers the account's table endpoint. It decides which limits are checked
/// before sending and which operations are available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TableService {
    /// Azure Table storage (and Azurite): query results sorted by PartitionKey and RowKey.
    #[default]
    Storage,
    /// The Cosmos DB Table API: stricter limits (a RowKey of at most 255 bytes, transactions
    /// of at most 2 MB, reserved property names), query results not sorted, throttling
    /// answered with 429 and a retry hint, request units charged per request.
    Cosmos,
}

impl TableService {
    /// The service a table endpoint belongs to: [`TableService::Cosmos`] for a host under
    /// `table.cosmos.azure.com` (or a sovereign cloud's `table.cosmos.…`), else
    /// [`TableService::Storage`].
    pub fn of_endpoint(table_endpoint: &azure_core::Url) -> Self {
        match table_endpoint.host_str() {
            Some(host) if host.to_ascii_lowercase().contains(".table.cosmos.") => Self::Cosmos,
            _ => Self::Storage,
        }
    }

    /// Whether query results come sorted by PartitionKey, then RowKey.
    pub fn sorts_query_results(self) -> bool {
        self == Self::Storage
    }
}

/// What to do with a query of an expensive shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScanAction {
    /// Send it.
    Allow,
    /// Send it and log a warning (`tracing`, target `tablekit`).
    Warn,
    /// Refuse it before sending, with [`tablekit_core::Error::ScanDenied`].
    Deny,
}

/// Which query shapes are allowed. Point and range queries always are.
///
/// Built from [`ScanPolicy::default`], [`ScanPolicy::allow_all`] or
/// [`ScanPolicy::deny_table_scans`] and the `with_*` setters, so that a field can be added
/// without breaking callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
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

    /// Sets what happens to queries that do not fix the PartitionKey.
    #[must_use]
    pub fn with_table_scans(mut self, action: ScanAction) -> Self {
        self.table_scans = action;
        self
    }

    /// Sets what happens to queries that fix the PartitionKey but filter on other properties.
    #[must_use]
    pub fn with_partition_scans(mut self, action: ScanAction) -> Self {
        self.partition_scans = action;
        self
    }
}

/// Settings shared by every handle of an [`Account`](crate::Account).
///
/// Built from [`Settings::default`] (or [`Settings::cosmos`]) and the `with_*` setters:
///
/// ```
/// use std::time::Duration;
/// use tablekit_azure::{RetryPolicy, Settings};
///
/// let settings = Settings::default()
///     .with_retry(RetryPolicy::none())
///     .with_request_timeout(Duration::from_secs(5));
/// # assert_eq!(settings.concurrency, 8);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
    /// Entity budgets per partition and per account, and their adaptation to throttling.
    /// Default: Azure Table storage's scalability targets. See [`ThroughputPolicy`].
    pub throughput: ThroughputPolicy,
    /// The service behind the table endpoint. Default [`TableService::Storage`]; accounts
    /// whose table endpoint is a Cosmos DB one get [`Settings::cosmos`] when built.
    pub table_service: TableService,
    /// What request spans record: key values only when opted in. See [`Telemetry`].
    pub telemetry: Telemetry,
}

impl Settings {
    /// Sets the retries of transient failures.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the retries of optimistic-concurrency conflicts in ETag loops.
    #[must_use]
    pub fn with_conflict_retry(mut self, conflict_retry: ConflictRetry) -> Self {
        self.conflict_retry = conflict_retry;
        self
    }

    /// Sets which expensive query shapes are allowed, warned about or denied.
    #[must_use]
    pub fn with_scan_policy(mut self, scan_policy: ScanPolicy) -> Self {
        self.scan_policy = scan_policy;
        self
    }

    /// Sets the requests in flight for bulk operations.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the time limit of one HTTP request attempt.
    #[must_use]
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Sets the entity budgets and their adaptation to throttling.
    #[must_use]
    pub fn with_throughput(mut self, throughput: ThroughputPolicy) -> Self {
        self.throughput = throughput;
        self
    }

    /// Sets the service behind the table endpoint.
    #[must_use]
    pub fn with_table_service(mut self, table_service: TableService) -> Self {
        self.table_service = table_service;
        self
    }

    /// Sets what request spans record.
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Settings for the Cosmos DB Table API: [`TableService::Cosmos`] (its limits are checked
    /// before sending; operations that rely on sorted query results refuse), and
    /// [`ThroughputPolicy::cosmos`] (budgets learned from 429 answers, retry hints honoured).
    /// Accounts whose table endpoint is under `table.cosmos.azure.com` get these settings
    /// when built from a connection string or [`AccountBuilder`](crate::AccountBuilder).
    pub fn cosmos() -> Self {
        Self {
            throughput: ThroughputPolicy::cosmos(),
            table_service: TableService::Cosmos,
            ..Self::default()
        }
    }

    /// The default settings for an account whose table endpoint is `table_endpoint`:
    /// [`Settings::cosmos`] for a Cosmos DB endpoint, [`Settings::default`] otherwise.
    pub fn for_table_endpoint(table_endpoint: &azure_core::Url) -> Self {
        match TableService::of_endpoint(table_endpoint) {
            TableService::Cosmos => Self::cosmos(),
            TableService::Storage => Self::default(),
        }
    }

    /// Checks the values are in range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the setting: zero concurrency, a zero request
    /// timeout, throughput values out of range ([`ThroughputPolicy::validate`]).
    pub fn validate(&self) -> Result<()> {
        if self.concurrency == 0 {
            return Err(Error::InvalidConfig {
                part: "concurrency".into(),
                reason: "must be at least 1".into(),
            });
        }
        self.throughput.validate()
    }

    /// Refuses `operation` when it relies on query results sorted by PartitionKey and RowKey
    /// (the newest entries of a log tail, a prefix read with `$top`, a merge of sorted
    /// partitions) and the table service does not sort them (the Cosmos DB Table API).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the table service and `operation`, before any request.
    pub fn require_sorted_queries(&self, operation: &str) -> Result<()> {
        if self.table_service.sorts_query_results() {
            return Ok(());
        }
        Err(Error::InvalidConfig {
            part: "table service (Cosmos DB Table API)".into(),
            reason: format!(
                "{operation} relies on query results sorted by PartitionKey and RowKey, \
                 which the Cosmos DB Table API does not return; read the whole range and \
                 sort it instead"
            ),
        })
    }

    /// The server timeout sent with every request (`timeout=`, whole seconds): the request
    /// timeout rounded up, at least 1 s and at most 30 s (the longest the Table and Queue
    /// services accept). The service finishes a request within it — applied or not — so
    /// an attempt cannot land long after the client gave up on it.
    pub fn server_timeout(&self) -> Duration {
        let seconds = self.request_timeout.as_secs_f64().ceil().clamp(1.0, 30.0);
        Duration::from_secs(seconds as u64)
    }

    /// How long after it is sent an attempt can still land: twice its
    /// [`server_timeout`](Self::server_timeout). It may reach the service as late as the
    /// client gives up on it — after the [`request_timeout`](Self::request_timeout), never
    /// more than the server timeout (that timeout rounded up, at most 30 s) — and the service
    /// finishes it within the server timeout.
    pub fn late_landing(&self) -> Duration {
        self.server_timeout().saturating_mul(2)
    }

    /// The longest a single write may take to land after it is started, by these settings:
    /// every attempt running into [`request_timeout`](Self::request_timeout), every retry
    /// delay at the top of its jitter, the last attempt's [`server_timeout`](Self::server_timeout)
    /// for the service to finish it after the client gave up, and one more request timeout
    /// of room for the waits before attempts (for throughput budget, for a token, for the
    /// runtime).
    ///
    /// It is a bound, not an estimate: every request has this deadline from its start, and
    /// an attempt that could land after it — because the request waited for throughput
    /// budget, for a token, or for the runtime — is not sent
    /// ([`Error::DeadlineExceeded`]). After this long a write that has not landed never
    /// will. Code that must tell "not yet written" from "not written" (queued jobs following
    /// a write, sweepers of orphaned blobs) waits this long before it decides. It depends
    /// only on the settings, not on the clocks of the machines involved; callers that compare
    /// times taken on different machines add an allowance for clock skew.
    pub fn write_settles_within(&self) -> Duration {
        let attempts = self.retry.max_attempts().saturating_add(1);
        self.request_timeout
            .saturating_mul(attempts)
            .saturating_add(self.retry.max_total_delay())
            .saturating_add(self.server_timeout())
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
            throughput: ThroughputPolicy::default(),
            table_service: TableService::Storage,
            telemetry: Telemetry::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_settles_within_every_attempt_the_delays_and_one_server_timeout() {
        let s = Settings::default();
        // 6 attempts of 30 s, 46 s of delays at +20 %, the last one's 30 s server timeout and
        // 30 s of room for waits.
        let expected = 7.0 * 30.0 + 46.0 * 1.2 + 30.0;
        assert!((s.write_settles_within().as_secs_f64() - expected).abs() < 1e-6);
        assert_eq!(s.server_timeout(), Duration::from_secs(30));
        assert_eq!(s.late_landing(), Duration::from_secs(60));
        let fast = Settings::default()
            .with_retry(RetryPolicy::none())
            .with_request_timeout(Duration::from_millis(600));
        // Server timeouts are whole seconds, rounded up; a late landing is two of them.
        assert_eq!(fast.server_timeout(), Duration::from_secs(1));
        assert_eq!(fast.late_landing(), Duration::from_secs(2));
        assert_eq!(fast.write_settles_within(), Duration::from_millis(2_200));
        let slow = Settings::default().with_request_timeout(Duration::from_secs(90));
        assert_eq!(
            slow.server_timeout(),
            Duration::from_secs(30),
            "the services' maximum"
        );
    }

    #[test]
    fn cosmos_endpoints_are_recognised_and_refuse_order_dependent_operations() {
        let url = |s: &str| azure_core::Url::parse(s).unwrap();
        assert_eq!(
            TableService::of_endpoint(&url("https://acct.table.cosmos.azure.com:443/")),
            TableService::Cosmos
        );
        assert_eq!(
            TableService::of_endpoint(&url("https://acct.table.core.windows.net/")),
            TableService::Storage
        );
        assert_eq!(
            TableService::of_endpoint(&url("http://127.0.0.1:10002/devstoreaccount1")),
            TableService::Storage
        );
        Settings::default().require_sorted_queries("x").unwrap();
        let err = Settings::cosmos()
            .require_sorted_queries("`LogTail::latest`")
            .unwrap_err();
        assert_eq!(err.kind(), tablekit_core::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("LogTail::latest"), "{err}");
    }
}
