//! What the scenarios store: the design guide's employee, and helpers to read a table back
//! directly.

use tablekit::TableEntity;
use tablekit_azure::{Account, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{Properties, Stored};
use tablekit_index::{CopyHandle, CopySpec, IndexSpec};
use tablekit_testkit::unique_table_name;

/// The guide's employee.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
pub struct Employee {
    /// The partition.
    pub department: String,
    /// The employee id (6 digits).
    pub id: String,
    /// Indexed by the lists.
    pub last_name: String,
    /// Indexed by the email copy.
    pub email: String,
    /// Not indexed.
    pub age: i32,
}

impl Employee {
    /// Jun Jones of `department`, id `id`.
    pub fn jones(department: &str, id: u32) -> Self {
        Self {
            department: department.into(),
            id: format!("{id:06}"),
            last_name: "Jones".into(),
            email: format!("jones{id}@contoso.com"),
            age: 34,
        }
    }
}

/// The index declaration of the scenarios: `empid_` (primary) and `email_`.
pub struct Directory {
    /// The declaration.
    pub spec: IndexSpec<Employee>,
    /// The email copy.
    pub by_email: CopyHandle<Employee>,
}

/// [`Directory`], declared.
pub fn directory() -> Directory {
    let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
    spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL));
    Directory {
        spec: spec.build().expect("a valid declaration"),
        by_email,
    }
}

/// A created table with a unique name starting with `prefix`, on `direct`.
pub async fn new_table(direct: &Account, prefix: &str) -> Result<String, String> {
    let name = unique_table_name(prefix);
    let table = direct.table(&name).map_err(|e| e.to_string())?;
    table.create().await.map_err(|e| e.to_string())?;
    Ok(name)
}

/// Every row of partition `pk` of `table`, read directly.
pub async fn rows(table: &Table, pk: &str) -> Result<Vec<Stored<Properties>>, String> {
    table
        .without_codec()
        .query::<Properties>()
        .filter(Filter::partition(pk))
        .collect()
        .await
        .map_err(|e| format!("reading partition {pk}: {e}"))
}

/// A string property of a row.
pub fn text<'a>(row: &'a Stored<Properties>, name: &str) -> Option<&'a str> {
    row.value.get_str(name).ok().flatten()
}

/// `Ok(())` when `cond` holds, else the message.
pub fn ensure(cond: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(message()) }
}

/// Worker options for the scenarios' jobs: short visibility (a stopped worker's message
/// returns within seconds), two handlers at once (duplicate messages run concurrently), fast
/// polls, six deliveries before poison, retried within two seconds.
pub fn worker_options() -> tablekit_eventual::WorkerOptions {
    use std::time::Duration;
    tablekit_eventual::WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_max_dequeue_count(6)
        .with_concurrency(2)
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(100))
        .with_failure_backoff(Duration::from_millis(50))
}

/// The clock allowance of the scenarios' jobs: one machine, one clock.
pub const SKEW: std::time::Duration = std::time::Duration::from_millis(500);

/// Messages left on a job queue and on its poison queue.
pub async fn left_on<J>(jobs: &tablekit_eventual::JobQueue<J>) -> Result<(usize, usize), String> {
    let queued = jobs
        .queue()
        .approximate_len()
        .await
        .map_err(|e| e.to_string())?;
    let poisoned = jobs
        .poison()
        .approximate_len()
        .await
        .map_err(|e| e.to_string())?;
    Ok((queued, poisoned))
}
