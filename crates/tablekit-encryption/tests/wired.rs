//! Encryption wired into `Table` (`EncryptionPolicy::table`), against Azurite: a derived type
//! with `#[table(encrypt)]` fields through a typed table, queries, transactions and bulk
//! writes, the refusals (merges, filters on encrypted properties) with no request sent, a
//! tampered entity read through the table, and two pattern crates — an intra-partition index
//! and a log tail — used unchanged over an encrypting table, with the requests of a plain one.

use std::error::Error as StdError;
use std::sync::Arc;

use chrono::{TimeZone as _, Utc};
use serde::{Deserialize, Serialize};
use tablekit_azure::{BulkOptions, MetricsSnapshot, RequestKind, Table, TypedTable, WriteMode};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys, TableEntity as _};
use tablekit_derive::TableEntity;
use tablekit_encryption::{AesKeyWrap, EncryptionPolicy, METADATA_PROPERTY, OVERHEAD};
use tablekit_index::{CopyHandle, CopySpec, IndexRead as _, IndexSpec, IntraPartitionIndex};
use tablekit_logtail::LogTail;
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
    first_name: String,
    last_name: String,
    #[table(encrypt)]
    email: String,
    #[table(encrypt)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    home_address: Option<String>,
    age: i32,
}

fn employee(department: &str, id: u32) -> Employee {
    Employee {
        department: department.into(),
        id,
        first_name: format!("Jun{id}"),
        last_name: "Cao".into(),
        email: format!("jun{id}@contoso.example"),
        home_address: (id % 2 == 0).then(|| format!("Zoë Ångström, 東京都港区 {id} 🏠")),
        age: 30 + (id % 40) as i32,
    }
}

fn policy() -> EncryptionPolicy {
    let kek = Arc::new(AesKeyWrap::new("employees-2026", &[0x42; 32]).expect("key"));
    EncryptionPolicy::for_type::<Employee>(kek).expect("policy")
}

/// A plain and an encrypting table on accounts of their own (so their metrics are apart).
async fn plain_and_encrypted(prefix: &str) -> (Table, Table) {
    let plain = fixtures::table_on(&fixtures::account(), prefix).await;
    let raw = fixtures::table_on(&fixtures::account(), prefix).await;
    (plain, policy().table(&raw))
}

/// The requests of each kind a snapshot counts, to compare two runs.
fn by_kind(s: &MetricsSnapshot) -> Vec<(RequestKind, u64)> {
    [
        RequestKind::Insert,
        RequestKind::Replace,
        RequestKind::UpsertReplace,
        RequestKind::Get,
        RequestKind::Query,
        RequestKind::Transaction,
        RequestKind::Delete,
    ]
    .into_iter()
    .map(|k| (k, s.requests_of(k)))
    .collect()
}

fn assert_same_requests(plain: &MetricsSnapshot, encrypted: &MetricsSnapshot) {
    assert_eq!(
        by_kind(encrypted),
        by_kind(plain),
        "{encrypted:?} vs {plain:?}"
    );
    assert_eq!(encrypted.requests(), plain.requests());
}

/// The stored form of the entity at `keys`, read without the codec.
async fn stored(table: &Table, keys: &Keys) -> Properties {
    table
        .without_codec()
        .get::<Properties>(keys)
        .await
        .expect("read")
        .expect("stored")
        .value
}

/// CRUD through a typed table; returns what was read back.
async fn crud(employees: &TypedTable<Employee>) -> tablekit_core::Result<Vec<Employee>> {
    let jun = employee("Sales", 223);
    let mut read = Vec::new();
    employees.insert(&jun).await?;
    let current = employees.get(&jun).await?.expect("inserted");
    read.push(current.value.clone());
    let moved = Employee {
        email: "jun.cao@fabrikam.example".into(),
        ..jun.clone()
    };
    employees.replace(&moved, current.if_match()).await?;
    let older = employees
        .update_with(&jun, |e| {
            let mut e = e.expect("exists");
            e.age += 1;
            e
        })
        .await?;
    read.push(older.value);
    employees.upsert_replace(&employee("Sales", 224)).await?;
    read.push(
        employees
            .get(("Sales", "000224"))
            .await?
            .expect("upserted")
            .value,
    );
    employees.delete(&jun, IfMatch::Any).await?;
    assert!(employees.get(&jun).await?.is_none());
    Ok(read)
}

