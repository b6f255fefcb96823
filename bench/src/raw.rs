//! The hand-written raw-SDK equivalents tablekit is compared with: the best a careful user
//! of `azure_data_tables` 0.21 would write (pooled HTTP client, 100-entity transactions,
//! bounded concurrency), plus the SDK's default transport for the connection figure.

use std::sync::Arc;

use azure_core::TransportOptions;
use azure_data_tables::clients::{TableClient, TableServiceClientBuilder};
use azure_storage::{CloudLocation, StorageCredentials};
use futures::{StreamExt as _, TryStreamExt as _};

use crate::data::RawRecord;

/// A raw SDK client for `table` at the emulator endpoint; `pooled` supplies a keep-alive
/// reqwest client through the SDK's transport options (the SDK's own keeps no idle
/// connections).
pub(crate) fn table_client(endpoint: &str, table: &str, pooled: bool) -> TableClient {
    let credentials = StorageCredentials::access_key(
        tablekit_testkit::ACCOUNT,
        azure_core::auth::Secret::new(tablekit_testkit::ACCOUNT_KEY),
    );
    let location = CloudLocation::Custom {
        account: tablekit_testkit::ACCOUNT.to_owned(),
        uri: endpoint.to_owned(),
    };
    let mut builder = TableServiceClientBuilder::with_location(location, credentials)
        .retry(azure_core::RetryOptions::none());
    if pooled {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        builder = builder.transport(TransportOptions::new(Arc::new(client)));
    }
    builder.build().table_client(table)
}

/// Inserts `records` (grouped by partition, 100 per transaction) with `concurrency`
/// transactions in flight. Fails if any transaction reports a failed operation.
pub(crate) async fn bulk_insert(
    client: &TableClient,
    records: Vec<RawRecord>,
    concurrency: usize,
) -> Result<usize, String> {
    let mut by_partition: std::collections::BTreeMap<String, Vec<RawRecord>> = Default::default();
    for r in records {
        by_partition
            .entry(r.partition_key.clone())
            .or_default()
            .push(r);
    }
    let chunks: Vec<(String, Vec<RawRecord>)> = by_partition
        .into_iter()
        .flat_map(|(pk, rows)| {
            rows.chunks(100)
                .map(|c| (pk.clone(), c.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect();
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
