//! Searchable encryption: standard beacons stored beside the ciphertext, signed, removed on
//! read; equality through `search`, with the beacon's false positives dropped after
//! decryption; and an intra-partition index keyed by the beacon of an encrypted email, so
//! that a lookup by email works without the email stored in the clear. Against Azurite,
//! counting requests.

mod common;

use std::error::Error as StdError;

use common::{TABLE, aes, assert_failure, field, metadata_fields};
use tablekit_azure::{RequestKind, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys};
use tablekit_derive::TableEntity;
use tablekit_encryption::{BeaconKey, EncryptionPolicy, METADATA_PROPERTY, StandardBeacon};
use tablekit_index::{CopySpec, IndexRead as _, IndexSpec, IntraPartitionIndex};
use tablekit_testkit::fixtures::{self, measured};

type TestResult = Result<(), Box<dyn StdError>>;

#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(
    crate = "tablekit_core",
    partition_key = "{department}",
    row_key = "{id:06}"
)]
struct Employee {
    department: String,
    id: u32,
    last_name: String,
    #[table(encrypt)]
    email: String,
}

fn employee(id: u32, email: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        id,
        last_name: "Cao".into(),
        email: email.into(),
    }
}

/// A beacon of 8 bits: short enough that two addresses sharing it are easy to find.
fn email_beacon() -> StandardBeacon {
    BeaconKey::new("hr-beacons", &[9; 32])
        .unwrap()
        .standard_beacon("Email", 8)
        .unwrap()
}

fn policy() -> EncryptionPolicy {
    EncryptionPolicy::builder(aes("employees-2026", 4))
        .properties_of::<Employee>()
        .beacon(email_beacon())
        .build()
        .unwrap()
}

const JUN: &str = "jun@contoso.example";

/// An address other than [`JUN`] with the same 8-bit beacon: a false positive.
fn colliding_with_jun() -> String {
    let beacon = email_beacon();
    (0..10_000)
        .map(|i| format!("user{i}@contoso.example"))
        .find(|email| beacon.value(email) == beacon.value(JUN))
        .expect("one in 256 addresses shares an 8-bit beacon")
}

/// An address whose beacon differs from [`JUN`]'s.
fn apart_from_jun() -> String {
    let beacon = email_beacon();
    (0..100)
        .map(|i| format!("other{i}@contoso.example"))
        .find(|email| beacon.value(email) != beacon.value(JUN))
        .unwrap()
}

fn keys() -> Keys {
    Keys::new("Sales", "000223").unwrap()
}

fn bag(email: &str) -> Properties {
    Properties::new()
        .with("Email", email)
        .with("LastName", "Cao")
}

#[tokio::test]
async fn a_beacon_is_stored_beside_the_ciphertext_signed_and_removed_on_read() {
    let policy = policy();
    let stored = policy.encrypt(&keys(), bag(JUN)).await.unwrap();
    assert_eq!(
        stored.get_str("_Beacon_Email").unwrap(),
        Some(email_beacon().value(JUN).as_str())
    );
    assert!(stored.get("Email").unwrap().as_bytes().is_some());
    assert_eq!(
        metadata_fields(&stored)[field::ENTRIES],
        "e:Email,s:_Beacon_Email"
    );
    assert_eq!(
        policy
            .decrypt(TABLE, &keys(), stored.clone())
            .await
            .unwrap(),
        bag(JUN)
    );

    // A writer to the table who points the beacon at another value, or removes it, makes
    // the entity a decryption failure.
    let mut moved = stored.clone();
    moved.insert("_Beacon_Email", email_beacon().value(&apart_from_jun()));
    let error = policy.decrypt(TABLE, &keys(), moved).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
    let mut removed = stored;
    removed.remove("_Beacon_Email");
    let error = policy.decrypt(TABLE, &keys(), removed).await.unwrap_err();
    assert_failure(error, &keys(), "_Beacon_Email", "absent");

    // A strict policy needs no classification of the beacon it adds itself.
    let strict = EncryptionPolicy::builder(aes("employees-2026", 4))
        .properties_of::<Employee>()
        .plain(["LastName"])
        .strict()
        .beacon(email_beacon())
        .build()
        .unwrap();
    let stored = strict.encrypt(&keys(), bag(JUN)).await.unwrap();
    assert!(stored.contains("_Beacon_Email"));
    assert_eq!(
        strict.decrypt(TABLE, &keys(), stored).await.unwrap(),
        bag(JUN)
    );

    // Names of beacons are reserved, and a beacon needs an encrypted property.
    let error = policy
        .encrypt(&keys(), bag(JUN).with("_Beacon_Email", "00"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidName { .. }), "{error:?}");
    let error = EncryptionPolicy::builder(aes("k", 1))
        .properties(["Notes"])
        .beacon(email_beacon())
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
}

async fn encrypting_table(prefix: &str) -> (Table, Table) {
    let raw = fixtures::table_on(&fixtures::account(), prefix).await;
    (policy().table(&raw), raw)
}

/// No stored key or string holds an address in the clear.
async fn assert_no_address_in_the_clear(raw: &Table) {
    let rows = raw
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert!(!row.keys.rk().contains('@'), "{:?}", row.keys);
        for (name, value) in row.value.iter() {
            if let EdmValue::String(text) = value {
                assert!(!text.contains('@'), "{:?} {name} = {text}", row.keys);
            }
        }
    }
}

