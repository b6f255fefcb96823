//! Quickstart: connect, create a table, write an entity, read it back, delete the table.
//!
//! Run against Azurite with `cargo xtask demo`, or against any account with
//! `cargo run -p tablekit-examples --bin quickstart -- --connection-string "<cs>"`.

use azure_data_tables::{clients::TableServiceClientBuilder, prelude::*};
use azure_storage::{CloudLocation, StorageCredentials};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Employee {
    #[serde(rename = "PartitionKey")]
    department: String,
    #[serde(rename = "RowKey")]
    id: String,
    #[serde(rename = "FirstName")]
    first_name: String,
    #[serde(rename = "Age")]
    age: i32,
}

fn service(cs: &str) -> Result<TableServiceClient, String> {
    let parts: std::collections::HashMap<&str, &str> =
        cs.split(';').filter_map(|kv| kv.split_once('=')).collect();
    if parts.get("UseDevelopmentStorage") == Some(&"true") {
        return Ok(TableServiceClientBuilder::emulator().build());
    }
    let account = parts.get("AccountName").ok_or("AccountName missing")?;
    let key = parts.get("AccountKey").ok_or("AccountKey missing")?;
    let credentials = StorageCredentials::access_key(account.to_string(), key.to_string());
    let location = match parts.get("TableEndpoint") {
        Some(uri) => CloudLocation::Custom {
            account: account.to_string(),
            uri: uri.to_string(),
        },
        None => CloudLocation::Public {
            account: account.to_string(),
        },
    };
    Ok(TableServiceClientBuilder::with_location(location, credentials).build())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service = service(&tablekit_examples::connection_string())?;
    let table = service.table_client(format!("quickstart{}", std::process::id()));
    table.create().await?;
    println!("created table {}", table.table_name());

    let jones = Employee {
        department: "Sales".into(),
        id: "000223".into(),
        first_name: "Jun".into(),
        age: 34,
    };
    table.insert::<_, serde_json_value::Ignore>(&jones)?.await?;
    let read = table
        .partition_key_client("Sales")
        .entity_client("000223")
        .get::<Employee>()
        .await?;
    assert_eq!(read.entity, jones);
    println!("wrote and read back Sales/000223: {:?}", read.entity);

    table.delete().await?;
    println!("deleted table {}", table.table_name());
    Ok(())
}

mod serde_json_value {
    /// The insert response body is not needed.
    #[derive(serde::Deserialize)]
    pub(crate) struct Ignore {}
}