#[tokio::test]
async fn a_typed_table_of_an_encrypted_type_round_trips_with_the_requests_of_a_plain_one()
-> TestResult {
    let (plain, encrypted) = plain_and_encrypted("encwcrud").await;
    assert!(plain.codec().is_none() && encrypted.codec().is_some());
    let (expected, plain_cost) = measured(plain.account(), crud(&plain.typed())).await;
    let (read, encrypted_cost) = measured(encrypted.account(), crud(&encrypted.typed())).await;
    assert_eq!(read?, expected?);
    assert_same_requests(&plain_cost, &encrypted_cost);

    // What the service holds: the marked fields as ciphertext, the rest as written.
    let raw = stored(&encrypted, &Keys::new("Sales", "000224")?).await;
    let email = "jun224@contoso.example";
    assert!(
        matches!(raw.get("Email"), Some(EdmValue::Binary(b)) if b.len() == email.len() + OVERHEAD)
    );
    assert!(matches!(raw.get("HomeAddress"), Some(EdmValue::Binary(_))));
    assert!(raw.get_str(METADATA_PROPERTY).unwrap().is_some());
    assert_eq!(raw.get_str("FirstName").unwrap(), Some("Jun224"));
    assert_eq!(raw.get_i64("Age").unwrap(), Some(54));
    Ok(())
}

#[tokio::test]
async fn queries_decrypt_and_a_filter_on_an_encrypted_property_sends_no_request() -> TestResult {
    let (_, table) = plain_and_encrypted("encwquery").await;
    let employees = table.typed::<Employee>();
    let all: Vec<Employee> = (1..=4).map(|id| employee("Sales", id)).collect();
    for e in &all {
        employees.insert(e).await?;
    }

    let by_name = Filter::partition("Sales").and(Employee::LAST_NAME.eq("Cao"));
    let read: Vec<Employee> = employees
        .query()
        .filter(by_name.clone())
        .collect()
        .await?
        .into_iter()
        .map(|s| s.value)
        .collect();
    assert_eq!(read, all);

    // A projection of encrypted properties decrypts them (the metadata is asked for too).
    let emails = table
        .query::<Properties>()
        .filter(by_name)
        .select(["Email", "HomeAddress"])
        .collect()
        .await?;
    assert_eq!(emails.len(), 4);
    for (stored, e) in emails.iter().zip(&all) {
        let mut expected = Properties::new().with("Email", e.email.as_str());
        if let Some(home) = &e.home_address {
            expected.insert("HomeAddress", home.as_str());
        }
        assert_eq!(stored.value, expected);
    }

    let metrics = table.account().metrics().clone();
    metrics.reset();
    let refused = [
        Employee::EMAIL.eq("jun1@contoso.example"),
        Filter::partition("Sales").and(Filter::not(Employee::HOME_ADDRESS.ne("x"))),
        Filter::raw("PartitionKey eq 'Sales' and Email eq 'jun1@contoso.example'"),
    ];
    for filter in refused {
        let error = employees
            .query()
            .filter(filter)
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(error, Error::InvalidFilter { .. }), "{error:?}");
    }
    let error = table
        .query::<Properties>()
        .filter(Employee::EMAIL.eq("x"))
        .first()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidFilter { .. }), "{error:?}");
    assert_eq!(metrics.snapshot().requests(), 0);
    Ok(())
}

#[tokio::test]
async fn merges_are_refused_before_any_request_and_nothing_is_written() -> TestResult {
    let (_, table) = plain_and_encrypted("encwmerge").await;
    let employees = table.typed::<Employee>();
    let jun = employee("Sales", 1);
    let partial = Entity::new(
        Keys::new("Sales", "000001")?,
        Properties::new().with("Email", "new@contoso.example"),
    );
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let errors = [
        employees.merge(&jun, IfMatch::Any).await.unwrap_err(),
        employees.upsert_merge(&jun).await.unwrap_err(),
        table.merge(&partial, IfMatch::Any).await.unwrap_err(),
        table.upsert_merge(&partial).await.unwrap_err(),
        table
            .submit(&BatchPlan::atomic([
                Operation::insert(&employee("Sales", 2))?,
                Operation::upsert_merge(&jun)?,
            ])?)
            .await
            .unwrap_err(),
        employees
            .bulk_write(
                WriteMode::UpsertMerge,
                &[employee("Sales", 3), employee("Sales", 4)],
                BulkOptions::default(),
            )
            .await
            .unwrap_err(),
    ];
    for error in errors {
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error:?}");
        assert!(error.to_string().contains("replace"), "{error}");
    }
    assert_eq!(metrics.snapshot().requests(), 0);
    let anything = table
        .without_codec()
        .query::<Properties>()
        .collect()
        .await?;
    assert!(anything.is_empty(), "nothing was written");
    Ok(())
}

