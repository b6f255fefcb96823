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

/// Scenario 1b: without retries, so that a tenth of the transactions end in a fault — refused
/// (503), broken before the service saw it (reset), applied with the response lost, or held
/// past the client's timeout and applied afterwards — a bulk write never reports as failed
/// what is stored, and every operation it reports written is stored.
#[tokio::test]
async fn bulk_write_reports_failed_only_what_is_not_stored() {
    use std::time::Duration;
    use tablekit_azure::{RetryPolicy, Settings};

    let settings = Settings {
        retry: RetryPolicy::none(),
        request_timeout: Duration::from_millis(1_000),
        ..Settings::default()
    };
    let settles = settings.write_settles_within();
    let p = common::proxied(settings);
    let table = common::table(&p.account, "faultclass").await;
    let n = 3_000;
    let ops: Vec<Operation> = (0..n)
        .map(|i| {
            let value = Properties::new().with("N", i as i64);
            // 300 partitions of 10: 300 transactions, so ~30 end in a fault.
            Operation::insert(
                &Entity::try_new(format!("p{:03}", i % 300), format!("{i:06}"), value).unwrap(),
            )
            .unwrap()
        })
        .collect();
    p.table.set_random(
        0.10,
        vec![
            Fault::Reset,
            Fault::Status(503),
            Fault::DropResponse,
            // Longer than the request timeout: the client gives up, then the service applies.
            Fault::Delay(Duration::from_millis(1_500)),
        ],
        0xc1a55,
    );
    let report = table.bulk_write(ops, Default::default()).await.unwrap();
    let faults = p.table.stats().faults_injected;
    p.table.clear();
    // Whatever was still on its way lands within this.
    tokio::time::sleep(settles).await;

    let stored: HashMap<String, tablekit_core::Stored<Properties>> = table
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.rk().to_owned(), s))
        .collect();
    let (mut written, mut failed, mut other) = (0, 0, 0);
    for (i, outcome) in report.outcomes.iter().enumerate() {
        let row = stored.get(&format!("{i:06}"));
        match outcome {
            tablekit_azure::OperationOutcome::Written(etag) => {
                written += 1;
                let row = row.unwrap_or_else(|| panic!("operation {i} reported written"));
                assert_eq!(
                    etag.as_ref(),
                    Some(&row.etag),
                    "operation {i}: the stored ETag"
                );
            }
            tablekit_azure::OperationOutcome::Failed(e) => {
                failed += 1;
                assert!(
                    row.is_none(),
                    "operation {i} reported failed ({e}) is stored"
                );
            }
            #[allow(unreachable_patterns)]
            _ => other += 1,
        }
    }
    println!(
        "scenario 1b: {n} inserts; faults: {} resets, {} 503s, {} lost responses, {} delays; written {written}, failed {failed}, other {other}",
        faults.reset, faults.status, faults.drop_response, faults.delay
    );
    table.delete_table().await.unwrap();
}
