//! Quickstart: connect, create a table, write and read entities, query by shape, commit a
//! transaction and update a counter under concurrency — with the request count of each step.
//!
//! `cargo xtask demo` runs it against Azurite; any account works with
//! `AZURE_STORAGE_CONNECTION_STRING="<cs>" cargo run -p tablekit-examples --bin quickstart`.

use serde::{Deserialize, Serialize};
use tablekit::prelude::*;
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// An employee as the design guide stores it: the department is the PartitionKey, the
/// zero-padded id the RowKey — both computed from the fields, which are stored too.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    age: i32,
    email: String,
}
// ANCHOR_END: model

/// A value without keys of its own: written at keys given with it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Department {
    employee_count: i64,
}

fn employee(id: u32, first_name: &str, last_name: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        id,
        first_name: first_name.into(),
        last_name: last_name.into(),
        age: 30,
        email: format!("{}@contoso.com", first_name.to_lowercase()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: connect
    let account = Account::from_env_or_emulator()?; // $AZURE_STORAGE_CONNECTION_STRING or Azurite
    let table = account.table(&unique_name("Employees"))?;
    table.create().await?;
    // ANCHOR_END: connect
    let metrics = account.metrics().clone();
    println!("quickstart: table {} on {}", table.name(), account.name());

    // ANCHOR: crud
    let employees = table.typed::<Employee>(); // reads and writes `Employee`s
    let jun = Employee {
        age: 47,
        ..employee(223, "Jun", "Cao")
    };
    let before = metrics.snapshot();
    let etag = employees.insert(&jun).await?; // keys ("Sales", "000223") from the fields
    let stored = employees
        .get(("Sales", "000223"))
        .await?
        .expect("just inserted");
    assert_eq!(stored.value, jun);
    assert_eq!(stored.etag, etag);
    // A write conditioned on the ETag we read: fails with PreconditionFailed if anyone wrote since.
    let older = Employee {
        age: 48,
        ..jun.clone()
    };
    let etag = employees.replace(&older, stored.if_match()).await?;
    report(
        "insert, get, conditional replace",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: crud

    // ANCHOR: transaction
    let before = metrics.snapshot();
    let oldest = Employee {
        age: 49,
        ..jun.clone()
    };
    let transaction = (100..110)
        .fold(employees.transaction(), |tx, id| {
            tx.insert(&employee(id, &format!("E{id}"), "Jones"))
        })
        .replace(&oldest, etag.into()); // only if Jun is as we wrote him
    transaction.submit().await?; // all eleven or none; refusals come here, before sending
    report(
        "one transaction: 10 inserts and a conditional replace",
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
    let query = employees.query().filter(range);
    println!("  range filter is a {:?} query", query.shape());
    let five = query.collect().await?;
    assert_eq!(five.len(), 5);
    report(
        "range query for ids 000100..000105",
        &metrics.snapshot().since(&before),
    );
    // A property constant compares only with values of its type: `Employee::AGE.eq("30")`
    // does not compile.
    let before = metrics.snapshot();
    let filter = Filter::partition("Sales").and(Employee::LAST_NAME.eq("Jones"));
    let joneses = employees.query().filter(filter).collect().await?;
    assert_eq!(joneses.len(), 10);
    report(
        "partition scan for last name Jones",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: query

    // ANCHOR: concurrency
    let departments = table.typed::<Department>();
    let before = metrics.snapshot();
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let departments = departments.clone();
            tokio::spawn(async move {
                departments
                    .update_with(("Sales", "Department"), |d| Department {
                        employee_count: d.unwrap_or_default().employee_count + 1,
                    })
                    .await
            })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }
    let count = departments
        .get(("Sales", "Department"))
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

    employees.delete(&jun, IfMatch::Any).await?;
    table.delete_table().await?;
    println!(
        "quickstart: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
