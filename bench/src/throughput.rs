//! Workload 9: throughput governance. A bulk load over 1, 10 and 100 partitions through a
//! fault proxy whose throttle model serves the service's scalability targets scaled down to
//! what Azurite serves (200 entities/s per partition, 2,000 per account), by tablekit and by
//! the raw SDK with the same concurrency and its default retry policy.
//!
//! Goodput is entities written per second of the run as a fraction of the theoretical budget:
//! in `t` seconds the model admits at most one full burst plus `t` seconds of its rate, where
//! the rate is min(account budget, partitions × partition budget).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_core::{RetryOptions, TransportOptions};
use azure_data_tables::clients::TableServiceClientBuilder;
use azure_storage::{CloudLocation, StorageCredentials};
use serde::Serialize;
use tablekit_azure::{Account, BulkOptions, Settings, ThroughputPolicy};
use tablekit_testkit::{FaultProxy, ThrottleMode, ThrottleModel};

use crate::data::{keys, raw_record};
use crate::raw;
use crate::workloads::{Result, Sizes, err, operations};

/// Entities per second one partition serves in the model.
pub(crate) const PER_PARTITION: f64 = 200.0;
/// Entities per second the account serves in the model.
pub(crate) const PER_ACCOUNT: f64 = 2_000.0;
/// Partition counts measured.
const PARTITIONS: [usize; 3] = [1, 10, 100];
/// tablekit's load of a partition count runs up to this many times, until one meets the
/// goal: a busy machine can slow one run below it, a quiet one passes the first.
const TABLEKIT_TRIES: usize = 3;

/// One side (tablekit or the raw SDK) of one partition count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Side {
    /// Entities written.
    pub(crate) written: usize,
    /// Seconds from the first request to the last answer.
    pub(crate) seconds: f64,
    /// Written entities over the budget's maximum in that time.
    pub(crate) goodput: f64,
    /// Requests that reached the proxy (admitted or refused).
    pub(crate) requests: u64,
    /// Requests the model refused (503 Server Busy).
    pub(crate) throttled: u64,
    /// The load's error, if it did not complete.
    pub(crate) error: Option<String>,
}

impl Side {
    pub(crate) fn throttled_fraction(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.throttled as f64 / self.requests as f64
        }
    }
}

/// Both sides for one partition count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) partitions: usize,
    pub(crate) entities: usize,
    /// Entities per second the model admits for this many partitions.
    pub(crate) budget: f64,
    /// tablekit's best run (one that met the goal, else the highest goodput).
    pub(crate) tablekit: Side,
    /// The goodput of each of tablekit's runs, in order.
    pub(crate) tablekit_goodput_runs: Vec<f64>,
    pub(crate) raw_sdk: Side,
}

/// Workload 9's rows.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Throughput {
    pub(crate) per_partition: f64,
    pub(crate) per_account: f64,
    pub(crate) concurrency: usize,
    pub(crate) rows: Vec<Row>,
}

/// The model: Azure's targets scaled down, refusing as Azure Table storage does (an account
/// over its target with 503 ServerBusy, a partition over its own alternately with 503
/// ServerBusy and 500 OperationTimedOut).
pub(crate) fn model() -> ThrottleModel {
    ThrottleModel::default()
        .with_per_partition(PER_PARTITION)
        .with_per_account(PER_ACCOUNT)
        .with_burst(Duration::from_secs(1))
        .with_mode(ThrottleMode::ServerBusyOrTimedOut)
}

pub(crate) fn upstream(endpoint: &str) -> Result<SocketAddr> {
    endpoint
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|authority| authority.parse().ok())
        .ok_or_else(|| format!("{endpoint}: not a loopback endpoint"))
}

pub(crate) async fn throughput(base: &Account, endpoint: &str, sizes: Sizes) -> Result<Throughput> {
    let proxy = FaultProxy::start(upstream(endpoint)?).map_err(err)?;
    let through = proxy.endpoint_for(endpoint);
    let concurrency = sizes.concurrency;
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={through}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY
    );
    let account = Account::from_connection_string(&cs)
        .and_then(|a| {
            // Told the model's rates, and that they are the ceiling: workload 14 measures what
            // the governor learns when it is not told (probing above a target costs a refusal
            // or so per busy partition).
            a.with_settings(
                Settings::default()
                    .with_throughput(
                        ThroughputPolicy::default()
                            .with_targets(PER_PARTITION, PER_ACCOUNT)
                            .with_probe_limit(1.0),
                    )
                    .with_concurrency(concurrency),
            )
        })
        .map_err(err)?;
    let mut rows = Vec::new();
    for partitions in PARTITIONS {
        let budget = PER_ACCOUNT.min(partitions as f64 * PER_PARTITION);
        let depth = budget * model().burst.as_secs_f64();
        // One burst plus `throughput_seconds` at the budget's rate.
        let entities = (depth + budget * sizes.throughput_seconds as f64) as usize;
        let mut tries: Vec<Side> = Vec::new();
        for _ in 0..TABLEKIT_TRIES {
            let run = tablekit_side(base, &account, &proxy, partitions, entities, budget).await?;
            let met = crate::report::throughput_goal_met(&run, entities);
            tries.push(run);
            if met {
                break;
            }
        }
        let tablekit_goodput_runs = tries.iter().map(|s| s.goodput).collect();
        let tablekit = tries
            .into_iter()
            .max_by(|a, b| {
                let key = |s: &Side| crate::report::throughput_goal_met(s, entities);
                key(a).cmp(&key(b)).then(a.goodput.total_cmp(&b.goodput))
            })
            .ok_or("no tablekit run")?;
        let raw_sdk = raw_side(
            base,
            &proxy,
            &through,
            partitions,
            entities,
            budget,
            concurrency,
        )
        .await?;
        rows.push(Row {
            partitions,
            entities,
            budget,
            tablekit,
            tablekit_goodput_runs,
            raw_sdk,
        });
    }
    Ok(Throughput {
        per_partition: PER_PARTITION,
        per_account: PER_ACCOUNT,
        concurrency,
        rows,
    })
}

