//! Employee directory: the design guide's Sales/Jones scenario end to end — look employees up
//! by id and by email (intra- and inter-partition secondary indexes), find every Jones (index
//! entities), show a department with its manager's details (denormalization), group reviews
//! with their employee (compound keys), mix employees and departments in one partition
//! (heterogeneous entities), and add an index to a table that already has data (backfill) —
//! with the request count of each step.

use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, Table};
use tablekit_core::batch::BatchPlan;
use tablekit_core::keys::CompoundKey;
use tablekit_core::{Entity, Keys, OrUnknown, Properties};
use tablekit_eventual::WorkerOptions;
use tablekit_examples::{account, report, unique_name};
use tablekit_index::{
    BackfillOptions, CompoundRows, CopySpec, DenormalizedCopy, EntityKind, EventualList, IndexSpec,
    InterPartitionIndex, IntraPartitionIndex, ListSpec, MemoryCheckpoint, SamePartitionList,
    SourceWrite, TypedRows,
};

// ANCHOR: model
/// The guide's employee. The department is its partition; the id its identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String, // six digits: "000223"
    first_name: String,
    last_name: String,
    email: String,
    age: i32,
}

/// What the email copy holds: everything but the age.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmailCard {
    id: String,
    first_name: String,
    last_name: String,
    email: String,
}

/// Two ways to find an employee: by id (`empid_000223`) and by email
/// (`email_jonesj@contoso.com`).
fn directory() -> tablekit_core::Result<IndexSpec<Employee>> {
    IndexSpec::builder(|e: &Employee| e.department.clone())
        .primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).fixed_width(6))
        .secondary(
            CopySpec::new("email", |e: &Employee| e.email.clone()).project([
                "Id",
                "FirstName",
                "LastName",
                "Email",
            ]),
        )
        .build()
}
// ANCHOR_END: model

fn employee(id: u32, first: &str, last: &str, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        id: format!("{id:06}"),
        first_name: first.into(),
        last_name: last.into(),
        email: email.into(),
        age: 34,
    }
}

/// Runs a step, prints what it cost, and returns its result.
async fn step<F: std::future::Future>(account: &Account, what: &str, f: F) -> F::Output {
    let before = account.metrics().snapshot();
    let out = f.await;
    report(what, &account.metrics().snapshot().since(&before));
    out
}

