//! Scenario 5: hostile strings used as query values — quotes, `' or true or '`, `%`, Unicode,
//! control characters — only ever match entities whose property equals the string.

mod common;

use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Properties};

fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("' or true or '".to_owned()),
        Just("x' or PartitionKey ne '".to_owned()),
        Just("'".to_owned()),
        Just("''".to_owned()),
        Just("%27%20or%201%20eq%201".to_owned()),
        Just(")) or ((".to_owned()),
        "[\\PC\\p{Cc}'%+&#?/\\\\ ]{0,24}",
        any::<String>().prop_map(|s| s.chars().take(40).collect()),
    ]
}

#[tokio::test]
async fn a_thousand_hostile_values_match_only_themselves() {
    let account = common::account(common::patient());
    let table = common::table(&account, "injection").await;
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let values: Vec<String> = (0..1_000)
        .map(|_| hostile().new_tree(&mut runner).unwrap().current())
        .collect();
    let ops = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Operation::insert(
                &Entity::try_new(
                    "inj",
                    format!("{i:04}"),
                    Properties::new().with("V", v.as_str()),
                )
                .unwrap(),
            )
            .unwrap()
        })
        .collect();
    assert!(
        table
            .bulk_write(ops, Default::default())
            .await
            .unwrap()
            .is_complete()
    );
    for value in &values {
        let expected: Vec<String> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| *v == value)
            .map(|(i, _)| format!("{i:04}"))
            .collect();
        let found = table
            .query::<Properties>()
            .filter(Filter::partition("inj").and(Filter::eq("V", value.as_str())))
            .collect()
            .await
            .unwrap();
        let found: Vec<String> = found.iter().map(|s| s.keys.rk().to_owned()).collect();
        assert_eq!(found, expected, "value {value:?}");
    }
    println!(
        "scenario 5: 1,000 hostile values queried; every query returned exactly its own matches"
    );
    table.delete_table().await.unwrap();
}
