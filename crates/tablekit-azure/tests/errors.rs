//! Error kinds at real call sites against Azurite: a value that cannot be stored (`Encode`,
//! before any request), stored data that does not fit the type asked for (`Decode`, naming the
//! table, the keys and the property), an argument outside its domain (`InvalidArgument`,
//! before any request).

mod common;

use serde::{Deserialize, Serialize};
use tablekit_core::batch::BatchPlan;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, Keys, Properties};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    first_name: String,
    age: i32,
}

#[tokio::test]
async fn a_value_the_service_cannot_store_is_an_encode_error_before_any_request() {
    let table = common::table("errencode").await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    #[derive(Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Counter {
        count: i32,
        huge: u64,
    }
    let err = table
        .insert(&Entity::new(
            Keys::new("p", "r").unwrap(),
            Counter {
                count: 1,
                huge: u64::MAX,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Encode, "{err}");
    assert!(
        matches!(&err, Error::Encode { property, .. } if property == "Huge"),
        "{err}"
    );
    assert_eq!(
        metrics.snapshot().requests(),
        0,
        "refused before any request"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn stored_data_of_another_type_is_a_decode_error_naming_table_keys_and_property() {
    let table = common::table("errdecode").await;
    let keys = Keys::new("Sales", "000223").unwrap();
    table
        .insert(&Entity::new(
            keys.clone(),
            Properties::new()
                .with("FirstName", "Jun")
                .with("Age", "forty-seven"),
        ))
        .await
        .unwrap();

    let check = |err: Error| {
        assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
        match &err {
            Error::Decode {
                target, property, ..
            } => {
                assert_eq!(target.table, table.name(), "{err}");
                assert_eq!(target.keys.as_deref(), Some(&keys), "{err}");
                assert_eq!(property, "Age", "{err}");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains(table.name()), "{err}");
    };
    check(table.get::<Employee>(&keys).await.unwrap_err());
    check(
        table
            .query::<Employee>()
            .filter(Filter::partition("Sales"))
            .collect()
            .await
            .unwrap_err(),
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_argument_outside_its_domain_is_refused_before_any_request() {
    let table = common::table("errarg").await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let err = table
        .bulk_write(Vec::new(), Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = BatchPlan::atomic(Vec::new()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { argument, .. } if argument == "operations"),
        "{err}"
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}