async fn new_table(account: &Account, prefix: &str) -> tablekit_core::Result<Table> {
    let table = account.table(&unique_name(prefix))?;
    table.create().await?;
    Ok(table)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = account()?;
    println!("employee-directory on {}", account.name());
    let mut tables = Vec::new();

    println!("intra-partition secondary index (one partition, one transaction per write):");
    let table = new_table(&account, "Directory").await?;
    tables.push(table.clone());
    // ANCHOR: intra
    let index = IntraPartitionIndex::new(table.clone(), directory()?);
    let mut jones = employee(223, "Jun", "Jones", "jonesj@contoso.com");
    // A new employee: both copies inserted in one transaction.
    step(
        &account,
        "insert 000223 (empid_ and email_ copies)",
        index.insert(&jones),
    )
    .await?;
    let card = step(
        &account,
        "get_by email jonesj@contoso.com",
        index.get_by_as::<EmailCard>("email", "Sales", "jonesj@contoso.com"),
    )
    .await?
    .expect("indexed");
    assert_eq!(card.value.id, "000223");
    // A new email: the stale copy is deleted and the new one inserted in the same
    // transaction, guarded by the ETag read.
    jones.email = "jun.jones@contoso.com".into();
    step(
        &account,
        "put with a new email (read + transaction)",
        index.put(&jones),
    )
    .await?;
    assert!(
        index
            .get_by_as::<EmailCard>("email", "Sales", "jonesj@contoso.com")
            .await?
            .is_none()
    );
    for (id, first, email) in [
        (100, "Ana", "ana@contoso.com"),
        (150, "Bo", "bo@contoso.com"),
    ] {
        index.insert(&employee(id, first, "Smith", email)).await?;
    }
    // Sorted by id: RowKey ge 'empid_000100' and RowKey le 'empid_000199'.
    let ids = step(
        &account,
        "range_by empid 000100..=000199",
        index
            .range_by("empid", "Sales", "000100"..="000199")?
            .collect(),
    )
    .await?;
    assert_eq!(ids.len(), 2);
    // Sorted by email: RowKey ge 'email_a' and RowKey lt 'email_b'.
    let a = step(
        &account,
        "range_by_prefix email \"a\"",
        index
            .range_by_prefix("email", "Sales", "a")?
            .as_type::<EmailCard>()
            .collect(),
    )
    .await?;
    assert_eq!(a[0].value.email, "ana@contoso.com");
    // A new department is a new partition, which no transaction spans: `relocate` inserts
    // the copies in Marketing, then deletes them from Sales under the ETag read (undoing the
    // insert if that fails). `put` would only have added the employee to Marketing.
    let bo = index.get("Sales", "000150").await?.expect("stored");
    let mut moved = bo.value.clone();
    moved.department = "Marketing".into();
    step(
        &account,
        "relocate 000150 to Marketing (2 transactions)",
        index.relocate(&bo, &moved),
    )
    .await?;
    assert!(index.get("Sales", "000150").await?.is_none());
    assert!(index.get("Marketing", "000150").await?.is_some());
    // ANCHOR_END: intra
    assert!(index.verify("Sales").await?.is_consistent());

    println!("inter-partition secondary index (copies follow through a queue):");
    let table = new_table(&account, "Partitions").await?;
    tables.push(table.clone());
    inter(&account, &table).await?;

    println!("index entities in the employees' partition (option 2):");
    let table = new_table(&account, "Jones").await?;
    tables.push(table.clone());
    // ANCHOR: list_same_partition
    let by_last_name = ListSpec::builder(
        "lastname",
        |e: &Employee| e.department.clone(),
        |e: &Employee| e.id.clone(),
        |e: &Employee| e.last_name.clone(),
    )
    // The prefix keeps list rows (`Sales/lastname_Jones`) apart from employees' RowKeys.
    .prefix("lastname_")
    .property("EmployeeIDs")
    .build()?;
    let jones_list = SamePartitionList::new(table.clone(), by_last_name)?;
    // Sales/000152 inserted and Sales/lastname_Jones updated in one transaction, conditioned
    // on its ETag (inserted the first time); a lost race starts again from the read.
    for (id, first) in [(152, "Ken"), (223, "Jun")] {
        let e = employee(id, first, "Jones", &format!("{first}@contoso.com"));
        step(
            &account,
            &format!("insert {id:06} Jones"),
            jones_list.insert(&e),
        )
        .await?;
    }
    let found = step(
        &account,
        "lookup Sales/Jones (list + one read per id)",
        jones_list.lookup("Sales", "Jones"),
    )
    .await?;
    assert_eq!(found.len(), 2);
    // A new last name: the employee and both lists change in one transaction.
    let mut ken = found[0].value.clone();
    ken.last_name = "Smith".into();
    step(
        &account,
        "put 000152 as Smith (3 entities, 1 transaction)",
        jones_list.put(&ken),
    )
    .await?;
    assert_eq!(jones_list.ids("Sales", "Jones").await?, ["000223"]);
    assert_eq!(jones_list.ids("Sales", "Smith").await?, ["000152"]);
    // ANCHOR_END: list_same_partition

    println!("index entities in their own partitions (option 3) and in blobs (option 1):");
    let table = new_table(&account, "Everyone").await?;
    tables.push(table.clone());
    lists_elsewhere(&account, &table).await?;

    println!("heterogeneous entities (employees and their department in one partition):");
    let table = new_table(&account, "Mixed").await?;
    tables.push(table.clone());
    heterogeneous(&account, &table).await?;

    println!("denormalization and compound keys (the guide's Sales partition):");
    let table = new_table(&account, "Sales").await?;
    tables.push(table.clone());
    denormalize(&account, &table).await?;
    compound(&account, &table).await?;

    println!("backfill (adding the email index to a table that has data):");
    let table = new_table(&account, "Backfill").await?;
    tables.push(table.clone());
    backfill(&account, &table).await?;

    for table in tables {
        table.delete_table().await?;
    }
    println!(
        "employee-directory: done, {} requests in total",
        account.metrics().snapshot().requests()
    );
    Ok(())
}

