//! Large entities against Azurite: a 5 MiB payload round trip, the request count of every
//! operation, refusals before any request, integrity checks, inline payloads, concurrent
//! writers and the sweeper.

mod common;

use bytes::Bytes;
use tablekit::TableEntity;
use tablekit_azure::{RequestKind, UploadOptions};
use tablekit_core::{Entity, ErrorKind, IfMatch, IntoKeys, Properties};
use tablekit_large::{Large, LargeEntities, SweepOptions};

/// An employee whose photo is the payload.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
}

fn jun() -> Employee {
    Employee {
        department: "Sales".into(),
        id: 223,
        first_name: "Jun".into(),
        last_name: "Cao".into(),
    }
}

/// Jun's keys.
const KEYS: (&str, &str) = ("Sales", "000223");

/// The employee at `keys` with the verified photo.
async fn read_employee(
    store: &LargeEntities,
    keys: impl IntoKeys,
) -> tablekit_core::Result<Option<Large<Employee>>> {
    store.get(keys).await
}

/// A property bag at Jun's keys.
fn bag(properties: Properties) -> Entity<Properties> {
    Entity::try_new(KEYS.0, KEYS.1, properties).unwrap()
}

/// `len` bytes that differ with `seed`.
fn payload(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn a_5_mib_payload_round_trips_with_the_documented_request_counts() {
    let account = common::account();
    let store = common::store(&account, "large5").await;
    let metrics = account.metrics().clone();
    let five = payload(5 << 20, 1);

    metrics.reset();
    let first = store.upsert(&jun(), five.clone()).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 3, "new entity: read, upload, insert");
    assert_eq!(
        [RequestKind::Get, RequestKind::BlobPut, RequestKind::Insert].map(|k| spent.requests_of(k)),
        [1, 1, 1]
    );
    let reference = first.reference.clone().unwrap();
    assert_eq!(reference.len, 5 << 20);
    assert!(reference.name.starts_with(store.prefix()));

    metrics.reset();
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 2, "entity, then blob");
    assert_eq!(
        (
            spent.requests_of(RequestKind::Get),
            spent.requests_of(RequestKind::BlobGet)
        ),
        (1, 1)
    );
    assert_eq!(read.payload, five, "exact round trip");
    assert_eq!(read.entity.value, jun());
    assert_eq!(read.reference.as_ref(), Some(&reference));
    assert_eq!(read.entity.etag, first.etag);

    metrics.reset();
    let (entity, only_ref) = store.get_entity::<Employee>(KEYS).await.unwrap().unwrap();
    assert_eq!(metrics.snapshot().requests(), 1);
    assert_eq!((entity.value, only_ref), (jun(), Some(reference.clone())));

    let other = payload(300_000, 2);
    metrics.reset();
    let second = store.upsert(&jun(), other.clone()).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        4,
        "replace: read, upload, replace, delete old blob: {spent:?}"
    );
    assert_eq!(
        [
            RequestKind::Get,
            RequestKind::BlobPut,
            RequestKind::Replace,
            RequestKind::BlobDelete
        ]
        .map(|k| spent.requests_of(k)),
        [1, 1, 1, 1]
    );
    assert_eq!(second.orphaned, None);
    assert_ne!(
        second.reference, first.reference,
        "a new blob name per write"
    );
    assert_eq!(
        common::blob_names(&store).await,
        [second.reference.unwrap().name]
    );
    assert_eq!(
        read_employee(&store, KEYS).await.unwrap().unwrap().payload,
        other
    );

    // Changing ordinary properties keeps the payload: one merge.
    metrics.reset();
    let renamed = Employee {
        last_name: "Cao-Smith".into(),
        ..jun()
    };
    store.merge(&renamed, IfMatch::Any).await.unwrap();
    assert_eq!(metrics.snapshot().requests(), 1);
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    assert_eq!((read.entity.value, read.payload), (renamed, other));

    metrics.reset();
    store.delete(KEYS, IfMatch::Any).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        3,
        "read, delete entity, delete blob: {spent:?}"
    );
    assert_eq!(spent.requests_of(RequestKind::BlobDelete), 1);
    metrics.reset();
    assert!(!store.delete_if_exists(KEYS).await.unwrap());
    assert_eq!(metrics.snapshot().requests(), 1);
    assert!(read_employee(&store, KEYS).await.unwrap().is_none());
    assert!(common::blob_names(&store).await.is_empty());
    common::cleanup(&store).await;
}

