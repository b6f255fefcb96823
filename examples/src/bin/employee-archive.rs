//! employee-archive: the design guide's eventually consistent transaction. Archiving an
//! employee moves the entity from table `Current` to table `Archive`; one entity group
//! transaction cannot span two tables, so a queue message describes the move and a worker
//! performs it with idempotent steps, deleting the message only after both steps succeeded.
//!
//! The run shows the request count of each step, a duplicate job handled harmlessly, a worker
//! that crashed between the two writes (readers briefly see the employee in both tables), and
//! a job that keeps failing landing in the poison queue with its payload intact.
//!
//! `cargo xtask demo` runs it against Azurite; any account works with
//! `AZURE_STORAGE_CONNECTION_STRING="<cs>" cargo run -p tablekit-examples --bin employee-archive`.
//! With `--serve`, the worker keeps running until Ctrl-C or SIGTERM instead of stopping when
//! the queue is empty.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit::azure::{MetricsSnapshot, RequestKind};
use tablekit::eventual::shutdown_signal;
use tablekit::eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions};
use tablekit::prelude::*;
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// An employee as the design guide stores it: PartitionKey = department, RowKey = employee id.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{employee_id}")]
struct Employee {
    department: String,
    employee_id: String,
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
}
// ANCHOR_END: model

// ANCHOR: job
/// "Archive employee N": the message names the employee; the worker reads the data when it
/// runs, so a late or repeated message archives whatever is current.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArchiveEmployee {
    department: String,
    employee_id: String,
}

impl Job for ArchiveEmployee {
    const KIND: &'static str = "archive-employee";
}
// ANCHOR_END: job

// ANCHOR: handler
/// Moves one employee from Current to Archive. Every step is safe to repeat, so a crash at
/// any point, or a duplicate message, converges on the same end state.
struct Archiver {
    current: Table,
    archive: Table,
}

impl Handler<ArchiveEmployee> for Archiver {
    async fn handle(&self, job: ArchiveEmployee, steps: &Steps) -> tablekit::Result<()> {
        let keys = (job.department, job.employee_id);
        // Step 3: read the entity. Absent means an earlier attempt already moved it.
        let Some(employee): Option<Stored<Employee>> = steps.get(&self.current, keys).await? else {
            return Ok(());
        };
        // Step 4: insert-or-replace into Archive (idempotent).
        steps.upsert_replace(&self.archive, &employee.value).await?;
        // Step 5: delete from Current, only the version we copied; absent is fine. If someone
        // edited the employee meanwhile, this fails and the worker re-runs the handler, which
        // copies the new version first.
        steps
            .delete(&self.current, &employee.value, employee.if_match())
            .await?;
        Ok(())
    }
}
// ANCHOR_END: handler

fn employee(department: &str, id: &str, first: &str, last: &str, age: i32) -> Employee {
    Employee {
        department: department.into(),
        employee_id: id.into(),
        first_name: first.into(),
        last_name: last.into(),
        age,
        email: format!(
            "{}{}@contoso.com",
            last.to_lowercase(),
            &first[..1].to_lowercase()
        ),
    }
}

fn job(department: &str, id: &str) -> ArchiveEmployee {
    ArchiveEmployee {
        department: department.into(),
        employee_id: id.into(),
    }
}

/// The requests of a step by kind, e.g. `queue.get 2, entity.get 3, …`.
fn breakdown(s: &MetricsSnapshot) {
    let parts: Vec<String> = RequestKind::ALL
        .iter()
        .filter(|k| s.requests_of(**k) > 0)
        .map(|k| format!("{} {}", k.name(), s.requests_of(*k)))
        .collect();
    println!("    ({})", parts.join(", "));
}

