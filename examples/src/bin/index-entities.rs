//! Index entities: every employee called Jones, found through a list per last name — in the
//! employees' partition, changed in the same transaction (option 2); in partitions of their
//! own (option 3) or in blobs (option 1), kept up by queued jobs across departments.

use tablekit::eventual::WorkerOptions;
use tablekit::index::{EventualList, ListSpec, SamePartitionList};
use tablekit::prelude::*;
use tablekit_examples::{Meter, unique_name};

// ANCHOR: model
/// The guide's employee, at `Sales/000152`.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
}
// ANCHOR_END: model

fn employee(department: &str, id: u32, first: &str, last: &str) -> Employee {
    Employee {
        department: department.into(),
        id,
        first_name: first.into(),
        last_name: last.into(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    println!("index-entities on {}", account.name());
    let table = account.table(&unique_name("Jones"))?;
    table.create().await?;
    let mut meter = Meter::new(&account);

    // ANCHOR: same_partition
    // Option 2: the list of each last name next to the employees. The prefix keeps list rows
    // (`Sales/lastname_Jones`) apart from employees' RowKeys.
    let by_last_name = ListSpec::<Employee>::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .with_property("EmployeeIDs")
        .build()?;
    let jones = SamePartitionList::new(table.clone(), by_last_name)?;
    // Sales/000152 inserted and Sales/lastname_Jones updated in one transaction, conditioned
    // on its ETag (inserted the first time); a lost race starts again from the read.
    jones
        .insert(&employee("Sales", 152, "Ken", "Jones"))
        .await?;
    jones
        .insert(&employee("Sales", 223, "Jun", "Jones"))
        .await?;
    let found = jones.lookup("Sales", "Jones").collect().await?;
    // ANCHOR_END: same_partition
    meter.report("2 inserts (a read + a transaction each), lookup (list + 2 reads)");
    assert_eq!(found.len(), 2);

    // ANCHOR: same_partition_change
    // A new last name: the employee and both lists change in one transaction.
    let mut ken = found[0].value.clone();
    ken.last_name = "Smith".into();
    jones.upsert(&ken).await?;
    // ANCHOR_END: same_partition_change
    meter.report("put 000152 as Smith (3 entities, 1 transaction)");
    assert_eq!(jones.ids("Sales", "Jones").await?, ["000223"]);
    assert_eq!(jones.ids("Sales", "Smith").await?, ["000152"]);
    meter.skip();
    table.delete_table().await?;

    let table = account.table(&unique_name("Everyone"))?;
    let queue = account.queue(&unique_name("directory-lists").to_lowercase())?;
    // ANCHOR: eventual
    // Option 3: each name's list in a partition of its own (lastname_Jones), holding
    // (department, id) pairs, so one lookup spans every department.
    let spec = ListSpec::<Employee>::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .with_property("EmployeeDetails")
        .build()?;
    let everyone = EventualList::separate(table.clone(), table.clone(), spec, queue);
    everyone.create().await?;
    let mut ken = employee("Sales", 152, "Ken", "Jones");
    let ann = employee("Marketing", 7, "Ann", "Jones");
    everyone.insert(&ken).await?; // the job is enqueued, then the entity written
    everyone.insert(&ann).await?;
    let worker = everyone.worker(WorkerOptions::default());
    worker.drain().await?; // in a service: `worker.run_until(shutdown_signal())`
    let found = everyone.lookup("Jones").collect().await?;
    // ANCHOR_END: eventual
    meter.report("create, 2 inserts (enqueue + insert), the jobs and polls, lookup");
    assert_eq!(found.len(), 2); // Sales and Marketing

    // ANCHOR: eventual_pages
    // Page by page, in (PartitionKey, RowKey) order: the list, then one point read per
    // entry of the page. The token resumes the lookup after the page's last entry, in this
    // process or another (as text, `Sales/000152`, or with serde).
    let by_page = everyone.lookup("Jones").with_page_size(1);
    let first = by_page.page().await?; // Marketing/000007
    let token = first.continuation.clone().expect("one more entry");
    let rest = by_page.resume(token.to_string().parse()?).collect().await?; // Sales/000152
    // ANCHOR_END: eventual_pages
    meter.report("a page of one (list + 1 read), the rest resumed (list + 1 read)");
    assert_eq!(first.items[0].value.id, 7);
    assert_eq!(rest.len(), 1);

    // ANCHOR: eventual_change
    // The entity at once; its list entry moves when the job has run.
    ken.last_name = "Smith".into();
    everyone.upsert(&ken).await?;
    worker.drain().await?;
    // ANCHOR_END: eventual_change
    meter.report("put 000152 as Smith (read, enqueue, write), the job and polls");
    let listed = everyone.ids("Jones").await?;
    assert_eq!(listed, [("Marketing".to_owned(), "000007".to_owned())]);
    meter.skip();
    everyone.jobs().delete_queues().await?;

    let container = account.container(&unique_name("directory-lists").to_lowercase())?;
    let queue = account.queue(&unique_name("directory-blobs").to_lowercase())?;
    // ANCHOR: blob
    // Option 1: the same index with each list in a blob (lastname_Jones.json).
    let spec = ListSpec::<Employee>::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .build()?;
    let in_blobs = EventualList::blobs(table.clone(), container.clone(), spec, queue);
    in_blobs.create().await?;
    in_blobs.upsert(&ann).await?;
    in_blobs.worker(WorkerOptions::default()).drain().await?;
    let found = in_blobs.lookup("Jones").collect().await?;
    // ANCHOR_END: blob
    meter.report("create, put (read, enqueue, write), the job and polls, lookup");
    assert_eq!(found[0].value.id, 7);

    in_blobs.jobs().delete_queues().await?;
    container.delete_container().await?;
    table.delete_table().await?;
    println!("index-entities: done, {} requests in total", meter.total());
    Ok(())
}
