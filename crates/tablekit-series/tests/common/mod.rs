//! Shared test setup: the testkit's fixtures (accounts with fresh metrics, unique tables,
//! fault-proxied accounts) and an account for heavy contention.
#![allow(dead_code, unused_imports, unreachable_pub)]

use std::time::Duration;

use tablekit_azure::{Account, ConflictRetry, Settings, Table};
use tablekit_testkit::FaultProxy;
pub use tablekit_testkit::fixtures::{account, fast_retries as settings, table};
use tablekit_testkit::fixtures::{account_with, proxied as proxied_services};

/// An account for heavy contention: many conflict retries with short backoff.
pub fn contended_account() -> Account {
    account_with(
        settings().with_conflict_retry(
            ConflictRetry::default()
                .with_max_attempts(10_000)
                .with_initial_backoff(Duration::from_millis(1))
                .with_max_backoff(Duration::from_millis(40)),
        ),
    )
}

/// The same table through another account handle.
pub fn reopen(table: &Table, account: &Account) -> Table {
    account.table(table.name()).expect("table name")
}

/// An account whose table traffic passes through a fault proxy in front of the test
/// emulator, and the proxy.
pub fn proxied(settings: Settings) -> (Account, FaultProxy) {
    let proxied = proxied_services(settings);
    (proxied.account, proxied.table)
}
