//! Denormalization: the guide's Sales department row carries its manager's name and email,
//! written in the same transaction as the manager, so one point read shows both; and a
//! summary (the department's employee count) kept exact the same way.

use tablekit::index::{DenormalizedCopy, SourceWrite};
use tablekit::prelude::*;
use tablekit_examples::{Meter, unique_name};

// ANCHOR: model
/// An employee, at `Sales/000223`.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    email: String,
}

/// The department, in its employees' partition: `Sales/Department`.
#[derive(Debug, Clone, Default, PartialEq, TableEntity)]
#[table(partition_key = "{name}", row_key = "Department")]
struct Department {
    name: String,
    manager_id: u32,
    #[serde(default)]
    manager_name: String,
    #[serde(default)]
    manager_email: String,
    #[serde(default)]
    employee_count: i64,
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    println!("denormalization on {}", account.name());
    let mut meter = Meter::new(&account);
    let table = account.table(&unique_name("Sales"))?;
    table.create().await?;
    let sales = Department {
        name: "Sales".into(),
        manager_id: 223,
        ..Department::default()
    };
    table.insert(&sales).await?;
    meter.report("create the table, insert Sales/Department");

    // ANCHOR: denormalize
    // The department row carries its manager's name and email, written in the same
    // transaction as the manager (same partition).
    let manager_details =
        DenormalizedCopy::new(table.clone(), |_, m: &Employee, d: &mut Department| {
            d.manager_name = format!("{} {}", m.first_name, m.last_name);
            d.manager_email = m.email.clone();
        });
    let mut manager = Employee {
        department: "Sales".into(),
        id: 223,
        first_name: "Jun".into(),
        last_name: "Jones".into(),
        email: "jonesj@contoso.com".into(),
    };
    let written = manager_details
        .write(&manager, SourceWrite::Insert, &sales)
        .await?;
    // ANCHOR_END: denormalize
    meter.report("insert the manager + copy into Sales/Department (read + 1)");

    // ANCHOR: update
    // A new email reaches both rows at once; the manager's write is conditioned on its ETag.
    manager.email = "jun.jones@contoso.com".into();
    let condition = SourceWrite::Replace(written.source.into());
    manager_details.write(&manager, condition, &sales).await?;
    // One point read shows the department and its manager.
    let read = table.typed::<Department>().get(&sales).await?;
    // ANCHOR_END: update
    meter.report("new email: manager + department (2 reads + 1); one point read");
    let read = read.expect("stored").value;
    assert_eq!(read.manager_email, "jun.jones@contoso.com");

    // ANCHOR: summary
    // A summary: the count moves only for a new employee (`before` is `None`), so rewriting
    // one leaves it alone, and two writers creating the same employee count it once.
    let count = DenormalizedCopy::new(
        table.clone(),
        |before: Option<&Employee>, _, d: &mut Department| {
            if before.is_none() {
                d.employee_count += 1;
            }
        },
    );
    let mut lee = Employee {
        department: "Sales".into(),
        id: 123,
        first_name: "Lee".into(),
        last_name: "Hall".into(),
        email: "lee@contoso.com".into(),
    };
    count.write(&lee, SourceWrite::Upsert, &sales).await?;
    lee.email = "lee.hall@contoso.com".into();
    count.write(&lee, SourceWrite::Upsert, &sales).await?;
    // ANCHOR_END: summary
    meter.report("two upserts of one employee (2 reads + 1 each)");
    let read = table.typed::<Department>().get(&sales).await?;
    assert_eq!(read.expect("stored").value.employee_count, 1);

    table.delete_table().await?;
    println!("denormalization: done, {} requests in total", meter.total());
    Ok(())
}
