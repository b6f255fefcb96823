//! Per-property actions: encrypt-and-sign, sign-only, plain. A sign-only property stays
//! readable and filterable, and changing it, removing it, or adding one the item does not
//! list is a decryption failure; a plain one is the writer's to change.

mod common;

use std::sync::Arc;

use common::{TABLE, aes, assert_failure, field, keys, metadata_fields};
use tablekit_core::edm::parse_datetime;
use tablekit_core::filter::Filter;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys};
use tablekit_encryption::{Action, EncryptionPolicy, METADATA_PROPERTY};
use tablekit_testkit::fixtures;

fn policy() -> EncryptionPolicy {
    EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties(["Email"])
        .sign_only([
            "LastName", "Salary", "Level", "Rating", "Zero", "Nan", "Active", "Hired", "Id",
            "Photo",
        ])
        .plain(["Nickname"])
        .build()
        .unwrap()
}

/// A value of every EDM type, including those the service may return in another form (−0,
/// NaN, a DateTime below the 100 ns resolution).
fn employee() -> Properties {
    Properties::new()
        .with("Email", "jun@contoso.example")
        .with("LastName", "Cao")
        .with("Salary", 9_007_199_254_740_993i64)
        .with("Level", 7i32)
        .with("Rating", 4.0f64)
        .with("Zero", -0.0f64)
        .with("Nan", f64::NAN)
        .with("Active", true)
        .with(
            "Hired",
            parse_datetime("2014-07-31T18:00:00.12345678Z").unwrap(),
        )
        .with(
            "Id",
            EdmValue::Guid("6f1a2b3c-4d5e-4f60-8172-839405a6b7c8".parse().unwrap()),
        )
        .with("Photo", vec![0u8, 1, 2, 254, 255])
        .with("Nickname", "J")
}

/// Compares two bags, NaN equal to NaN.
fn same(a: &Properties, b: &Properties) -> bool {
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|((n, x), (m, y))| {
            n == m
                && match (x, y) {
                    (EdmValue::Double(x), EdmValue::Double(y)) => {
                        x == y || (x.is_nan() && y.is_nan())
                    }
                    (EdmValue::DateTime(x), EdmValue::DateTime(y)) => {
                        // The service keeps 100 ns.
                        (x.timestamp_nanos_opt().unwrap() / 100)
                            == (y.timestamp_nanos_opt().unwrap() / 100)
                    }
                    _ => x == y,
                }
        })
}

