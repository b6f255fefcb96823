//! A table round trip through the testkit's emulator: create, write, read back, delete.

use azure_data_tables::clients::TableServiceClientBuilder;
use azure_storage::{CloudLocation, StorageCredentials};
use serde::{Deserialize, Serialize};
use tablekit_testkit::{TestStorage, unique_table_name};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Row {
    #[serde(rename = "PartitionKey")]
    pk: String,
    #[serde(rename = "RowKey")]
    rk: String,
    value: String,
}

#[tokio::test]
async fn create_write_read_delete() {
    let storage = TestStorage::shared().unwrap();
    let azurite = storage
        .emulator()
        .expect("this test starts its own emulator");
    let credentials = StorageCredentials::access_key(
        tablekit_testkit::ACCOUNT,
        azure_core::auth::Secret::new(tablekit_testkit::ACCOUNT_KEY),
    );
    let location = CloudLocation::Custom {
        account: "devstoreaccount1".into(),
        uri: azurite.endpoints().table.clone(),
    };
    let service = TableServiceClientBuilder::with_location(location, credentials).build();
    let table = service.table_client(unique_table_name("roundtrip"));
    table.create().await.unwrap();

    let row = Row {
        pk: "p".into(),
        rk: "r".into(),
        value: "hello".into(),
    };
    table.insert::<_, Empty>(&row).unwrap().await.unwrap();
    let got = table
        .partition_key_client("p")
        .entity_client("r")
        .get::<Row>()
        .await
        .unwrap();
    assert_eq!(got.entity, row);

    table.delete().await.unwrap();
    let again = table
        .partition_key_client("p")
        .entity_client("r")
        .get::<Row>()
        .await;
    assert!(again.is_err(), "the table is gone, so is the entity");
}

#[derive(Deserialize)]
struct Empty {}
