//! Shared test setup: accounts (plain and behind fault proxies), the design guide's archive
//! job, and fixtures for tables and job queues.
#![allow(dead_code, unused_imports, unreachable_pub)]

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit::TableEntity;
use tablekit_azure::{Account, BulkOptions, Table};
use tablekit_core::batch::Operation;
use tablekit_core::{Entity, Result, Stored};
use tablekit_eventual::{Handler, HandlerRetry, Job, JobQueue, Steps, WorkerOptions};
use tablekit_testkit::fixtures::table_on;
pub use tablekit_testkit::fixtures::{Proxied, account, account_with, fast_retries};
use tablekit_testkit::unique_queue_name;

/// An employee as the design guide stores it (PK = department, RK = zero-padded employee id).
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
pub struct Employee {
    pub department: String,
    pub id: u32,
    pub first_name: String,
    pub last_name: String,
    pub age: i32,
    pub email: String,
}

pub fn employee(id: u32) -> Employee {
    Employee {
        department: department(id).to_owned(),
        id,
        first_name: format!("First{id}"),
        last_name: format!("Last{id}"),
        age: 20 + (id % 40) as i32,
        email: format!("e{id}@contoso.com"),
    }
}

pub fn department(id: u32) -> &'static str {
    ["Sales", "Marketing", "Finance", "Support"][id as usize % 4]
}

/// Employee `id`'s `(PartitionKey, RowKey)`.
pub fn keys(id: u32) -> (&'static str, String) {
    (department(id), format!("{id:06}"))
}

/// `value` at employee `id`'s keys: a value without keys of its own, written next to (or over)
/// the employee.
pub fn at<T>(id: u32, value: T) -> Entity<T> {
    let (pk, rk) = keys(id);
    Entity::try_new(pk, rk, value).expect("keys")
}

/// "Archive employee N": the job names the employee, the handler reads the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchiveEmployee {
    pub department: String,
    pub employee_id: String,
}

impl ArchiveEmployee {
    pub fn new(id: u32) -> Self {
        let (department, employee_id) = keys(id);
        Self {
            department: department.to_owned(),
            employee_id,
        }
    }
}

impl Job for ArchiveEmployee {
    const KIND: &'static str = "archive-employee";
}

/// Moves an employee from Current to Archive: get, upsert into Archive, delete from Current
/// if unchanged since the read. Absent from Current means an earlier run finished.
#[derive(Clone)]
pub struct Archiver {
    pub current: Table,
    pub archive: Table,
    /// A pause between the write to Archive and the delete from Current (usually none), so
    /// that a test can find handlers half way.
    pub pause: Duration,
}

impl Handler<ArchiveEmployee> for Archiver {
    async fn handle(&self, job: ArchiveEmployee, steps: &Steps) -> Result<()> {
        let keys = (job.department, job.employee_id);
        let Some(employee): Option<Stored<Employee>> = steps.get(&self.current, keys).await? else {
            return Ok(());
        };
        steps.upsert_replace(&self.archive, &employee.value).await?;
        if !self.pause.is_zero() {
            tokio::time::sleep(self.pause).await;
        }
        steps
            .delete(&self.current, &employee.value, employee.if_match())
            .await?;
        Ok(())
    }
}

/// Current and Archive tables (created, unique names) on `account`.
pub async fn archive_tables(account: &Account) -> Archiver {
    Archiver {
        current: table_on(account, "Current").await,
        archive: table_on(account, "Archive").await,
        pause: Duration::ZERO,
    }
}

/// Writes employees `ids` into Current.
pub async fn seed(current: &Table, ids: impl IntoIterator<Item = u32>) {
    let ops = ids
        .into_iter()
        .map(|id| Operation::insert(&employee(id)).expect("operation"))
        .collect();
    let report = current
        .bulk_write(ops, BulkOptions::default())
        .await
        .expect("seed");
    assert!(report.is_complete(), "seeding Current failed");
}

/// The employee ids stored in a table, with their values checked against the fixture.
pub async fn ids_in(table: &Table) -> BTreeSet<u32> {
    let all = table
        .typed::<Employee>()
        .query()
        .allow_scan()
        .collect()
        .await
        .expect("scan");
    let mut ids = BTreeSet::new();
    for stored in all {
        let id: u32 = stored.keys.rk().parse().expect("numeric id");
        assert_eq!(stored.value, employee(id), "employee {id} was altered");
        assert!(ids.insert(id), "employee {id} twice");
    }
    ids
}

/// A created job queue with a unique name on `account`.
pub async fn job_queue<J: Job>(account: &Account, prefix: &str) -> JobQueue<J> {
    let queue = JobQueue::new(
        account
            .queue(&unique_queue_name(prefix))
            .expect("queue name"),
    );
    queue.create().await.expect("create queues");
    queue
}

/// Worker options for tests: short visibility, quick polls and retries.
pub fn quick_options() -> WorkerOptions {
    WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_max_dequeue_count(5)
        .with_concurrency(8)
        .with_poll_interval(Duration::from_millis(50))
        .with_idle_backoff_max(Duration::from_millis(250))
        .with_handler_retry(
            HandlerRetry::default()
                .with_max_retries(2)
                .with_initial_backoff(Duration::from_millis(10))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .with_shutdown_grace(Duration::from_secs(10))
}

/// Deletes what a test created.
pub async fn cleanup<J: Job>(queue: &JobQueue<J>, tables: &Archiver) {
    queue.delete_queues().await.expect("delete queues");
    tables.current.delete_table().await.expect("delete Current");
    tables.archive.delete_table().await.expect("delete Archive");
}

/// An account whose table, queue and blob traffic passes through fault proxies.
pub fn proxied() -> Proxied {
    tablekit_testkit::fixtures::proxied(fast_retries())
}

/// Asserts the requests of each kind: `expected` exactly, none of any other kind except those
/// in `ignore` (polls, whose number depends on timing). An attempt the account retried after
/// a transient failure (the emulator now and then resets a fresh connection) is sent, and
/// counted, twice; such retries, counted by the metrics, are the only slack allowed.
pub fn assert_requests(
    s: &tablekit_azure::MetricsSnapshot,
    expected: &[(tablekit_azure::RequestKind, u64)],
    ignore: &[tablekit_azure::RequestKind],
) {
    let mut extra = 0;
    for kind in tablekit_azure::RequestKind::ALL {
        let got = s.requests_of(*kind);
        if ignore.contains(kind) {
            continue;
        }
        let want = expected
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, n)| *n);
        assert!(
            got >= want && got <= want + s.retries,
            "{kind}: {got} requests, expected {want} (retries: {})",
            s.retries
        );
        extra += got - want;
    }
    assert!(extra <= s.retries, "{extra} requests beyond the retries");
}

/// A job for tests that need no tables.
#[derive(Debug, Serialize, Deserialize)]
pub struct Probe(pub u32);
impl Job for Probe {
    const KIND: &'static str = "probe";
}

/// A handler that takes its time and succeeds.
pub struct Slow(pub Duration);
impl Handler<Probe> for Slow {
    async fn handle(&self, _job: Probe, _steps: &Steps) -> Result<()> {
        tokio::time::sleep(self.0).await;
        Ok(())
    }
}
