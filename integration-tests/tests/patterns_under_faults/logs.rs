//! Time-ordered data and bulk deletes under faults: the log tail, the spread log, the blob
//! log and a partition purge.

use serde::{Deserialize, Serialize};
use tablekit_azure::BulkOptions;
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Properties};
use tablekit_logtail::{
    BlobLogReader, BlobLogWriter, FlushPolicy, Level, LogEntry, LogRecord, LogTail, SpreadLog,
};
use tablekit_retention::{PurgeOptions, purge_partition};
use tablekit_testkit::unique_container_name;

use crate::{Figures, arm, common, disarm, lost_and_duplicated};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Claim {
    seq: i64,
    description: String,
}

fn claim(seq: i64) -> Claim {
    Claim {
        seq,
        description: format!("claim {seq}"),
    }
}

/// Sequence numbers in read order, and whether the read order is newest first (RowKeys
/// ascending, times never increasing).
fn sequence(entries: &[LogEntry<Claim>]) -> Vec<i64> {
    for pair in entries.windows(2) {
        assert!(
            pair[0].keys.rk() < pair[1].keys.rk() && pair[0].time >= pair[1].time,
            "newest first: {:?} then {:?}",
            pair[0].keys,
            pair[1].keys
        );
    }
    entries.iter().map(|e| e.value.seq).collect()
}

