//! A logical table name bound into every item: tenants whose tables share a key-encryption key
//! cannot read each other's entities as their own.

mod common;

use common::{TABLE, aes, assert_failure, field, keys, metadata_fields};
use tablekit_core::Error;
use tablekit_core::Properties;
use tablekit_encryption::{EncryptionPolicy, METADATA_PROPERTY};

fn employee() -> Properties {
    Properties::new()
        .with("Email", "jun@contoso.example")
        .with("Salary", 90_000i64)
}

/// Table per tenant, one key for all of them.
fn tenant(name: &str) -> EncryptionPolicy {
    EncryptionPolicy::builder(aes("tenants-2026", 1))
        .properties(["Email"])
        .bind_table(name)
        .build()
        .unwrap()
}

fn unbound() -> EncryptionPolicy {
    EncryptionPolicy::builder(aes("tenants-2026", 1))
        .properties(["Email"])
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_entity_copied_to_another_tenants_table_is_refused() {
    let stored = tenant("tenant-a")
        .encrypt(&keys(), employee())
        .await
        .unwrap();
    assert_eq!(metadata_fields(&stored)[field::FLAGS], "table");
    assert!(
        !stored
            .get_str(METADATA_PROPERTY)
            .unwrap()
            .unwrap()
            .contains("tenant-a"),
        "the name itself is not stored"
    );
    assert_eq!(
        tenant("tenant-a")
            .decrypt(TABLE, &keys(), stored.clone())
            .await
            .unwrap(),
        employee()
    );
    // A writer to tenant B's table copies tenant A's entity there, under the same keys.
    let error = tenant("tenant-b")
        .decrypt(TABLE, &keys(), stored.clone())
        .await
        .unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");
    // A policy that binds no name does not read a bound entity, nor the other way round.
    let error = unbound().decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "logical table name");
    let plain = unbound().encrypt(&keys(), employee()).await.unwrap();
    let error = tenant("tenant-a")
        .decrypt(TABLE, &keys(), plain)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "logical table name");
    // Nor entities of the formats that bind none.
    let (keys, stored, _, _) = common::format_fixture(2);
    let bound_reader = EncryptionPolicy::builder(aes("fixture-kek", 7))
        .properties(["Email", "Notes", "Empty"])
        .bind_table("tenant-a")
        .build()
        .unwrap();
    let error = bound_reader
        .decrypt(TABLE, &keys, stored)
        .await
        .unwrap_err();
    assert_failure(
        error,
        &keys,
        METADATA_PROPERTY,
        "format version 2 binds none",
    );
}

#[tokio::test]
async fn the_binding_flag_cannot_be_dropped_and_the_name_must_be_text() {
    // Dropping the flag makes the item read as unbound: the ciphertexts, bound to the name,
    // no longer open.
    let mut stored = tenant("tenant-a")
        .encrypt(&keys(), employee())
        .await
        .unwrap();
    let mut fields = metadata_fields(&stored);
    fields[field::FLAGS] = String::new();
    stored.insert(METADATA_PROPERTY, fields.join(";"));
    let error = unbound().decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");

    for bad in ["", "tenant\n"] {
        let error = EncryptionPolicy::builder(aes("k", 1))
            .properties(["Email"])
            .bind_table(bad)
            .build()
            .unwrap_err();
        assert!(
            matches!(error, Error::InvalidConfig { .. }),
            "{bad:?}: {error:?}"
        );
    }
}
