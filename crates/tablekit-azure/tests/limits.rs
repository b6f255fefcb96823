//! Service limits (PATTERNS.md claims 1–4, 6–8, 13, 14): tablekit refuses what Azure would
//! refuse, before any request — including what Azurite would wrongly accept — and the exact
//! boundaries pass.

mod common;

use serde::{Deserialize, Serialize};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{EdmValue, Entity, Error, ErrorKind, Keys, Limit, Properties};

fn props(n: usize) -> Properties {
    (0..n)
        .map(|i| (format!("P{i}"), EdmValue::Int32(1)))
        .collect()
}

/// Awaits `op` (futures are lazy: nothing was sent yet) and asserts it failed with `kind`
/// without sending anything.
async fn refused<T: std::fmt::Debug>(
    table: &tablekit_azure::Table,
    kind: ErrorKind,
    op: impl std::future::Future<Output = Result<T, Error>>,
) {
    let before = table.account().metrics().snapshot();
    let result = op.await;
    assert!(matches!(&result, Err(e) if e.kind() == kind), "{result:?}");
    assert_eq!(
        table
            .account()
            .metrics()
            .snapshot()
            .since(&before)
            .requests(),
        0,
        "refused before sending"
    );
}

#[tokio::test]
async fn boundaries_pass_and_one_past_is_refused_without_a_request() {
    let table = common::table("limits").await;
    // Claim 6: 252 user properties pass, 253 are refused (Azurite itself accepts 253).
    table
        .insert(&Entity::try_new("p", "252", props(252)).unwrap())
        .await
        .unwrap();
    let too_many = Entity::try_new("p", "253", props(253)).unwrap();
    refused(&table, ErrorKind::LimitExceeded, table.insert(&too_many)).await;
    // Claim 7: 1 MiB entities (as the service counts) — 16 binary properties of 64 KiB exceed it.
    let big: Properties = (0..16)
        .map(|i| (format!("B{i}"), EdmValue::Binary(vec![0; 65_536])))
        .collect();
    let big = Entity::try_new("p", "big", big).unwrap();
    refused(&table, ErrorKind::LimitExceeded, table.insert(&big)).await;
    // 64 KiB per string, counted in UTF-16: 32,768 characters pass, 32,769 do not.
    table
        .insert(
            &Entity::try_new("p", "s", Properties::new().with("S", "x".repeat(32_768))).unwrap(),
        )
        .await
        .unwrap();
    let long = Entity::try_new("p", "s2", Properties::new().with("S", "x".repeat(32_769))).unwrap();
    refused(&table, ErrorKind::LimitExceeded, table.insert(&long)).await;
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn keys_are_limited_to_512_utf16_units_by_tablekit_and_azurite_alike() {
    let table = common::table("keysize").await;
    for key in ["a".repeat(512), "é".repeat(512)] {
        let keys = Keys::new("p", key.as_str()).unwrap();
        table
            .insert(&Entity::new(keys.clone(), Properties::new()))
            .await
            .unwrap();
        assert!(table.get::<Properties>(&keys).await.unwrap().is_some());
    }
    for key in ["a".repeat(513), "é".repeat(513)] {
        assert!(matches!(
            Keys::new("p", key),
            Err(Error::LimitExceeded {
                limit: Limit::KeyBytes(_),
                actual: 1026
            })
        ));
    }
    // The emulator's own boundary, observed through the raw SDK (which does not validate):
    // 512 two-byte characters are accepted, 513 are refused — it counts UTF-16 units too.
    #[derive(Serialize, Deserialize)]
    struct Raw {
        #[serde(rename = "PartitionKey")]
        pk: String,
        #[serde(rename = "RowKey")]
        rk: String,
    }
    #[derive(Deserialize)]
    struct Empty {}
    if tablekit_testkit::TestStorage::shared()
        .unwrap()
        .is_emulator()
    {
        let client = table.client();
        let accepted = client
            .insert::<_, Empty>(Raw {
                pk: "raw".into(),
                rk: "é".repeat(512),
            })
            .unwrap()
            .await;
        let refused = client
            .insert::<_, Empty>(Raw {
                pk: "raw".into(),
                rk: "é".repeat(513),
            })
            .unwrap()
            .await;
        assert!(
            accepted.is_ok() && refused.is_err(),
            "Azurite's key boundary changed"
        );
    }
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn transactions_outside_the_limits_are_refused_before_sending() {
    let table = common::table("txlimits").await;
    let op = |pk: &str, rk: usize, payload: usize| {
        Operation::insert(
            &Entity::try_new(
                pk,
                format!("{rk:03}"),
                Properties::new().with("B", vec![1u8; payload]),
            )
            .unwrap(),
        )
        .unwrap()
    };
    // Claim 1: 100 operations commit atomically; 101 are refused and nothing is applied.
    table
        .submit(&BatchPlan::atomic((0..100).map(|i| op("p", i, 1))).unwrap())
        .await
        .unwrap();
    let err = BatchPlan::atomic((100..201).map(|i| op("p", i, 1))).unwrap_err();
    assert!(matches!(
        err,
        Error::LimitExceeded {
            limit: Limit::TransactionOperations,
            actual: 101
        }
    ));
    // Claim 2: two PartitionKeys (Azurite would accept them; Azure refuses).
    assert!(matches!(
        BatchPlan::atomic([op("a", 1, 1), op("b", 1, 1)]),
        Err(Error::CrossPartitionTransaction { .. })
    ));
    // Claim 3: the same entity twice.
    assert!(matches!(
        BatchPlan::atomic([op("p", 500, 1), op("p", 500, 1)]),
        Err(Error::DuplicateInTransaction { .. })
    ));
    // Claim 4: a body of 4 MiB or more (Azurite does not enforce it).
    let heavy = BatchPlan::atomic((300..360).map(|i| op("p", i, 60_000))).unwrap();
    refused(&table, ErrorKind::LimitExceeded, table.submit(&heavy)).await;
    assert_eq!(
        table.query::<Properties>().collect().await.unwrap().len(),
        100
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn forbidden_key_characters_and_bad_table_names() {
    for key in [
        "a/b", "a\\b", "a#b", "a?b", "a\u{1}b", "a\u{7f}b", "a\u{9f}b",
    ] {
        assert_eq!(
            Keys::new("p", key).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{key:?}"
        );
    }
    let account = common::account();
    for name in ["1abc", "ab", "a-b", "tables", "Tables"] {
        assert_eq!(
            account.table(name).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{name}"
        );
    }
    assert_eq!(account.metrics().snapshot().requests(), 0);
}
