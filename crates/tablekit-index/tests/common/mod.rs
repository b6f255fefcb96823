//! Shared test setup: accounts on the test storage (fresh metrics per call), unique tables,
//! and the guide's employee with its two copies.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit::TableEntity;
use tablekit_azure::{Account, ConflictRetry, MetricsSnapshot, Table};
use tablekit_index::{CopyHandle, CopySpec, IndexSpec};
use tablekit_testkit::fixtures::{account_with, fast_retries, table_on};

/// A new account handle on the shared test storage with its own metrics, fast transient
/// retries and enough conflict retries for contended tests.
pub fn account() -> Account {
    account_with(
        fast_retries().with_conflict_retry(
            ConflictRetry::default()
                .with_max_attempts(100)
                .with_initial_backoff(Duration::from_millis(2))
                .with_max_backoff(Duration::from_millis(50)),
        ),
    )
}

/// A created table with a unique name, on a fresh account.
pub async fn table(prefix: &str) -> Table {
    table_on(&account(), prefix).await
}

/// Runs `f` and returns what it returned and the requests the table's account sent.
pub async fn measured<F: std::future::Future>(table: &Table, f: F) -> (F::Output, MetricsSnapshot) {
    tablekit_testkit::fixtures::measured(table.account(), f).await
}

/// The guide's sample employee, stored at `Sales/000223` where it is stored as itself (the
/// lists); the indexes store it under keys of their own.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
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

/// The directory's declaration and the handles of its copies.
pub struct Directory {
    pub spec: IndexSpec<Employee>,
    /// `empid_`: the primary, ids of exactly 6 characters.
    pub by_id: CopyHandle<Employee>,
    /// `email_`: without the age, read as an [`EmailCard`].
    pub by_email: CopyHandle<Employee, EmailCard>,
}

/// `empid_` (the primary, ids of exactly 6 digits) and `email_` (without the age).
pub fn directory() -> Directory {
    let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
    let by_id = spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let by_email =
        spec.secondary(CopySpec::new("email", Employee::EMAIL).with_projection_of::<EmailCard>());
    Directory {
        spec: spec.build().expect("valid declaration"),
        by_id,
        by_email,
    }
}
