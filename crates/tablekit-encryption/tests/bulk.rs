//! Bulk writes through an encrypting table, against Azurite: every refusal encryption can make
//! — wherever the operation sits in the bulk write — is made before the first request; a
//! transaction that outgrows the 4 MiB limit once encrypted is split; and a key-encryption key
//! that fails while transactions are being sent fails the operations it could not encrypt,
//! not the ones already written.

mod common;

use std::sync::Arc;

use common::{Counting, aes};
use tablekit_azure::{BulkOptions, OperationOutcome, Table};
use tablekit_core::batch::Operation;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Entity, Error, ErrorKind, Limit};
use tablekit_encryption::{EncryptionPolicy, KeyEncryptionKey};
use tablekit_testkit::fixtures;

/// Encrypts `Email` and every property whose name starts with `Notes`.
fn policy(kek: Arc<dyn KeyEncryptionKey>) -> EncryptionPolicy {
    EncryptionPolicy::builder(kek)
        .properties(["Email"])
        .select_with(|_, _, name| name.starts_with("Notes"))
        .build()
        .expect("policy")
}

async fn encrypting(prefix: &str, kek: Arc<dyn KeyEncryptionKey>) -> Table {
    let table = fixtures::table_on(&fixtures::account(), prefix).await;
    policy(kek).table(&table)
}

/// Entity `i` of `n` spread over 4 partitions, with the two encrypted strings and a plain one.
fn row(i: usize) -> Entity<Properties> {
    Entity::try_new(
        format!("p{}", i % 4),
        format!("{i:05}"),
        Properties::new()
            .with("Name", format!("Employee {i}"))
            .with("Email", format!("employee{i}@contoso.example"))
            .with("Notes", "n".repeat(200)),
    )
    .expect("keys")
}

fn inserts(n: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| Operation::insert(&row(i)).expect("operation"))
        .collect()
}

async fn stored_count(table: &Table) -> usize {
    table
        .without_codec()
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .expect("read")
        .len()
}

/// What a refusal must be.
type Expected = dyn Fn(&Error) -> bool;

#[tokio::test]
async fn bad_input_anywhere_in_a_bulk_write_is_refused_before_the_first_request() {
    let table = encrypting("encbulkbad", aes("k1", 1)).await;
    let metrics = table.account().metrics().clone();
    // Each bad operation sits at the end of a bulk write of 800 valid ones, in a partition
    // whose transactions would be sent first.
    let cjk = "東".repeat(21_900); // 43,800 bytes as UTF-16; 65,700 + 16 once encrypted
    let wide = (0..17).fold(Properties::new(), |p, n| {
        p.with(format!("Notes{n:02}"), "東".repeat(21_000))
    });
    let bad: Vec<(&str, Operation, Box<Expected>)> = vec![
        (
            "a selected property that is not a string",
            Operation::insert(
                &Entity::try_new("p0", "bad", Properties::new().with("Email", 7i32)).unwrap(),
            )
            .unwrap(),
            Box::new(|e| e.kind() == ErrorKind::Encode),
        ),
        (
            "a value that fits in plain text but not once encrypted",
            Operation::insert(
                &Entity::try_new("p0", "bad", Properties::new().with("Notes", cjk.as_str()))
                    .unwrap(),
            )
            .unwrap(),
            Box::new(|e| {
                matches!(
                    e,
                    Error::LimitExceeded {
                        limit: Limit::PropertyBytes { .. },
                        ..
                    }
                )
            }),
        ),
        (
            "an entity that fits in plain text but not once encrypted",
            Operation::insert(
                &Entity::try_new("p0", "bad", {
                    // Encrypting all 17 values (63,016 bytes each) passes 1 MiB; in plain text
                    // they take 42,000 bytes each.
                    let mut p = wide.clone();
                    p.insert("Email", "x");
                    p
                })
                .unwrap(),
            )
            .unwrap(),
            Box::new(|e| {
                matches!(
                    e,
                    Error::LimitExceeded {
                        limit: Limit::EntityBytes,
                        ..
                    }
                )
            }),
        ),
        (
            "a merge",
            Operation::upsert_merge(&row(900)).unwrap(),
            Box::new(|e| e.kind() == ErrorKind::InvalidArgument),
        ),
    ];
    for (what, op, expected) in bad {
        metrics.reset();
        let mut ops = inserts(800);
        ops.push(op);
        let error = table
            .bulk_write(ops, BulkOptions::default())
            .await
            .expect_err(what);
        assert!(expected(&error), "{what}: {error:?}");
        assert_eq!(metrics.snapshot().requests(), 0, "{what}");
        assert_eq!(stored_count(&table).await, 0, "{what}: nothing written");
    }
}

#[tokio::test]
async fn a_transaction_that_outgrows_4_mib_once_encrypted_is_split() {
    // 100 entities of one partition, each with a 32,000-character note: 3.2 MB in plain
    // text, one transaction; 4.3 MB once encrypted (base64 of 32,016 bytes each).
    let (plain, encrypted) = (
        fixtures::table_on(&fixtures::account(), "encbulkbig").await,
        encrypting("encbulkbig", aes("k1", 1)).await,
    );
    let ops = || -> Vec<Operation> {
        (0..100)
            .map(|i| {
                Operation::insert(
                    &Entity::try_new(
                        "p0",
                        format!("{i:03}"),
                        Properties::new().with("Notes", "n".repeat(32_000)),
                    )
                    .unwrap(),
                )
                .unwrap()
            })
            .collect()
    };
    let sent_plain = plain
        .bulk_write(ops(), BulkOptions::default())
        .await
        .unwrap();
    assert!(sent_plain.is_complete());
    assert_eq!(sent_plain.transactions, 1);
    let sent = encrypted
        .bulk_write(ops(), BulkOptions::default())
        .await
        .unwrap();
    assert!(sent.is_complete(), "{sent:?}");
    assert_eq!(sent.transactions, 2, "split below 4 MiB");
    let read = encrypted
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap();
    assert_eq!(read.len(), 100);
    assert!(
        read.iter()
            .all(|s| s.value.get_str("Notes").unwrap().map(str::len) == Some(32_000))
    );
}

#[tokio::test]
async fn a_key_that_fails_mid_write_fails_what_it_could_not_encrypt_and_nothing_else() {
    let kek = Counting::failing_after(aes("k1", 1), 1_000);
    let table = encrypting("encbulkkek", kek).await;
    let report = table
        .bulk_write(inserts(2_000), BulkOptions::default())
        .await
        .unwrap();
    let (written, failed) = (report.written(), report.failed());
    assert_eq!(written + failed, 2_000, "no outcome unknown: {report:?}");
    assert!(
        written >= 900 && failed >= 900,
        "{written} written, {failed} failed"
    );
    for (_, error) in report.failures() {
        assert!(error.to_string().contains("key store"), "{error}");
    }
    assert_eq!(stored_count(&table).await, written);
    // Every entity stored is one the report calls written, and it decrypts.
    let read = table
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap();
    for stored in &read {
        let i: usize = stored.keys.rk().parse().unwrap();
        assert!(
            matches!(report.outcomes[i], OperationOutcome::Written(_)),
            "{} stored but reported {:?}",
            stored.keys,
            report.outcomes[i]
        );
        assert_eq!(
            stored.value.get("Email"),
            Some(&EdmValue::from(format!("employee{i}@contoso.example")))
        );
    }
}