/// A transaction of 3 and a bulk write of 250 (2 partitions); returns what is read back.
async fn batches(table: &Table) -> tablekit_core::Result<Vec<Employee>> {
    let ops = (1..=3)
        .map(|id| Operation::insert(&employee("Sales", id)))
        .collect::<tablekit_core::Result<Vec<_>>>()?;
    table.submit(&BatchPlan::atomic(ops)?).await?;
    // Several transactions per partition, in two partitions.
    let many: Vec<Employee> = (0..700)
        .map(|i| employee(if i < 150 { "Support" } else { "Legal" }, i))
        .collect();
    let report = table
        .typed::<Employee>()
        .bulk_write(WriteMode::Insert, &many, BulkOptions::default())
        .await?;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.transactions, 8);
    let stored = table
        .typed::<Employee>()
        .query()
        .allow_scan()
        .collect()
        .await?;
    // Each outcome is its own operation's (a codec encodes a bulk write in chunks on tasks of
    // their own): the ETag it reports is the one stored for that entity.
    let etags: std::collections::BTreeMap<(String, String), String> = stored
        .iter()
        .map(|s| {
            let key = (s.keys.pk().to_owned(), s.keys.rk().to_owned());
            (key, s.etag.to_string())
        })
        .collect();
    for (employee, outcome) in many.iter().zip(&report.outcomes) {
        let keys = employee.keys()?;
        let key = (keys.pk().to_owned(), keys.rk().to_owned());
        match outcome {
            tablekit_azure::OperationOutcome::Written(Some(etag)) => {
                assert_eq!(Some(&etag.to_string()), etags.get(&key), "{keys}");
            }
            other => panic!("{keys}: {other:?}"),
        }
    }
    Ok(stored.into_iter().map(|s| s.value).collect())
}

