//! Scenario 1: a bulk write under a 10 % fault rate (connection resets, 503s, lost responses)
//! stores every entity exactly once, and what it reports is what is stored.

mod common;

use std::collections::HashMap;

use tablekit_core::batch::Operation;
use tablekit_core::{Entity, Properties};
use tablekit_testkit::Fault;

#[tokio::test]
async fn bulk_write_under_ten_percent_faults_loses_and_duplicates_nothing() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultbulk").await;
    let n = 10_000;
    let ops: Vec<Operation> = (0..n)
        .map(|i| {
            let value = Properties::new()
                .with("N", i as i64)
                .with("Pad", "x".repeat(64));
            // 1,000 partitions of 10: 1,000 transactions, so ~100 faults land.
            Operation::insert(
                &Entity::try_new(format!("p{:03}", i % 1_000), format!("{i:06}"), value).unwrap(),
            )
            .unwrap()
        })
        .collect();
    p.table.set_random(
        0.10,
        vec![Fault::Reset, Fault::Status(503), Fault::DropResponse],
        0x7ab1e,
    );
    let report = table.bulk_write(ops, Default::default()).await.unwrap();
    let faults = p.table.stats().faults_injected;
    p.table.clear();

    let stored: HashMap<String, tablekit_core::Stored<Properties>> = table
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.rk().to_owned(), s))
        .collect();
    assert!(
        report.is_complete(),
        "every operation succeeded: {:?}",
        report.failures().next()
    );
    assert_eq!(
        stored.len(),
        n,
        "every entity present exactly once (keys are unique per table)"
    );
    for (i, outcome) in report.outcomes.iter().enumerate() {
        let s = &stored[&format!("{i:06}")];
        assert_eq!(s.value.get_i64("N"), Some(i as i64));
        match outcome {
            tablekit_azure::OperationOutcome::Written(Some(etag)) => {
                assert_eq!(etag, &s.etag, "reported ETag is the stored one")
            }
            other => panic!("operation {i}: {other:?}"),
        }
    }
    println!(
        "scenario 1: {n} inserts in {} transactions; faults injected: {} resets, {} 503s, {} lost responses; lost 0, duplicated 0",
        report.transactions, faults.reset, faults.status, faults.drop_response
    );
    assert!(
        faults.reset > 0 && faults.status > 0 && faults.drop_response > 0,
        "the whole fault mix ran: {faults:?}"
    );
    table.delete_table().await.unwrap();
}
