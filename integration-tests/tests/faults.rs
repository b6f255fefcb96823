//! Scenario 1: a bulk write under a 10 % fault rate (connection resets, 503s, lost responses)
//! stores every entity exactly once, and what it reports is what is stored: written is
//! stored, failed is not, unknown is reported as such.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tablekit_azure::{BulkOptions, BulkReport, OperationOutcome};
use tablekit_core::batch::Operation;
use tablekit_core::{Entity, Properties, Stored};
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

    let stored = stored(&table).await;
    let counts = check_outcomes(&report, &stored);
    assert!(
        report.is_complete(),
        "with retries every operation is written: {:?} failed, {:?} unknown",
        report.failures().next(),
        report.unknowns().next()
    );
    assert_eq!(counts.written, n);
    assert_eq!(
        stored.len(),
        n,
        "every entity present exactly once (keys are unique per table)"
    );
    for (i, _) in report.outcomes.iter().enumerate() {
        assert_eq!(
            stored[&format!("{i:06}")].value.get_i64("N").unwrap(),
            Some(i as i64)
        );
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
/// what is stored, every operation it reports written is stored, and the rest is reported
/// unknown.
#[tokio::test]
async fn bulk_write_reports_failed_only_what_is_not_stored() {
    use std::time::Duration;
    use tablekit_azure::{RetryPolicy, Settings};

    let settings = Settings::default()
        .with_retry(RetryPolicy::none())
        .with_request_timeout(Duration::from_millis(2_000));
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
            Fault::Delay(Duration::from_millis(3_000)),
        ],
        0xc1a55,
    );
    let last = Arc::new(Mutex::new(None));
    let options = BulkOptions::default().with_progress({
        let last = last.clone();
        move |progress| *last.lock().unwrap() = Some(*progress)
    });
    let report = table.bulk_write(ops, options).await.unwrap();
    let faults = p.table.stats().faults_injected;
    p.table.clear();
    // Whatever was still on its way lands within this.
    tokio::time::sleep(settles).await;

    let stored = stored(&table).await;
    let counts = check_outcomes(&report, &stored);
    println!(
        "scenario 1b: {n} inserts in {} transactions, {} read-backs; faults: {} resets, {} 503s, {} lost responses, {} delays; written {}, failed {}, unknown {} ({} of them stored)",
        report.transactions,
        report.read_backs,
        faults.reset,
        faults.status,
        faults.drop_response,
        faults.delay,
        counts.written,
        counts.failed,
        counts.unknown,
        counts.unknown_stored
    );
    assert!(
        faults.reset > 0 && faults.status > 0 && faults.drop_response > 0 && faults.delay > 0,
        "the whole fault mix ran: {faults:?}"
    );
    assert!(counts.failed > 0, "503s on the last attempt fail");
    assert!(
        counts.unknown > 0,
        "resets and timeouts on the last attempt leave outcomes unknown"
    );
    assert!(
        report.read_backs > 0,
        "open outcomes are read back: lost responses are found written"
    );
    assert_eq!(counts.written + counts.failed + counts.unknown, n);
    let last = last.lock().unwrap().expect("progress was reported");
    assert_eq!(
        (
            last.done,
            last.succeeded(),
            last.failed,
            last.unknown,
            last.requests
        ),
        (
            n,
            counts.written,
            counts.failed,
            counts.unknown,
            report.transactions + report.read_backs
        ),
        "the last progress is the report's"
    );
    table.delete_table().await.unwrap();
}

/// Every row of `table`, by RowKey, read straight from the emulator: the proxy's connections
/// may still be closing from the faults it injected, and the check must not depend on them.
async fn stored(table: &tablekit_azure::Table) -> HashMap<String, Stored<Properties>> {
    common::account(tablekit_azure::Settings::default())
        .table(table.name())
        .unwrap()
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.rk().to_owned(), s))
        .collect()
}

#[derive(Debug, Default)]
struct Counts {
    written: usize,
    failed: usize,
    unknown: usize,
    unknown_stored: usize,
}

/// Checks each outcome of a bulk write of inserts keyed `{i:06}` against what is stored: a
/// written operation is stored with the reported ETag, a failed one is not stored.
fn check_outcomes(report: &BulkReport, stored: &HashMap<String, Stored<Properties>>) -> Counts {
    let mut counts = Counts::default();
    for (i, outcome) in report.outcomes.iter().enumerate() {
        let row = stored.get(&format!("{i:06}"));
        match outcome {
            OperationOutcome::Written(etag) => {
                counts.written += 1;
                let row = row.unwrap_or_else(|| panic!("operation {i} reported written"));
                assert_eq!(
                    etag.as_ref(),
                    Some(&row.etag),
                    "operation {i}: the stored ETag"
                );
            }
            OperationOutcome::Failed(e) => {
                counts.failed += 1;
                assert!(
                    row.is_none(),
                    "operation {i} reported failed ({e}) is stored"
                );
            }
            OperationOutcome::Unknown(_) => {
                counts.unknown += 1;
                counts.unknown_stored += usize::from(row.is_some());
            }
        }
    }
    counts
}
