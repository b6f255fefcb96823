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
//! `cargo run -p tablekit-examples --bin employee-archive -- --connection-string "<cs>"`.
//! With `--serve`, the worker keeps running until Ctrl-C or SIGTERM instead of stopping when
//! the queue is empty.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::{MetricsSnapshot, RequestKind, Table};
use tablekit_core::{Entity, Keys, Result};
use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions, shutdown_signal};
use tablekit_examples::{account, report, unique_name};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
}

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
    async fn handle(&self, job: ArchiveEmployee, steps: &Steps) -> Result<()> {
        let keys = Keys::new(job.department, job.employee_id)?;
        // Step 3: read the entity. Absent means an earlier attempt already moved it.
        let Some(employee) = steps.get::<Employee>(&self.current, &keys).await? else {
            return Ok(());
        };
        // Step 4: insert-or-replace into Archive (idempotent).
        let copy = Entity::new(keys.clone(), &employee.value);
        steps.upsert_replace(&self.archive, &copy).await?;
        // Step 5: delete from Current, only the version we copied; absent is fine. If someone
        // edited the employee meanwhile, this fails and the worker re-runs the handler, which
        // copies the new version first.
        steps
            .delete_if_match(&self.current, &keys, &employee.etag)
            .await?;
        Ok(())
    }
}
// ANCHOR_END: handler

fn employee(first: &str, last: &str, age: i32) -> Employee {
    Employee {
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

async fn ids(table: &Table) -> Result<Vec<String>> {
    let all = table.query::<Employee>().allow_scan().collect().await?;
    Ok(all
        .into_iter()
        .map(|e| format!("{}/{}", e.keys.pk(), e.keys.rk()))
        .collect())
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().any(|a| a == "--serve");
    let account = account()?;
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
        ("Sales", "000223", employee("Jun", "Cao", 47)),
        ("Sales", "000456", employee("Ana", "Jones", 38)),
        ("Sales", "000789", employee("Lee", "Smith", 29)),
        ("Marketing", "000101", employee("Kim", "Abe", 51)),
    ];
    for (pk, rk, e) in &staff {
        current
            .insert(&Entity::new(Keys::new(*pk, *rk)?, e))
            .await?;
    }

    // ANCHOR: enqueue
    let queue = JobQueue::<ArchiveEmployee>::new(account.queue(&unique_name("archive-jobs"))?);
    queue.create().await?; // the queue and `<name>-poison`
    let before = metrics.snapshot();
    queue.enqueue(&job("Sales", "000456")).await?;
    queue.enqueue(&job("Marketing", "000101")).await?;
    // Delivery is at least once anyway; a duplicate job is harmless.
    queue.enqueue(&job("Sales", "000456")).await?;
    // ANCHOR_END: enqueue
    report(
        "enqueue 3 archive jobs (one a duplicate)",
        &metrics.snapshot().since(&before),
    );

    // ANCHOR: worker
    let handler = Archiver {
        current: current.clone(),
        archive: archive.clone(),
    };
    let options = WorkerOptions {
        visibility_timeout: Duration::from_secs(30),
        max_dequeue_count: 3,
        concurrency: 8,
        // Retry a failed job after 0.2 s, 0.4 s, … instead of waiting out the 30 s timeout.
        failure_backoff: Some(Duration::from_millis(200)),
        ..WorkerOptions::default()
    };
    let worker = Worker::new(queue.clone(), handler, options);
    // ANCHOR_END: worker
    let before = metrics.snapshot();
    let done = worker.drain().await?;
    let used = metrics.snapshot().since(&before);
    report(&format!("worker: {} jobs processed", done.processed), &used);
    breakdown(&used);
    assert_eq!((done.processed, done.deleted), (3, 3));
    assert_eq!(ids(&archive).await?, ["Marketing/000101", "Sales/000456"]);
    assert_eq!(ids(&current).await?, ["Sales/000223", "Sales/000789"]);
    println!("  Current: Sales/000223, Sales/000789; Archive: Marketing/000101, Sales/000456");

    // ANCHOR: crash
    // A worker that crashed between step 4 and step 5: the copy is in Archive, the original
    // still in Current, the message still on the queue (here: enqueued, as a real worker's
    // message would reappear after its visibility timeout).
    let keys = Keys::new("Sales", "000789")?;
    let steps = Steps::detached();
    let smith = steps
        .get::<Employee>(&current, &keys)
        .await?
        .expect("in Current");
    steps
        .upsert_replace(&archive, &Entity::new(keys.clone(), &smith.value))
        .await?;
    queue.enqueue(&job("Sales", "000789")).await?;
    let in_both = current.get::<Employee>(&keys).await?.is_some()
        && archive.get::<Employee>(&keys).await?.is_some();
    println!("  after a crash between the writes, Sales/000789 is in both tables: {in_both}");
    assert!(in_both, "no isolation between steps");
    let before = metrics.snapshot();
    worker.drain().await?; // the message is processed again: the state converges
    let used = metrics.snapshot().since(&before);
    report("redelivery completes the move", &used);
    breakdown(&used);
    assert!(current.get::<Employee>(&keys).await?.is_none());
    assert_eq!(
        archive.get::<Employee>(&keys).await?.map(|s| s.value),
        Some(smith.value)
    );
    // ANCHOR_END: crash

    // ANCHOR: poison
    // A job that can never succeed: '/' is not allowed in a key, so every attempt fails.
    queue.enqueue(&job("Sales/East", "000999")).await?;
    let before = metrics.snapshot();
    let failed = worker.drain().await?;
    let used = metrics.snapshot().since(&before);
    let step = format!(
        "a failing job: {} attempts, then the poison queue",
        failed.failed_attempts
    );
    report(&step, &used);
    breakdown(&used);
    let poisoned = queue.peek_poisoned(32).await?;
    let record = &poisoned[0];
    println!(
        "  poison record: dequeued {} times; reason: {}",
        record.dequeue_count, record.reason
    );
    let original: ArchiveEmployee = record.job()?; // the payload, byte for byte
    assert_eq!(original.department, "Sales/East");
    // ANCHOR_END: poison
    assert_eq!(
        (poisoned.len(), failed.poisoned, failed.failed_attempts),
        (1, 1, 3)
    );

    if serve {
        // ANCHOR: serve
        for (pk, rk, _) in &staff[..1] {
            queue.enqueue(&job(pk, rk)).await?;
        }
        println!("  serving until Ctrl-C or SIGTERM …");
        let served = worker.run_until(shutdown_signal()).await?;
        println!("  stopped after {} jobs", served.processed);
        // ANCHOR_END: serve
    }

    queue.delete().await?;
    current.delete_table().await?;
    archive.delete_table().await?;
    println!("employee-archive: done");
    Ok(())
}
