//! Inter-partition secondary index: the guide's employees found by id and by email, each copy
//! in a partition of its own (`empid_Sales`, `email_Sales`) so lookups spread over many
//! partitions; the primary copy is written at once and the email copy follows through a
//! queued job that a worker runs.

use tablekit::eventual::WorkerOptions;
use tablekit::index::{CopySpec, IndexRead, IndexSpec, InterPartitionIndex};
use tablekit::prelude::*;
use tablekit_examples::{Meter, unique_name};

// ANCHOR: model
/// The guide's employee, stored at `empid_Sales/000223` (the primary copy).
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "empid_{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    email: String,
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    println!("inter-partition-index on {}", account.name());
    let mut meter = Meter::new(&account);
    let table = account.table(&unique_name("Partitions"))?;
    let queue = account.queue(&unique_name("directory-copies").to_lowercase())?;

    // ANCHOR: declare
    // The same declaration as for one partition; only the index type differs.
    let mut spec = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
    spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL));
    let index = InterPartitionIndex::new(table.clone(), spec.build()?, queue);
    index.create().await?; // the table, the job queue and its poison queue
    // ANCHOR_END: declare
    meter.report("create the table and the queues");

    // ANCHOR: insert
    // The job is enqueued first, then the primary copy written: no write without its job.
    let jones = Employee {
        department: "Sales".into(),
        id: 223,
        first_name: "Jun".into(),
        last_name: "Jones".into(),
        email: "jonesj@contoso.com".into(),
    };
    index.insert(&jones).await?;
    // ANCHOR_END: insert
    meter.report("insert 000223 (enqueue + primary copy)");

    // ANCHOR: before
    // The primary is there at once; the email copy only once the job has run.
    let primary = index.get("Sales", 223).await?;
    let report = index.verify("Sales").await?;
    // ANCHOR_END: before
    meter.report("get 000223 (1), verify Sales before the job (1 per copy)");
    assert_eq!(primary.expect("written").value, jones);
    assert_eq!(report.missing.len(), 1); // email_Sales/jonesj@contoso.com: not yet

    // ANCHOR: worker
    // A worker: in a service, a long-running `worker.run_until(shutdown_signal())`.
    let worker = index.worker(WorkerOptions::default());
    worker.drain().await?;
    let found = index
        .get_by(&by_email, "Sales", "jonesj@contoso.com")
        .await?;
    // ANCHOR_END: worker
    meter.report("a worker drains the queue (the job, its polls); get_by email");
    assert_eq!(found.expect("copied").value.id, 223);
    assert!(index.verify("Sales").await?.is_consistent());
    meter.skip();

    // ANCHOR: delete
    // The primary at once (the job is enqueued first); its copies when the job has run.
    let stored = index.get("Sales", 223).await?.expect("stored");
    index.delete(&stored.value, stored.if_match()).await?;
    worker.drain().await?;
    // ANCHOR_END: delete
    meter.report("get 000223, delete it (enqueue + delete), the job and its polls");
    assert!(
        index
            .get_by(&by_email, "Sales", "jonesj@contoso.com")
            .await?
            .is_none()
    );

    index.jobs().delete_queues().await?;
    table.delete_table().await?;
    println!(
        "inter-partition-index: done, {} requests in total",
        meter.total()
    );
    Ok(())
}
