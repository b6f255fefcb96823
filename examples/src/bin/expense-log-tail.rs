//! The log tail pattern: an employee's 10 most recent expense claims in one request.
//!
//! RowKeys are inverted ticks (`DateTime.MaxValue.Ticks − t.Ticks`, 19 digits, as the design
//! guide's C# writes them) plus a unique suffix, so a partition reads newest first and `$top=10`
//! returns the 10 newest. `cargo xtask demo` runs it against Azurite.

use chrono::{DateTime, Duration, Utc};
use futures::TryStreamExt as _;
use serde::{Deserialize, Serialize};
use tablekit_core::keys::inverted_ticks;
use tablekit_core::{Entity, Properties};
use tablekit_examples::{account, report, unique_name};
use tablekit_logtail::LogTail;
use tablekit_logtail::key::{time_of, truncate_to_tick};

// ANCHOR: model
/// An expense claim. The employee id is the PartitionKey and the submission time the RowKey,
/// so the claim itself needs neither.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ExpenseClaim {
    amount_cents: i64,
    category: String,
    description: String,
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = account()?;
    let table = account.table(&unique_name("EmployeeExpense"))?;
    table.create().await?;
    let metrics = account.metrics().clone();
    println!("expense-log-tail: table {}", table.name());

    // ANCHOR: append
    let claims = LogTail::<ExpenseClaim>::new(table.clone());
    let employee = "000123";
    let now = Utc::now();
    let submitted = |day: i64| now - Duration::days(30 - day);
    let before = metrics.snapshot();
    let first = claims.append_at(employee, submitted(0), &claim(0)).await?; // 1 request
    report("append one claim", &metrics.snapshot().since(&before));
    let history: Vec<(DateTime<Utc>, ExpenseClaim)> =
        (1..30).map(|day| (submitted(day), claim(day))).collect();
    let before = metrics.snapshot();
    claims
        .append_batch(employee, &history)
        .await?
        .into_result()?; // one transaction of 29
    report(
        "append 29 more claims in one transaction",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: append

    // ANCHOR: latest
    let before = metrics.snapshot();
    let recent = claims.latest(employee, 10).await?; // $top=10: one request, newest first
    report(
        "the 10 most recent claims",
        &metrics.snapshot().since(&before),
    );
    for claim in &recent[..3] {
        println!(
            "    {}  {:>8}  {}",
            claim.time.format("%Y-%m-%d %H:%M"),
            claim.value.amount_cents,
            claim.value.description
        );
    }
    // ANCHOR_END: latest
    let spent = metrics.snapshot().since(&before);
    // Every attempt counts as a request; a transient failure retried would add one.
    assert_eq!(
        spent.requests() - spent.retries,
        1,
        "latest(p, 10) is one request"
    );
    let days: Vec<i64> = recent.iter().map(|c| c.value.amount_cents / 100).collect();
    assert_eq!(
        days,
        (20..30).rev().collect::<Vec<_>>(),
        "the 10 newest, newest first"
    );

    // ANCHOR: window
    let (from, to) = (submitted(7), submitted(14));
    let before = metrics.snapshot();
    let week: Vec<_> = claims.window(employee, from, to).try_collect().await?; // one range query
    report(
        "claims of one week, newest first",
        &metrics.snapshot().since(&before),
    );
    // ANCHOR_END: window
    assert_eq!(week.len(), 7);
    assert!(week.windows(2).all(|w| w[0].time > w[1].time));

    // ANCHOR: key
    // The time is in the key: 19 digits the .NET formula gives, then `_` and a unique suffix.
    println!("    first claim's RowKey: {}", first.keys.rk());
    assert_eq!(&first.keys.rk()[..19], inverted_ticks(submitted(0)));
    assert_eq!(time_of(first.keys.rk())?, first.time);
    // A claim written by a .NET service with the guide's formula reads back the same way.
    let dotnet_time = submitted(30);
    let dotnet_key = inverted_ticks(dotnet_time); // string.Format("{0:D19}", MaxTicks - t.Ticks)
    let from_dotnet = Properties::new()
        .with("AmountCents", 3_000_i64)
        .with("Category", "Travel")
        .with("Description", "written by .NET");
    table
        .insert(&Entity::try_new(employee, dotnet_key, from_dotnet)?)
        .await?;
    let newest = &claims.latest(employee, 1).await?[0];
    assert_eq!(newest.value.description, "written by .NET");
    println!("    newest claim, written by .NET, at {}", newest.time);
    // ANCHOR_END: key
    assert_eq!(newest.time, truncate_to_tick(dotnet_time)?);

    table.delete_table().await?;
    println!(
        "expense-log-tail: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}

fn claim(day: i64) -> ExpenseClaim {
    ExpenseClaim {
        amount_cents: day * 100,
        category: if day % 3 == 0 { "Travel" } else { "Meals" }.into(),
        description: format!("claim of day {day}"),
    }
}
