//! IM counts: messages per hour as a data series (one entity, 24 properties) and messages
//! per day for a year as a wide entity (365 properties in two shards) — with the request
//! count of each step.
//!
//! `cargo xtask demo` runs it against Azurite; any account works with
//! `AZURE_STORAGE_CONNECTION_STRING="<cs>" cargo run -p tablekit-examples --bin im-counts`.

use std::collections::BTreeMap;

use tablekit::prelude::*;
use tablekit::series::WideStored;
use tablekit::series::{Series, SeriesLayout, WideEntities};
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// A year of one employee's daily message counts, `D001` … `D365`: more properties than one
/// entity holds, stored as a wide entity.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{employee_id}", row_key = "DailyIm")]
struct DailyIm {
    employee_id: String,
    #[serde(flatten)]
    days: BTreeMap<String, i64>,
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let table = account.table(&unique_name("ImCounts"))?;
    table.create().await?;
    let metrics = account.metrics().clone();
    println!("im-counts: table {} on {}", table.name(), account.name());

    // ANCHOR: series
    // One entity per employee, one property per hour: H00 … H23.
    let hourly: Series = Series::new(table.clone(), SeriesLayout::hours());
    let jun = ("000223", "ImPerHour"); // PartitionKey, RowKey
    // ANCHOR_END: series

    let before = metrics.snapshot();
    // ANCHOR: series_add
    // Five chat servers report Jun's messages of 13:00 at the same time; every increment is
    // a read and a merge conditioned on the read ETag, retried on conflict.
    let servers: Vec<_> = (0..5)
        .map(|_| {
            let hourly = hourly.clone();
            tokio::spawn(async move {
                for _ in 0..4 {
                    hourly.add(jun, "H13", 1).await?;
                }
                Ok::<_, tablekit::core::Error>(())
            })
        })
        .collect();
    for server in servers {
        server.await??;
    }
    // ANCHOR_END: series_add
    let spent = metrics.snapshot().since(&before);
    report(
        &format!(
            "20 concurrent adds to H13 ({} conflicts retried)",
            spent.conflict_retries
        ),
        &spent,
    );

    let before = metrics.snapshot();
    // ANCHOR: series_set
    // A batch job that knows the exact count of an hour sets it: one unconditional merge.
    hourly.upsert_slot(jun, "H14", 7).await?;
    // ANCHOR_END: series_set
    report("set H14 = 7", &metrics.snapshot().since(&before));

    let before = metrics.snapshot();
    // ANCHOR: series_read
    // The whole chart: one point read.
    let chart = hourly.get(jun).await?.expect("written above").value;
    assert_eq!(chart.get("H13"), Some(20), "no increment is lost");
    assert_eq!(chart.get("H14"), Some(7));
    assert_eq!(chart.get_or_zero("H15"), 0);
    let bars: String = chart
        .iter()
        .map(|(_, v)| match v.unwrap_or(0) {
            0 => '.',
            1..=9 => '▄',
            _ => '█',
        })
        .collect();
    println!("  messages per hour 00-23: {bars}");
    // ANCHOR_END: series_read
    report("read the 24-hour chart", &metrics.snapshot().since(&before));

    let before = metrics.snapshot();
    // ANCHOR: wide
    // 365 daily counts are more than the 252 properties of one entity: two shards,
    // DailyIm_01 (D001 … D250) and DailyIm_02 (D251 … D365), in one partition.
    let daily = WideEntities::new(table.clone());
    let year = DailyIm {
        employee_id: "000223".into(),
        days: (1..=365)
            .map(|day| (format!("D{day:03}"), (day * 37) % 50))
            .collect(),
    };
    let version = daily.insert(&year).await?; // one transaction
    let shards: Vec<&str> = version.shards.iter().map(|s| s.keys.rk()).collect();
    println!("  shards: {shards:?}");
    assert_eq!(shards, ["DailyIm_01", "DailyIm_02"]);
    // ANCHOR_END: wide
    report(
        "insert a year of daily counts (one transaction)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: wide_read
    let read: WideStored<DailyIm> = daily.get(&year).await?.expect("inserted"); // one range query
    assert_eq!(read.value, year);
    // ANCHOR_END: wide_read
    report(
        "read the whole year (one range query)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: wide_update
    // Close the day: today's total from the hourly series goes into day 365. Both shards
    // are rewritten in one transaction, conditional on the ETags just read.
    let total = chart.total().expect("no overflow");
    let updated = daily
        .update_with(&year, |stored: Option<DailyIm>| {
            let mut stored = stored.unwrap_or_else(|| year.clone());
            stored.days.insert("D365".into(), total);
            stored
        })
        .await?;
    assert_eq!(updated.value.days["D365"], 27);
    // ANCHOR_END: wide_update
    report(
        "record today's total in D365 (read + transaction)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: wide_delete
    // Every shard in one transaction, only if nobody wrote the year since our update; a
    // stale version fails with PreconditionFailed and deletes nothing.
    daily.delete(&year, updated.if_match()).await?;
    // ANCHOR_END: wide_delete
    hourly.delete(jun, IfMatch::Any).await?;
    report(
        "delete both (projection read + transaction, 1 delete)",
        &metrics.snapshot().since(&before),
    );
    table.delete_table().await?;
    println!(
        "im-counts: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
