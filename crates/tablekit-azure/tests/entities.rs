//! Single-entity operations against Azurite: CRUD with awkward keys, ETag semantics,
//! replace vs merge, Timestamp, request counts.

mod common;

use serde::{Deserialize, Serialize};
use tablekit_azure::RequestKind;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, ErrorKind, IfMatch, Keys, Properties};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    first_name: String,
    age: i32,
    salary: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    email: Option<String>,
}

fn jun() -> Employee {
    Employee {
        first_name: "Jun".into(),
        age: 47,
        salary: 9_007_199_254_740_993,
        email: Some("junc@contoso.com".into()),
    }
}

#[tokio::test]
async fn awkward_keys_work_for_every_operation() {
    let table = common::table("keys").await;
    let kib = "k".repeat(512); // 512 UTF-16 units = 1 KiB
    for key in ["O'Brien", "a%20b", "x+y", "naïve 東京", "''", kib.as_str()] {
        let keys = Keys::new(key, key).unwrap();
        let entity = Entity::new(keys.clone(), jun());
        table
            .insert(&entity)
            .await
            .unwrap_or_else(|e| panic!("insert {key:?}: {e}"));
        let got = table
            .get::<Employee>(&keys)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("get {key:?}"));
        assert_eq!(
            (got.keys.clone(), got.value.clone()),
            (keys.clone(), jun()),
            "{key:?}"
        );
        let older = Employee { age: 48, ..jun() };
        table
            .replace(&Entity::new(keys.clone(), &older), got.if_match())
            .await
            .unwrap();
        table
            .merge(
                &Entity::new(keys.clone(), Properties::new().with("Note", key)),
                IfMatch::Any,
            )
            .await
            .unwrap();
        let found = table
            .query::<Properties>()
            .filter(Filter::point(&keys))
            .collect()
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{key:?}");
        assert_eq!(found[0].value.get_str("Note").unwrap(), Some(key));
        assert_eq!(found[0].value.get_i64("Age").unwrap(), Some(48));
        table.delete(&keys, IfMatch::Any).await.unwrap();
        assert!(
            table.get::<Employee>(&keys).await.unwrap().is_none(),
            "{key:?}"
        );
    }
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn keys_are_unique_per_table_and_partition() {
    let table = common::table("unique").await;
    let a = Entity::try_new("Sales", "000223", jun()).unwrap();
    table.insert(&a).await.unwrap();
    let err = table.insert(&a).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    table
        .insert(&Entity::try_new("Marketing", "000223", jun()).unwrap())
        .await
        .unwrap();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn entities_are_schemaless() {
    let table = common::table("schemaless").await;
    table
        .insert(
            &Entity::try_new(
                "p",
                "1",
                Properties::new().with("A", 1).with("Shared", "text"),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    table
        .insert(
            &Entity::try_new(
                "p",
                "2",
                Properties::new().with("B", true).with("Shared", 5i64),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows[0].value,
        Properties::new().with("A", 1).with("Shared", "text")
    );
    assert_eq!(
        rows[1].value,
        Properties::new().with("B", true).with("Shared", 5i64)
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn the_server_owns_timestamp_and_etag_changes() {
    let table = common::table("timestamps").await;
    let keys = Keys::new("p", "r").unwrap();
    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    // A client-supplied Timestamp cannot even be sent: it is a reserved name.
    let bogus = Properties::new().with(
        "Timestamp",
        chrono::Utc::now() - chrono::Duration::days(999),
    );
    assert_eq!(
        table
            .insert(&Entity::new(keys.clone(), bogus))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    let e1 = table
        .insert(&Entity::new(keys.clone(), jun()))
        .await
        .unwrap();
    let s1 = table.get::<Employee>(&keys).await.unwrap().unwrap();
    assert_eq!(s1.etag, e1);
    let t1 = s1.timestamp.unwrap();
    assert!(t1 >= before, "the server assigns Timestamp: {t1}");
    assert_eq!(e1.timestamp(), Some(t1), "the ETag encodes the Timestamp");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let e2 = table
        .merge(
            &Entity::new(keys.clone(), Properties::new().with("Age", 50)),
            IfMatch::Any,
        )
        .await
        .unwrap();
    let s2 = table.get::<Employee>(&keys).await.unwrap().unwrap();
    assert_ne!(e2, e1);
    assert!(s2.timestamp.unwrap() > t1);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn replace_merge_upsert_and_etags() {
    let table = common::table("semantics").await;
    let keys = Keys::new("Sales", "000223").unwrap();
    // 41: replace and merge of a missing entity fail; upserts create it.
    assert_eq!(
        table
            .replace(&Entity::new(keys.clone(), jun()), IfMatch::Any)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        table
            .merge(&Entity::new(keys.clone(), jun()), IfMatch::Any)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    table
        .upsert_merge(&Entity::new(keys.clone(), jun()))
        .await
        .unwrap();
    let other = Keys::new("Sales", "000224").unwrap();
    table
        .upsert_replace(&Entity::new(other.clone(), jun()))
        .await
        .unwrap();
    assert!(table.get::<Employee>(&other).await.unwrap().is_some());

    // 39: replace without Email removes it; 40: merge without it keeps it.
    let no_email = Employee {
        email: None,
        ..jun()
    };
    table
        .merge(&Entity::new(keys.clone(), &no_email), IfMatch::Any)
        .await
        .unwrap();
    assert_eq!(
        table
            .get::<Employee>(&keys)
            .await
            .unwrap()
            .unwrap()
            .value
            .email,
        jun().email
    );
    table
        .replace(&Entity::new(keys.clone(), &no_email), IfMatch::Any)
        .await
        .unwrap();
    assert_eq!(
        table
            .get::<Employee>(&keys)
            .await
            .unwrap()
            .unwrap()
            .value
            .email,
        None
    );

    // 42: a stale ETag fails with 412, the current one succeeds, `*` always does.
    let current = table.get::<Employee>(&keys).await.unwrap().unwrap();
    let stale = current.if_match();
    table
        .merge(
            &Entity::new(keys.clone(), Properties::new().with("Age", 1)),
            current.if_match(),
        )
        .await
        .unwrap();
    let err = table
        .merge(
            &Entity::new(keys.clone(), Properties::new().with("Age", 2)),
            stale.clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(
        table.delete(&keys, stale).await.unwrap_err().kind(),
        ErrorKind::PreconditionFailed
    );
    table
        .merge(
            &Entity::new(keys.clone(), Properties::new().with("Age", 3)),
            IfMatch::Any,
        )
        .await
        .unwrap();
    assert_eq!(
        table
            .get::<Employee>(&keys)
            .await
            .unwrap()
            .unwrap()
            .value
            .age,
        3
    );
    assert!(table.delete_if_exists(&keys).await.unwrap());
    assert!(!table.delete_if_exists(&keys).await.unwrap());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn single_operations_take_one_request_each() {
    let table = common::table("counts").await;
    let metrics = table.account().metrics().clone();
    let keys = Keys::new("p", "r").unwrap();
    metrics.reset();
    table
        .insert(&Entity::new(keys.clone(), jun()))
        .await
        .unwrap();
    let after_insert = metrics.snapshot();
    assert_eq!(
        (
            after_insert.requests(),
            after_insert.requests_of(RequestKind::Insert)
        ),
        (1, 1)
    );
    table.get::<Employee>(&keys).await.unwrap().unwrap();
    let after_get = metrics.snapshot().since(&after_insert);
    assert_eq!(
        (
            after_get.requests(),
            after_get.requests_of(RequestKind::Get)
        ),
        (1, 1)
    );
    assert_eq!(after_get.entities_read, 1);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_missing_table_is_an_error_and_a_missing_entity_is_none() {
    let account = common::account();
    let table = account.table("nosuchtable0x").unwrap();
    let err = table
        .get::<Employee>(&Keys::new("p", "r").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let present = common::table("present").await;
    assert!(
        present
            .get::<Employee>(&Keys::new("p", "r").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert!(!present.create_if_not_exists().await.unwrap());
    assert!(present.delete_table_if_exists().await.unwrap());
    assert!(!present.delete_table_if_exists().await.unwrap());
}
