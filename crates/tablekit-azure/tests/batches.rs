//! Entity group transactions, bulk writes and ETag loops against Azurite.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use tablekit_azure::{BulkOptions, RequestKind};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys, Properties};

fn insert(pk: &str, rk: &str) -> Operation {
    Operation::insert(&Entity::try_new(pk, rk, Properties::new().with("V", 1)).unwrap()).unwrap()
}

#[tokio::test]
async fn a_failed_transaction_writes_nothing_and_names_the_operation() {
    let table = common::table("atomic").await;
    table
        .insert(&Entity::try_new("p", "002", Properties::new()).unwrap())
        .await
        .unwrap();
    let plan = BatchPlan::atomic([
        insert("p", "000"),
        insert("p", "001"),
        insert("p", "002"),
        insert("p", "003"),
    ])
    .unwrap();
    let metrics = table.account().metrics().clone();
    metrics.reset();
    match table.submit(&plan).await {
        Err(Error::BatchFailed { index: 2, source }) => {
            assert_eq!(source.kind(), ErrorKind::AlreadyExists, "{source}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        metrics.snapshot().requests_of(RequestKind::Transaction),
        1,
        "one transaction = one request"
    );
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        1,
        "nothing of the failed transaction was written"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn invalid_transactions_are_refused_before_any_request() {
    let table = common::table("refused").await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let too_many = BatchPlan::atomic((0..101).map(|i| insert("p", &format!("{i:03}"))));
    assert_eq!(too_many.unwrap_err().kind(), ErrorKind::LimitExceeded);
    let two_partitions =
        BatchPlan::atomic([insert("empid_Sales", "1"), insert("email_Sales", "a")]);
    assert!(
        matches!(two_partitions, Err(Error::CrossPartitionTransaction { .. })),
        "claim 31"
    );
    let duplicate = BatchPlan::atomic([insert("p", "1"), insert("p", "1")]);
    assert!(matches!(
        duplicate,
        Err(Error::DuplicateInTransaction {
            first: 0,
            second: 1,
            ..
        })
    ));
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_100_operation_transaction_commits_with_etags() {
    let table = common::table("hundred").await;
    let plan = BatchPlan::atomic((0..100).map(|i| insert("p", &format!("{i:03}")))).unwrap();
    let done = table.submit(&plan).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].indices, (0..100).collect::<Vec<_>>());
    assert!(done[0].etags.iter().all(|e| e.is_some()));
    let mixed = BatchPlan::atomic([
        Operation::merge(
            &Entity::try_new("p", "000", Properties::new().with("V", 2)).unwrap(),
            IfMatch::Any,
        )
        .unwrap(),
        Operation::delete(("p", "001"), IfMatch::Any).unwrap(),
        Operation::upsert_replace(
            &Entity::try_new("p", "new", Properties::new().with("V", 3)).unwrap(),
        )
        .unwrap(),
    ])
    .unwrap();
    table.submit(&mixed).await.unwrap();
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 100);
    assert_eq!(rows[0].value.get_i64("V").unwrap(), Some(2));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn bulk_write_of_10000_entities_writes_each_once_and_reports_progress() {
    let table = common::table("bulk").await;
    let ops: Vec<Operation> = (0..10_000)
        .map(|i| {
            let value = Properties::new()
                .with("N", i as i64)
                .with("Pad", "x".repeat(100));
            Operation::insert(
                &Entity::try_new(format!("p{}", i % 10), format!("{i:06}"), value).unwrap(),
            )
            .unwrap()
        })
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let last_done = Arc::new(AtomicUsize::new(0));
    let (c, d) = (calls.clone(), last_done.clone());
    let options = BulkOptions::default()
        .with_concurrency(8)
        .with_progress(move |p| {
            c.fetch_add(1, Ordering::Relaxed);
            d.fetch_max(p.done, Ordering::Relaxed);
            assert_eq!(p.total, Some(10_000));
            assert!(p.done <= 10_000);
            // One transaction per call and no read-back: requests follow the calls.
            assert_eq!(p.requests * 100, p.done);
        });
    let report = table.bulk_write(ops, options).await.unwrap();
    assert!(report.is_complete());
    assert_eq!(
        report.transactions, 100,
        "10 partitions × 1,000 = 100 transactions of 100"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 100);
    assert_eq!(last_done.load(Ordering::Relaxed), 10_000);
    let mut ns: Vec<i64> = table
        .query::<Properties>()
        .collect()
        .await
        .unwrap()
        .iter()
        .map(|s| s.value.get_i64("N").unwrap().unwrap())
        .collect();
    ns.sort_unstable();
    assert_eq!(
        ns,
        (0..10_000).collect::<Vec<_>>(),
        "every entity exactly once"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn bulk_write_takes_out_a_refused_operation_and_writes_the_rest() {
    let table = common::table("bulkfail").await;
    table
        .insert(&Entity::try_new("p", "005", Properties::new()).unwrap())
        .await
        .unwrap();
    let ops: Vec<Operation> = (0..10).map(|i| insert("p", &format!("{i:03}"))).collect();
    let report = table.bulk_write(ops, Default::default()).await.unwrap();
    let failures: Vec<(usize, ErrorKind)> = report.failures().map(|(i, e)| (i, e.kind())).collect();
    assert_eq!(failures, [(5, ErrorKind::AlreadyExists)]);
    assert_eq!(report.written(), 9);
    assert_eq!(
        report.transactions, 2,
        "the transaction is re-sent once without the refused operation"
    );
    assert_eq!(
        table.query::<Properties>().collect().await.unwrap().len(),
        10
    );
    table.delete_table().await.unwrap();
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Counter {
    #[serde(rename = "Count")]
    count: i64,
}

#[tokio::test]
async fn sixteen_writers_times_25_increments_end_at_exactly_400() {
    let table = common::table("counter").await;
    let keys = Keys::new("counters", "c").unwrap();
    let metrics = table.account().metrics().clone();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (table, keys) = (table.clone(), keys.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    table
                        .update_with::<Counter, _>(&keys, |c| Counter {
                            count: c.unwrap_or_default().count + 1,
                        })
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let final_value = table.get::<Counter>(&keys).await.unwrap().unwrap();
    assert_eq!(final_value.value.count, 400);
    let snapshot = metrics.snapshot();
    assert!(
        snapshot.conflict_retries > 0,
        "16 writers on one entity must conflict: {snapshot:?}"
    );
    assert_eq!(
        snapshot.conflicts_412 + snapshot.conflicts_409,
        snapshot.conflict_retries
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn line_separators_in_a_transaction_round_trip() {
    // Regression: U+2028/U+2029 unescaped in a batch body make Azurite answer 500 after
    // applying part of the transaction; tablekit escapes them in its JSON.
    let table = common::table("separators").await;
    let text = "a\u{2028}b\u{2029}c";
    let plan = BatchPlan::atomic(["1", "2"].map(|rk| {
        Operation::insert(
            &Entity::try_new(
                "p",
                format!("{rk}{text}"),
                Properties::new().with("V", text),
            )
            .unwrap(),
        )
        .unwrap()
    }))
    .unwrap();
    table.submit(&plan).await.unwrap();
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r.value.get_str("V").unwrap() == Some(text) && r.keys.rk().ends_with(text))
    );
    table.delete_table().await.unwrap();
}

/// Ten inserts of one partition whose `$batch` requests get `faults` in turn (one per attempt,
/// the last one for every attempt after), through a proxy; reads pass untouched.
async fn bulk_under(
    settings: tablekit_azure::Settings,
    faults: &[tablekit_testkit::Fault],
    options: BulkOptions,
) -> (
    tablekit_azure::Table,
    tablekit_azure::BulkReport,
    tablekit_azure::MetricsSnapshot,
    common::Proxied,
) {
    use tablekit_testkit::{Matcher, Occurrences, Rule};
    let p = common::proxied(settings);
    let table = p
        .account
        .table(&tablekit_testkit::unique_table_name("readback"))
        .unwrap();
    table.create().await.unwrap();
    let batches = Matcher::any()
        .with_method("POST")
        .with_path_contains("$batch");
    for (i, fault) in faults.iter().enumerate() {
        let occurrences = if i + 1 == faults.len() {
            Occurrences::All
        } else {
            Occurrences::Nth(1)
        };
        p.table
            .add_rule(Rule::new(batches.clone(), occurrences, *fault));
    }
    let ops: Vec<Operation> = (0..10).map(|i| insert("p", &format!("{i:03}"))).collect();
    let metrics = p.account.metrics().clone();
    metrics.reset();
    let report = table.bulk_write(ops, options).await.unwrap();
    let snapshot = metrics.snapshot();
    p.table.clear();
    (table, report, snapshot, p)
}

#[tokio::test]
async fn a_transaction_whose_every_response_was_lost_is_read_back_with_one_query() {
    use tablekit_testkit::Fault;
    // The first attempt is applied and its response lost; every retry breaks before reaching
    // the service, so the last error says nothing about the first attempt.
    let (table, report, s, _p) = bulk_under(
        common::fast_retries(),
        &[Fault::DropResponse, Fault::Reset],
        BulkOptions::default(),
    )
    .await;
    assert!(
        report.is_complete(),
        "the read-back finds the transaction applied: {:?}",
        report.outcomes
    );
    assert_eq!(
        s.requests_of(RequestKind::Query),
        1,
        "one range read for the transaction: {s:?}"
    );
    assert_eq!(report.read_backs, 1);
    let stored = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .collect()
        .await
        .unwrap();
    assert_eq!(stored.len(), 10);
    for (outcome, row) in report.outcomes.iter().zip(&stored) {
        match outcome {
            tablekit_azure::OperationOutcome::Written(Some(etag)) => assert_eq!(etag, &row.etag),
            other => panic!("{other:?}"),
        }
    }
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_transaction_not_there_after_a_broken_connection_is_unknown_then_failed_once_settled() {
    use tablekit_testkit::Fault;
    // Every attempt breaks before the service sees it; the client cannot know that.
    let settings = common::fast_retries().with_request_timeout(std::time::Duration::from_secs(2));
    let (table, report, s, _p) =
        bulk_under(settings.clone(), &[Fault::Reset], BulkOptions::default()).await;
    assert_eq!(report.unknown(), 10, "{:?}", report.outcomes);
    assert_eq!((report.written(), report.failed()), (0, 0));
    assert!(report.outcomes.iter().all(|o| o.error().is_some()));
    assert_eq!(
        (s.requests_of(RequestKind::Query), report.read_backs),
        (1, 1),
        "one range read: {s:?}"
    );
    table.delete_table().await.unwrap();

    // Waiting until no attempt can land turns "not there" into "not written".
    let (table, report, s, _p) = bulk_under(
        settings,
        &[Fault::Reset],
        BulkOptions::default().with_wait_to_settle(true),
    )
    .await;
    assert_eq!(report.failed(), 10, "{:?}", report.outcomes);
    assert_eq!(
        (s.requests_of(RequestKind::Query), report.read_backs),
        (2, 2),
        "a read before and after the wait: {s:?}"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_transaction_refused_with_503_on_every_attempt_is_failed_without_a_read() {
    use tablekit_testkit::Fault;
    let (table, report, s, _p) = bulk_under(
        common::fast_retries(),
        &[Fault::Status(503)],
        BulkOptions::default(),
    )
    .await;
    assert_eq!(report.failed(), 10, "{:?}", report.outcomes);
    assert_eq!(
        (s.requests_of(RequestKind::Query), report.read_backs),
        (0, 0),
        "a refusal needs no read: {s:?}"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn reinserting_identical_entities_counts_them_written_with_one_read() {
    let table = common::table("identical").await;
    let ops = || -> Vec<Operation> { (0..10).map(|i| insert("p", &format!("{i:03}"))).collect() };
    let first = table
        .bulk_write(ops()[..6].to_vec(), Default::default())
        .await
        .unwrap();
    assert!(first.is_complete());
    // A different entity under one of the keys: that insert is refused for real.
    table
        .insert(&Entity::try_new("p", "007", Properties::new().with("V", 2)).unwrap())
        .await
        .unwrap();
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let report = table
        .bulk_write(ops(), BulkOptions::default().with_accept_identical(true))
        .await
        .unwrap();
    let written: Vec<bool> = report.outcomes.iter().map(|o| o.is_written()).collect();
    assert_eq!(
        written,
        [true, true, true, true, true, true, true, false, true, true],
        "{:?}",
        report.outcomes
    );
    let failures: Vec<(usize, ErrorKind)> = report.failures().map(|(i, e)| (i, e.kind())).collect();
    assert_eq!(failures, [(7, ErrorKind::AlreadyExists)]);
    let s = metrics.snapshot();
    // 409 → one read (000–005 identical, 007 not) → 006, 008, 009 sent again.
    assert_eq!(
        (
            s.requests_of(RequestKind::Transaction),
            s.requests_of(RequestKind::Query)
        ),
        (2, 1),
        "{s:?}"
    );
    assert_eq!((report.transactions, report.read_backs), (2, 1));
    assert_eq!(
        table.query::<Properties>().collect().await.unwrap().len(),
        10
    );
    table.delete_table().await.unwrap();
}
