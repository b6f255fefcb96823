//! The high volume delete pattern: sign-in records kept 60 days. Each day's sign-ins live in
//! their own table (`Signins20261122`), so expiring a day is one delete-table request instead
//! of a scan and a delete per record. A purge covers data that cannot be laid out by table:
//! a closed account's audit trail, deleted 100 entities per transaction.
//!
//! `cargo xtask demo` runs it against Azurite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, Utc};
use tablekit::core::batch::Operation;
use tablekit::prelude::*;
use tablekit::retention::{Period, PeriodTables};
use tablekit::retention::{PeriodToken, PurgeOptions, purge_partition};
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// One sign-in attempt. PartitionKey = user id (inserts spread over many partitions),
/// RowKey = the attempt's time as .NET ticks, so a user's sign-ins of a day are one range.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{user}", row_key = "{at:ticks}")]
struct Signin {
    user: String,
    at: DateTime<Utc>,
    address: String,
    succeeded: bool,
}

fn signin(user: &str, at: DateTime<Utc>) -> Signin {
    Signin {
        user: user.into(),
        at,
        address: "203.0.113.7".into(),
        succeeded: at.timestamp() % 5 != 0,
    }
}
// ANCHOR_END: model

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let metrics = account.metrics().clone();
    let now = Utc::now();
    let days_ago = |n: i64| now - Duration::days(n);

    // ANCHOR: layout
    let prefix = format!("{}T", unique_name("Signins")); // "Signins" in production
    let history = PeriodTables::new(&account, &prefix, Period::Day)?;
    let signins = history.clone().with_retention(Duration::days(60));
    println!(
        "signin-retention: today's table is {}",
        signins.table_name(now)?
    );
    // ANCHOR_END: layout

    // Sign-ins of three days beyond the retention (recorded back then, simulated here with
    // the handle that has no retention check) and of the last three days.
    for n in [63, 62, 61] {
        for user in ["alice", "bob"] {
            history
                .insert(days_ago(n), &signin(user, days_ago(n)))
                .await?;
        }
    }
    let before = metrics.snapshot();
    // ANCHOR: write
    signins
        .insert(days_ago(2), &signin("alice", days_ago(2)))
        .await?; // no table yet: 3 requests (insert, create table, insert)
    // ANCHOR_END: write
    report(
        "first sign-in of a day (insert, create table, insert)",
        &metrics.snapshot().since(&before),
    );
    let before = metrics.snapshot();
    // ANCHOR: write_next
    let later = days_ago(2) + Duration::hours(1);
    signins.insert(later, &signin("bob", later)).await?; // the table exists: 1 request
    // ANCHOR_END: write_next
    report(
        "next sign-in of that day",
        &metrics.snapshot().since(&before),
    );
    let before = metrics.snapshot();
    // ANCHOR: create_ahead
    signins.create_ahead(now).await?; // tomorrow's table, before its traffic arrives
    // ANCHOR_END: create_ahead
    report(
        "create tomorrow's table ahead of time",
        &metrics.snapshot().since(&before),
    );
    for n in [1, 0] {
        for user in ["alice", "bob"] {
            signins
                .insert(days_ago(n), &signin(user, days_ago(n)))
                .await?;
        }
    }
    let refused = signins
        .insert(days_ago(70), &signin("carol", days_ago(70)))
        .await;
    assert!(
        refused.is_err(),
        "an expired day's table is never written to again"
    );

    let before = metrics.snapshot();
    // ANCHOR: query
    let recent: Vec<Stored<Signin>> = signins
        .query(days_ago(2), now)
        .filter(Signin::USER.eq("alice"))
        .collect()
        .await?; // one query per daily table the range touches, and no other table
    // ANCHOR_END: query
    let spent = metrics.snapshot().since(&before);
    report("alice's sign-ins over the last 3 days", &spent);
    assert_eq!(recent.len(), 3);
    assert_eq!(
        spent.requests() - spent.retries,
        3,
        "three tables, no other"
    );

    let before = metrics.snapshot();
    // ANCHOR: query_pages
    // The same read page by page: each page's token names the table it stopped in, so a
    // later request — or another process — carries on from there.
    let everyone = signins.query(days_ago(2), now).with_page_size(2);
    let first: Page<Stored<Signin>, PeriodToken> = everyone.clone().page().await?;
    let token = first.continuation.expect("more pages").to_string();
    println!("    the next page starts at {token}");
    let rest = everyone.resume(token.parse()?).collect().await?;
    // ANCHOR_END: query_pages
    report(
        "the last 3 days page by page, resumed from a token",
        &metrics.snapshot().since(&before),
    );
    assert_eq!(first.items.len() + rest.len(), 6);

    let before = metrics.snapshot();
    // ANCHOR: drop
    let expired = signins.drop_expired(now).await?; // list + one delete-table per expired day
    // ANCHOR_END: drop
    let spent = metrics.snapshot().since(&before);
    report(
        &format!("drop {} expired days", expired.dropped.len()),
        &spent,
    );
    assert_eq!(
        expired.dropped,
        [63, 62, 61].map(|n| signins.table_name(days_ago(n)).unwrap())
    );
    assert_eq!(expired.kept.len(), 4, "the last three days and tomorrow");
    assert_eq!(
        spent.requests() - spent.retries,
        4,
        "a listing and three deletes"
    );

    let audit = account.table(&unique_name("SigninAudit"))?;
    audit.create().await?;
    let trail =
        (0..2_500).map(|i| Operation::insert(&signin("dave", days_ago(1) + Duration::seconds(i))));
    audit
        .bulk_write(trail.collect::<Result<_, _>>()?, Default::default())
        .await?;
    let pages = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&pages);
    let before = metrics.snapshot();
    // ANCHOR: purge
    // A closed account: its audit trail shares a table with everyone else's, so it cannot be
    // dropped as a table. Purge its partition: keys only, 100 deletes per transaction.
    let options = PurgeOptions::default().with_progress(move |p| {
        seen.fetch_add(1, Ordering::Relaxed);
        println!(
            "    purge progress: {} deleted, {} requests",
            p.done, p.requests
        );
    });
    let purged = purge_partition(&audit, "dave", options).await?;
    // ANCHOR_END: purge
    report(
        &format!(
            "purge 2,500 audit records ({} transactions)",
            purged.transactions
        ),
        &metrics.snapshot().since(&before),
    );
    assert_eq!(
        (purged.deleted, purged.transactions, purged.pages),
        (2_500, 25, 3)
    );
    assert_eq!(pages.load(Ordering::Relaxed), 3);
    let audit_rows: TypedTable<Signin> = audit.typed();
    let gone = audit_rows.get(&signin("dave", days_ago(1))).await?;
    assert!(gone.is_none());

    audit.delete_table().await?;
    history.drop_older_than(now + Duration::days(3)).await?;
    assert!(history.list().await?.is_empty());
    println!(
        "signin-retention: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