#[tokio::test]
async fn delete_is_not_found_when_missing_and_conditional_on_an_etag() {
    let account = common::account();
    let store = common::store(&account, "largedel").await;
    let metrics = account.metrics().clone();

    metrics.reset();
    let err = store.delete(KEYS, IfMatch::Any).await.unwrap_err();
    assert!(
        matches!(&err, tablekit_core::Error::NotFound { target } if target.keys.is_some()),
        "the entity is named: {err}"
    );
    assert!(!store.delete_if_exists(KEYS).await.unwrap());
    assert_eq!(metrics.snapshot().requests(), 2, "one read each");

    let first = store.upsert(&jun(), payload(1_000, 1)).await.unwrap();
    store.upsert(&jun(), payload(1_000, 2)).await.unwrap();
    // The ETag of the first write no longer matches: refused after the read alone.
    metrics.reset();
    let err = store
        .delete(&jun(), IfMatch::ETag(first.etag))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(metrics.snapshot().requests(), 1);
    assert_eq!(common::blob_names(&store).await.len(), 1, "nothing deleted");

    // The ETag just read deletes the entity and its blob.
    let (stored, _) = store.get_entity::<Employee>(&jun()).await.unwrap().unwrap();
    metrics.reset();
    store.delete(&jun(), stored.if_match()).await.unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        3,
        "read, delete, blob delete"
    );
    assert!(read_employee(&store, KEYS).await.unwrap().is_none());
    assert!(common::blob_names(&store).await.is_empty());

    // Keys that are not keys are refused before any request.
    metrics.reset();
    let err = store
        .delete(("Sales", "a#b"), IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(metrics.snapshot().requests(), 0);
    common::cleanup(&store).await;
}

