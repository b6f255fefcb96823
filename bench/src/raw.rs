//! The hand-written raw-SDK equivalents tablekit is compared with: the best a careful user
//! of `azure_data_tables` 0.21 would write (pooled HTTP client, the SDK's default retry
//! policy, 100-entity transactions dispatched round-robin across partitions, bounded
//! concurrency), plus the SDK's default transport for the connection figure.

use std::sync::Arc;

use azure_core::TransportOptions;
use azure_data_tables::clients::{TableClient, TableServiceClientBuilder};
use azure_storage::{CloudLocation, StorageCredentials};
use futures::{StreamExt as _, TryStreamExt as _};

use crate::data::RawRecord;

/// A raw SDK client for `table` at the emulator endpoint, with the SDK's default retry policy;
/// `pooled` supplies a keep-alive reqwest client through the SDK's transport options (the
/// SDK's own keeps no idle connections).
pub(crate) fn table_client(endpoint: &str, table: &str, pooled: bool) -> TableClient {
    let credentials = StorageCredentials::access_key(
        tablekit_testkit::ACCOUNT,
        azure_core::auth::Secret::new(tablekit_testkit::ACCOUNT_KEY),
    );
    let location = CloudLocation::Custom {
        account: tablekit_testkit::ACCOUNT.to_owned(),
        uri: endpoint.to_owned(),
    };
    let mut builder = TableServiceClientBuilder::with_location(location, credentials);
    if pooled {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        builder = builder.transport(TransportOptions::new(Arc::new(client)));
    }
    builder.build().table_client(table)
}

/// The order transactions are sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// One transaction of each partition in turn: the transactions in flight spread over the
    /// partitions, as a careful user dispatches them.
    RoundRobin,
    /// Every transaction of one partition, then the next partition's: the transactions in
    /// flight pile onto one partition at a time.
    PartitionMajor,
}

/// Inserts `records` (grouped by partition, 100 per transaction, sent in `order`) with
/// `concurrency` transactions in flight. Fails if any transaction reports a failed operation.
pub(crate) async fn bulk_insert(
    client: &TableClient,
    records: Vec<RawRecord>,
    concurrency: usize,
    order: Order,
) -> Result<usize, String> {
    let mut by_partition: std::collections::BTreeMap<String, Vec<RawRecord>> = Default::default();
    for r in records {
        by_partition
            .entry(r.partition_key.clone())
            .or_default()
            .push(r);
    }
    let per_partition: Vec<Vec<(String, Vec<RawRecord>)>> = by_partition
        .into_iter()
        .map(|(pk, rows)| {
            rows.chunks(100)
                .map(|c| (pk.clone(), c.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect();
    let chunks: Vec<(String, Vec<RawRecord>)> = match order {
        Order::PartitionMajor => per_partition.into_iter().flatten().collect(),
        Order::RoundRobin => round_robin(per_partition),
    };
    let written: Vec<usize> = futures::stream::iter(chunks)
        .map(|(pk, rows)| async move {
            let mut tx = client.partition_key_client(pk).transaction();
            let n = rows.len();
            for row in rows {
                tx = tx.insert(row).map_err(|e| e.to_string())?;
            }
            let response = tx.await.map_err(|e| e.to_string())?;
            // The 0.21 SDK returns Ok for a failed transaction: a careful user checks.
            if response
                .operation_responses
                .iter()
                .any(|r| !r.status_code.is_success())
            {
                return Err("a transaction operation failed".to_owned());
            }
            Ok::<_, String>(n)
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    Ok(written.iter().sum())
}

/// The first item of every list, then the second of every list, and so on.
fn round_robin<T>(lists: Vec<Vec<T>>) -> Vec<T> {
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        out.extend(iters.iter_mut().filter_map(Iterator::next));
        if out.len() == before {
            return out;
        }
    }
}

/// Scans one partition with the SDK's stream; returns the number of entities.
pub(crate) async fn scan(client: &TableClient, pk: &str) -> Result<usize, String> {
    let filter = format!("PartitionKey eq '{pk}'");
    let mut stream = client.query().filter(filter).into_stream::<RawRecord>();
    let mut n = 0;
    while let Some(page) = stream.next().await {
        n += page.map_err(|e| e.to_string())?.entities.len();
    }
    Ok(n)
}

/// Reads one entity.
pub(crate) async fn get(client: &TableClient, pk: &str, rk: &str) -> Result<(), String> {
    client
        .partition_key_client(pk)
        .entity_client(rk)
        .get::<RawRecord>()
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_takes_one_of_each_list_in_turn() {
        let lists = vec![vec!["a1", "a2", "a3"], vec!["b1"], vec!["c1", "c2"]];
        assert_eq!(
            round_robin(lists),
            ["a1", "b1", "c1", "a2", "c2", "a3"],
            "consecutive transactions go to different partitions while there are several"
        );
        assert!(round_robin::<u8>(vec![]).is_empty());
    }
}
