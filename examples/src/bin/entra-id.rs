//! Microsoft Entra ID: a table, a queue and a blob container reached with bearer tokens
//! instead of an account key — with the request count of each step and the token requests
//! they took.
//!
//! Against a real account, set `AZURE_STORAGE_ACCOUNT_NAME` (and, outside the public cloud,
//! `AZURE_STORAGE_ENDPOINT_SUFFIX`) and sign in any way the default credential chain knows:
//! a managed identity, workload identity, `AZURE_TENANT_ID`/`AZURE_CLIENT_ID`/
//! `AZURE_CLIENT_SECRET`, or `az login`. The principal needs the Storage Table, Queue and Blob
//! Data Contributor roles:
//!
//! ```sh
//! AZURE_STORAGE_ACCOUNT_NAME=contosodata cargo run -p tablekit-examples --bin entra-id
//! ```
//!
//! `cargo xtask demo` runs it against Azurite over HTTPS with `--oauth basic`, which accepts
//! unsigned tokens but knows no identity: there (`TABLEKIT_DEMO_MINTED_TOKENS=1`) the
//! testkit's minting credential stands in for the chain, and the emulator's endpoints and
//! certificate authority come from `AZURE_STORAGE_{TABLE,QUEUE,BLOB}_ENDPOINT` and
//! `TABLEKIT_ROOT_CERTIFICATE`.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tablekit::azure::{AccountBuilder, SendOptions, TablePermissions, TableSas, UploadOptions};
use tablekit::prelude::*;
use tablekit::testkit::{Claims, MintingCredential};
use tablekit_examples::{report, unique_name};

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
    // The demo's stand-in for Microsoft Entra ID (never used against Azure).
    let minted = std::env::var_os("TABLEKIT_DEMO_MINTED_TOKENS")
        .map(|_| Arc::new(MintingCredential::new(Claims::valid())));

    // ANCHOR: connect
    // AZURE_STORAGE_ACCOUNT_NAME (+ AZURE_STORAGE_ENDPOINT_SUFFIX, AZURE_STORAGE_TOKEN_SCOPE…):
    // no key, no connection string. Without a credential, `build` uses the default chain:
    // environment, workload identity, managed identity, Azure CLI.
    let mut builder = AccountBuilder::from_env()?;
    // ANCHOR_END: connect
    if let Some(credential) = &minted {
        builder = builder.with_token_credential(credential.clone());
    }
    let account = builder.build()?;
    if !account.uses_token() {
        return Err(
            "set AZURE_STORAGE_ACCOUNT_NAME, not a connection string: this example \
                    authenticates with Microsoft Entra ID"
                .into(),
        );
    }
    // The account prints its token scope, never a token.
    println!("entra-id: {account:?}");
    let metrics = account.metrics().clone();

    // ANCHOR: use
    // Every handle of the account carries a bearer token: one token (scope
    // https://storage.azure.com/.default) serves tables, queues and blobs until five minutes
    // before it expires; then the next request fetches a new one.
    let before = metrics.snapshot();
    let table = account.table(&unique_name("EntraEmployees"))?;
    table.create().await?;
    let jun = Employee {
        department: "Sales".into(),
        id: 223,
        first_name: "Jun".into(),
        email: "junc@contoso.com".into(),
    };
    let employees = table.typed::<Employee>();
    employees.insert(&jun).await?;
    let sales = employees
        .query()
        .filter(Filter::partition("Sales"))
        .collect()
        .await?;
    assert_eq!(sales.len(), 1);
    report(
        "table: create, insert, query",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    let queue = account.queue(&unique_name("entra-jobs"))?;
    queue.create().await?;
    queue
        .send(b"archive 000223", SendOptions::default())
        .await?;
    let messages = queue.receive(1, Duration::from_secs(30)).await?;
    queue.delete_message(&messages[0]).await?;
    report(
        "queue: create, put, get, delete message",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    let photos = account.container(&unique_name("entra-photos"))?;
    photos.create().await?;
    photos
        .upload("000223.jpg", vec![0u8; 1024], UploadOptions::default())
        .await?;
    let listed = photos.list("").await?;
    assert_eq!(listed.len(), 1);
    report(
        "blob: create container, put, list",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: use

    // ANCHOR: sas
    // A table SAS is signed with the account key, which a token account does not have:
    // refused before anything is sent.
    let expiry = Utc::now() + chrono::Duration::hours(1);
    let refused = TableSas::new(table.name(), TablePermissions::READ, expiry).sign(&account);
    println!("  table SAS from a token account: {}", refused.unwrap_err());
    // ANCHOR_END: sas

    let before = metrics.snapshot();
    photos.delete_container().await?;
    queue.delete_queue().await?;
    table.delete_table().await?;
    report("clean up", &metrics.snapshot().since(&before));
    if let Some(credential) = &minted {
        println!(
            "  token requests to the (stand-in) identity: {}",
            credential.calls()
        );
    }
    println!(
        "entra-id: {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