async fn ids(table: &TypedTable<Employee>) -> tablekit::Result<Vec<String>> {
    let all = table.query().allow_scan().collect().await?;
    Ok(all
        .into_iter()
        .map(|e| format!("{}/{}", e.value.department, e.value.employee_id))
        .collect())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().any(|a| a == "--serve");
    let account = Account::from_env_or_emulator()?;
    let metrics = account.metrics().clone();
    let current = account.table(&unique_name("Current"))?;
    let archive = account.table(&unique_name("Archive"))?;
    current.create().await?;
    archive.create().await?;
    println!(
        "employee-archive: tables {} and {} on {}",
        current.name(),
        archive.name(),
        account.name()
    );
    let staff = [
        employee("Sales", "000223", "Jun", "Cao", 47),
        employee("Sales", "000456", "Ana", "Jones", 38),
        employee("Sales", "000789", "Lee", "Smith", 29),
        employee("Marketing", "000101", "Kim", "Abe", 51),
    ];
    for e in &staff {
        current.insert(e).await?;
    }
    // Typed views for the checks below; the handler and its steps take the plain handles.
    let current_rows: TypedTable<Employee> = current.typed();
    let archive_rows: TypedTable<Employee> = archive.typed();

    // ANCHOR: enqueue
    let queue: JobQueue<ArchiveEmployee> =
        JobQueue::new(account.queue(&unique_name("archive-jobs"))?);
    queue.create().await?; // the queue and `<name>-poison`
    // ANCHOR_END: enqueue
    let before = metrics.snapshot();
    // ANCHOR: enqueue_jobs
    queue.enqueue(&job("Sales", "000456")).await?;
    queue.enqueue(&job("Marketing", "000101")).await?;
    // Delivery is at least once anyway; a duplicate job is harmless.
    queue.enqueue(&job("Sales", "000456")).await?;
    // ANCHOR_END: enqueue_jobs
    report(
        "enqueue 3 archive jobs (one a duplicate)",
        &metrics.snapshot().since(&before),
    );

    // ANCHOR: worker
    let handler = Archiver {
        current: current.clone(),
        archive: archive.clone(),
    };
    let options = WorkerOptions::default()
        // The default, 2 minutes: longer than a request may land late (60 s with the default
        // 30 s request timeout), so that the handler's writes land while the worker holds
        // the message.
        .with_visibility_timeout(Duration::from_secs(120))
        .with_max_dequeue_count(3)
        .with_concurrency(8)
        // Retry a failed job after 0.2 s, 0.4 s, … instead of waiting out the 2 min timeout.
        .with_failure_backoff(Duration::from_millis(200));
    let worker = Worker::new(queue.clone(), handler, options);
    // ANCHOR_END: worker
    let before = metrics.snapshot();
    let done = worker.drain().await?;
    let used = metrics.snapshot().since(&before);
    report(&format!("worker: {} jobs processed", done.processed), &used);
    breakdown(&used);
    assert_eq!((done.processed, done.deleted), (3, 3));
    assert_eq!(
        ids(&archive_rows).await?,
        ["Marketing/000101", "Sales/000456"]
    );
    assert_eq!(ids(&current_rows).await?, ["Sales/000223", "Sales/000789"]);
    println!("  Current: Sales/000223, Sales/000789; Archive: Marketing/000101, Sales/000456");

    // ANCHOR: crash
    // A worker that crashed between step 4 and step 5: the copy is in Archive, the original
    // still in Current, the message still on the queue (here: enqueued, as a real worker's
    // message would reappear after its visibility timeout).
    let smith = ("Sales", "000789");
    let steps = Steps::detached();
    let copied: Stored<Employee> = steps.get(&current, smith).await?.expect("in Current");
    steps.upsert_replace(&archive, &copied.value).await?;
    queue.enqueue(&job("Sales", "000789")).await?;
    let in_both =
        current_rows.get(smith).await?.is_some() && archive_rows.get(smith).await?.is_some();
    assert!(in_both, "no isolation between steps");
    // ANCHOR_END: crash
    println!("  after a crash between the writes, Sales/000789 is in both tables: {in_both}");
    let before = metrics.snapshot();
    // ANCHOR: converge
    worker.drain().await?; // the message is processed again: the state converges
    assert!(current_rows.get(smith).await?.is_none());
    assert_eq!(
        archive_rows.get(smith).await?.map(|s| s.value),
        Some(copied.value)
    );
    // ANCHOR_END: converge
    let used = metrics.snapshot().since(&before);
    report("redelivery completes the move", &used);
    breakdown(&used);

    let before = metrics.snapshot();
    // ANCHOR: poison
    // A job that can never succeed: '/' is not allowed in a key, so every attempt fails.
    queue.enqueue(&job("Sales/East", "000999")).await?;
    let failed = worker.drain().await?;
    // ANCHOR_END: poison
    let used = metrics.snapshot().since(&before);
    let step = format!(
        "a failing job: {} attempts, then the poison queue",
        failed.failed_attempts
    );
    report(&step, &used);
    breakdown(&used);
    // ANCHOR: poison_record
    let poisoned = queue.peek_poisoned(32).await?;
    let record = &poisoned[0];
    println!(
        "  poison record: dequeued {} times; reason: {}",
        record.dequeue_count, record.reason
    );
    let original: ArchiveEmployee = record.job()?; // the payload, byte for byte
    assert_eq!(original.department, "Sales/East");
    // ANCHOR_END: poison_record
    assert_eq!(
        (poisoned.len(), failed.poisoned, failed.failed_attempts),
        (1, 1, 3)
    );

    if serve {
        // ANCHOR: serve
        for e in &staff[..1] {
            queue.enqueue(&job(&e.department, &e.employee_id)).await?;
        }
        println!("  serving until Ctrl-C or SIGTERM …");
        let served = worker.run_until(shutdown_signal()).await?;
        println!("  stopped after {} jobs", served.processed);
        // ANCHOR_END: serve
    }

    queue.delete_queues().await?;
    current.delete_table().await?;
    archive.delete_table().await?;
    println!("employee-archive: done");
    Ok(())
}