#[tokio::test]
async fn an_equality_on_an_encrypted_email_is_answered_through_its_beacon_in_one_request()
-> TestResult {
    let (table, raw) = encrypting_table("encbeacon").await;
    let employees = table.typed::<Employee>();
    let other = colliding_with_jun();
    let apart = apart_from_jun();
    for e in [employee(1, JUN), employee(2, &other), employee(3, &apart)] {
        employees.insert(&e).await?;
    }
    assert_no_address_in_the_clear(&raw).await;

    let policy = policy();
    let by_email = Filter::partition("Sales").and(Employee::EMAIL.eq(JUN));
    let (found, cost) = measured(
        table.account(),
        policy.search::<Employee>(&table, by_email.clone()),
    )
    .await;
    let found: Vec<Employee> = found?.into_iter().map(|s| s.value).collect();
    assert_eq!(found, [employee(1, JUN)]);
    fixtures::assert_requests(&cost, Some(RequestKind::Query), 1);
    fixtures::assert_requests(&cost, None, 1);

    // The service returned the false positive too: the beacon alone matches two.
    let rewritten = policy.beacon_filter(&by_email)?;
    let candidates = table
        .query::<Properties>()
        .filter(rewritten.filter().clone())
        .collect()
        .await?;
    assert_eq!(candidates.len(), 2);
    assert_eq!(
        candidates
            .iter()
            .filter(|c| rewritten.matches(&c.value))
            .count(),
        1
    );

    // The encrypting handle's own query is rewritten the same way: one request, the false
    // positive dropped after decryption.
    let (found, cost) = measured(
        table.account(),
        employees.query().filter(by_email.clone()).collect(),
    )
    .await;
    let found = found?;
    assert_eq!(
        found.iter().map(|s| &s.value).collect::<Vec<_>>(),
        [&employee(1, JUN)]
    );
    fixtures::assert_requests(&cost, None, 1);

    // A projection without the compared property still compares it, and returns only what
    // it selected.
    let projected = table
        .query::<Properties>()
        .filter(by_email.clone())
        .select(["LastName"])
        .collect()
        .await?;
    assert_eq!(projected.len(), 1, "{projected:?}");
    assert_eq!(projected[0].keys, found[0].keys);
    assert_eq!(projected[0].value.get_str("LastName").unwrap(), Some("Cao"));
    assert!(projected[0].value.get("Email").is_none(), "{projected:?}");

    // Per entity too.
    let (good, bad) = employees
        .query()
        .filter(by_email)
        .per_entity()
        .collect()
        .await?;
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(
        good.into_iter().map(|s| s.value).collect::<Vec<_>>(),
        [employee(1, JUN)]
    );

    // An equality under `or` cannot be rewritten: refused before any request.
    let (refused, cost) = measured(
        table.account(),
        employees
            .query()
            .filter(Filter::partition("Sales").or(Employee::EMAIL.eq(JUN)))
            .collect(),
    )
    .await;
    let error = refused.unwrap_err();
    assert!(matches!(&error, Error::InvalidFilter { .. }), "{error:?}");
    assert_eq!(cost.requests(), 0);
    Ok(())
}

#[tokio::test]
async fn an_index_on_an_encrypted_email_finds_by_email_without_storing_it_in_the_clear()
-> TestResult {
    let (table, raw) = encrypting_table("encbeaconidx").await;
    let beacon = email_beacon();
    let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
    spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let key = beacon.clone();
    let by_email = spec.secondary(CopySpec::new("email", move |e: &Employee| {
        key.index_value(&e.email, format_args!("{:06}", e.id))
    }));
    let index = IntraPartitionIndex::new(table.clone(), spec.build()?);
    let other = colliding_with_jun();
    for e in [
        employee(1, JUN),
        employee(2, &other),
        employee(3, &apart_from_jun()),
    ] {
        index.insert(&e).await?;
    }
    // Two entities share Jun's beacon: two copies, not a conflict.
    assert_no_address_in_the_clear(&raw).await;

    let lookup = |email: String| {
        let index = &index;
        let by_email = &by_email;
        let prefix = beacon.index_prefix(&email);
        async move {
            let candidates = index
                .range_by_prefix(by_email, "Sales", &prefix)?
                .collect()
                .await?;
            let count = candidates.len();
            let found: Vec<Employee> = candidates
                .into_iter()
                .map(|s| s.value)
                .filter(|e| e.email == email)
                .collect();
            Ok::<_, Error>((count, found))
        }
    };
    let (read, cost) = measured(table.account(), lookup(JUN.to_owned())).await;
    let (candidates, found) = read?;
    assert_eq!(candidates, 2, "the false positive is read and dropped");
    assert_eq!(found, [employee(1, JUN)]);
    fixtures::assert_requests(&cost, Some(RequestKind::Query), 1);
    fixtures::assert_requests(&cost, None, 1);

    // A changed email moves the copy: the old address finds nothing, the new one finds it.
    let current = index.get("Sales", 1).await?.expect("stored");
    let moved = employee(1, "jun.cao@fabrikam.example");
    index.replace(&current, &moved).await?;
    assert_eq!(lookup(JUN.to_owned()).await?.1, []);
    assert_eq!(lookup(moved.email.clone()).await?.1, [moved]);
    assert_eq!(lookup(other.clone()).await?.1, [employee(2, &other)]);
    assert_no_address_in_the_clear(&raw).await;
    Ok(())
}