#[tokio::test]
async fn transactions_and_bulk_writes_store_ciphertext_in_as_many_requests() -> TestResult {
    let (plain, encrypted) = plain_and_encrypted("encwbatch").await;
    let (expected, plain_cost) = measured(plain.account(), batches(&plain)).await;
    let (read, encrypted_cost) = measured(encrypted.account(), batches(&encrypted)).await;
    let (expected, read) = (expected?, read?);
    assert_eq!(read.len(), 703);
    assert_eq!(read, expected);
    assert_same_requests(&plain_cost, &encrypted_cost);
    for stored in encrypted
        .without_codec()
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await?
    {
        assert!(
            matches!(stored.value.get("Email"), Some(EdmValue::Binary(_))),
            "{}",
            stored.keys
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_tampered_entity_read_through_the_table_is_corrupt_naming_it() -> TestResult {
    let (_, table) = plain_and_encrypted("encwtamper").await;
    let jun = employee("Sales", 7);
    table.insert(&jun).await?;
    let keys = jun.keys()?;
    let mut raw = stored(&table, &keys).await;
    let Some(EdmValue::Binary(mut bytes)) = raw.remove("Email") else {
        panic!("Email is not stored encrypted");
    };
    bytes[15] ^= 1;
    raw.insert("Email", EdmValue::Binary(bytes));
    table
        .without_codec()
        .replace(&Entity::new(keys.clone(), raw), IfMatch::Any)
        .await?;
    let from_get = table.typed::<Employee>().get(&keys).await.unwrap_err();
    let from_query = table
        .typed::<Employee>()
        .query()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap_err();
    for error in [from_get, from_query] {
        match &error {
            Error::Corrupt { target, reason } => {
                assert_eq!(target.table, table.name());
                assert_eq!(target.keys.as_deref(), Some(&keys));
                assert!(reason.contains("`Email`"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn an_encrypted_property_deleted_from_the_stored_entity_is_corrupt_not_absent() -> TestResult
{
    let (_, table) = plain_and_encrypted("encwdel").await;
    let jun = employee("Sales", 8);
    assert!(jun.home_address.is_some());
    table.typed::<Employee>().insert(&jun).await?;
    let keys = jun.keys()?;
    // A writer to the table deletes the encrypted home address and nothing else.
    let mut raw = stored(&table, &keys).await;
    assert!(raw.remove("HomeAddress").is_some());
    table
        .without_codec()
        .replace(&Entity::new(keys.clone(), raw), IfMatch::Any)
        .await?;
    let read = table.typed::<Employee>().get(&keys).await;
    match read {
        Err(Error::Corrupt { target, reason }) => {
            assert_eq!(target.keys.as_deref(), Some(&keys));
            assert!(reason.contains("`HomeAddress`"), "{reason}");
        }
        other => panic!("the deletion went unnoticed: {other:?}"),
    }
    // A projection through the table asks for every property the policy encrypts, so it
    // sees the deletion too, although it selected only the e-mail.
    let projected = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .select(["Email"])
        .collect()
        .await;
    match projected {
        Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("`HomeAddress`")),
        other => panic!("the deletion went unnoticed by a projection: {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_projection_is_refused_before_any_request_when_a_function_chooses_what_is_encrypted()
-> TestResult {
    let raw = fixtures::table_on(&fixtures::account(), "encwproj").await;
    let kek = Arc::new(AesKeyWrap::new("employees-2026", &[0x42; 32])?);
    let table = EncryptionPolicy::builder(kek)
        .select_with(|_, _, name| name.ends_with("Address"))
        .build()?
        .table(&raw);
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let error = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .select(["FirstName"])
        .collect()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error:?}");
    assert!(error.to_string().contains("decrypt_projection"), "{error}");
    assert_eq!(metrics.snapshot().requests(), 0);
    Ok(())
}

/// An intra-partition index keyed by plain properties (the id, and the name), with the
/// handles its lookups take.
fn index(
    table: Table,
) -> (
    IntraPartitionIndex<Employee>,
    CopyHandle<Employee>,
    CopyHandle<Employee>,
) {
    let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
    let by_id = spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let by_name = spec.secondary(CopySpec::new("name", |e: &Employee| {
        format!("{}{}", e.last_name, e.first_name)
    }));
    let spec = spec.build().expect("spec");
    (IntraPartitionIndex::new(table, spec), by_id, by_name)
}

/// Insert, put with a new email, and lookups; returns what the lookups read.
async fn index_round(table: Table) -> tablekit_core::Result<Vec<Employee>> {
    let (index, by_id, by_name) = index(table);
    let jun = employee("Sales", 223);
    index.insert(&jun).await?;
    let moved = Employee {
        email: "jun.cao@fabrikam.example".into(),
        ..jun.clone()
    };
    index.upsert(&moved).await?;
    let mut read = Vec::new();
    read.extend(index.get("Sales", 223).await?.map(|s| s.value));
    read.extend(
        index
            .get_by(&by_name, "Sales", "CaoJun223")
            .await?
            .map(|s| s.value),
    );
    let range = index.range_by(&by_id, "Sales", 200..=299)?;
    read.extend(range.collect().await?.into_iter().map(|s| s.value));
    Ok(read)
}

#[tokio::test]
async fn an_intra_partition_index_works_unchanged_over_an_encrypting_table() -> TestResult {
    let (plain, encrypted) = plain_and_encrypted("encwindex").await;
    let (expected, plain_cost) = measured(plain.account(), index_round(plain.clone())).await;
    let (read, encrypted_cost) =
        measured(encrypted.account(), index_round(encrypted.clone())).await;
    let (expected, read) = (expected?, read?);
    assert_eq!(read.len(), 3);
    assert!(read.iter().all(|e| e.email == "jun.cao@fabrikam.example"));
    assert_eq!(read, expected);
    assert_same_requests(&plain_cost, &encrypted_cost);

    // Every copy holds the email encrypted on its own: other bytes, bound to its own keys.
    let by_id = stored(&encrypted, &Keys::new("Sales", "empid_000223")?).await;
    let by_name = stored(&encrypted, &Keys::new("Sales", "name_CaoJun223")?).await;
    let (Some(EdmValue::Binary(a)), Some(EdmValue::Binary(b))) =
        (by_id.get("Email"), by_name.get("Email"))
    else {
        panic!("copies hold the email in the clear: {by_id:?} {by_name:?}");
    };
    assert_ne!(a, b);
    Ok(())
}

#[tokio::test]
async fn an_index_copy_keyed_by_an_encrypted_property_holds_its_value_in_the_row_key() -> TestResult
{
    // What the book lists under "does not hold": keys are never encrypted, so a copy keyed
    // by an encrypted property stores that property's value in the clear in its RowKey.
    let (_, table) = plain_and_encrypted("encwleak").await;
    let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
    spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL));
    let index = IntraPartitionIndex::new(table.clone(), spec.build()?);
    let jun = employee("Sales", 5);
    index.insert(&jun).await?;
    let found = index.get_by(&by_email, "Sales", jun.email.as_str()).await?;
    assert_eq!(found.map(|s| s.value), Some(jun.clone()));
    let rows = table
        .without_codec()
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await?;
    assert!(
        rows.iter()
            .any(|r| r.keys.rk() == format!("email_{}", jun.email)),
        "the plaintext email is the copy's RowKey"
    );
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Claim {
    amount_cents: i64,
    description: String,
}

/// Appends, reads the newest, and appends a batch twice under the same ids (the second time
/// every item is already there). Returns the newest entries and the two batch reports'
/// (appended, transactions, read-backs).
async fn log_round(
    table: Table,
) -> tablekit_core::Result<(Vec<Claim>, [(usize, usize, usize); 2])> {
    let claims = LogTail::<Claim>::new(table);
    let t0 = Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap();
    claims
        .append_at(
            "000123",
            t0,
            &Claim {
                amount_cents: 4_250,
                description: "Taxi to the airport".into(),
            },
        )
        .await?;
    let items: Vec<_> = (1..=5)
        .map(|i| {
            (
                claims.append_id(),
                t0 + chrono::Duration::minutes(i),
                Claim {
                    amount_cents: i * 100,
                    description: format!("Lunch {i}"),
                },
            )
        })
        .collect();
    let first = claims.append_batch_with_ids("000123", &items).await?;
    let again = claims.append_batch_with_ids("000123", &items).await?;
    let summary = |r: &tablekit_logtail::AppendReport| (r.written(), r.transactions, r.read_backs);
    let newest = claims
        .latest("000123", 3)
        .await?
        .into_iter()
        .map(|e| e.value)
        .collect();
    Ok((newest, [summary(&first), summary(&again)]))
}

#[tokio::test]
async fn a_log_tail_works_unchanged_over_an_encrypting_table() -> TestResult {
    let plain = fixtures::table_on(&fixtures::account(), "encwlogp").await;
    let raw = fixtures::table_on(&fixtures::account(), "encwloge").await;
    let kek = Arc::new(AesKeyWrap::new("claims-2026", &[9; 32])?);
    // Selection by name, for a type without the derive.
    let encrypted = EncryptionPolicy::builder(kek)
        .properties(["Description"])
        .build()?
        .table(&raw);
    let (expected, plain_cost) = measured(plain.account(), log_round(plain.clone())).await;
    let (read, encrypted_cost) = measured(encrypted.account(), log_round(encrypted.clone())).await;
    let (expected, read) = (expected?, read?);
    assert_eq!(read, expected);
    assert_eq!(read.0[0].description, "Lunch 5");
    // The batch sent again is recognised entry by entry, although encrypting it again made
    // other bytes: one transaction refused, one range read, nothing appended twice.
    assert_eq!(read.1, [(5, 1, 0), (5, 1, 1)]);
    assert_same_requests(&plain_cost, &encrypted_cost);

    let rows = raw.query::<Properties>().allow_scan().collect().await?;
    assert_eq!(rows.len(), 6);
    for row in rows {
        assert!(matches!(
            row.value.get("Description"),
            Some(EdmValue::Binary(_))
        ));
        assert!(row.value.get_i64("AmountCents").unwrap().is_some());
    }
    Ok(())
}
