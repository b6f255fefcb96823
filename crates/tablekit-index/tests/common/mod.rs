//! Shared test setup: accounts on the test storage (fresh metrics per call), unique tables,
//! and the guide's employee.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, ConflictRetry, MetricsSnapshot, RetryPolicy, Settings, Table};
use tablekit_index::{CopySpec, IndexSpec};
use tablekit_testkit::{TestStorage, unique_table_name};

/// A new account handle on the shared test storage with its own metrics, fast transient
/// retries and enough conflict retries for contended tests.
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
            conflict_retry: ConflictRetry {
                max_attempts: 100,
                initial_backoff: Duration::from_millis(2),
                max_backoff: Duration::from_millis(50),
            },
            ..Settings::default()
        })
        .expect("settings")
}

/// A created table with a unique name, on a fresh account.
pub async fn table(prefix: &str) -> Table {
    let table = account()
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    table
}

/// Runs `f` and returns what it returned and the requests it sent.
pub async fn measured<F: std::future::Future>(table: &Table, f: F) -> (F::Output, MetricsSnapshot) {
    let metrics = table.account().metrics().clone();
    let before = metrics.snapshot();
    let out = f.await;
    (out, metrics.snapshot().since(&before))
}

/// The guide's sample employee.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Employee {
    pub department: String,
    pub id: String,
    pub first_name: String,
    pub last_name: String,
    pub email: String,
    pub age: i32,
}

/// What the email copy holds: everything but the age.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EmailCard {
    pub department: String,
    pub id: String,
    pub first_name: String,
    pub last_name: String,
    pub email: String,
}

pub fn employee(department: &str, id: u32, last_name: &str, email: &str) -> Employee {
    Employee {
        department: department.into(),
        id: format!("{id:06}"),
        first_name: "Jun".into(),
        last_name: last_name.into(),
        email: email.into(),
        age: 34,
    }
}

/// `empid_` (the primary, ids of exactly 6 digits) and `email_` (without the age).
pub fn employee_spec() -> IndexSpec<Employee> {
    IndexSpec::builder(|e: &Employee| e.department.clone())
        .primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).fixed_width(6))
        .secondary(
            CopySpec::new("email", |e: &Employee| e.email.clone()).project([
                "Department",
                "Id",
                "FirstName",
                "LastName",
                "Email",
            ]),
        )
        .build()
        .expect("valid declaration")
}