async fn inter(account: &Account, table: &Table) -> Result<(), Box<dyn std::error::Error>> {
    let queue = account.queue(&unique_name("directory-copies").to_lowercase())?;
    // ANCHOR: inter
    // Copies in partitions of their own: empid_Sales/000223, email_Sales/jonesj@contoso.com.
    let index = InterPartitionIndex::new(table.clone(), directory()?, queue);
    index.create().await?; // the table, the job queue and its poison queue
    let jones = employee(223, "Jun", "Jones", "jonesj@contoso.com");
    // The job is enqueued first, then the primary copy is written: no write without its job.
    step(
        account,
        "insert 000223 (enqueue + primary copy)",
        index.insert(&jones),
    )
    .await?;
    assert!(index.get("Sales", "000223").await?.is_some()); // the primary: at once
    let report = step(
        account,
        "verify Sales (before the job ran)",
        index.verify("Sales"),
    )
    .await?;
    assert_eq!(report.missing.len(), 1); // email_Sales/jonesj@contoso.com: not yet
    // A worker (normally a long-running process: `run_until(shutdown_signal())`).
    let worker = index.worker(WorkerOptions::default());
    step(account, "a worker runs the copy job", worker.drain()).await?;
    let card = step(
        account,
        "get_by email (point query on email_Sales)",
        index.get_by_as::<EmailCard>("email", "Sales", "jonesj@contoso.com"),
    )
    .await?;
    assert_eq!(card.expect("copied").value.id, "000223");
    assert!(index.verify("Sales").await?.is_consistent());
    // ANCHOR_END: inter
    index.jobs().delete().await?;
    Ok(())
}

async fn lists_elsewhere(
    account: &Account,
    table: &Table,
) -> Result<(), Box<dyn std::error::Error>> {
    let queue = account.queue(&unique_name("directory-lists").to_lowercase())?;
    // ANCHOR: list_eventual
    // Option 3: each name's list in a partition of its own (lastname_Jones), holding
    // (department, id) pairs, so one lookup spans every department.
    let spec = ListSpec::builder(
        "lastname",
        |e: &Employee| e.department.clone(),
        |e: &Employee| e.id.clone(),
        |e: &Employee| e.last_name.clone(),
    )
    .prefix("lastname_")
    .property("EmployeeDetails")
    .build()?;
    let everyone = EventualList::separate(table.clone(), table.clone(), spec, queue);
    everyone.create().await?;
    let mut ken = employee(152, "Ken", "Jones", "kenj@contoso.com");
    let mut ann = employee(7, "Ann", "Jones", "annj@contoso.com");
    ann.department = "Marketing".into();
    for e in [&ken, &ann] {
        step(
            account,
            &format!("insert {}/{} (enqueue + entity)", e.department, e.id),
            everyone.insert(e),
        )
        .await?;
    }
    step(
        account,
        "a worker updates the lists",
        everyone.worker(WorkerOptions::default()).drain(),
    )
    .await?;
    let jones = step(
        account,
        "lookup Jones (list + one read per id)",
        everyone.lookup("Jones"),
    )
    .await?;
    assert_eq!(jones.len(), 2); // Sales and Marketing
    ken.last_name = "Smith".into();
    everyone.put(&ken).await?; // the list entry moves when the job has run
    everyone.worker(WorkerOptions::default()).drain().await?;
    assert_eq!(
        everyone.ids("Jones").await?,
        [("Marketing".to_owned(), "000007".to_owned())]
    );
    // ANCHOR_END: list_eventual
    everyone.jobs().delete().await?;

    // ANCHOR: list_blob
    // Option 1: the same index with each list in a blob (lastname_Jones.json).
    let container = account.container(&unique_name("directory-lists").to_lowercase())?;
    let queue = account.queue(&unique_name("directory-blobs").to_lowercase())?;
    let spec = ListSpec::builder(
        "lastname",
        |e: &Employee| e.department.clone(),
        |e: &Employee| e.id.clone(),
        |e: &Employee| e.last_name.clone(),
    )
    .prefix("lastname_")
    .build()?;
    let in_blobs = EventualList::blobs(table.clone(), container.clone(), spec, queue);
    in_blobs.create().await?;
    in_blobs.put(&ann).await?;
    in_blobs.worker(WorkerOptions::default()).drain().await?;
    let found = step(
        account,
        "lookup Jones in a blob list",
        in_blobs.lookup("Jones"),
    )
    .await?;
    assert_eq!(found[0].value.id, "000007");
    // ANCHOR_END: list_blob
    in_blobs.jobs().delete().await?;
    container.delete().await?;
    Ok(())
}

