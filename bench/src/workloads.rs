//! The workloads: each runs once to warm up, then `RUNS` times, tablekit and the raw SDK
//! alternating so that drift in the emulator's speed affects both alike.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use tablekit_azure::{Account, BulkOptions, Table};
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Keys};

use crate::data::{Record, keys, raw_record, record};
use crate::measure::{Figure, process_cpu, timed};
use crate::raw;

pub(crate) const RUNS: usize = 5;

pub(crate) type Result<T> = std::result::Result<T, String>;

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Sizes of one benchmark run.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sizes {
    /// Entities in the bulk load (over `bulk_partitions` partitions).
    pub(crate) bulk: usize,
    pub(crate) bulk_partitions: usize,
    /// Entities written one by one for the sequential-insert comparison.
    pub(crate) sequential: usize,
    /// Entities in the scanned partition.
    pub(crate) scan: usize,
    /// Point reads per run.
    pub(crate) point_reads: usize,
    /// Requests for the connection count.
    pub(crate) connection_requests: usize,
    /// Entities streamed in the small and the large memory runs.
    pub(crate) memory_small: usize,
    pub(crate) memory_large: usize,
    /// Transactions in flight for bulk loads.
    pub(crate) concurrency: usize,
    /// Seconds of the model's budget each throughput-governance load needs (after its first
    /// burst).
    pub(crate) throughput_seconds: u64,
    /// Entities the `tablekit` tool exports (one partition) and copies (over
    /// `bulk_partitions`) per run.
    pub(crate) tool: usize,
    /// Entities in the small and the large table `tablekit export` runs over for its peak
    /// memory (partitions of 1,000).
    pub(crate) tool_memory_small: usize,
    pub(crate) tool_memory_large: usize,
}

impl Sizes {
    pub(crate) fn full() -> Self {
        Self {
            bulk: 10_000,
            bulk_partitions: 10,
            // The same workload as the bulk load: Azurite's cost per write grows with the
            // partition, so a smaller sequential run would flatter it.
            sequential: 10_000,
            scan: 10_000,
            point_reads: 1_000,
            connection_requests: 1_000,
            memory_small: 10_000,
            memory_large: 200_000,
            concurrency: 8,
            throughput_seconds: 15,
            tool: 10_000,
            tool_memory_small: 10_000,
            tool_memory_large: 200_000,
        }
    }

    pub(crate) fn quick() -> Self {
        Self {
            bulk: 1_000,
            bulk_partitions: 10,
            sequential: 1_000,
            scan: 1_000,
            point_reads: 100,
            // 1 % of 300 allows the pool race its connection or two.
            connection_requests: 300,
            memory_small: 1_000,
            memory_large: 20_000,
            concurrency: 8,
            throughput_seconds: 4,
            tool: 10_000,
            tool_memory_small: 5_000,
            tool_memory_large: 40_000,
        }
    }
}

pub(crate) async fn fresh_table(account: &Account, prefix: &str) -> Result<Table> {
    let table = account
        .table(&tablekit_testkit::unique_table_name(prefix))
        .map_err(err)?;
    table.create().await.map_err(err)?;
    Ok(table)
}

pub(crate) fn operations(n: usize, partitions: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| {
            let (pk, rk) = keys(i, partitions);
            Operation::insert(&Entity::new(
                Keys::new(pk, rk).expect("valid keys"),
                record(i),
            ))
            .expect("valid entity")
        })
        .collect()
}

/// Workload 1 and 4: bulk load throughput and client CPU per entity. Each side's clock and
/// CPU snapshot start before it builds its operations (tablekit encodes entities when an
/// operation is built, the raw SDK when a transaction is sent), so both measure the same work.
#[derive(Debug, Serialize)]
pub(crate) struct Bulk {
    pub(crate) tablekit: Figure,
    /// The raw SDK, transactions dispatched round-robin across partitions: the baseline.
    pub(crate) raw_sdk: Figure,
    /// The raw SDK, every transaction of one partition before the next partition's (shown,
    /// not gated).
    pub(crate) raw_sdk_partition_major: Figure,
    pub(crate) sequential: Figure,
    pub(crate) tablekit_cpu_us: Figure,
    pub(crate) raw_cpu_us: Figure,
}

