//! Workload 5: peak memory while streaming a large scan, measured in child processes so each
//! peak starts from a clean baseline.

use std::process::Command;

use futures::TryStreamExt as _;
use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, BulkOptions};
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Keys};

use crate::data::{Record, keys, record};
use crate::workloads::Result;

/// What one child measured.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Streamed {
    pub(crate) entities: usize,
    pub(crate) baseline_rss: u64,
    pub(crate) peak_rss: u64,
}

impl Streamed {
    pub(crate) fn growth(&self) -> u64 {
        self.peak_rss.saturating_sub(self.baseline_rss)
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Memory {
    pub(crate) small: Streamed,
    pub(crate) large: Streamed,
}

/// Loads `n` entities in partitions of 1,000 (Azurite slows down as a partition grows).
pub(crate) async fn load(account: &Account, n: usize) -> Result<tablekit_azure::Table> {
    let table = account
        .table(&tablekit_testkit::unique_table_name("benchmem"))
        .map_err(|e| e.to_string())?;
    table.create().await.map_err(|e| e.to_string())?;
    let partitions = n.div_ceil(1_000);
    let ops: Vec<Operation> = (0..n)
        .map(|i| {
            let (pk, rk) = keys(i, partitions);
            Operation::insert(&Entity::new(Keys::new(pk, rk).expect("keys"), record(i)))
                .expect("entity")
        })
        .collect();
    let report = table
        .bulk_write(ops, BulkOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    if !report.is_complete() {
        return Err("memory table load incomplete".into());
    }
    Ok(table)
}

/// Runs a child that streams the first `partitions` partitions of `table`.
pub(crate) fn measure(connection_string: &str, table: &str, partitions: usize) -> Result<Streamed> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args([
            "stream-child",
            connection_string,
            table,
            &partitions.to_string(),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "stream child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// The child: stream every entity of the first `partitions` partitions, one page at a time,
/// and report the peak RSS growth.
pub(crate) async fn child(
    connection_string: &str,
    table: &str,
    partitions: usize,
) -> Result<Streamed> {
    let account = Account::from_connection_string(connection_string).map_err(|e| e.to_string())?;
    let table = account.table(table).map_err(|e| e.to_string())?;
    let filter = Filter::ge("PartitionKey", "p000")
        .and(Filter::lt("PartitionKey", format!("p{partitions:03}")));
    // Warm the client up (TLS-free here, but the pool, the runtime) before the baseline.
    table
        .query::<Record>()
        .filter(filter.clone())
        .top(1)
        .allow_scan()
        .page()
        .await
        .map_err(|e| e.to_string())?;
    let baseline_rss = crate::measure::rss();
    let entities = table
        .query::<Record>()
        .filter(filter)
        .allow_scan()
        .stream()
        .try_fold(0usize, |n, _| async move { Ok(n + 1) })
        .await
        .map_err(|e| e.to_string())?;
    Ok(Streamed {
        entities,
        baseline_rss,
        peak_rss: crate::measure::peak_rss(),
    })
}
