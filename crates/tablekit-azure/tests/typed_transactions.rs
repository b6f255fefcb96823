//! Transactions built step by step on a typed (and an untyped) table, against Azurite: a mixed
//! transaction lands whole in one request, a refused step leaves nothing written and is named
//! by its index, and every refusal `submit` can make before sending is made with no request.

mod common;

use serde::{Deserialize, Serialize};
use tablekit_azure::{RequestKind, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys, Limit, Properties};
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
    /// Stored as `Edm.Int64`, so a value above `i64::MAX` cannot be encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    badge: Option<u64>,
}

fn employee(department: &str, id: u32, email: &str) -> Employee {
    Employee {
        department: department.into(),
        id,
        email: email.into(),
        badge: None,
    }
}

/// A value of another type, written next to employees through the untyped transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Note {
    text: String,
}

async fn rows(table: &Table, partition: &str) -> Vec<(String, Properties)> {
    table
        .query::<Properties>()
        .filter(Filter::partition(partition))
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.rk().to_owned(), s.value))
        .collect()
}

#[tokio::test]
async fn a_mixed_typed_transaction_lands_whole_in_one_request() {
    let table = common::table("txmixed").await;
    let metrics = table.account().metrics().clone();
    let employees = table.typed::<Employee>();
    let b = employee("Sales", 2, "b@contoso.com");
    let c = employee("Sales", 3, "c@contoso.com");
    let d = employee("Sales", 4, "d@contoso.com");
    for e in [&b, &c, &d] {
        employees.insert(e).await.unwrap();
    }
    let c_etag = employees.get(&c).await.unwrap().unwrap().etag;

    let a = employee("Sales", 1, "a@contoso.com");
    let b2 = Employee {
        badge: Some(7),
        ..b.clone()
    };
    let c2 = employee("Sales", 3, "c.new@contoso.com");
    metrics.reset();
    let outcome = employees
        .transaction()
        .insert(&a)
        .upsert_merge(&b2)
        .replace(&c2, c_etag.into())
        .delete(&d, IfMatch::Any)
        .submit()
        .await
        .unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 1, "one request in all");
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);

    assert_eq!(outcome.indices, [0, 1, 2, 3]);
    let stored = rows(&table, "Sales").await;
    let keys: Vec<&str> = stored.iter().map(|(rk, _)| rk.as_str()).collect();
    assert_eq!(
        keys,
        ["000001", "000002", "000003"],
        "d deleted, a inserted"
    );
    for (i, e) in [&a, &b2, &c2].into_iter().enumerate() {
        let read = employees.get(e).await.unwrap().unwrap();
        assert_eq!(&read.value, e, "operation {i} in place");
        assert_eq!(
            outcome.etags[i].as_ref(),
            Some(&read.etag),
            "operation {i}'s ETag is the stored one"
        );
    }
    assert_eq!(outcome.etags[3], None, "a delete has no ETag");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_stale_etag_fails_the_transaction_names_its_step_and_writes_nothing() {
    let table = common::table("txstale").await;
    let metrics = table.account().metrics().clone();
    let employees = table.typed::<Employee>();
    let c = employee("Sales", 3, "c@contoso.com");
    let stale = employees.insert(&c).await.unwrap();
    // Another writer changes c after it was read: the ETag held is stale.
    let theirs = employee("Sales", 3, "theirs@contoso.com");
    employees.replace(&theirs, IfMatch::Any).await.unwrap();

    let a = employee("Sales", 1, "a@contoso.com");
    let b = employee("Sales", 2, "b@contoso.com");
    let mine = employee("Sales", 3, "mine@contoso.com");
    metrics.reset();
    let result = employees
        .transaction()
        .insert(&a)
        .upsert_replace(&b)
        .replace(&mine, stale.into())
        .submit()
        .await;
    match result {
        Err(Error::BatchFailed { index: 2, source }) => {
            assert_eq!(source.kind(), ErrorKind::PreconditionFailed, "{source}");
        }
        other => panic!("expected the stale replace (step 2) to fail: {other:?}"),
    }
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Transaction), 1);
    let stored = rows(&table, "Sales").await;
    assert_eq!(stored.len(), 1, "neither a nor b landed: {stored:?}");
    let c_now = employees.get(&c).await.unwrap().unwrap().value;
    assert_eq!(c_now, theirs, "the other writer's value stands");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_untyped_transaction_writes_entities_of_several_types() {
    let table = common::table("txuntyped").await;
    let jones = employee("Sales", 223, "jonesj@contoso.com");
    let note = Entity::new(
        Keys::new("Sales", "note_000223").unwrap(),
        Note {
            text: "moved from Marketing".into(),
        },
    );
    let outcome = table
        .transaction()
        .insert(&jones)
        .upsert_replace(&note)
        .submit()
        .await
        .unwrap();
    assert_eq!(outcome.indices, [0, 1]);
    let read = table.get::<Note>(&note.keys).await.unwrap().unwrap();
    assert_eq!(read.value, note.value);
    assert_eq!(
        table.get::<Employee>(&jones).await.unwrap().unwrap().value,
        jones
    );
    table.delete_table().await.unwrap();
}