#[tokio::test]
async fn replace_writes_only_the_version_asked_for_and_refuses_before_uploading() {
    let account = common::account();
    let store = common::store(&account, "largerepl").await;
    let metrics = account.metrics().clone();

    // Absent: NotFound after the read alone, with either condition; nothing uploaded.
    for condition in [
        IfMatch::Any,
        IfMatch::ETag(tablekit_core::ETag::new("W/\"x\"")),
    ] {
        metrics.reset();
        let err = store
            .replace(&jun(), payload(1_000, 1), condition)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, tablekit_core::Error::NotFound { target } if target.keys.is_some()),
            "the entity is named: {err}"
        );
        assert_eq!(metrics.snapshot().requests(), 1, "the read alone");
    }
    assert!(read_employee(&store, KEYS).await.unwrap().is_none());
    assert!(
        common::blob_names(&store).await.is_empty(),
        "nothing uploaded"
    );

    let first = store.upsert(&jun(), payload(1_000, 1)).await.unwrap();
    let second = store.upsert(&jun(), payload(1_000, 2)).await.unwrap();
    let second_blob = second.reference.clone().unwrap().name;

    // A stale ETag: refused after the read alone; the stored value and its blob unchanged.
    metrics.reset();
    let renamed = Employee {
        last_name: "Cao-Smith".into(),
        ..jun()
    };
    let err = store
        .replace(&renamed, payload(1_000, 3), IfMatch::ETag(first.etag))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(metrics.snapshot().requests(), 1, "the read alone");
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    assert_eq!(
        (read.entity.value, read.payload),
        (jun(), payload(1_000, 2))
    );
    assert_eq!(read.entity.etag, second.etag);
    assert_eq!(
        common::blob_names(&store).await,
        std::slice::from_ref(&second_blob)
    );

    // The current ETag: replaced, the old blob deleted.
    metrics.reset();
    let third = store
        .replace(&renamed, payload(1_000, 3), IfMatch::ETag(second.etag))
        .await
        .unwrap();
    let spent = metrics.snapshot();
    assert_eq!(
        [
            RequestKind::Get,
            RequestKind::BlobPut,
            RequestKind::Replace,
            RequestKind::BlobDelete
        ]
        .map(|k| spent.requests_of(k)),
        [1, 1, 1, 1],
        "{spent:?}"
    );
    assert_eq!(spent.requests(), 4, "{spent:?}");
    assert_eq!(third.orphaned, None);
    let third_blob = third.reference.clone().unwrap().name;
    assert_ne!(third_blob, second_blob);
    assert_eq!(
        common::blob_names(&store).await,
        std::slice::from_ref(&third_blob)
    );
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    assert_eq!(
        (read.entity.value, read.payload),
        (renamed.clone(), payload(1_000, 3))
    );
    assert_eq!(read.entity.etag, third.etag);

    // Any: whatever version is stored.
    metrics.reset();
    let fourth = store
        .replace(&jun(), payload(1_000, 4), IfMatch::Any)
        .await
        .unwrap();
    assert_eq!(metrics.snapshot().requests(), 4);
    assert_eq!(
        common::blob_names(&store).await,
        [fourth.reference.unwrap().name]
    );
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    assert_eq!(
        (read.entity.value, read.payload),
        (jun(), payload(1_000, 4))
    );

    // Bad input is refused before any request.
    metrics.reset();
    let clash = Properties::new().with("PayloadSha256", "x");
    let err = store
        .replace(&bag(clash), payload(10, 0), IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let bad_keys = Entity::try_new("Sales", "a#b", Properties::new());
    assert!(
        bad_keys.is_err(),
        "keys are checked when the entity is made"
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    common::cleanup(&store).await;
}

#[tokio::test]
async fn insert_costs_two_requests_and_refuses_an_existing_entity_without_a_leak() {
    let account = common::account();
    let store = common::store(&account, "largeins").await;
    let metrics = account.metrics().clone();
    metrics.reset();
    store.insert(&jun(), payload(100_000, 3)).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 2, "upload, insert");
    metrics.reset();
    let err = store.insert(&jun(), payload(100_000, 4)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert_eq!(
        metrics.snapshot().requests(),
        3,
        "upload, refused insert, delete the new blob"
    );
    assert_eq!(common::blob_names(&store).await.len(), 1);
    assert_eq!(
        read_employee(&store, KEYS).await.unwrap().unwrap().payload,
        payload(100_000, 3)
    );
    common::cleanup(&store).await;
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let account = common::account();
    let store = common::store(&account, "largebad").await;
    let metrics = account.metrics().clone();
    metrics.reset();
    let clash = Properties::new().with("PayloadBlob", "x");
    assert_eq!(
        store
            .upsert(&bag(clash), payload(10, 0))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    // The reference's three properties must fit next to the caller's 252.
    let full: Properties = (0..251).map(|i| (format!("P{i}"), 1.into())).collect();
    assert_eq!(
        store
            .upsert(&bag(full), payload(10, 0))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::LimitExceeded
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    assert!(common::blob_names(&store).await.is_empty());

    let (table, container) = (store.table().clone(), store.container().clone());
    assert!(
        LargeEntities::builder(table.clone(), container.clone())
            .with_property("Bad-Name")
            .build()
            .is_err()
    );
    assert!(
        LargeEntities::builder(table.clone(), container.clone())
            .with_inline_max(70_000)
            .build()
            .is_err()
    );
    assert!(
        LargeEntities::builder(table.clone(), container.clone())
            .with_commit_deadline(std::time::Duration::ZERO)
            .build()
            .is_err()
    );
    let err = LargeEntities::builder(table, container)
        .with_clock_allowance(std::time::Duration::from_millis(999))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_tampered_or_missing_blob_is_an_error_not_wrong_data() {
    let account = common::account();
    let store = common::store(&account, "largetamper").await;
    let written = store.upsert(&jun(), payload(50_000, 5)).await.unwrap();
    let name = written.reference.unwrap().name;
    store
        .container()
        .upload(&name, payload(50_000, 6), UploadOptions::default())
        .await
        .unwrap();
    let err = read_employee(&store, KEYS).await.unwrap_err();
    assert!(err.to_string().contains("SHA-256"), "{err}");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    store
        .container()
        .delete_blob(&name, IfMatch::Any)
        .await
        .unwrap();
    let metrics = account.metrics().clone();
    metrics.reset();
    let err = read_employee(&store, KEYS).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(
        matches!(&err, tablekit_core::Error::Corrupt { target, .. }
            if target.table == store.table().name() && target.keys.as_deref() == Some(&KEYS.into_keys().unwrap())),
        "{err}"
    );
    assert_eq!(
        metrics.snapshot().requests(),
        4,
        "the entity is read again before refusing"
    );
    common::cleanup(&store).await;
}

#[tokio::test]
async fn small_payloads_can_stay_inline() {
    let account = common::account();
    let (table, container) = common::resources(&account, "largeinline").await;
    let store = LargeEntities::builder(table, container)
        .with_property("Photo")
        .with_inline_max(32 * 1024)
        .build()
        .unwrap();
    let metrics = account.metrics().clone();
    let big = store.upsert(&jun(), payload(40_000, 7)).await.unwrap();
    assert!(big.reference.is_some());

    metrics.reset();
    let small = store.upsert(&jun(), payload(1_000, 8)).await.unwrap();
    assert_eq!(small.reference, None);
    assert_eq!(
        metrics.snapshot().requests(),
        3,
        "read, replace, delete the old blob"
    );
    assert!(common::blob_names(&store).await.is_empty());

    metrics.reset();
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    assert_eq!(metrics.snapshot().requests(), 1, "inline: the entity alone");
    assert_eq!(read.payload, payload(1_000, 8));
    let raw = store
        .table()
        .typed::<Properties>()
        .get(KEYS)
        .await
        .unwrap()
        .unwrap();
    assert!(raw.value.get("Photo").and_then(|p| p.as_bytes()).is_some());
    common::cleanup(&store).await;
}

#[tokio::test]
async fn concurrent_writers_end_with_one_reference_and_no_leaked_blob() {
    let account = common::account();
    let store = common::store(&account, "largeconc").await;
    store.upsert(&jun(), payload(20_000, 0)).await.unwrap();
    let writers: Vec<_> = (1..=8u8)
        .map(|seed| {
            let store = store.clone();
            tokio::spawn(async move {
                for round in 0..3u8 {
                    store
                        .upsert(
                            &jun(),
                            payload(20_000 + usize::from(seed), seed * 10 + round),
                        )
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let read = read_employee(&store, KEYS).await.unwrap().unwrap();
    let reference = read.reference.unwrap();
    assert!(reference.len > 20_000, "one of the writers' payloads");
    assert!(
        account.metrics().snapshot().conflict_retries > 0,
        "the writers did contend"
    );
    assert_eq!(
        common::blob_names(&store).await,
        std::slice::from_ref(&reference.name),
        "each writer deleted what it replaced and what it could not commit"
    );
    let report = store.sweep(SweepOptions::immediate()).await.unwrap();
    assert_eq!((report.referenced, report.deleted.len()), (1, 0));
    let again = read_employee(&store, KEYS).await.unwrap().unwrap();
    assert_eq!(again.reference.unwrap(), reference);
    common::cleanup(&store).await;
}

#[tokio::test]
async fn the_sweeper_deletes_only_old_unreferenced_blobs_and_reports_its_cost() {
    let account = common::account();
    let store = common::store(&account, "largesweep").await;
    let kept = store.upsert(&jun(), payload(1_000, 1)).await.unwrap();
    let other = Employee { id: 224, ..jun() };
    store.upsert(&other, payload(1_000, 2)).await.unwrap();
    // Orphans as a crash would leave them: uploaded for an entity that never referenced them.
    let metadata = |(pk, rk): (&str, &str)| {
        std::collections::BTreeMap::from([
            ("tablekit_pk".to_owned(), pk.to_owned()),
            ("tablekit_rk".to_owned(), rk.to_owned()),
        ])
    };
    for (i, owner) in [KEYS, KEYS, ("Sales", "000999")].into_iter().enumerate() {
        let name = format!("{}orphan{i}", store.prefix());
        let options = UploadOptions::default().with_metadata(metadata(owner));
        store
            .container()
            .upload(&name, payload(10, 0), options)
            .await
            .unwrap();
    }
    // A blob under the prefix that names no entity is not the sweeper's to delete.
    let foreign = format!("{}readme.txt", store.prefix());
    store
        .container()
        .upload(&foreign, payload(10, 0), UploadOptions::default())
        .await
        .unwrap();

    let young = store.sweep(SweepOptions::default()).await.unwrap();
    assert_eq!((young.listed, young.young, young.deleted.len()), (6, 6, 0));

    let dry = store
        .sweep(SweepOptions::immediate().with_dry_run(true))
        .await
        .unwrap();
    assert_eq!(dry.deleted.len(), 3);
    assert_eq!(
        common::blob_names(&store).await.len(),
        6,
        "a dry run deletes nothing"
    );

    let metrics = account.metrics().clone();
    metrics.reset();
    let report = store.sweep(SweepOptions::immediate()).await.unwrap();
    assert_eq!(
        (report.listed, report.referenced, report.foreign),
        (6, 2, 1)
    );
    assert_eq!(report.entities_read, 3, "one read per entity, not per blob");
    assert_eq!(report.deleted.len(), 3);
    let spent = metrics.snapshot();
    assert_eq!(spent.requests_of(RequestKind::BlobList), 1);
    assert_eq!(spent.requests_of(RequestKind::Get), 3);
    assert_eq!(spent.requests_of(RequestKind::BlobDelete), 3);
    assert_eq!(spent.requests(), 7);
    let mut left = common::blob_names(&store).await;
    left.sort();
    assert_eq!(left.len(), 3);
    assert!(left.contains(&kept.reference.unwrap().name) && left.contains(&foreign));
    assert_eq!(
        read_employee(&store, &other)
            .await
            .unwrap()
            .unwrap()
            .payload,
        payload(1_000, 2)
    );
    common::cleanup(&store).await;
}
