//! A strict policy: every string property of an entity written is classified — encrypted,
//! signed only or plain — so that a misspelled name in the policy is an error, not a value
//! stored in the clear.

mod common;

use common::{Counting, aes, keys};
use tablekit_azure::BulkOptions;
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::{Entity, Error, ErrorKind};
use tablekit_encryption::EncryptionPolicy;
use tablekit_testkit::fixtures;

#[tokio::test]
async fn a_misspelled_name_in_a_strict_policy_is_refused_before_the_key() {
    let kek = Counting::new(aes("hr-2026", 1));
    let policy = EncryptionPolicy::builder(kek.clone())
        .properties(["Emial"])
        .plain(["FirstName"])
        .strict()
        .build()
        .unwrap();
    let jun = Properties::new()
        .with("FirstName", "Jun")
        .with("Email", "jun@contoso.example")
        .with("Age", 38i32);
    let error = policy.encrypt(&keys(), jun).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Encode, "{error:?}");
    match &error {
        Error::Encode { property, reason } => {
            assert_eq!(property, "Email");
            assert!(reason.contains("strict"), "{reason}");
            assert!(!reason.contains("jun@"), "the value must not be shown");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(kek.wraps(), 0, "refused before the key is used");
}

#[tokio::test]
async fn a_strict_policy_writes_what_it_classifies_and_refuses_the_rest_before_any_request() {
    let policy = EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties(["Email"])
        .plain(["FirstName"])
        .strict()
        .build()
        .unwrap();
    // Classified strings, and properties of other types, are written.
    let fine = Properties::new()
        .with("FirstName", "Jun")
        .with("Email", "jun@contoso.example")
        .with("Age", 38i32);
    let stored = policy.encrypt(&keys(), fine.clone()).await.unwrap();
    assert_eq!(
        policy
            .decrypt(common::TABLE, &keys(), stored)
            .await
            .unwrap(),
        fine
    );

    // A bulk write through a strict encrypting table refuses before its first request.
    let raw = fixtures::table_on(&fixtures::account(), "encstrict").await;
    let table = policy.table(&raw);
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let mut ops: Vec<Operation> = (0..300)
        .map(|i| {
            let e = Entity::try_new("p", format!("{i:04}"), fine.clone()).unwrap();
            Operation::insert(&e).unwrap()
        })
        .collect();
    let stray = fine.clone().with("LastNmae", "Cao");
    ops.push(Operation::insert(&Entity::try_new("p", "stray", stray).unwrap()).unwrap());
    let error = table
        .bulk_write(ops, BulkOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Encode { property, .. } if property == "LastNmae"),
        "{error:?}"
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    assert!(
        raw.query::<Properties>()
            .allow_scan()
            .collect()
            .await
            .unwrap()
            .is_empty()
    );
}
