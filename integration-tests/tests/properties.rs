//! Scenario 4: random entities — arbitrary valid Unicode keys, every EDM type with its
//! extremes — round-trip exactly; random invalid input is refused with a typed error and no
//! request.

mod common;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tablekit_core::batch::Operation;
use tablekit_core::edm::{max_datetime, min_datetime};
use tablekit_core::{EdmValue, Entity, ErrorKind, Keys, Properties};

fn key() -> impl Strategy<Value = String> {
    // Any characters but the forbidden ones; up to 100 characters (well inside 1 KiB).
    proptest::collection::vec(
        any::<char>().prop_filter(
            "allowed in keys",
            |c| !matches!(c, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'),
        ),
        0..100,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn datetime() -> impl Strategy<Value = DateTime<Utc>> {
    prop_oneof![
        Just(min_datetime()),
        Just(max_datetime()),
        (
            min_datetime().timestamp()..=max_datetime().timestamp(),
            0u32..10_000_000
        )
            .prop_map(|(s, t)| DateTime::from_timestamp(s, t * 100).unwrap()),
    ]
}

fn value() -> impl Strategy<Value = EdmValue> {
    prop_oneof![
        any::<String>().prop_map(EdmValue::String),
        prop_oneof![Just(i32::MIN), Just(i32::MAX), any::<i32>()].prop_map(EdmValue::Int32),
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just((1i64 << 53) + 1),
            any::<i64>()
        ]
        .prop_map(EdmValue::Int64),
        prop_oneof![
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            any::<f64>().prop_filter("NaN is not equal to itself", |f| !f.is_nan())
        ]
        .prop_map(EdmValue::Double),
        any::<bool>().prop_map(EdmValue::Boolean),
        datetime().prop_map(EdmValue::DateTime),
        any::<u128>().prop_map(|u| EdmValue::Guid(uuid::Uuid::from_u128(u))),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(EdmValue::Binary),
    ]
}

fn entity() -> impl Strategy<Value = (String, String, Properties)> {
    (
        key(),
        key(),
        proptest::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,30}", value(), 0..12).prop_filter(
            "system names are not user properties",
            |m| {
                !m.keys()
                    .any(|k| matches!(k.as_str(), "PartitionKey" | "RowKey" | "Timestamp"))
            },
        ),
    )
        .prop_map(|(pk, rk, props)| (pk, rk, props.into_iter().collect()))
}

#[tokio::test]
async fn five_hundred_random_entities_round_trip_exactly() {
    let account = common::account(common::patient());
    let table = common::table(&account, "roundtrips").await;
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[4; 32]),
    );
    let mut entities = std::collections::BTreeMap::new();
    while entities.len() < 500 {
        let (pk, rk, props) = entity().new_tree(&mut runner).unwrap().current();
        entities.insert(Keys::new(pk, rk).unwrap(), props);
    }
    let ops = entities
        .iter()
        .map(|(k, p)| Operation::insert(&Entity::new(k.clone(), p.clone())).unwrap())
        .collect();
    let report = table.bulk_write(ops, Default::default()).await.unwrap();
    assert!(
        report.is_complete(),
        "{:?}",
        report.outcomes.iter().find(|o| !o.is_written())
    );
    for (keys, props) in &entities {
        let stored = table
            .get::<Properties>(keys)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{keys} missing"));
        assert_eq!(&stored.value, props, "{keys}");
    }
    println!("scenario 4: 500 random entities with every EDM type round-tripped exactly");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn random_invalid_input_is_refused_without_a_request() {
    let account = common::account(common::patient());
    let table = common::table(&account, "invalid").await;
    account.metrics().reset();
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[9; 32]),
    );
    let bad_key = (
        key(),
        prop_oneof![
            Just('/'),
            Just('\\'),
            Just('#'),
            Just('?'),
            Just('\u{0}'),
            Just('\u{1f}'),
            Just('\u{7f}'),
            Just('\u{9f}')
        ],
        key(),
    )
        .prop_map(|(a, c, b)| format!("{a}{c}{b}"));
    let bad_name = prop_oneof![
        "[0-9][A-Za-z]{0,5}".prop_map(String::from),
        "[A-Za-z]{1,5}[ .\\-@][A-Za-z]{0,5}".prop_map(String::from),
        Just("PartitionKey".to_owned()),
        Just("x".repeat(256))
    ];
    let mut refused = 0;
    for _ in 0..200 {
        let key = bad_key.new_tree(&mut runner).unwrap().current();
        assert_eq!(
            Keys::new("p", key.as_str()).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let name = bad_name.new_tree(&mut runner).unwrap().current();
        let err = table
            .insert(&Entity::try_new("p", "r", Properties::new().with(name.as_str(), 1)).unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::InvalidInput | ErrorKind::LimitExceeded
            ),
            "{name:?}: {err}"
        );
        let oversized = Properties::new().with("S", "é".repeat(32_769));
        assert_eq!(
            table
                .insert(&Entity::try_new("p", "r", oversized).unwrap())
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::LimitExceeded
        );
        refused += 3;
    }
    assert_eq!(
        account.metrics().snapshot().requests(),
        0,
        "no invalid input reached the service"
    );
    println!("scenario 4: {refused} invalid inputs refused with typed errors and 0 requests");
    table.delete_table().await.unwrap();
}
