//! Partition spreading against Azurite: even buckets, a globally newest-first merge with one
//! page per bucket in memory, `latest(n)` across buckets in one request per bucket.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::str::FromStr;

use chrono::Duration;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use tablekit_azure::RequestKind;
use tablekit_core::{ErrorKind, Properties};
use tablekit_logtail::{Appended, SpreadLog, SpreadToken};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Access {
    employee: String,
    resource: String,
}

#[tokio::test]
async fn ten_thousand_spread_appends_are_even_and_merge_back_newest_first() {
    let table = common::table("spread").await;
    let metrics = table.account().metrics().clone();
    let log: SpreadLog<Access> = SpreadLog::new(table.clone(), "netlog", 16).unwrap();
    let base = common::at("2026-11-22T10:00:00Z");
    let items: Vec<(String, _, Access)> = (0..10_000)
        .map(|i| {
            let event = format!("event-{i}");
            let access = Access {
                employee: format!("{:06}", i % 700),
                resource: format!("share-{}", i % 13),
            };
            (event, base + Duration::milliseconds(i), access)
        })
        .collect();
    metrics.reset();
    let report = log.append_batch(&items).await.unwrap();
    assert!(
        report.is_complete(),
        "{:?}",
        report.outcomes.iter().find(|o| !o.is_written())
    );
    let report_transactions = report.transactions;
    let appended: Vec<Appended> = report.into_result().unwrap();

    let mut per_partition: BTreeMap<String, usize> = BTreeMap::new();
    for a in &appended {
        *per_partition.entry(a.keys.pk().to_owned()).or_default() += 1;
    }
    assert_eq!(per_partition.len(), 16);
    assert_eq!(
        per_partition.keys().cloned().collect::<Vec<_>>(),
        log.partitions()
    );
    let fair = 10_000 / 16;
    for (pk, n) in &per_partition {
        assert!(
            *n <= 2 * fair,
            "{pk} holds {n}, more than twice its fair share {fair}"
        );
    }
    let transactions: usize = per_partition.values().map(|n| n.div_ceil(100)).sum();
    // Every attempt is a request: a transient failure retried under load (2,000+ requests
    // per second into one emulator) adds one request and one retry.
    let spent = metrics.snapshot();
    common::assert_requests(&spent, Some(RequestKind::Transaction), transactions as u64);
    assert_eq!(report_transactions, transactions);

    // The partitions really hold what the report says.
    for (pk, n) in &per_partition {
        assert_eq!(log.tail().latest(pk, 1_000).await.unwrap().len(), *n);
    }

    // Merged stream, one page (100) per bucket at a time: the first entry costs one request
    // per bucket, no more.
    metrics.reset();
    let paged = log.clone().with_page_size(100);
    let mut stream = Box::pin(paged.entries().stream());
    let first = stream.next().await.unwrap().unwrap();
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Query), 16);
    let mut merged = vec![first];
    merged.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    assert_eq!(merged.len(), 10_000);
    for pair in merged.windows(2) {
        assert!(pair[0].time >= pair[1].time, "globally newest first");
        assert!(pair[0].keys.rk() < pair[1].keys.rk());
    }
    let expected_pages: u64 = per_partition.values().map(|n| n.div_ceil(100) as u64).sum();
    // A bucket whose last page is full may need one more (empty) page to see the end.
    let spent = metrics.snapshot();
    let pages = spent.requests_of(RequestKind::Query);
    assert!(
        (expected_pages..=expected_pages + 16 + 2 * spent.retries).contains(&pages),
        "{pages} pages for {expected_pages} pages of entries"
    );
    let merged_keys: HashSet<_> = merged.iter().map(|e| e.keys.clone()).collect();
    let appended_keys: HashSet<_> = appended.iter().map(|a| a.keys.clone()).collect();
    assert_eq!(merged_keys, appended_keys);

    // latest(50) across buckets = the 50 newest overall, one request per bucket.
    metrics.reset();
    let latest = log.latest(50).await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 16);
    let mut newest = appended.clone();
    newest.sort_by_key(|a| std::cmp::Reverse(a.time));
    assert_eq!(
        latest.iter().map(|e| e.keys.clone()).collect::<Vec<_>>(),
        newest[..50]
            .iter()
            .map(|a| a.keys.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(latest[0].value.employee, format!("{:06}", 9_999 % 700));

    // A window across buckets is the same as filtering the merged stream.
    let (from, to) = (base + Duration::seconds(3), base + Duration::seconds(4));
    metrics.reset();
    let window = log.window(from, to).collect().await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 16); // one range query per bucket
    let expected: Vec<_> = merged
        .iter()
        .filter(|e| from <= e.time && e.time < to)
        .map(|e| e.keys.clone())
        .collect();
    assert_eq!(expected.len(), 1_000);
    assert_eq!(
        window.into_iter().map(|e| e.keys).collect::<Vec<_>>(),
        expected
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn single_appends_go_to_the_bucket_of_their_value() {
    let table = common::table("spreadone").await;
    let metrics = table.account().metrics().clone();
    let log: SpreadLog<Access> = SpreadLog::new(table.clone(), "netlog", 4).unwrap();
    let access = Access {
        employee: "000123".into(),
        resource: "share-1".into(),
    };
    metrics.reset();
    let appended = log.append("000123", &access).await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 1);
    assert_eq!(appended.keys.pk(), log.partition_for("000123"));
    assert_eq!(
        log.partition_for("000123"),
        format!("netlog-{:02}", log.bucket_of("000123"))
    );
    metrics.reset();
    let latest = log.latest(5).await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 4);
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].value, access);
    assert!(log.latest(0).await.unwrap().is_empty());
    table.delete_table().await.unwrap();
}