fn side(
    proxy: &FaultProxy,
    written: usize,
    took: Duration,
    budget: f64,
    error: Option<String>,
) -> Side {
    let depth = budget * model().burst.as_secs_f64();
    let stats = proxy.throttle_stats().unwrap_or_default();
    let seconds = took.as_secs_f64();
    Side {
        written,
        seconds,
        goodput: written as f64 / (depth + budget * seconds),
        requests: stats.admitted_requests + stats.throttled,
        throttled: stats.throttled,
        error,
    }
}

async fn tablekit_side(
    base: &Account,
    account: &Account,
    proxy: &FaultProxy,
    partitions: usize,
    entities: usize,
    budget: f64,
) -> Result<Side> {
    // Tables are created directly, so that only the load goes through the model.
    let name = tablekit_testkit::unique_table_name("benchtput");
    base.table(&name)
        .map_err(err)?
        .create()
        .await
        .map_err(err)?;
    let table = account.table(&name).map_err(err)?;
    let ops = operations(entities, partitions);
    proxy.set_throttle(model());
    let start = Instant::now();
    let report = table.bulk_write(ops, BulkOptions::default()).await;
    let took = start.elapsed();
    let (written, error) = match report {
        Ok(r) => (
            r.written(),
            r.failures()
                .next()
                .map(|(i, e)| format!("operation {i}: {e}")),
        ),
        Err(e) => (0, Some(e.to_string())),
    };
    let out = side(proxy, written, took, budget, error);
    proxy.clear_throttle();
    base.table(&name)
        .map_err(err)?
        .delete_table()
        .await
        .map_err(err)?;
    Ok(out)
}

async fn raw_side(
    base: &Account,
    proxy: &FaultProxy,
    through: &str,
    partitions: usize,
    entities: usize,
    budget: f64,
    concurrency: usize,
) -> Result<Side> {
    let name = tablekit_testkit::unique_table_name("benchtputraw");
    base.table(&name)
        .map_err(err)?
        .create()
        .await
        .map_err(err)?;
    // A careful raw-SDK user: a pooled client and the SDK's default retry policy
    // (the first retry after 400 ms plus jitter, doubling, 8 retries), which retries 503,
    // 500 and 429.
    let credentials = StorageCredentials::access_key(
        tablekit_testkit::ACCOUNT,
        azure_core::auth::Secret::new(tablekit_testkit::ACCOUNT_KEY),
    );
    let location = CloudLocation::Custom {
        account: tablekit_testkit::ACCOUNT.to_owned(),
        uri: through.to_owned(),
    };
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap_or_default();
    let client = TableServiceClientBuilder::with_location(location, credentials)
        .retry(RetryOptions::default())
        .transport(TransportOptions::new(Arc::new(http)))
        .build()
        .table_client(&name);
    let rows: Vec<_> = (0..entities)
        .map(|i| {
            let (pk, rk) = keys(i, partitions);
            raw_record(&pk, &rk, i)
        })
        .collect();
    proxy.set_throttle(model());
    let start = Instant::now();
    let result = raw::bulk_insert(&client, rows, concurrency, raw::Order::RoundRobin).await;
    let took = start.elapsed();
    let (written, error) = match result {
        Ok(n) => (n, None),
        // Which transactions landed is unknown to the raw loop; count what is stored.
        Err(e) => (count(base, &name).await?, Some(e)),
    };
    let out = side(proxy, written, took, budget, error);
    proxy.clear_throttle();
    base.table(&name)
        .map_err(err)?
        .delete_table()
        .await
        .map_err(err)?;
    Ok(out)
}

async fn count(base: &Account, name: &str) -> Result<usize> {
    use futures::TryStreamExt as _;
    let table = base.table(name).map_err(err)?;
    table
        .query::<tablekit_core::Properties>()
        .allow_scan()
        .select(["RowKey"])
        .stream()
        .try_fold(0usize, |n, _| async move { Ok(n + 1) })
        .await
        .map_err(err)
}
