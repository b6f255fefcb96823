//! Shared test setup: an account on the test storage (fresh metrics per call), unique tables
//! and containers.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use tablekit_azure::{
    Account, Container, MetricsSnapshot, RequestKind, RetryPolicy, Settings, Table,
};
use tablekit_testkit::{TestStorage, unique_container_name, unique_table_name};

/// A new account handle on the shared test storage, with its own metrics and fast retries.
pub fn account() -> Account {
    let storage = TestStorage::shared().expect("test storage");
    Account::from_connection_string(storage.connection_string())
        .expect("connection string")
        .with_settings(Settings {
            retry: RetryPolicy::exponential(
                4,
                Duration::from_millis(20),
                Duration::from_millis(200),
            ),
            ..Settings::default()
        })
        .expect("settings")
}

/// A created table with a unique name, on its own account handle.
pub async fn table(prefix: &str) -> Table {
    let table = account()
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    table
}

/// A created blob container with a unique name, on its own account handle.
pub async fn container(prefix: &str) -> Container {
    let container = account()
        .container(&unique_container_name(prefix))
        .expect("container name");
    container.create().await.expect("create container");
    container
}

/// An instant from RFC 3339 text.
pub fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .to_utc()
}

/// Asserts that `snapshot` counts `expected` requests (of `kind`, or of every kind).
///
/// Every attempt is a request, so a transient failure that was retried adds one, and a
/// retried write whose first response was lost is verified with one read. Only extra
/// requests that the retry counter explains are allowed: none without retries, at most two
/// per retry.
#[track_caller]
pub fn assert_requests(snapshot: &MetricsSnapshot, kind: Option<RequestKind>, expected: u64) {
    let sent = kind.map_or(snapshot.requests(), |k| snapshot.requests_of(k));
    assert!(
        expected <= sent && sent <= expected + 2 * snapshot.retries,
        "{kind:?}: {sent} requests, expected {expected} (+{} retries): {snapshot:?}",
        snapshot.retries
    );
}
