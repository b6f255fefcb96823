//! The log tail pattern: an employee's 10 most recent expense claims in one request.
//!
//! RowKeys are inverted ticks (`DateTime.MaxValue.Ticks − t.Ticks`, 19 digits, as the design
//! guide's C# writes them) plus a unique suffix, so a partition reads newest first and `$top=10`
//! returns the 10 newest. `cargo xtask demo` runs it against Azurite.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use tablekit::core::keys::inverted_ticks;
use tablekit::logtail::LogTail;
use tablekit::logtail::key::{time_of, truncate_to_tick};
use tablekit::prelude::*;
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// An expense claim: a value without keys of its own. The employee id is the PartitionKey
/// and the submission time the RowKey, so the claim itself needs neither.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ExpenseClaim {
    amount_cents: i64,
    category: String,
    description: String,
}

/// The one property a report of amounts reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Amount {
    amount_cents: i64,
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let table = account.table(&unique_name("EmployeeExpense"))?;
    table.create().await?;
    let metrics = account.metrics().clone();
    println!("expense-log-tail: table {}", table.name());

    // ANCHOR: append
    let claims: LogTail<ExpenseClaim> = LogTail::new(table.clone());
    let employee = "000123";
    let now = Utc::now();
    let submitted = |day: i64| now - Duration::days(30 - day);
    // ANCHOR_END: append
    let before = metrics.snapshot();
    // ANCHOR: append_one
    let first = claims.append_at(employee, submitted(0), &claim(0)).await?; // 1 request
    // ANCHOR_END: append_one
    report("append one claim", &metrics.snapshot().since(&before));
    let before = metrics.snapshot();
    // ANCHOR: append_batch
    let history: Vec<(DateTime<Utc>, ExpenseClaim)> =
        (1..30).map(|day| (submitted(day), claim(day))).collect();
    claims
        .append_batch(employee, &history)
        .await?
        .into_result()?; // one transaction of 29
    // ANCHOR_END: append_batch
    report(
        "append 29 more claims in one transaction",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: latest
    let recent = claims.latest(employee, 10).await?; // $top=10: one request, newest first
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
    report("the 10 most recent claims", &spent);
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

    let before = metrics.snapshot();
    // ANCHOR: window
    let (from, to) = (submitted(7), submitted(14));
    let week = claims.window(employee, from, to).collect().await?; // one range query
    // ANCHOR_END: window
    report(
        "claims of one week, newest first",
        &metrics.snapshot().since(&before),
    );
    assert_eq!(week.len(), 7);
    assert!(week.windows(2).all(|w| w[0].time > w[1].time));

    let before = metrics.snapshot();
    // ANCHOR: pages
    // A report page by page: 12 claims per request, only the properties `Amount` reads, and
    // a token to carry on later — from a web request's "next" link, or another process.
    let amounts: LogTail<Amount> = LogTail::new(table.clone());
    let read = amounts.entries(employee).select_fields().with_page_size(12);
    let page = read.clone().page().await?;
    let next: String = page.continuation.expect("more claims").to_string();
    let rest = read.resume(next.parse()?).collect().await?;
    // ANCHOR_END: pages
    report(
        "30 amounts, 12 per page, resumed from a token",
        &metrics.snapshot().since(&before),
    );
    let total: i64 = page
        .items
        .iter()
        .chain(&rest)
        .map(|a| a.value.amount_cents)
        .sum();
    assert_eq!(page.items.len() + rest.len(), 30);
    assert_eq!(total, (0..30).sum::<i64>() * 100);

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
