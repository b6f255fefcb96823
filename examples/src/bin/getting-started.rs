//! Getting started: connect, create a table, write employees through an intra-partition
//! secondary index, and look one up by email — the book's first chapter, end to end.

// ANCHOR: all
use serde::{Deserialize, Serialize};
use tablekit::prelude::*;

/// An employee: the department is the partition; the id and the email are two ways to find it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String,
    first_name: String,
    email: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `--connection-string`, $AZURE_STORAGE_CONNECTION_STRING, $AZURE_STORAGE_ACCOUNT_NAME
    // (Microsoft Entra ID), or Azurite on its standard ports.
    let account = tablekit_examples::account()?;
    let table = account.table(&tablekit_examples::unique_name("GettingStarted"))?;
    table.create().await?;

    // Every employee is stored twice in its department's partition — as `empid_000223` and as
    // `email_jonesj@contoso.com` — and both copies are written in one transaction.
    let spec = IndexSpec::builder(|e: &Employee| e.department.clone())
        .primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).fixed_width(6))
        .secondary(CopySpec::new("email", |e: &Employee| e.email.clone()))
        .build()?;
    let employees = IntraPartitionIndex::new(table.clone(), spec);
    for (id, name, email) in [
        ("000223", "Jun", "jonesj@contoso.com"),
        ("000152", "Ken", "kenk@contoso.com"),
    ] {
        let employee = Employee {
            department: "Sales".into(),
            id: id.into(),
            first_name: name.into(),
            email: email.into(),
        };
        employees.insert(&employee).await?; // 1 request: one transaction
    }

    // A point query on the email copy: no scan, one request.
    let before = account.metrics().snapshot();
    let found = employees
        .get_by("email", "Sales", "jonesj@contoso.com")
        .await?
        .expect("indexed");
    let requests = account.metrics().snapshot().since(&before).requests();
    println!(
        "found {} ({}) by email in {requests} request",
        found.value.first_name, found.value.id
    );
    assert_eq!((found.value.id.as_str(), requests), ("000223", 1));

    table.delete_table().await?;
    Ok(())
}
// ANCHOR_END: all