#[tokio::test]
async fn sign_only_values_of_every_type_are_stored_as_written_and_verify_after_the_service() {
    let raw = fixtures::table_on(&fixtures::account(), "encsign").await;
    let table = policy().table(&raw);
    table
        .insert(&Entity::new(keys(), employee()))
        .await
        .unwrap();

    // Stored as written, listed in the item.
    let stored = raw.get::<Properties>(&keys()).await.unwrap().unwrap().value;
    assert_eq!(stored.get_str("LastName").unwrap(), Some("Cao"));
    assert!(matches!(stored.get("Email"), Some(EdmValue::Binary(_))));
    let entries = &metadata_fields(&stored)[field::ENTRIES];
    assert!(
        entries.contains("e:Email") && entries.contains("s:Salary"),
        "{entries}"
    );
    assert!(
        !entries.contains("Nickname"),
        "plain is not listed: {entries}"
    );

    // What the service returns — its Double and DateTime forms included — verifies.
    let read = table
        .get::<Properties>(&keys())
        .await
        .unwrap()
        .unwrap()
        .value;
    assert!(same(&read, &employee()), "{read:?}");

    // Sign-only properties stay filterable through the encrypting table.
    let found = table
        .query::<Properties>()
        .filter(Filter::partition("Sales").and(Filter::eq("LastName", "Cao")))
        .collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);

    // A writer to the table changes a signed value: the read through the table fails.
    let mut changed = stored.clone();
    changed.insert("Salary", 10_000_000i64);
    raw.replace(&Entity::new(keys(), changed), IfMatch::Any)
        .await
        .unwrap();
    let error = table.get::<Properties>(&keys()).await.unwrap_err();
    match &error {
        Error::Corrupt { reason, .. } => assert!(reason.contains("authentication"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_signed_property_changed_removed_or_added_is_corrupt_and_a_plain_one_is_not() {
    let original = policy().encrypt(&keys(), employee()).await.unwrap();
    let read = |stored: Properties| async move { policy().decrypt(TABLE, &keys(), stored).await };

    let mut changed = original.clone();
    changed.insert("LastName", "Smith");
    assert_failure(
        read(changed).await.unwrap_err(),
        &keys(),
        METADATA_PROPERTY,
        "authentication failed",
    );
    let mut retyped = original.clone();
    retyped.insert("Level", 7i64);
    assert_failure(
        read(retyped).await.unwrap_err(),
        &keys(),
        METADATA_PROPERTY,
        "authentication failed",
    );
    let mut removed = original.clone();
    removed.remove("Salary");
    assert_failure(
        read(removed).await.unwrap_err(),
        &keys(),
        "Salary",
        "absent from the entity",
    );

    // Added where the item does not list it: a property the policy signs.
    let without = policy()
        .encrypt(
            &keys(),
            Properties::new().with("Email", "jun@contoso.example"),
        )
        .await
        .unwrap();
    let mut added = without.clone();
    added.insert("Salary", 1i64);
    assert_failure(
        read(added).await.unwrap_err(),
        &keys(),
        "Salary",
        "does not cover it",
    );

    // A plain property is the writer's to change, add or remove.
    let mut plain = original.clone();
    plain.insert("Nickname", "Junior");
    plain.insert("Unlisted", 3i32);
    let read_back = read(plain).await.unwrap();
    assert_eq!(read_back.get_str("Nickname").unwrap(), Some("Junior"));
}

#[tokio::test]
async fn an_entity_with_nothing_encrypted_is_still_signed() {
    let policy = EncryptionPolicy::builder(aes("hr-2026", 1))
        .sign_only(["Salary"])
        .build()
        .unwrap();
    let plain = Properties::new()
        .with("Salary", 90_000i64)
        .with("Nickname", "J");
    let stored = policy.encrypt(&keys(), plain.clone()).await.unwrap();
    assert_eq!(metadata_fields(&stored)[field::ENTRIES], "s:Salary");
    assert_eq!(
        policy
            .decrypt(TABLE, &keys(), stored.clone())
            .await
            .unwrap(),
        plain
    );
    let mut changed = stored;
    changed.insert("Salary", 1i64);
    assert_failure(
        policy.decrypt(TABLE, &keys(), changed).await.unwrap_err(),
        &keys(),
        METADATA_PROPERTY,
        "authentication failed",
    );
    // Metadata stripped: the signed property is no longer covered.
    let error = policy.decrypt(TABLE, &keys(), plain).await.unwrap_err();
    assert_failure(error, &keys(), "Salary", "does not cover it");
}

#[tokio::test]
async fn signing_by_default_covers_every_property_not_listed_as_plain() {
    let policy = EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties(["Email"])
        .plain(["LastLogin"])
        .default_action(Action::SignOnly)
        .build()
        .unwrap();
    assert_eq!(policy.action("p", "r", "Anything"), Action::SignOnly);
    assert_eq!(policy.action("p", "r", "LastLogin"), Action::Plain);
    let entity = Properties::new()
        .with("Email", "jun@contoso.example")
        .with("FirstName", "Jun")
        .with("Age", 38i32)
        .with("LastLogin", "2026-05-01");
    let stored = policy.encrypt(&keys(), entity.clone()).await.unwrap();
    assert_eq!(
        metadata_fields(&stored)[field::ENTRIES],
        "s:Age,e:Email,s:FirstName"
    );
    for (name, value) in [
        ("Age", EdmValue::Int32(39)),
        ("FirstName", EdmValue::from("Mei")),
    ] {
        let mut changed = stored.clone();
        changed.insert(name, value);
        assert!(
            policy.decrypt(TABLE, &keys(), changed).await.is_err(),
            "{name}"
        );
    }
    let mut added = stored.clone();
    added.insert("Admin", true);
    assert_failure(
        policy.decrypt(TABLE, &keys(), added).await.unwrap_err(),
        &keys(),
        "Admin",
        "does not cover it",
    );

    let error = EncryptionPolicy::builder(aes("hr-2026", 1))
        .default_action(Action::EncryptAndSign)
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
    let error = EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties(["Email"])
        .sign_only(["Email"])
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
}

#[tokio::test]
async fn a_classification_function_decides_per_entity_and_the_more_protective_action_wins() {
    let policy = EncryptionPolicy::builder(aes("hr-2026", 1))
        .plain(["Notes"])
        .classify_with(|pk, _, name| match name {
            "Notes" if pk == "Legal" => Some(Action::EncryptAndSign),
            "Salary" => Some(Action::SignOnly),
            _ => None,
        })
        .build()
        .unwrap();
    let entity = Properties::new()
        .with("Notes", "privileged")
        .with("Salary", 1i64);
    let legal = Keys::new("Legal", "1").unwrap();
    let stored = policy.encrypt(&legal, entity.clone()).await.unwrap();
    assert!(matches!(stored.get("Notes"), Some(EdmValue::Binary(_))));
    assert_eq!(metadata_fields(&stored)[field::ENTRIES], "e:Notes,s:Salary");
    let stored = policy.encrypt(&keys(), entity).await.unwrap();
    assert_eq!(stored.get_str("Notes").unwrap(), Some("privileged"));
    assert_eq!(metadata_fields(&stored)[field::ENTRIES], "s:Salary");
}

#[tokio::test]
async fn projections_of_signed_properties_verify_the_whole_item_or_are_refused() {
    // Through an encrypting table: the listed sign-only properties are fetched too.
    let raw = fixtures::table_on(&fixtures::account(), "encsignproj").await;
    let table = policy().table(&raw);
    table
        .insert(&Entity::new(keys(), employee()))
        .await
        .unwrap();
    let projected = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .select(["LastName"])
        .collect()
        .await
        .unwrap();
    assert_eq!(projected[0].value.get_str("LastName").unwrap(), Some("Cao"));

    // A policy that signs by default cannot name what it protects: refused, nothing sent.
    let by_default = EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties(["Email"])
        .default_action(Action::SignOnly)
        .build()
        .unwrap()
        .table(&raw);
    let metrics = by_default.account().metrics().clone();
    metrics.reset();
    let error = by_default
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .select(["LastName"])
        .collect()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error:?}");
    assert_eq!(metrics.snapshot().requests(), 0);

    // The projection read of the bag: a sign-only value without the rest of its item cannot
    // be verified.
    let stored = raw.get::<Properties>(&keys()).await.unwrap().unwrap().value;
    let partial: Properties = stored
        .iter()
        .filter(|(n, _)| ["LastName", "Email", METADATA_PROPERTY].contains(n))
        .map(|(n, v)| (n.to_owned(), v.clone()))
        .collect();
    let error = policy()
        .decrypt_projection(TABLE, &keys(), partial)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error:?}");
    assert!(error.to_string().contains("LastName"), "{error}");
    let decrypted = Arc::new(policy())
        .decrypt_projection(TABLE, &keys(), stored)
        .await
        .unwrap();
    assert_eq!(
        decrypted.get_str("Email").unwrap(),
        Some("jun@contoso.example")
    );
}

#[derive(Debug, Clone, PartialEq, tablekit_derive::TableEntity)]
#[table(
    crate = "tablekit_core",
    partition_key = "{department}",
    row_key = "{id:06}"
)]
struct Employee {
    department: String,
    id: u32,
    #[table(encrypt)]
    email: String,
    #[table(sign)]
    salary: i64,
    #[table(plain)]
    last_login: String,
}

