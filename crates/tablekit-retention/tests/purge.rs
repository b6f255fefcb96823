//! Partition purges against Azurite: 100 deletes per transaction, scan pages, progress,
//! re-runs and entities deleted under the purge.

mod common;

use std::sync::{Arc, Mutex};

use tablekit_azure::{RequestKind, Table};
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, ErrorKind, Properties};
use tablekit_retention::{PurgeOptions, purge_partition, purge_where};

/// Inserts `n` entities into partition `pk` and returns their `(PartitionKey, RowKey)`s.
async fn fill(table: &Table, pk: &str, n: usize) -> Vec<(String, String)> {
    let keys: Vec<(String, String)> = (0..n).map(|i| (pk.to_owned(), format!("{i:06}"))).collect();
    let ops = keys
        .iter()
        .map(|(pk, rk)| {
            let payload = Properties::new().with("Payload", "x".repeat(64));
            Operation::insert(&Entity::try_new(pk, rk, payload).unwrap()).unwrap()
        })
        .collect();
    let report = table.bulk_write(ops, Default::default()).await.unwrap();
    assert!(report.is_complete());
    keys
}

async fn count(table: &Table, pk: &str) -> usize {
    table
        .typed::<Properties>()
        .query()
        .filter(Filter::partition(pk))
        .collect()
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn purging_2500_entities_takes_25_transactions_and_3_scan_pages() {
    let table = common::table("purge").await;
    let metrics = table.account().metrics().clone();
    fill(&table, "user42", 2_500).await;
    fill(&table, "user43", 50).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let options = PurgeOptions::default().with_progress(move |p| log.lock().unwrap().push(*p));

    metrics.reset();
    let done = purge_partition(&table, "user42", options).await.unwrap();
    let spent = metrics.snapshot();
    common::assert_requests(&spent, Some(RequestKind::Transaction), 25); // 100 deletes each
    common::assert_requests(&spent, Some(RequestKind::Query), 3); // keys read 1,000 at a time
    common::assert_requests(&spent, None, 28);
    assert_eq!(
        (
            done.pages,
            done.scanned,
            done.deleted,
            done.already_gone,
            done.transactions,
            done.rechecks
        ),
        (3, 2_500, 2_500, 0, 25, 0)
    );
    let reported: Vec<(usize, usize, Option<usize>)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|p| (p.done, p.requests, p.total))
        .collect();
    // After each page: the entities gone so far, and the scan pages and transactions sent.
    assert_eq!(
        reported,
        [(1_000, 11, None), (2_000, 22, None), (2_500, 28, None)]
    );
    assert_eq!(count(&table, "user42").await, 0);
    assert_eq!(
        count(&table, "user43").await,
        50,
        "other partitions are untouched"
    );

    // Re-running a finished purge is one scan request and no deletes.
    metrics.reset();
    let again = purge_partition(&table, "user42", PurgeOptions::default())
        .await
        .unwrap();
    assert_eq!((again.deleted, again.transactions), (0, 0));
    common::assert_requests(&metrics.snapshot(), None, 1);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn two_purges_racing_on_one_partition_both_finish() {
    let table = common::table("purgerace").await;
    fill(&table, "p", 1_000).await;
    let options = PurgeOptions::default().with_page_size(200);
    let (a, b) = tokio::join!(
        purge_partition(&table, "p", options.clone()),
        purge_partition(&table, "p", options)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    for p in [a, b] {
        assert_eq!(p.deleted + p.already_gone, p.scanned, "{p:?}");
    }
    // Each entity was deleted by one of them; a transaction retried after a transient failure
    // may also count, as deleted, entities the other purge deleted in between (see
    // `PurgeReport::deleted`).
    assert!(a.deleted + b.deleted >= 1_000, "{a:?} {b:?}");
    assert_eq!(count(&table, "p").await, 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_purge_by_filter_deletes_only_matches() {
    let table = common::table("purgewhere").await;
    fill(&table, "p", 300).await;
    let old = Filter::row_range(
        "p",
        std::ops::Bound::Unbounded,
        std::ops::Bound::Excluded("000120"),
    );
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let done = purge_where(&table, old, PurgeOptions::default().with_concurrency(2))
        .await
        .unwrap();
    assert_eq!((done.deleted, done.transactions), (120, 2));
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Transaction), 2);
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Query), 1);
    assert_eq!(count(&table, "p").await, 180);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn bad_input_and_missing_tables_are_reported() {
    let table = common::table("purgebad").await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let err = purge_partition(&table, "a/b", PurgeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = purge_partition(&table, "p", PurgeOptions::default().with_page_size(1_001))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LimitExceeded);
    let err = purge_where(
        &table,
        Filter::partition("p"),
        PurgeOptions::default().with_page_size(0),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{err}");
    common::assert_requests(&metrics.snapshot(), None, 0);

    table.delete_table().await.unwrap();
    let err = purge_partition(&table, "p", PurgeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}
