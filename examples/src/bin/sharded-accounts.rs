//! Sharding over storage accounts: one orders table spread over three accounts by a stable
//! hash of the PartitionKey, so that the workload has three accounts' request budgets — with
//! the requests each shard took, and a changed account list refused.
//!
//! Against real accounts, list one connection string per shard, in a fixed order, in
//! `TABLEKIT_SHARD_CONNECTION_STRINGS` (separated by whitespace):
//!
//! ```sh
//! TABLEKIT_SHARD_CONNECTION_STRINGS="$CS_ORDERS0 $CS_ORDERS1 $CS_ORDERS2" \
//!     cargo run -p tablekit-examples --bin sharded-accounts
//! ```
//!
//! Without it, shard 0 is the account of `AZURE_STORAGE_CONNECTION_STRING` (or Azurite) and,
//! when that is an emulator, the other two shards are emulators the example starts itself.
//! `cargo xtask demo` runs it that way.

use futures::TryStreamExt as _;
use tablekit::azure::ShardedAccount;
use tablekit::core::batch::Operation;
use tablekit::prelude::*;
use tablekit::testkit::Azurite;
use tablekit_examples::unique_name;

// ANCHOR: model
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{customer}", row_key = "{order:08}")]
struct Order {
    customer: String,
    order: u32,
    total_cents: i64,
}
// ANCHOR_END: model

/// The requests each shard has sent so far.
fn per_shard(accounts: &ShardedAccount) -> Vec<u64> {
    accounts
        .shards()
        .iter()
        .map(|a| a.metrics().snapshot().requests())
        .collect()
}

fn report(step: &str, before: &[u64], accounts: &ShardedAccount) {
    let now = per_shard(accounts);
    let sent: Vec<u64> = now.iter().zip(before).map(|(a, b)| a - b).collect();
    println!(
        "  {step:<52} {:>4} request(s), per shard {sent:?}",
        sent.iter().sum::<u64>()
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (shards, _emulators) = shard_accounts()?;

    // ANCHOR: accounts
    // Shard i is the i-th account, for the life of the data: keep the list and its order.
    let accounts = ShardedAccount::new(shards)?;
    let orders = accounts.table(&unique_name("Orders"))?;
    orders.create().await?; // the table and a shard marker in every account
    // ANCHOR_END: accounts
    println!(
        "sharded-accounts: table {} over {} accounts (shard set {})",
        orders.name(),
        accounts.shard_count(),
        accounts.set_id()
    );
    for customer in ["alice", "bob", "carol"] {
        println!(
            "    customer {customer:<5} -> shard {}",
            accounts.shard_of(customer)
        );
    }

    // ANCHOR: write
    // 3,000 orders of 300 customers: split by shard, each shard's transactions sent by its
    // own account (own connection pool, own throughput budget), the shards at once.
    let batch: Vec<Operation> = (0..3_000u32)
        .map(|i| {
            Operation::insert(&Order {
                customer: format!("customer-{:03}", i % 300),
                order: i,
                total_cents: i64::from(i) * 125,
            })
        })
        .collect::<tablekit::Result<_>>()?;
    let before = per_shard(&accounts);
    let written = orders.bulk_write(batch, BulkOptions::default()).await?;
    assert!(written.is_complete());
    // ANCHOR_END: write
    report(
        "bulk write of 3,000 orders, 300 partitions",
        &before,
        &accounts,
    );

    // ANCHOR: read
    // A partition is in one shard: point reads and partition queries ask only that one.
    let before = per_shard(&accounts);
    let one: Option<Stored<Order>> = orders.get(("customer-042", "00000042")).await?;
    let history: Vec<Stored<Order>> = orders
        .query_partition::<Order>("customer-042")
        .await?
        .collect()
        .await?;
    // ANCHOR_END: read
    report(
        "point read + partition query of customer-042",
        &before,
        &accounts,
    );
    assert_eq!(one.map(|s| s.value.total_cents), Some(42 * 125));
    assert_eq!(history.len(), 10);

    // ANCHOR: scan
    // A scan asks every shard and merges their answers in key order.
    let before = per_shard(&accounts);
    let big: Vec<Stored<Order>> = orders
        .scan::<Order>()
        .filter(Filter::ge("TotalCents", 370_000_i64))
        .allow_scan()
        .stream()
        .try_collect()
        .await?;
    // ANCHOR_END: scan
    report("scan for orders of 3,700.00 or more", &before, &accounts);
    assert_eq!(big.len(), 40);

    // ANCHOR: transaction
    // A transaction covers one partition, so one shard: it stays atomic.
    let status = Properties::new().with("Status", "refunded");
    let refund = Properties::new().with("Cents", -5_250_i64);
    let before = per_shard(&accounts);
    orders
        .transaction()
        .upsert_merge(&Entity::try_new("customer-042", "00000042", status)?)
        .insert(&Entity::try_new("customer-042", "refund-00000042", refund)?)
        .submit() // one request, to customer-042's shard
        .await?;
    // ANCHOR_END: transaction
    report(
        "one transaction in customer-042's partition",
        &before,
        &accounts,
    );

    // ANCHOR: refused
    // The same table through a list that lost an account: every marker is checked before
    // the first request, and the changed count is refused — nothing is misrouted.
    let fewer = ShardedAccount::new(accounts.shards()[..2].to_vec())?;
    let err = fewer
        .table(orders.name())?
        .get::<Order>(("customer-042", "00000042"))
        .await
        .unwrap_err();
    println!("  two of the three accounts: {err}");
    // ANCHOR_END: refused
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    let before = per_shard(&accounts);
    orders.delete_table().await?;
    report("delete the table in every shard", &before, &accounts);
    let total: u64 = per_shard(&accounts).iter().sum();
    println!("sharded-accounts: {total} requests in total");
    Ok(())
}

/// The shards' accounts, and the emulators started for them (stopped when dropped).
fn shard_accounts() -> Result<(Vec<Account>, Vec<Azurite>), Box<dyn std::error::Error>> {
    if let Ok(list) = std::env::var("TABLEKIT_SHARD_CONNECTION_STRINGS") {
        let accounts = list
            .split_whitespace()
            .map(Account::from_connection_string)
            .collect::<tablekit::Result<Vec<_>>>()?;
        return Ok((accounts, Vec::new()));
    }
    let first = Account::from_env_or_emulator()?;
    if first.name() != tablekit::testkit::ACCOUNT {
        return Err(
            "set TABLEKIT_SHARD_CONNECTION_STRINGS to one connection string per shard".into(),
        );
    }
    let emulators = (0..2)
        .map(|_| Azurite::start())
        .collect::<Result<Vec<_>, _>>()?;
    let mut accounts = vec![first];
    for emulator in &emulators {
        accounts.push(Account::from_connection_string(
            &emulator.connection_string(),
        )?);
    }
    Ok((accounts, emulators))
}