#[test]
fn bad_layouts_are_refused() {
    let table = common::account().table("SpreadNoTable").unwrap();
    let kind = |base: &str, buckets: u32| {
        let log: tablekit_core::Result<SpreadLog<Access>> =
            SpreadLog::new(table.clone(), base, buckets);
        log.unwrap_err().kind()
    };
    assert_eq!(kind("netlog", 0), ErrorKind::InvalidArgument);
    assert_eq!(kind("netlog", 1_001), ErrorKind::LimitExceeded);
    assert_eq!(kind("net/log", 16), ErrorKind::InvalidInput);
    assert_eq!(kind(&"n".repeat(510), 16), ErrorKind::LimitExceeded);
    let log: SpreadLog<Access> = SpreadLog::new(table, "netlog", 1_000).unwrap();
    assert_eq!(log.partition_of_bucket(7), "netlog-007");
    assert_eq!(log.partitions().len(), 1_000);
}

#[tokio::test]
async fn a_resumed_spread_read_equals_the_unresumed_read_and_select_projects() {
    let table = common::table("spreadresume").await;
    let metrics = table.account().metrics().clone();
    let log: SpreadLog<Access> = SpreadLog::new(table.clone(), "netlog", 4).unwrap();
    let base = common::at("2026-11-22T10:00:00Z");
    let access = |i: i64| Access {
        employee: format!("{:06}", i % 9),
        resource: format!("share-{i}"),
    };
    let items: Vec<_> = (0..60)
        .map(|i| {
            (
                format!("{:06}", i % 9),
                base + Duration::seconds(i),
                access(i),
            )
        })
        .collect();
    assert!(log.append_batch(&items).await.unwrap().is_complete());
    // Two entries with the same RowKey in two buckets: the same id and time, two values.
    let (a, b) = ("000001", "000002");
    assert_ne!(log.bucket_of(a), log.bucket_of(b));
    let (id, at) = (log.tail().append_id(), base + Duration::seconds(30));
    let tied_a = log.append_with_id(a, &id, at, &access(100)).await.unwrap();
    let tied_b = log.append_with_id(b, &id, at, &access(101)).await.unwrap();
    assert_eq!(tied_a.keys.rk(), tied_b.keys.rk());
    // Equal RowKeys come in bucket order: resuming after the first of the two yields the
    // second next, resuming after the second skips both.
    let (first, second) = if log.bucket_of(a) < log.bucket_of(b) {
        ((a, tied_a), (b, tied_b))
    } else {
        ((b, tied_b), (a, tied_a))
    };
    let after = |spread: &str, appended: &Appended| {
        SpreadToken::from_str(&format!("{} {}", log.bucket_of(spread), appended.keys.rk())).unwrap()
    };
    let next = log
        .entries()
        .resume(after(first.0, &first.1))
        .first()
        .await
        .unwrap();
    assert_eq!(next.unwrap().keys, second.1.keys);
    let next = log
        .entries()
        .resume(after(second.0, &second.1))
        .first()
        .await
        .unwrap();
    assert!(next.unwrap().keys.rk() > second.1.keys.rk());

    let (from, to) = (base + Duration::seconds(10), base + Duration::seconds(50));
    for read in [log.entries(), log.window(from, to)] {
        let whole = read.clone().collect().await.unwrap();
        // Page after page of 5, each from a new read resumed from the token saved as text.
        let mut resumed = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut page_read = read.clone().with_page_size(5);
            if let Some(saved) = token.take() {
                let token: SpreadToken = saved.parse().unwrap();
                page_read = page_read.resume(token);
            }
            metrics.reset();
            let page = page_read.page().await.unwrap();
            assert!(metrics.snapshot().requests() >= 4, "one query per bucket");
            assert!(page.items.len() <= 5);
            resumed.extend(page.items);
            match page.continuation {
                Some(next) => token = Some(next.to_string()),
                None => break,
            }
        }
        assert_eq!(resumed.len(), whole.len());
        assert_eq!(resumed, whole, "the resumed read is the same read");
    }
    // The pages of one read carry the same tokens.
    let pages: Vec<_> = log
        .entries()
        .with_page_size(7)
        .pages()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(pages.iter().map(|p| p.items.len()).sum::<usize>(), 62);
    assert!(
        pages[..pages.len() - 1]
            .iter()
            .all(|p| p.continuation.is_some())
    );
    assert!(pages.last().unwrap().continuation.is_none());

    // A projection reads only the properties asked for.
    let raw: SpreadLog<Properties> = SpreadLog::new(table.clone(), "netlog", 4).unwrap();
    let projected = raw.entries().select(["Resource"]).collect().await.unwrap();
    assert_eq!(projected.len(), 62);
    assert!(projected.iter().all(
        |e| e.value.get_str("Resource").unwrap().is_some() && e.value.get("Employee").is_none()
    ));

    // A token of a bucket this log does not have is refused before any request.
    metrics.reset();
    let err = log
        .entries()
        .resume("7 0000".parse().unwrap())
        .collect()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(SpreadToken::from_str("no-bucket").is_err());
    common::assert_requests(&metrics.snapshot(), None, 0);
    table.delete_table().await.unwrap();
}
