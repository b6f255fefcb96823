//! Entities that know their keys, against Azurite: a derived entity through `TypedTable`
//! (CRUD, queries with typed filters, `update_with`, `bulk_write`), every form of keys
//! `IntoKeys` accepts, and both forms of entity `AsEntity` accepts — with their request counts.

mod common;

use serde::{Deserialize, Serialize};
use tablekit_azure::{BulkOptions, RequestKind, WriteMode};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{
    Entity, Error, ErrorKind, IfMatch, IntoKeys, Keys, Properties, TableEntity as _,
};
use tablekit_derive::TableEntity;

#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(
    crate = "tablekit_core",
    partition_key = "{department}",
    row_key = "{id:06}"
)]
struct Employee {
    department: String,
    id: u32,
    email: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    manager: Option<u32>,
}

fn employee(department: &str, id: u32, email: &str) -> Employee {
    Employee {
        department: department.into(),
        id,
        email: email.into(),
        manager: None,
    }
}

/// A value type without keys, written through `Entity<T>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Note {
    text: String,
}

#[tokio::test]
async fn a_typed_table_reads_and_writes_a_derived_entity_one_request_each() {
    let table = common::table("typedcrud").await;
    let metrics = table.account().metrics().clone();
    let employees = table.typed::<Employee>();
    let jones = employee("Sales", 223, "jonesj@contoso.com");

    metrics.reset();
    let etag = employees.insert(&jones).await.unwrap();
    let stored = employees.get(("Sales", "000223")).await.unwrap().unwrap();
    assert_eq!(stored.value, jones);
    assert_eq!(stored.etag, etag);
    assert_eq!(stored.keys, jones.keys().unwrap());
    let spent = metrics.snapshot();
    assert_eq!(spent.requests_of(RequestKind::Insert), 1);
    assert_eq!(spent.requests_of(RequestKind::Get), 1);
    assert_eq!(spent.requests(), 2);

    // Conditional writes take the ETag read; a stale one is refused.
    let moved = Employee {
        manager: Some(17),
        ..jones.clone()
    };
    metrics.reset();
    let newer = employees.replace(&moved, stored.if_match()).await.unwrap();
    let err = employees
        .merge(&jones, stored.if_match())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    employees
        .merge(&moved, IfMatch::ETag(newer.clone()))
        .await
        .unwrap();
    employees.upsert_replace(&jones).await.unwrap();
    employees.upsert_merge(&moved).await.unwrap();
    assert_eq!(metrics.snapshot().requests(), 5);
    assert_eq!(
        employees.get(&jones).await.unwrap().unwrap().value,
        moved,
        "the last merge brought the manager back"
    );

    // A query with a typed filter.
    employees
        .insert(&employee("Sales", 152, "kenk@contoso.com"))
        .await
        .unwrap();
    metrics.reset();
    let found = employees
        .query()
        .filter(
            Employee::DEPARTMENT
                .eq("Sales")
                .and(Employee::EMAIL.eq("kenk@contoso.com")),
        )
        .allow_scan()
        .collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].value.id, 152);
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Query), 1);

    // Deletes: by the entity itself, with an ETag; absent is `NotFound` or `false`.
    let current = employees.get(&moved).await.unwrap().unwrap();
    metrics.reset();
    employees.delete(&moved, current.if_match()).await.unwrap();
    let err = employees
        .delete(("Sales", "000223"), IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(!employees.delete_if_exists(&jones).await.unwrap());
    assert!(
        employees
            .delete_if_exists(("Sales", "000152"))
            .await
            .unwrap()
    );
    assert_eq!(metrics.snapshot().requests(), 4);
    assert!(employees.get(("Sales", "000152")).await.unwrap().is_none());
    assert_eq!(employees.table().name(), table.name());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn update_with_and_bulk_write_on_a_typed_table() {
    let table = common::table("typedbulk").await;
    let metrics = table.account().metrics().clone();
    let employees = table.typed::<Employee>();
    let staff: Vec<Employee> = (0..150)
        .map(|i| {
            employee(
                if i % 2 == 0 { "Sales" } else { "Marketing" },
                i,
                "x@contoso.com",
            )
        })
        .collect();
    metrics.reset();
    let report = employees
        .bulk_write(WriteMode::Insert, &staff, BulkOptions::default())
        .await
        .unwrap();
    assert!(report.is_complete());
    // 75 per partition: one transaction each.
    assert_eq!(report.transactions, 2);
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Transaction), 2);
    let again = employees
        .bulk_write(WriteMode::Insert, &staff[..2], BulkOptions::default())
        .await
        .unwrap();
    assert_eq!(again.failed(), 2, "inserting existing entities fails");
    employees
        .bulk_write(
            WriteMode::UpsertReplace,
            &staff[..2],
            BulkOptions::default(),
        )
        .await
        .unwrap();

    metrics.reset();
    let updated = employees
        .update_with(&staff[0], |e| Employee {
            manager: Some(7),
            ..e.expect("exists")
        })
        .await
        .unwrap();
    assert_eq!(updated.value.manager, Some(7));
    assert_eq!(metrics.snapshot().requests(), 2, "a read, then a replace");
    let sales = employees
        .query()
        .filter(tablekit_core::filter::Filter::partition("Sales"))
        .collect()
        .await
        .unwrap();
    assert_eq!(sales.len(), 75);

    // An entity that cannot make keys is refused before any request, nothing written.
    let bad = employee("a/b", 1, "x");
    metrics.reset();
    let err = employees
        .bulk_write(
            WriteMode::UpsertMerge,
            [&staff[2], &bad],
            BulkOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn every_form_of_keys_reads_writes_and_deletes_the_same_entity() {
    let table = common::table("intokeys").await;
    let metrics = table.account().metrics().clone();
    let jones = employee("Sales", 223, "jonesj@contoso.com");
    let keys = Keys::new("Sales", "000223").unwrap();
    table.insert(&jones).await.unwrap();

    metrics.reset();
    let by_keys = table.get::<Employee>(keys.clone()).await.unwrap().unwrap();
    let by_ref = table.get::<Employee>(&keys).await.unwrap().unwrap();
    let by_strs = table
        .get::<Employee>(("Sales", "000223"))
        .await
        .unwrap()
        .unwrap();
    let by_strings = table
        .get::<Employee>((String::from("Sales"), format!("{:06}", 223)))
        .await
        .unwrap()
        .unwrap();
    let by_entity = table.get::<Employee>(&jones).await.unwrap().unwrap();
    for read in [&by_ref, &by_strs, &by_strings, &by_entity] {
        assert_eq!(read, &by_keys);
    }
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Get), 5);

    // update_with and delete take the same forms.
    table
        .update_with(("Sales", "000223"), |e: Option<Employee>| Employee {
            manager: Some(1),
            ..e.unwrap()
        })
        .await
        .unwrap();
    table.delete(&jones, IfMatch::Any).await.unwrap();
    assert!(!table.delete_if_exists(keys.clone()).await.unwrap());

    // Keys that are not valid keys are refused before any request.
    metrics.reset();
    for err in [
        table.get::<Employee>(("Sales", "a/b")).await.unwrap_err(),
        table
            .delete(("Sal#es", "1"), IfMatch::Any)
            .await
            .unwrap_err(),
        table.delete_if_exists(("Sales", "a?b")).await.unwrap_err(),
        table
            .update_with(("Sales", "a\\b"), |e: Option<Employee>| e.unwrap())
            .await
            .unwrap_err(),
        table
            .get::<Employee>(&employee("a/b", 1, "x"))
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    }
    assert_eq!(metrics.snapshot().requests(), 0);
    assert_eq!((&jones).into_keys().unwrap(), keys);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_entity_and_a_table_entity_are_written_alike_by_every_write() {
    let table = common::table("asentity").await;
    let jones = employee("Sales", 223, "jonesj@contoso.com");
    // The same keys and value, once as a `TableEntity`, once as an `Entity` with explicit keys.
    let explicit = Entity::new(jones.keys().unwrap(), jones.clone());
    table.insert(&jones).await.unwrap();
    let first = table.get::<Properties>(&jones).await.unwrap().unwrap();
    table.delete(&jones, IfMatch::Any).await.unwrap();
    table.insert(&explicit).await.unwrap();
    let second = table.get::<Properties>(&jones).await.unwrap().unwrap();
    assert_eq!(first.value, second.value, "the same properties either way");

    table.replace(&explicit, IfMatch::Any).await.unwrap();
    table.merge(&jones, IfMatch::Any).await.unwrap();
    table.upsert_replace(&jones).await.unwrap();
    table.upsert_merge(&explicit).await.unwrap();
    // A value without keys goes through `Entity<T>`, in a typed table too.
    let notes = table.typed::<Note>();
    let note = Entity::new(
        Keys::new("Notes", "1").unwrap(),
        Note {
            text: "hello".into(),
        },
    );
    notes.insert(&note).await.unwrap();
    assert_eq!(
        notes.get(("Notes", "1")).await.unwrap().unwrap().value,
        note.value
    );
    // And in transactions: `Operation` takes both forms too.
    let plan = BatchPlan::atomic([
        Operation::upsert_merge(&jones).unwrap(),
        Operation::insert(&Entity::new(
            Keys::new("Sales", "000224").unwrap(),
            employee("Sales", 224, "b@x"),
        ))
        .unwrap(),
        Operation::delete(&employee("Sales", 225, "c@x"), IfMatch::Any).unwrap(),
    ])
    .unwrap();
    let err = table.submit(&plan).await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchFailed { index: 2, source } if source.kind() == ErrorKind::NotFound),
        "{err}"
    );
    table.delete_table().await.unwrap();
}
