//! Intra-partition secondary index: the design guide's Sales department, where every employee
//! is stored once per lookup key — by id and by email — in its own partition, each write one
//! transaction; then the same index added to a table that already holds employees (backfill).

use tablekit::index::{BackfillOptions, MemoryCheckpoint};
use tablekit::index::{CopySpec, IndexRead, IndexSpec, IntraPartitionIndex};
use tablekit::prelude::*;
use tablekit_examples::{Meter, unique_name};

// ANCHOR: model
/// The guide's employee. The department is its partition; `empid_000223` its identity.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "empid_{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    email: String,
    age: u32,
}

/// What the email copy holds: everything but the age.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmailCard {
    id: u32,
    first_name: String,
    last_name: String,
    email: String,
}
// ANCHOR_END: model

fn employee(id: u32, first: &str, last: &str, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        id,
        first_name: first.into(),
        last_name: last.into(),
        email: email.into(),
        age: 34,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    println!("intra-partition-index on {}", account.name());
    let table = account.table(&unique_name("Directory"))?;
    table.create().await?;
    let mut meter = Meter::new(&account);

    // ANCHOR: declare
    // The partition, the primary copy (the identity) and a copy by email without the age.
    let mut spec = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
    let by_id = spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let by_email =
        spec.secondary(CopySpec::new("email", Employee::EMAIL).with_projection_of::<EmailCard>());
    let spec = spec.build()?;
    let index = IntraPartitionIndex::new(table.clone(), spec.clone());
    // ANCHOR_END: declare

    // ANCHOR: insert
    // A new employee: Sales/empid_000223 and Sales/email_jonesj@contoso.com, one transaction.
    let mut jones = employee(223, "Jun", "Jones", "jonesj@contoso.com");
    index.insert(&jones).await?;
    let card = index
        .get_by(&by_email, "Sales", "jonesj@contoso.com")
        .await?;
    // ANCHOR_END: insert
    meter.report("insert 000223 (one transaction), get_by email (one read)");
    let card = card.expect("indexed").value;
    assert_eq!(
        (card.id, card.first_name, card.last_name),
        (223, "Jun".into(), "Jones".into())
    );

    // ANCHOR: put
    // A new email: the stale copy is deleted and the new one inserted in the same
    // transaction, guarded by the ETag read.
    jones.email = "jun.jones@contoso.com".into();
    index.upsert(&jones).await?;
    // ANCHOR_END: put
    meter.report("put with a new email (a read, one transaction)");
    let old = index
        .get_by(&by_email, "Sales", "jonesj@contoso.com")
        .await?;
    assert!(old.is_none());
    meter.skip();
    for (id, first, email) in [
        (100, "Ana", "ana@contoso.com"),
        (150, "Bo", "bo@contoso.com"),
    ] {
        index.insert(&employee(id, first, "Smith", email)).await?;
    }
    meter.report("insert 000100 and 000150 (one transaction each)");

    // ANCHOR: ranges
    // Sorted by id: RowKey ge 'empid_000100' and RowKey le 'empid_000199'.
    let hundreds = index
        .range_by(&by_id, "Sales", 100..=199)?
        .collect()
        .await?;
    // Sorted by email: RowKey ge 'email_a' and RowKey lt 'email_b'.
    let a = index
        .range_by_prefix(&by_email, "Sales", "a")?
        .collect()
        .await?;
    // ANCHOR_END: ranges
    meter.report("range_by id, range_by_prefix email (a page each)");
    assert_eq!(hundreds.len(), 2);
    assert_eq!(a[0].value.email, "ana@contoso.com");

    // ANCHOR: relocate
    // A new department is a new partition, which no transaction spans: `relocate` inserts
    // the copies in Marketing, then deletes them from Sales under the ETag read (undoing the
    // insert if that fails). `put` would only have added the employee to Marketing.
    let bo = index.get("Sales", 150).await?.expect("stored");
    let mut moved = bo.value.clone();
    moved.department = "Marketing".into();
    index.relocate(&bo, &moved).await?;
    // ANCHOR_END: relocate
    meter.report("get 000150, relocate it to Marketing (2 transactions)");
    assert!(index.get("Sales", 150).await?.is_none());
    assert!(index.get("Marketing", 150).await?.is_some());
    meter.skip();

    // ANCHOR: delete
    // The entity as read, under its ETag: every copy deleted in one transaction.
    let ana = index.get("Sales", 100).await?.expect("stored");
    index.delete(&ana.value, ana.if_match()).await?;
    // Missing is an error for `delete`, an answer for `delete_if_exists`.
    assert!(!index.delete_if_exists(("Sales", 100)).await?);
    // ANCHOR_END: delete
    meter.report("get 000100, delete it (1), delete_if_exists (1 read)");
    assert!(index.verify("Sales").await?.is_consistent());
    meter.report("verify Sales (a range per copy)");

    // A table written before the email copy was declared: only the employees themselves,
    // stored where the primary copies go (their own keys are `Sales/empid_000xyz`).
    let older = account.table(&unique_name("Backfill"))?;
    older.create().await?;
    for id in 0..250 {
        older
            .insert(&employee(id, "E", "Jones", &format!("e{id}@contoso.com")))
            .await?;
    }
    meter.report("a table of 250 employees, without email copies");

    // ANCHOR: backfill
    let index = IntraPartitionIndex::new(older.clone(), spec);
    let checkpoint = MemoryCheckpoint::new(); // or TableCheckpoint: survives a restart
    let options = BackfillOptions::default()
        .with_page_size(100)
        .with_progress(|p| println!("    this run: {} employees indexed", p.done));
    // Stopped after one page ...
    index
        .backfill(&checkpoint, options.clone().with_max_pages(1))
        .await?;
    // ... and resumed from the checkpoint: no copy written twice.
    let done = index.backfill(&checkpoint, options).await?;
    // ANCHOR_END: backfill
    meter.report("backfill: one page, then resumed to the end");
    assert!(done.done);
    assert!(index.verify("Sales").await?.is_consistent());

    table.delete_table().await?;
    older.delete_table().await?;
    println!(
        "intra-partition-index: done, {} requests in total",
        meter.total()
    );
    Ok(())
}