/// The loads of workload 1, alternated run by run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BulkLoad {
    Tablekit,
    Raw(raw::Order),
}

pub(crate) async fn bulk(account: &Account, endpoint: &str, s: Sizes) -> Result<Bulk> {
    let (mut tk, mut rw, mut rw_major, mut tk_cpu, mut rw_cpu, mut seq) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for run in 0..=RUNS {
        let warmup = run == 0;
        let mut order = [
            BulkLoad::Tablekit,
            BulkLoad::Raw(raw::Order::RoundRobin),
            BulkLoad::Raw(raw::Order::PartitionMajor),
        ];
        order.rotate_left(run % 3);
        for load in order {
            match load {
                BulkLoad::Tablekit => {
                    let table = fresh_table(account, "benchbulk").await?;
                    let cpu = process_cpu();
                    let (report, took) = timed(async {
                        let ops = operations(s.bulk, s.bulk_partitions);
                        table
                            .bulk_write(ops, BulkOptions::default().with_concurrency(s.concurrency))
                            .await
                    })
                    .await;
                    let cpu = process_cpu() - cpu;
                    let report = report.map_err(err)?;
                    if !report.is_complete() {
                        return Err(format!(
                            "tablekit bulk load incomplete: {:?}",
                            report.outcomes.iter().find(|o| !o.is_written())
                        ));
                    }
                    if !warmup {
                        tk.push(s.bulk as f64 / took.as_secs_f64());
                        tk_cpu.push(cpu.as_secs_f64() * 1e6 / s.bulk as f64);
                    }
                    table.delete_table().await.map_err(err)?;
                }
                BulkLoad::Raw(raw_order) => {
                    let table = fresh_table(account, "benchraw").await?;
                    let client = raw::table_client(endpoint, table.name(), true);
                    let cpu = process_cpu();
                    let (written, took) = timed(async {
                        let rows: Vec<_> = (0..s.bulk)
                            .map(|i| {
                                let (pk, rk) = keys(i, s.bulk_partitions);
                                raw_record(&pk, &rk, i)
                            })
                            .collect();
                        raw::bulk_insert(&client, rows, s.concurrency, raw_order).await
                    })
                    .await;
                    let cpu = process_cpu() - cpu;
                    if written? != s.bulk {
                        return Err("raw bulk load incomplete".into());
                    }
                    if !warmup {
                        let rate = s.bulk as f64 / took.as_secs_f64();
                        if raw_order == raw::Order::RoundRobin {
                            rw.push(rate);
                            rw_cpu.push(cpu.as_secs_f64() * 1e6 / s.bulk as f64);
                        } else {
                            rw_major.push(rate);
                        }
                    }
                    table.delete_table().await.map_err(err)?;
                }
            }
        }
        if !warmup {
            let table = fresh_table(account, "benchseq").await?;
            let (result, took) = timed(async {
                for i in 0..s.sequential {
                    let (pk, rk) = keys(i, s.bulk_partitions);
                    table
                        .insert(&Entity::new(Keys::new(pk, rk).map_err(err)?, record(i)))
                        .await
                        .map_err(err)?;
                }
                Ok::<_, String>(())
            })
            .await;
            result?;
            seq.push(s.sequential as f64 / took.as_secs_f64());
            table.delete_table().await.map_err(err)?;
        }
    }
    Ok(Bulk {
        tablekit: Figure::of(tk, "entities/s"),
        raw_sdk: Figure::of(rw, "entities/s"),
        raw_sdk_partition_major: Figure::of(rw_major, "entities/s"),
        sequential: Figure::of(seq, "entities/s"),
        tablekit_cpu_us: Figure::of(tk_cpu, "µs/entity"),
        raw_cpu_us: Figure::of(rw_cpu, "µs/entity"),
    })
}

