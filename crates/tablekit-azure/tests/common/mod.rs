//! Shared test setup: an account on the test storage (fresh metrics per call) and unique tables.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tablekit_azure::{Account, RetryPolicy, Settings, Table};
use tablekit_testkit::{TestStorage, unique_table_name};

/// A new account handle on the shared test storage, with its own metrics and a fast retry
/// schedule (tests inject faults; the 2/4/10/30 s default would only slow them down).
pub fn account() -> Account {
    let storage = TestStorage::shared().expect("test storage");
    let account =
        Account::from_connection_string(storage.connection_string()).expect("connection string");
    account
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

/// A created table with a unique name.
pub async fn table(prefix: &str) -> Table {
    let table = account()
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    table
}

/// The same table through another account handle (fresh metrics).
pub fn reopen(table: &Table) -> Table {
    account().table(table.name()).expect("table name")
}
