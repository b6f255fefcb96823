//! The log-data anti-pattern and its fix: log records go to blobs named like Azure Storage
//! Analytics logs (`{prefix}/{yyyy}/{MM}/{dd}/{HHmm}/{seq:06}.log`), buffered and written a
//! file at a time, with the first and last record times in each file's metadata. The guide's
//! query — every *error* and *critical* message between 15:04 and 15:06 — lists one hour's
//! files by prefix and downloads only the files that overlap the window.
//!
//! `cargo xtask demo` runs it against Azurite.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tablekit::logtail::{BlobLogReader, BlobLogWriter};
use tablekit::logtail::{FlushPolicy, Level, LogRecord};
use tablekit::prelude::*;
use tablekit_examples::report;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .to_utc()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let nanos = Utc::now().timestamp_subsec_nanos();
    let container = account.container(&format!("logs-{}-{nanos:x}", std::process::id()))?;
    container.create().await?;
    let metrics = account.metrics().clone();
    println!("analytics-log-blobs: container {}", container.name());

    let before = metrics.snapshot();
    // ANCHOR: write
    // Flush at 16 KiB (or after a minute): a few large writes instead of one per record.
    let policy = FlushPolicy::default()
        .with_max_bytes(16 * 1024)
        .with_max_age(Duration::from_secs(60));
    let writer = BlobLogWriter::new(container.clone(), "queue", policy)?;
    let start = at("2014-07-31T14:55:00Z");
    let mut files = Vec::new();
    for i in 0..1_200_i64 {
        let time = start + TimeDelta::seconds(i); // 14:55:00 to 15:14:59
        let level = match i % 97 {
            0 => Level::Critical,
            n if n % 10 == 0 => Level::Error,
            _ => Level::Information,
        };
        let record = LogRecord::new(time, level, format!("message {i}: queue depth {}", i % 40));
        files.extend(writer.append(&record).await?); // usually only buffers
    }
    files.extend(writer.flush().await?); // write what is left before shutting down
    // ANCHOR_END: write
    report(
        "1,200 records written as files",
        &metrics.snapshot().since(&before),
    );
    for f in &files {
        println!(
            "    {} ({} records, {} .. {})",
            f.name,
            f.entries,
            f.first.format("%H:%M:%S"),
            f.last.format("%H:%M:%S")
        );
    }
    assert!(files.len() >= 3);
    assert!(
        files
            .iter()
            .any(|f| f.name == "queue/2014/07/31/1400/000001.log")
    );
    assert!(
        files
            .iter()
            .any(|f| f.name == "queue/2014/07/31/1500/000001.log")
    );

    let before = metrics.snapshot();
    // ANCHOR: read
    let reader = BlobLogReader::new(container.clone(), "queue")?;
    let serious: Vec<LogRecord> = reader
        .entries(at("2014-07-31T15:04:00Z"), at("2014-07-31T15:06:00Z"))
        .await? // one listing (hour 15:00) + one download per overlapping file
        .into_iter()
        .filter(|r| r.level >= Level::Error)
        .collect();
    // ANCHOR_END: read
    report(
        "errors and criticals between 15:04 and 15:06",
        &metrics.snapshot().since(&before),
    );
    let expected = (540..660)
        .filter(|i| i % 97 == 0 || (i % 97) % 10 == 0)
        .count();
    assert_eq!(serious.len(), expected);
    assert!(serious.windows(2).all(|w| w[0].time <= w[1].time));
    println!(
        "    {} serious records, first: {:?}",
        serious.len(),
        serious[0].message
    );

    // ANCHOR: listing
    // Prefix listing finds one hour's files and nothing of the next hour (claim 49).
    let hour = container.list("queue/2014/07/31/1400").await?;
    assert!(
        hour.iter()
            .all(|b| b.name.starts_with("queue/2014/07/31/1400/"))
    );
    println!(
        "    hour 14:00 holds {} file(s), first record {}",
        hour.len(),
        hour[0].metadata["first"]
    );
    // ANCHOR_END: listing

    container.delete_container().await?;
    println!(
        "analytics-log-blobs: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