/// Workload 2: scanning one partition.
#[derive(Debug, Serialize)]
pub(crate) struct Scan {
    pub(crate) tablekit: Figure,
    pub(crate) raw_sdk: Figure,
}

/// Workload 3: point reads.
#[derive(Debug, Serialize)]
pub(crate) struct Points {
    pub(crate) tablekit_sequential: Figure,
    pub(crate) raw_sequential: Figure,
    pub(crate) tablekit_parallel: Figure,
    pub(crate) raw_parallel: Figure,
}

/// Loads one partition of `n` entities for the scan and point-read workloads.
pub(crate) async fn scan_table(account: &Account, n: usize) -> Result<Table> {
    let table = fresh_table(account, "benchscan").await?;
    let ops = (0..n)
        .map(|i| {
            Operation::insert(&Entity::new(
                Keys::new("scan", format!("{i:08}")).expect("keys"),
                record(i),
            ))
            .expect("entity")
        })
        .collect();
    let report = table
        .bulk_write(ops, BulkOptions::default())
        .await
        .map_err(err)?;
    if !report.is_complete() {
        return Err("scan table load incomplete".into());
    }
    Ok(table)
}

pub(crate) async fn scan(table: &Table, endpoint: &str, n: usize) -> Result<Scan> {
    let client = raw::table_client(endpoint, table.name(), true);
    let (mut tk, mut rw) = (vec![], vec![]);
    for run in 0..=RUNS {
        let mut order = [true, false];
        if run % 2 == 1 {
            order.reverse();
        }
        for tablekit in order {
            let (count, took) = if tablekit {
                let stream = table
                    .query::<Record>()
                    .filter(Filter::partition("scan"))
                    .stream();
                let (count, took) =
                    timed(stream.try_fold(0usize, |n, _| async move { Ok(n + 1) })).await;
                (count.map_err(err)?, took)
            } else {
                let (count, took) = timed(raw::scan(&client, "scan")).await;
                (count?, took)
            };
            if count != n {
                return Err(format!(
                    "{} scan returned {count} of {n}",
                    if tablekit { "tablekit" } else { "raw" }
                ));
            }
            if run > 0 {
                (if tablekit { &mut tk } else { &mut rw }).push(n as f64 / took.as_secs_f64());
            }
        }
    }
    Ok(Scan {
        tablekit: Figure::of(tk, "entities/s"),
        raw_sdk: Figure::of(rw, "entities/s"),
    })
}

pub(crate) async fn points(
    table: &Table,
    endpoint: &str,
    n: usize,
    reads: usize,
) -> Result<Points> {
    let client = raw::table_client(endpoint, table.name(), true);
    let keys: Vec<String> = (0..reads)
        .map(|i| format!("{:08}", (i * 7919) % n))
        .collect();
    let tablekit_get = |rk: &str| {
        let keys = Keys::new("scan", rk);
        async move {
            table
                .get::<Record>(&keys.map_err(err)?)
                .await
                .map_err(err)?
                .ok_or_else(|| "missing".to_owned())
        }
    };
    let (mut ts, mut rs, mut tp, mut rp) = (vec![], vec![], vec![], vec![]);
    for run in 0..=RUNS {
        let mut order = [true, false];
        if run % 2 == 1 {
            order.reverse();
        }
        for tablekit in order {
            let (sequential, took) = timed(async {
                for rk in &keys {
                    if tablekit {
                        tablekit_get(rk).await?;
                    } else {
                        raw::get(&client, "scan", rk).await?;
                    }
                }
                Ok::<_, String>(())
            })
            .await;
            sequential?;
            let (parallel, took_parallel) = timed(
                futures::stream::iter(keys.iter())
                    .map(|rk| async {
                        if tablekit {
                            tablekit_get(rk).await.map(|_| ())
                        } else {
                            raw::get(&client, "scan", rk).await
                        }
                    })
                    .buffer_unordered(16)
                    .try_collect::<Vec<_>>(),
            )
            .await;
            parallel?;
            if run > 0 {
                let rate = |d: Duration| reads as f64 / d.as_secs_f64();
                let (seq, par) = if tablekit {
                    (&mut ts, &mut tp)
                } else {
                    (&mut rs, &mut rp)
                };
                seq.push(rate(took));
                par.push(rate(took_parallel));
            }
        }
    }
    Ok(Points {
        tablekit_sequential: Figure::of(ts, "reads/s"),
        raw_sequential: Figure::of(rs, "reads/s"),
        tablekit_parallel: Figure::of(tp, "reads/s"),
        raw_parallel: Figure::of(rp, "reads/s"),
    })
}

