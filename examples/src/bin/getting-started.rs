//! Getting started: connect, create a table, write employees whose keys come from their
//! fields, read one back by its keys and find one by email — the book's first chapter, end to
//! end.

// ANCHOR: all
use tablekit::prelude::*;

/// An employee: the department is the partition, the zero-padded id the row. The keys are
/// computed from the fields, which are stored as properties too.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    email: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // $AZURE_STORAGE_CONNECTION_STRING, $AZURE_STORAGE_ACCOUNT_NAME (Microsoft Entra ID), or
    // Azurite on its standard ports.
    let account = Account::from_env_or_emulator()?;
    let table = account.table(&tablekit_examples::unique_name("GettingStarted"))?;
    table.create().await?;

    for (id, name, email) in [
        (223, "Jun", "jonesj@contoso.com"),
        (152, "Ken", "kenk@contoso.com"),
    ] {
        let employee = Employee {
            department: "Sales".into(),
            id,
            first_name: name.into(),
            email: email.into(),
        };
        table.insert(&employee).await?; // at ("Sales", "000223"): 1 request
    }

    // A point read by the keys: one request, no scan.
    let employees = table.typed::<Employee>();
    let jun = employees.get(("Sales", "000223")).await?.expect("inserted");
    assert_eq!(jun.value.first_name, "Jun");

    // By email: a typed filter within the Sales partition (it reads that partition).
    let before = account.metrics().snapshot();
    let by_email = Filter::partition("Sales").and(Employee::EMAIL.eq("jonesj@contoso.com"));
    let found = employees.query().filter(by_email).collect().await?;
    let requests = account.metrics().snapshot().since(&before).requests();
    println!(
        "found {} ({:06}) by email in {requests} request",
        found[0].value.first_name, found[0].value.id
    );
    assert_eq!((found.len(), found[0].value.id, requests), (1, 223, 1));

    table.delete_table().await?;
    Ok(())
}
// ANCHOR_END: all
