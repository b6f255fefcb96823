//! Appending again what a batch append did not report as written: through a proxy that breaks,
//! refuses, delays past the client's timeout or loses the response of some transactions, then
//! a re-append of those items leaves every entry in the partition exactly once.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tablekit_azure::{RetryPolicy, Settings, ThroughputPolicy};
use tablekit_core::ErrorKind;
use tablekit_logtail::{AppendId, LogEntry, LogTail};
use tablekit_testkit::fixtures::proxied;
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule, unique_table_name};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Claim {
    seq: i64,
}

#[tokio::test]
async fn reappending_what_was_not_reported_written_duplicates_nothing() {
    // No governor: the injected 503 would cut the budget of the one partition written, and
    // with this short deadline the next transactions would fail unsent — a governor's
    // answer, not the re-append's that this test is about.
    let settings = Settings::default()
        .with_retry(RetryPolicy::none())
        .with_request_timeout(Duration::from_millis(2_000))
        .with_throughput(ThroughputPolicy::unlimited());
    // Every attempt of the first append is sent at once: each has landed one late landing
    // later. (Waiting longer lets the emulator close the idle pooled connections, 5 s, and a
    // request without retries can meet one closing.)
    let settles = settings.late_landing();
    let p = proxied(settings);
    let table = p.account.table(&unique_table_name("reappend")).unwrap();
    table.create().await.unwrap();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    // 1,000 items of one partition: 10 transactions of 100.
    let now = Utc::now();
    let items: Vec<_> = (0..1_000).map(|seq| (now, Claim { seq })).collect();
    // Four of the transactions end in a fault: the response of one is lost (it was applied),
    // one is broken before it reaches the service, one is held past the timeout and applied
    // afterwards, one is refused. Each rule counts the requests the earlier ones let through.
    let batches = Matcher::any()
        .with_method("POST")
        .with_path_contains("$batch");
    for (nth, fault) in [
        (2, Fault::DropResponse),
        (2, Fault::Reset),
        (2, Fault::Delay(Duration::from_millis(3_000))),
        (2, Fault::Status(503)),
    ] {
        p.table
            .add_rule(Rule::new(batches.clone(), Occurrences::Nth(nth), fault));
    }
    let first = tail.append_batch("p", &items).await.unwrap();
    p.table.clear();
    let faults = p.table.stats().faults_injected;
    assert_eq!(faults.total(), 4, "{faults:?}");
    // The held transaction has landed by now: the re-append meets it.
    tokio::time::sleep(settles).await;

    // The refused transaction failed. The broken and the held one were not there when read
    // back: unknown. The lost response is read back as appended (unknown only if that read
    // fails too).
    let not_appended: Vec<_> = first.outcomes.iter().filter(|o| !o.is_written()).collect();
    assert_eq!(first.failed(), 100, "{:?}", not_appended.first());
    assert!(
        (200..=300).contains(&first.unknown()),
        "{} unknown",
        first.unknown()
    );
    assert_eq!(first.written() + first.unknown(), 900);

    let again: Vec<_> = first
        .pending()
        .map(|(i, id)| (id.clone(), items[i].0, items[i].1.clone()))
        .collect();
    let second = tail.append_batch_with_ids("p", &again).await.unwrap();
    assert!(second.is_complete(), "{:?}", second.outcomes);
    assert!(
        second.read_backs >= 1,
        "the held transaction's items are found by reading them back"
    );
    for ((outcome, reported), (id, _, _)) in second.outcomes.iter().zip(&second.ids).zip(&again) {
        assert_eq!(reported, id, "re-appended under the same id");
        assert_eq!(&outcome.value().unwrap().id, id, "stored under the same id");
    }

    let entries: Vec<LogEntry<Claim>> = tail.entries("p").collect().await.unwrap();
    let mut copies: HashMap<i64, usize> = HashMap::new();
    for e in &entries {
        *copies.entry(e.value.seq).or_default() += 1;
    }
    let duplicated: Vec<_> = copies.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "entries stored twice: {duplicated:?}"
    );
    assert_eq!(copies.len(), items.len(), "every entry stored");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_refused_transaction_is_reported_like_a_bulk_write_with_its_items_ids() {
    let p = proxied(Settings::default().with_retry(RetryPolicy::none()));
    let table = p.account.table(&unique_table_name("appendreport")).unwrap();
    table.create().await.unwrap();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    // 250 items of one partition: transactions of 100, 100 and 50; the second sent is refused.
    let now = Utc::now();
    let items: Vec<_> = (0..250).map(|seq| (now, Claim { seq })).collect();
    p.table.add_rule(Rule::new(
        Matcher::any()
            .with_method("POST")
            .with_path_contains("$batch"),
        Occurrences::Nth(2),
        Fault::Status(503),
    ));
    let report = tail.append_batch("p", &items).await.unwrap();
    p.table.clear();

    assert_eq!(report.ids.len(), items.len(), "every item's id");
    assert_eq!(report.unknown(), 0, "{:?}", report.unknowns().next());
    assert!(
        matches!(report.failed(), 50 | 100),
        "{} failed",
        report.failed()
    );
    assert_eq!(report.written() + report.failed(), items.len());
    assert!(!report.is_complete());
    let failed: Vec<usize> = report.failures().map(|(i, _)| i).collect();
    assert_eq!(failed.len(), report.failed());
    // One transaction's items: a contiguous run, each refused with the transaction's status.
    assert_eq!(
        failed.last().unwrap() - failed[0] + 1,
        failed.len(),
        "{failed:?}"
    );
    for (i, error) in report.failures() {
        assert_eq!(error.kind(), ErrorKind::Throttled, "item {i}: {error}");
        assert!(report.outcomes[i].is_failed());
        assert_eq!(
            report.outcomes[i].error().map(|e| e.kind()),
            Some(ErrorKind::Throttled)
        );
    }
    // The written ones carry their entries, under the ids the report lists.
    let written: Vec<usize> = report.successes().map(|(i, _)| i).collect();
    assert_eq!(written.len(), report.written());
    for (i, appended) in report.successes() {
        assert_eq!(appended.id, report.ids[i]);
        assert!(!failed.contains(&i));
    }
    // What to append again: exactly the refused items, with their ids.
    let pending: Vec<(usize, AppendId)> = report.pending().map(|(i, id)| (i, id.clone())).collect();
    assert_eq!(pending.iter().map(|(i, _)| *i).collect::<Vec<_>>(), failed);
    for (i, id) in &pending {
        assert_eq!(id, &report.ids[*i]);
    }
    let again: Vec<_> = pending
        .iter()
        .map(|(i, id)| (id.clone(), items[*i].0, items[*i].1.clone()))
        .collect();
    match report.into_result() {
        Err(tablekit_core::Error::BatchFailed { index, source }) => {
            assert_eq!(index, failed[0], "the first item not written");
            assert_eq!(source.kind(), ErrorKind::Throttled);
        }
        other => panic!("expected the first failure, got {other:?}"),
    }

    let second = tail.append_batch_with_ids("p", &again).await.unwrap();
    assert!(second.is_complete(), "{:?}", second.failures().next());
    assert_eq!((second.failed(), second.unknown()), (0, 0));
    let ids: Vec<AppendId> = second.ids.clone();
    let appended = second.into_result().unwrap();
    assert_eq!(appended.len(), again.len());
    for ((a, id), (sent, _, _)) in appended.iter().zip(&ids).zip(&again) {
        assert_eq!((&a.id, id), (sent, sent), "re-appended under the same id");
    }
    let entries: Vec<LogEntry<Claim>> = tail.entries("p").collect().await.unwrap();
    assert_eq!(entries.len(), items.len(), "every item stored once");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn appending_again_with_the_same_id_finds_the_entry() {
    let table = common::table("appendonce").await;
    let metrics = table.account().metrics().clone();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let (id, now) = (tail.append_id(), Utc::now());
    let first = tail
        .append_with_id("p", &id, now, &Claim { seq: 1 })
        .await
        .unwrap();
    // As after a crash: a new handle, the id and time kept with the item.
    let restarted: LogTail<Claim> = LogTail::new(table.clone());
    let id = AppendId::new(id.to_string()).unwrap();
    metrics.reset();
    let again = restarted
        .append_with_id("p", &id, now, &Claim { seq: 1 })
        .await
        .unwrap();
    assert_eq!(again, first, "already appended: the same keys and ETag");
    common::assert_requests(&metrics.snapshot(), None, 2);
    let err = restarted
        .append_with_id("p", &id, now, &Claim { seq: 2 })
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::AlreadyExists,
        "another item under a used id"
    );
    let entries: Vec<LogEntry<Claim>> = tail.entries("p").collect().await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].value, Claim { seq: 1 });
    table.delete_table().await.unwrap();
}