/// Submits `tx`, asserts it was refused with no request sent, and returns the error.
async fn refused(
    table: &Table,
    what: &str,
    tx: impl std::future::Future<Output = tablekit_core::Result<tablekit_azure::TransactionOutcome>>,
) -> Error {
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let error = match tx.await {
        Err(error) => error,
        Ok(outcome) => panic!("{what}: submitted ({outcome:?})"),
    };
    assert_eq!(
        metrics.snapshot().requests(),
        0,
        "{what}: refused before any request ({error})"
    );
    error
}

#[tokio::test]
async fn every_refusal_is_made_before_any_request() {
    let table = common::table("txrefused").await;
    let employees = table.typed::<Employee>();
    let a = employee("Sales", 1, "a@contoso.com");
    let b = employee("Sales", 2, "b@contoso.com");

    // A step whose keys are invalid, after valid ones: the valid steps are not sent either.
    let slash = employee("Sales/East", 3, "c@contoso.com");
    let error = refused(
        &table,
        "invalid key",
        employees
            .transaction()
            .insert(&a)
            .insert(&b)
            .insert(&slash)
            .submit(),
    )
    .await;
    match &error {
        Error::BatchFailed { index: 2, source } => {
            assert!(matches!(**source, Error::InvalidKey { .. }), "{source:?}")
        }
        other => panic!("invalid key: {other:?}"),
    }

    // A delete's keys, given as strings.
    let error = refused(
        &table,
        "invalid delete keys",
        employees
            .transaction()
            .insert(&a)
            .delete(("Sales", "a#b"), IfMatch::Any)
            .submit(),
    )
    .await;
    assert!(
        matches!(&error, Error::BatchFailed { index: 1, source } if source.kind() == ErrorKind::InvalidInput),
        "invalid delete keys: {error:?}"
    );

    // A value that cannot be stored: a u64 above i64::MAX.
    let huge = Employee {
        badge: Some(u64::MAX),
        ..employee("Sales", 4, "d@contoso.com")
    };
    let error = refused(
        &table,
        "encoding",
        employees
            .transaction()
            .upsert_merge(&a)
            .merge(&huge, IfMatch::Any)
            .submit(),
    )
    .await;
    match &error {
        Error::BatchFailed { index: 1, source } => {
            assert_eq!(source.kind(), ErrorKind::Encode, "{source}")
        }
        other => panic!("encoding: {other:?}"),
    }

    // Two operations on one entity.
    let error = refused(
        &table,
        "duplicate",
        employees
            .transaction()
            .insert(&a)
            .insert(&b)
            .delete(&a, IfMatch::Any)
            .submit(),
    )
    .await;
    assert!(
        matches!(
            error,
            Error::DuplicateInTransaction {
                first: 0,
                second: 2,
                ..
            }
        ),
        "duplicate: {error:?}"
    );

    // Two partitions.
    let marketing = employee("Marketing", 5, "e@contoso.com");
    let error = refused(
        &table,
        "two partitions",
        employees
            .transaction()
            .insert(&a)
            .insert(&marketing)
            .submit(),
    )
    .await;
    assert!(
        matches!(
            error,
            Error::CrossPartitionTransaction {
                first: 0,
                second: 1,
                ..
            }
        ),
        "two partitions: {error:?}"
    );

    // 101 operations.
    let many: Vec<Employee> = (0..101)
        .map(|i| employee("Sales", 100 + i, "x@contoso.com"))
        .collect();
    let tx = many
        .iter()
        .fold(employees.transaction(), |tx, e| tx.insert(e));
    assert_eq!(tx.len(), 101);
    let error = refused(&table, "101 operations", tx.submit()).await;
    assert!(
        matches!(
            error,
            Error::LimitExceeded {
                limit: Limit::TransactionOperations,
                actual: 101
            }
        ),
        "101 operations: {error:?}"
    );

    // A body of 4 MiB or more: 10 entities of 15 properties of 60,000 bytes (UTF-16), each
    // within the entity and property limits.
    let big: Vec<Entity<Properties>> = (0..10)
        .map(|i| {
            let value = (0..15)
                .map(|p| (format!("P{p}"), "x".repeat(30_000).into()))
                .collect();
            Entity::new(Keys::new("Sales", format!("big{i}")).unwrap(), value)
        })
        .collect();
    let tx = big
        .iter()
        .fold(table.transaction(), |tx, e| tx.upsert_replace(e));
    let error = refused(&table, "4 MiB", tx.submit()).await;
    assert!(
        matches!(
            error,
            Error::LimitExceeded {
                limit: Limit::TransactionBytes,
                actual
            } if actual >= 4 * 1024 * 1024
        ),
        "4 MiB: {error:?}"
    );

    // No steps at all.
    let error = refused(&table, "empty", employees.transaction().submit()).await;
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");

    assert!(
        rows(&table, "Sales").await.is_empty(),
        "nothing of any refused transaction was written"
    );
    table.delete_table().await.unwrap();
}