#[tokio::test]
async fn a_derived_type_says_which_fields_are_signed_and_which_plain() {
    let policy = EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties_of::<Employee>()
        .sign_only(Employee::signed_properties())
        .plain(Employee::plain_properties())
        .strict()
        .build()
        .unwrap();
    let raw = fixtures::table_on(&fixtures::account(), "encsignderive").await;
    let employees = policy.table(&raw).typed::<Employee>();
    let jun = Employee {
        department: "Sales".into(),
        id: 223,
        email: "jun@contoso.example".into(),
        salary: 90_000,
        last_login: "2026-05-01".into(),
    };
    // Strict: the key fields, stored as properties too, are strings to classify.
    let error = employees.insert(&jun).await.unwrap_err();
    assert!(
        matches!(&error, Error::Encode { property, .. } if property == "Department"),
        "{error:?}"
    );
    let policy = EncryptionPolicy::builder(aes("hr-2026", 1))
        .properties_of::<Employee>()
        .sign_only(Employee::signed_properties())
        .sign_only(["Department"])
        .plain(Employee::plain_properties())
        .strict()
        .build()
        .unwrap();
    let employees = policy.table(&raw).typed::<Employee>();
    employees.insert(&jun).await.unwrap();
    assert_eq!(employees.get(&jun).await.unwrap().unwrap().value, jun);

    let keys = Keys::new("Sales", "000223").unwrap();
    let mut stored = raw.get::<Properties>(&keys).await.unwrap().unwrap().value;
    stored.insert("LastLogin", "2026-06-01");
    raw.replace(&Entity::new(keys.clone(), stored.clone()), IfMatch::Any)
        .await
        .unwrap();
    assert_eq!(
        employees.get(&jun).await.unwrap().unwrap().value.last_login,
        "2026-06-01",
        "a plain field is the writer's to change"
    );
    stored.insert("Salary", 1_000_000i64);
    raw.replace(&Entity::new(keys, stored), IfMatch::Any)
        .await
        .unwrap();
    assert!(
        matches!(employees.get(&jun).await, Err(Error::Corrupt { .. })),
        "a signed field changed"
    );
}