/// Workload 6: TCP connections opened for sequential requests, counted by a proxy, in
/// `RUNS` runs. A run now and then opens a connection or two more than it needs — the HTTP
/// client's pool can be asked for a connection a moment before the previous response has
/// handed its connection back, for tablekit and the pooled raw SDK alike — so the gate is on
/// what it exists to catch, a connection per request (see `report::connections_check`).
#[derive(Debug, Serialize)]
pub(crate) struct Connections {
    pub(crate) requests: usize,
    /// Medians over the runs.
    pub(crate) tablekit: u64,
    pub(crate) raw_sdk_pooled: u64,
    pub(crate) raw_sdk_default: u64,
    /// Every run's count.
    pub(crate) tablekit_runs: Vec<u64>,
    pub(crate) raw_sdk_pooled_runs: Vec<u64>,
    pub(crate) raw_sdk_default_runs: Vec<u64>,
}

fn median_count(runs: &[u64]) -> u64 {
    let mut sorted = runs.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

pub(crate) async fn connections(
    account: &Account,
    table: &Table,
    endpoint: &str,
    requests: usize,
) -> Result<Connections> {
    let authority = endpoint
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .ok_or("bad endpoint")?;
    let proxy =
        tablekit_testkit::FaultProxy::start(authority.parse().map_err(err)?).map_err(err)?;
    let proxied = proxy.endpoint_for(endpoint);
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={proxied};QueueEndpoint={proxied};BlobEndpoint={proxied}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY
    );
    let _ = account;
    let key = Keys::new("scan", "00000000").map_err(err)?;
    let (mut tablekit, mut raw_sdk_pooled, mut raw_sdk_default) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        // A new account per run has a new HTTP client (tablekit's own, as users get it), so
        // no connection opened earlier is reused.
        let through = tablekit_azure::Account::from_connection_string(&cs).map_err(err)?;
        let tk_table = through.table(table.name()).map_err(err)?;
        proxy.reset_stats();
        for _ in 0..requests {
            tk_table.get::<Record>(&key).await.map_err(err)?;
        }
        tablekit.push(proxy.stats().connections_accepted);
        for (pooled, counts) in [(true, &mut raw_sdk_pooled), (false, &mut raw_sdk_default)] {
            let client = raw::table_client(&proxied, table.name(), pooled);
            proxy.reset_stats();
            for _ in 0..requests {
                raw::get(&client, "scan", "00000000").await?;
            }
            counts.push(proxy.stats().connections_accepted);
        }
    }
    Ok(Connections {
        requests,
        tablekit: median_count(&tablekit),
        raw_sdk_pooled: median_count(&raw_sdk_pooled),
        raw_sdk_default: median_count(&raw_sdk_default),
        tablekit_runs: tablekit,
        raw_sdk_pooled_runs: raw_sdk_pooled,
        raw_sdk_default_runs: raw_sdk_default,
    })
}
