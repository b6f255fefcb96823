//! A table round trip through the testkit's emulator: create, write, read back, delete.

use serde::{Deserialize, Serialize};
use tablekit_azure::Account;
use tablekit_core::{Entity, ErrorKind, Keys};
use tablekit_testkit::{TestStorage, unique_table_name};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    value: String,
    n: i64,
}

#[tokio::test]
async fn create_write_read_delete() {
    let storage = TestStorage::shared().unwrap();
    let account = Account::from_connection_string(storage.connection_string()).unwrap();
    let table = account.table(&unique_table_name("roundtrip")).unwrap();
    table.create().await.unwrap();

    let keys = Keys::new("p", "r").unwrap();
    let row = Row {
        value: "hello".into(),
        n: i64::MAX,
    };
    table
        .insert(&Entity::new(keys.clone(), &row))
        .await
        .unwrap();
    let got = table.get::<Row>(&keys).await.unwrap().unwrap();
    assert_eq!(got.value, row);

    table.delete_table().await.unwrap();
    let err = table.get::<Row>(&keys).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "the table is gone: {err}");
}
