//! The prepend/append anti-pattern and its fix: logging employees' network access with the
//! current hour as the PartitionKey sends every insert to one hot partition; spreading the
//! log over 16 bucket partitions (a stable hash of the employee id) spreads the inserts, and
//! readers merge the buckets back into one newest-first stream.
//!
//! `cargo xtask demo` runs it against Azurite.

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use serde::{Deserialize, Serialize};
use tablekit::logtail::SpreadLog;
use tablekit::logtail::SpreadToken;
use tablekit::prelude::*;
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// One access to a network resource: a value without keys of its own (the log makes them
/// from the bucket and the time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Access {
    employee_id: String,
    resource: String,
    allowed: bool,
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let table = account.table(&unique_name("NetworkAccess"))?;
    table.create().await?;
    let metrics = account.metrics().clone();
    println!("network-access-spread: table {}", table.name());

    let now = Utc::now();
    let events: Vec<(String, _, Access)> = (0..2_000)
        .map(|i| {
            let employee_id = format!("{:06}", i % 240);
            let access = Access {
                employee_id: employee_id.clone(),
                resource: format!("\\\\files\\share{}", i % 7),
                allowed: i % 50 != 0,
            };
            (
                employee_id,
                now - Duration::milliseconds(1_800 * (2_000 - i)),
                access,
            )
        })
        .collect();

    // The anti-pattern: PartitionKey = the current hour. Every insert of the hour lands in the
    // same partition, which the service cannot split (§5.12).
    let hot: BTreeMap<String, usize> = events.iter().fold(BTreeMap::new(), |mut m, (_, t, _)| {
        *m.entry(t.format("%Y%m%d%H").to_string()).or_default() += 1;
        m
    });
    println!(
        "  hour-keyed layout: {} partition(s) for the last hour's 2,000 inserts, all writes to the newest",
        hot.len()
    );

    // ANCHOR: layout
    // PartitionKey = netlog-{bucket}, bucket = stable hash of the employee id into 16;
    // RowKey = inverted ticks + unique suffix, as in the log tail.
    let log: SpreadLog<Access> = SpreadLog::new(table.clone(), "netlog", 16)?;
    println!(
        "    employee 000042 -> partition {}",
        log.partition_for("000042")
    );
    // ANCHOR_END: layout

    let before = metrics.snapshot();
    // ANCHOR: append
    let appended = log.append_batch(&events).await?.into_result()?; // grouped by bucket, 100 per transaction
    // ANCHOR_END: append
    report(
        "2,000 accesses spread over 16 partitions",
        &metrics.snapshot().since(&before),
    );
    let mut per_partition: BTreeMap<&str, usize> = BTreeMap::new();
    for a in &appended {
        *per_partition.entry(a.keys.pk()).or_default() += 1;
    }
    let busiest = per_partition.values().max().copied().unwrap_or(0);
    println!(
        "    {} partitions, busiest holds {busiest} (fair share 125)",
        per_partition.len()
    );
    assert_eq!(per_partition.len(), 16);
    assert!(busiest <= 250, "no bucket above twice its fair share");

    let before = metrics.snapshot();
    // ANCHOR: read
    let latest = log.latest(20).await?; // $top=20 in each bucket, merged newest first
    // ANCHOR_END: read
    report(
        "the 20 newest accesses across all buckets",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: window
    let last_five_minutes = log
        .window(now - Duration::minutes(5), now + Duration::seconds(1))
        .collect()
        .await?; // one range query per bucket, k-way merged, one page per bucket in memory
    // ANCHOR_END: window
    report(
        "the last 5 minutes, merged newest first",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: pages
    // The merged read page by page: a page's token is the position of its last entry (its
    // bucket and RowKey), so a later read continues the merge exactly where it stopped.
    let all = log.entries().with_page_size(500);
    let first_page = all.page().await?;
    let token: SpreadToken = first_page
        .continuation
        .expect("more entries")
        .to_string()
        .parse()?;
    let rest = all.resume(token).collect().await?;
    // ANCHOR_END: pages
    report(
        "every access: 500, then the rest resumed from a token",
        &metrics.snapshot().since(&before),
    );
    assert_eq!(first_page.items.len() + rest.len(), 2_000);
    let newest: Vec<_> = events
        .iter()
        .rev()
        .take(20)
        .map(|(_, _, a)| a.clone())
        .collect();
    assert_eq!(
        latest.iter().map(|e| e.value.clone()).collect::<Vec<_>>(),
        newest
    );
    assert!(last_five_minutes.windows(2).all(|w| w[0].time >= w[1].time));
    println!(
        "    {} accesses in the last 5 minutes",
        last_five_minutes.len()
    );
    assert_eq!(
        last_five_minutes.len(),
        events
            .iter()
            .filter(|(_, t, _)| *t >= now - Duration::minutes(5))
            .count()
    );

    table.delete_table().await?;
    println!(
        "network-access-spread: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
