//! Compound keys: an employee's yearly reviews stored next to it under compound RowKeys
//! (`empid_000123`, `empid_000123_2012`), so one range query returns the employee with all
//! its reviews and one transaction can write them together.

use tablekit::core::keys::CompoundKey;
use tablekit::index::CompoundRows;
use tablekit::prelude::*;
use tablekit_examples::{Meter, unique_name};

// ANCHOR: model
/// An employee, at `Sales/empid_000123`.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "empid_{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
}

/// A yearly review, next to its employee: `Sales/empid_000123_2012`.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(
    partition_key = "{department}",
    row_key = "empid_{employee_id:06}_{year:04}"
)]
struct Review {
    department: String,
    employee_id: u32,
    year: u16,
    manager_rating: i32,
    peer_rating: i32,
    comments: String,
}
// ANCHOR_END: model

fn review(employee_id: u32, year: u16, rating: i32) -> Review {
    Review {
        department: "Sales".into(),
        employee_id,
        year,
        manager_rating: rating,
        peer_rating: rating,
        comments: format!("{year} review"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    println!("compound-keys on {}", account.name());
    let mut meter = Meter::new(&account);
    let table = account.table(&unique_name("Reviews"))?;
    table.create().await?;

    // ANCHOR: write
    let lee = Employee {
        department: "Sales".into(),
        id: 123,
        first_name: "Lee".into(),
        last_name: "Hall".into(),
    };
    // An employee and its reviews share a partition: one transaction writes them together.
    table
        .transaction()
        .insert(&lee)
        .insert(&review(123, 2012, 3))
        .insert(&review(123, 2013, 4))
        .submit()
        .await?;
    // ANCHOR_END: write
    meter.report("create the table; employee 000123 and two reviews, one transaction");
    let ada = Employee {
        department: "Sales".into(),
        id: 124,
        first_name: "Ada".into(),
        last_name: "Cao".into(),
    };
    table.insert(&ada).await?;
    meter.report("insert employee 000124");

    // ANCHOR: read
    // Keys with the id padded to six digits and the year to four, as the templates pad them.
    let rows = CompoundRows::new(
        table.clone(),
        CompoundKey::new('_').with_width(1, 6).with_width(2, 4),
    );
    // RowKey ge 'empid_000123' and lt 'empid_000124' (never 'lt 000123_2012': below the start).
    let of_123: Vec<Stored<Properties>> = rows
        .with_prefix("Sales", ["empid", "123"])?
        .collect()
        .await?;
    // One review: a point read of its keys.
    let review: Option<Stored<Review>> = rows.get("Sales", ["empid", "123", "2013"]).await?;
    // ANCHOR_END: read
    meter.report("employee 000123 with all its reviews (one range), one review (1)");
    let keys: Vec<&str> = of_123.iter().map(|r| r.keys.rk()).collect();
    assert_eq!(
        keys,
        ["empid_000123", "empid_000123_2012", "empid_000123_2013"]
    );
    assert_eq!(review.expect("stored").value.manager_rating, 4);

    table.delete_table().await?;
    println!("compound-keys: done, {} requests in total", meter.total());
    Ok(())
}
