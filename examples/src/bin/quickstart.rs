//! Quickstart: connect, create a table, write and read entities, query by shape, commit a
//! transaction and update a counter under concurrency — with the request count of each step.
//!
//! `cargo xtask demo` runs it against Azurite; any account works with
//! `cargo run -p tablekit-examples --bin quickstart -- --connection-string "<cs>"`.

use serde::{Deserialize, Serialize};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, IfMatch, Keys};
use tablekit_examples::{account, report, unique_name};

// ANCHOR: model
/// An employee as the design guide stores it: the department is the PartitionKey, the
/// employee id the RowKey; the value type needs no key fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
}
// ANCHOR_END: model

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Department {
    employee_count: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: connect
    let account = account()?; // --connection-string, $AZURE_STORAGE_CONNECTION_STRING, or Azurite
    let table = account.table(&unique_name("Employees"))?;
    table.create().await?;
    // ANCHOR_END: connect
    let metrics = account.metrics().clone();
    println!("quickstart: table {} on {}", table.name(), account.name());

    // ANCHOR: crud
    let keys = Keys::new("Sales", "000223")?;
    let jun = Employee {
        first_name: "Jun".into(),
        last_name: "Cao".into(),
        age: 47,
        email: "junc@contoso.com".into(),
    };
    let before = metrics.snapshot();
    let etag = table.insert(&Entity::new(keys.clone(), &jun)).await?;
    let stored = table.get::<Employee>(&keys).await?.expect("just inserted");
    assert_eq!(stored.value, jun);
    assert_eq!(stored.etag, etag);
    // A write conditioned on the ETag we read: fails with PreconditionFailed if anyone wrote since.
    let older = Employee {
        age: 48,
        ..jun.clone()
    };
    table
        .replace(&Entity::new(keys.clone(), &older), stored.if_match())
        .await?;
    report(
        "insert, get, conditional replace",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: crud

    // ANCHOR: transaction
    let before = metrics.snapshot();
    let plan = BatchPlan::atomic((100..110).map(|id| {
        let employee = Employee {
            first_name: format!("E{id}"),
            last_name: "Jones".into(),
            age: 30,
            email: format!("e{id}@contoso.com"),
        };
        Operation::insert(
            &Entity::try_new("Sales", format!("{id:06}"), employee).expect("valid keys"),
        )
        .expect("valid entity")
    }))?;
    table.submit(&plan).await?; // all ten or none
    report(
        "one transaction inserting 10 employees",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: transaction

    // ANCHOR: query
    let before = metrics.snapshot();
    let range = Filter::row_range(
        "Sales",
        std::ops::Bound::Included("000100"),
        std::ops::Bound::Excluded("000105"),
    );
    let query = table.query::<Employee>().filter(range);
    println!("  range filter is a {:?} query", query.shape());
    let five = query.collect().await?;
    assert_eq!(five.len(), 5);
    report(
        "range query for ids 000100..000105",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: query

    // ANCHOR: concurrency
    let counter = Keys::new("Sales", "Department")?;
    let before = metrics.snapshot();
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let (table, counter) = (table.clone(), counter.clone());
            tokio::spawn(async move {
                table
                    .update_with::<Department, _>(&counter, |d| Department {
                        employee_count: d.unwrap_or_default().employee_count + 1,
                    })
                    .await
            })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }
    let count = table
        .get::<Department>(&counter)
        .await?
        .expect("written")
        .value
        .employee_count;
    assert_eq!(count, 8, "no increment is lost");
    let spent = metrics.snapshot().since(&before);
    report(
        &format!(
            "8 concurrent increments ({} conflicts retried)",
            spent.conflict_retries
        ),
        &spent,
    );
    // ANCHOR_END: concurrency

    table.delete(&keys, IfMatch::Any).await?;
    table.delete_table().await?;
    println!(
        "quickstart: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