// ANCHOR: kinds
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Department {
    name: String,
    manager_id: String,
    manager_name: String,
    manager_email: String,
    employee_count: i64,
}

impl EntityKind for Employee {
    const ENTITY_TYPE: &'static str = "Employee";
    const ROW_PREFIX: &'static str = "EMPLOYEE_";
}

impl EntityKind for Department {
    const ENTITY_TYPE: &'static str = "Department";
    const ROW_PREFIX: &'static str = "DEPARTMENT_";
}

/// Any row of a department's partition, told apart by its `EntityType`.
#[derive(Debug, Deserialize)]
#[serde(tag = "EntityType")]
enum SalesRow {
    Employee(Employee),
    Department(Department),
}
// ANCHOR_END: kinds

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Review {
    manager_rating: i32,
    peer_rating: i32,
    comments: String,
}

async fn heterogeneous(account: &Account, table: &Table) -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: heterogeneous
    let rows = TypedRows::new(table.clone());
    let sales = Department {
        name: "Sales".into(),
        manager_id: "000223".into(),
        employee_count: 2,
        ..Department::default()
    };
    // Different types in one partition, so one transaction can write them together.
    let plan = BatchPlan::atomic([
        TypedRows::insert_operation("Sales", "Sales", &sales)?,
        TypedRows::insert_operation(
            "Sales",
            "000123",
            &employee(123, "Lee", "Hall", "lee@contoso.com"),
        )?,
        TypedRows::insert_operation(
            "Sales",
            "000223",
            &employee(223, "Jun", "Jones", "jonesj@contoso.com"),
        )?,
    ])?;
    step(
        account,
        "one transaction, two entity types",
        table.submit(&plan),
    )
    .await?;
    // DEPARTMENT_Sales, then EMPLOYEE_000123, EMPLOYEE_000223: each type contiguous.
    let mixed = step(
        account,
        "read the whole partition",
        rows.all::<SalesRow>("Sales").collect(),
    )
    .await?;
    assert!(
        matches!(&mixed[0].value, OrUnknown::Known(SalesRow::Department(d)) if d.employee_count == 2)
    );
    assert!(
        matches!(&mixed[2].value, OrUnknown::Known(SalesRow::Employee(e)) if e.last_name == "Jones")
    );
    let staff = step(
        account,
        "read only the employees (a range)",
        rows.of_kind::<Employee>("Sales").collect(),
    )
    .await?;
    assert_eq!(staff.len(), 2);
    // ANCHOR_END: heterogeneous
    Ok(())
}

async fn denormalize(account: &Account, table: &Table) -> Result<(), Box<dyn std::error::Error>> {
    let department = Keys::new("Sales", "Department")?;
    let sales = Department {
        name: "Sales".into(),
        manager_id: "000223".into(),
        ..Department::default()
    };
    table
        .insert(&Entity::new(department.clone(), &sales))
        .await?;
    // ANCHOR: denormalize
    // The department row carries its manager's name and email, written in the same
    // transaction as the manager (same partition), so one point read shows both.
    let manager_details =
        DenormalizedCopy::new(table.clone(), |_, m: &Employee, d: &mut Department| {
            d.manager_name = format!("{} {}", m.first_name, m.last_name);
            d.manager_email = m.email.clone();
        });
    let mut manager = employee(223, "Jun", "Jones", "jonesj@contoso.com");
    let manager_keys = Keys::new("Sales", "000223")?;
    let written = step(
        account,
        "insert the manager + copy into Sales/Department",
        manager_details.write(
            &Entity::new(manager_keys.clone(), manager.clone()),
            SourceWrite::Insert,
            &department,
        ),
    )
    .await?;
    // A new email reaches both rows at once; the manager's write is conditioned on its ETag.
    manager.email = "jun.jones@contoso.com".into();
    let update = Entity::new(manager_keys, manager);
    let condition = SourceWrite::Replace(written.source.into());
    step(
        account,
        "new email: manager + department, one transaction",
        manager_details.write(&update, condition, &department),
    )
    .await?;
    let read = step(
        account,
        "one point read: department and manager",
        table.get::<Department>(&department),
    )
    .await?;
    assert_eq!(
        read.expect("stored").value.manager_email,
        "jun.jones@contoso.com"
    );
    // ANCHOR_END: denormalize
    Ok(())
}

