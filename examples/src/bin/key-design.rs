//! Designing keys: zero-padded numbers, compound keys, prefix ranges, newest-first keys, and
//! what each query shape costs — with the scan policy refusing the expensive ones.

use std::ops::Bound;

use tablekit::azure::{ScanAction, ScanPolicy, Settings};
use tablekit::core::QueryShape;
use tablekit::core::keys::{CompoundKey, inverted_ticks, pad_number, prefix_range};
use tablekit::prelude::*;
use tablekit_examples::{report, unique_name};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: builders
    // Numbers sort as text: pad them to one fixed width per key component.
    assert!("10" < "9");
    assert!(pad_number(9, 6)? < pad_number(10, 6)?); // "000009" < "000010"

    // Compound keys: an employee row and one row per review year, contiguous and in order.
    let key = CompoundKey::new('_').with_width(1, 6);
    let employee = key.build(["empid", "123"])?; // "empid_000123"
    let review = key.build(["empid", "123", "2012"])?; // "empid_000123_2012"
    let all_of_123 = key.range_for_prefix(["empid", "123"])?; // the employee and its reviews
    assert!(all_of_123.contains(&employee) && all_of_123.contains(&review));
    assert!(!all_of_123.contains(&key.build(["empid", "124"])?));

    // Prefix ranges: every email starting with "a", and nothing else.
    let emails_a = prefix_range("email_a"); // ["email_a", "email_b")
    assert_eq!(
        (emails_a.start.as_str(), emails_a.end.as_deref()),
        ("email_a", Some("email_b"))
    );

    // Newest first: .NET-compatible inverted ticks sort later times first.
    let earlier = inverted_ticks(chrono::Utc::now() - chrono::Duration::seconds(1));
    assert!(inverted_ticks(chrono::Utc::now()) < earlier);
    // ANCHOR_END: builders

    let account = Account::from_env_or_emulator()?;
    let table = account.table(&unique_name("KeyDesign"))?;
    table.create().await?;
    let metrics = account.metrics().clone();
    println!("key-design: table {}", table.name());
    for id in [100u64, 123, 150, 199, 200] {
        let rk = key.build(["empid", &id.to_string()])?;
        table
            .insert(&Entity::new(
                Keys::new("Sales", rk)?,
                Properties::new()
                    .with("Id", id as i64)
                    .with("LastName", "Jones"),
            ))
            .await?;
    }

    // ANCHOR: shapes
    let point = Filter::point(&Keys::new("Sales", key.build(["empid", "123"])?)?);
    let range = Filter::row_range(
        "Sales",
        Bound::Included("empid_000100"),
        Bound::Excluded("empid_000200"),
    );
    let partition_scan = Filter::partition("Sales").and(Filter::eq("LastName", "Jones"));
    let table_scan = Filter::eq("LastName", "Jones");
    let either = Filter::partition("Sales")
        .and(Filter::eq("RowKey", "empid_000121").or(Filter::eq("RowKey", "empid_000322")));
    assert_eq!(point.shape(), QueryShape::Point);
    assert_eq!(range.shape(), QueryShape::Range);
    assert_eq!(partition_scan.shape(), QueryShape::PartitionScan);
    assert_eq!(table_scan.shape(), QueryShape::TableScan);
    assert_eq!(either.shape(), QueryShape::PartitionScan); // `or` over RowKeys is a scan
    // ANCHOR_END: shapes

    for (name, filter, expected) in [
        ("point", point, 1),
        ("range 000100..000200", range, 4),
        ("partition scan on LastName", partition_scan, 5),
    ] {
        let before = metrics.snapshot();
        let rows = table.query::<Properties>().filter(filter).collect().await?;
        assert_eq!(rows.len(), expected);
        report(
            &format!("{name}: {} row(s)", rows.len()),
            &metrics.snapshot().since(&before),
        );
    }

    // ANCHOR: policy
    let strict = account.with_settings(
        Settings::default().with_scan_policy(
            ScanPolicy::default()
                .with_table_scans(ScanAction::Deny)
                .with_partition_scans(ScanAction::Warn),
        ),
    )?;
    let err = strict
        .table(table.name())?
        .query::<Properties>()
        .filter(table_scan)
        .page()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput); // refused before any request
    assert_eq!(strict.metrics().snapshot().requests(), 0);
    // ANCHOR_END: policy
    println!("  table scan refused by the scan policy: {err}");

    table.delete_table().await?;
    Ok(())
}