#[tokio::test]
async fn log_tail_holds_every_appended_entry_once_newest_first() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faulttail").await;
    let claims = LogTail::<Claim>::new(table.clone());
    let partitions = ["000123", "000124"];
    let n = 300i64;
    arm(&p, 0x2_11);
    for seq in 0..n {
        claims
            .append(partitions[seq as usize % 2], &claim(seq))
            .await
            .unwrap();
    }
    let faults = disarm(&p);

    let (mut lost, mut duplicated) = (0, 0);
    for (k, partition) in partitions.iter().enumerate() {
        let entries: Vec<LogEntry<Claim>> = claims.entries(partition).collect().await.unwrap();
        let found = sequence(&entries);
        // Appended one after another, so newest first is exactly descending.
        let expected: Vec<i64> = (0..n).filter(|s| *s as usize % 2 == k).rev().collect();
        let (l, d) = lost_and_duplicated(&expected, &found);
        (lost, duplicated) = (lost + l, duplicated + d);
        assert_eq!(found, expected, "every entry once, newest first");
        let latest = claims.latest(partition, 10).await.unwrap();
        assert_eq!(sequence(&latest), expected[..10]);
    }
    Figures {
        pattern: "log tail",
        operations: n as usize,
        faults,
        lost,
        duplicated,
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn spread_log_holds_every_entry_once_in_its_bucket_newest_first() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultspread").await;
    let log = SpreadLog::<Claim>::new(table.clone(), "netlog", 8).unwrap();
    let n = 300i64;
    let spread = |seq: i64| format!("user{}", seq % 13);
    arm(&p, 0x2_12);
    for seq in 0..n {
        log.append(&spread(seq), &claim(seq)).await.unwrap();
    }
    let faults = disarm(&p);

    let entries: Vec<LogEntry<Claim>> = log.entries().collect().await.unwrap();
    let times: Vec<_> = entries.iter().map(|e| e.time).collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "merged newest first"
    );
    for e in &entries {
        assert_eq!(e.keys.pk(), log.partition_for(&spread(e.value.seq)));
    }
    let found: Vec<i64> = entries.iter().map(|e| e.value.seq).collect();
    let expected: Vec<i64> = (0..n).rev().collect();
    let (lost, duplicated) = lost_and_duplicated(&expected, &found);
    assert_eq!(found, expected, "every entry once, newest first");
    let used = log
        .partitions()
        .iter()
        .filter(|pk| entries.iter().any(|e| e.keys.pk() == pk.as_str()))
        .count();
    assert!(used > 4, "spread over the buckets: {used} of 8 used");
    Figures {
        pattern: "spread log",
        operations: n as usize,
        faults,
        lost,
        duplicated,
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn purged_partitions_end_empty() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultpurge").await;
    let (partitions, per_partition) = (6, 600);
    let ops: Vec<Operation> = (0..partitions * per_partition)
        .map(|i| {
            let entity = Entity::try_new(
                format!("signins{:02}", i % partitions),
                format!("{i:06}"),
                Properties::new().with("N", i as i64),
            )
            .unwrap();
            Operation::insert(&entity).unwrap()
        })
        .collect();
    assert!(
        table
            .bulk_write(ops, BulkOptions::default())
            .await
            .unwrap()
            .is_complete()
    );
    // A neighbour that must survive.
    table
        .insert(&Entity::try_new("signins99", "keep", Properties::new()).unwrap())
        .await
        .unwrap();

    arm(&p, 0x2_13);
    let options = PurgeOptions::default()
        .with_page_size(50)
        .with_concurrency(2);
    let (mut deleted, mut transactions) = (0, 0);
    for k in 0..partitions {
        let progress = purge_partition(&table, &format!("signins{k:02}"), options.clone())
            .await
            .unwrap();
        assert_eq!(progress.scanned, per_partition, "every key read once");
        deleted += progress.deleted + progress.already_gone;
        transactions += progress.transactions;
    }
    let faults = disarm(&p);

    let left = table
        .query::<Properties>()
        .filter(Filter::ge("PartitionKey", "signins").and(Filter::lt("PartitionKey", "signint")))
        .allow_scan()
        .collect()
        .await
        .unwrap();
    let survivors: Vec<&str> = left.iter().map(|s| s.keys.pk()).collect();
    assert_eq!(survivors, ["signins99"], "the purged partitions end empty");
    assert_eq!(deleted, partitions * per_partition);
    println!("  retention purge: {deleted} entities deleted in {transactions} transactions");
    Figures {
        pattern: "retention purge",
        operations: partitions,
        faults,
        // Nothing to lose in a delete; an entity the purge missed counts here.
        lost: left.len() - 1,
        duplicated: 0,
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn blob_log_files_hold_every_flushed_record_once() {
    let p = common::proxied(common::patient());
    let container = p
        .account
        .container(&unique_container_name("faultbloblog"))
        .unwrap();
    container.create().await.unwrap();
    let writer = BlobLogWriter::new(container.clone(), "queue", FlushPolicy::default()).unwrap();
    let start = chrono::Utc::now() - chrono::Duration::hours(3);
    let n = 600;
    // Records spread over three hours, a file every 5 records.
    let record = |i: i64| {
        LogRecord::new(
            start + chrono::Duration::seconds(i * 18),
            Level::Information,
            format!("request {i}"),
        )
    };
    arm(&p, 0x2_14);
    let mut files = 0;
    for i in 0..n {
        // A record of a new hour flushes the previous hour's buffer first.
        files += usize::from(writer.append(&record(i)).await.unwrap().is_some());
        if i % 5 == 4 {
            files += usize::from(writer.flush().await.unwrap().is_some());
        }
    }
    let faults = disarm(&p);

    let read = BlobLogReader::new(container.clone(), "queue")
        .unwrap()
        .entries(start, start + chrono::Duration::hours(4))
        .await
        .unwrap();
    let found: Vec<String> = read.iter().map(|r| r.message.clone()).collect();
    let expected: Vec<String> = (0..n).map(|i| record(i).message).collect();
    let (lost, duplicated) = lost_and_duplicated(&expected, &found);
    assert_eq!(found, expected, "every record once, in time order");
    assert_eq!(container.list("queue/").await.unwrap().len(), files);
    Figures {
        pattern: "blob log",
        operations: files,
        faults,
        lost,
        duplicated,
    }
    .report(&p);
    container.delete_container().await.unwrap();
}