async fn compound(account: &Account, table: &Table) -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: compound
    // Reviews next to their employee: empid_000123, empid_000123_2012, empid_000123_2013.
    let reviews = CompoundRows::new(
        table.clone(),
        CompoundKey::new('_').with_width(1, 6).with_width(2, 4),
    );
    reviews
        .put(
            "Sales",
            ["empid", "123"],
            &employee(123, "Lee", "Hall", "lee@contoso.com"),
        )
        .await?;
    for (year, rating) in [("2012", 3), ("2013", 4)] {
        let review = Review {
            manager_rating: rating,
            peer_rating: rating,
            comments: format!("{year} review"),
        };
        reviews
            .put("Sales", ["empid", "123", year], &review)
            .await?;
    }
    reviews
        .put(
            "Sales",
            ["empid", "124"],
            &employee(124, "Ada", "Cao", "ada@contoso.com"),
        )
        .await?;
    // RowKey ge 'empid_000123' and RowKey lt 'empid_000124' (not S4's 'lt 000123_2012').
    let of_123 = step(
        account,
        "employee 000123 with all its reviews (one range)",
        reviews
            .with_prefix::<Properties, _, _>("Sales", ["empid", "123"])?
            .collect(),
    )
    .await?;
    let keys: Vec<&str> = of_123.iter().map(|r| r.keys.rk()).collect();
    assert_eq!(
        keys,
        ["empid_000123", "empid_000123_2012", "empid_000123_2013"]
    );
    let review = reviews
        .get::<Review, _, _>("Sales", ["empid", "123", "2013"])
        .await?;
    assert_eq!(review.expect("stored").value.manager_rating, 4);
    // ANCHOR_END: compound
    Ok(())
}

async fn backfill(account: &Account, table: &Table) -> Result<(), Box<dyn std::error::Error>> {
    // Before the email index existed: only empid_ rows.
    for id in 0..250u32 {
        let e = employee(id, "E", "Jones", &format!("e{id}@contoso.com"));
        table
            .insert(&Entity::new(
                Keys::new("Sales", format!("empid_{}", e.id))?,
                e,
            ))
            .await?;
    }
    // ANCHOR: backfill
    let index = IntraPartitionIndex::new(table.clone(), directory()?);
    let checkpoint = MemoryCheckpoint::new(); // or TableCheckpoint: survives a restart
    let options = BackfillOptions {
        page_size: Some(100),
        on_progress: Some(std::sync::Arc::new(|s: &tablekit_index::BackfillState| {
            println!(
                "    page {}: {} scanned, {} copies written",
                s.pages, s.scanned, s.written
            )
        })),
        ..BackfillOptions::default()
    };
    // Stopped after one page ...
    let first = BackfillOptions {
        max_pages: Some(1),
        ..options.clone()
    };
    step(
        account,
        "backfill, stopped after one page",
        index.backfill(&checkpoint, first),
    )
    .await?;
    // ... and resumed from the checkpoint: no copy written twice.
    let done = step(
        account,
        "backfill resumed to the end",
        index.backfill(&checkpoint, options),
    )
    .await?;
    assert!(done.done);
    assert!(index.verify("Sales").await?.is_consistent());
    // ANCHOR_END: backfill
    Ok(())
}
