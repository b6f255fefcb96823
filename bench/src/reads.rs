//! Workload 13: the reads of the patterns, each against the shortest raw-SDK code that does
//! the same: a fan-out query over 100 partitions, a log tail's newest 10 entries, an index
//! lookup by a secondary value, and the purge of a partition (a retention sweep). Both sides
//! run the same requests with the same concurrency; tablekit's side is the pattern's own
//! call, so the gate is what the pattern adds: its time over the raw code's, best run
//! against best run.

use std::time::Duration;

use chrono::{TimeZone as _, Utc};
use futures::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, BulkOptions, Table};
use tablekit_core::Entity;
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;

use crate::data::{Record, keys, record};
use crate::measure::{Figure, timed};
use crate::raw;
use crate::workloads::{Result, err};

/// Runs per side at least; the sides alternate run by run.
const RUNS: usize = 5;
/// Runs per side at most.
const MAX_RUNS: usize = 41;
/// Time each side is measured for at least, over its runs: a read of a millisecond is at the
/// mercy of one pause of the emulator in five runs of 100, and its best time moves with it.
const MEASURED_FOR: Duration = Duration::from_secs(3);
/// Partitions of the fan-out, entities in each.
const FAN_OUT: (usize, usize) = (100, 20);
/// Entries in the log tail's partition, and how many of the newest each read takes.
const TAIL: (usize, usize) = (1_000, 10);
/// Employees in the indexed partition.
const INDEXED: usize = 1_000;
/// Entities in the purged partition.
const PURGED: usize = 1_000;
/// Reads per run of the point-like reads (tail, lookup).
const READS: usize = 100;
/// Requests in flight where a side sends several at once.
const IN_FLIGHT: usize = 8;

/// One pattern read, both sides.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) read: &'static str,
    /// Measured runs per side.
    pub(crate) runs: usize,
    /// Milliseconds per operation.
    pub(crate) tablekit: Figure,
    pub(crate) raw_sdk: Figure,
    /// Requests tablekit sent per operation (both sides send the same requests).
    pub(crate) requests: f64,
}

impl Row {
    /// tablekit's best time over the raw SDK's best (lower is better).
    pub(crate) fn ratio(&self) -> f64 {
        self.tablekit.best(true) / self.raw_sdk.best(true)
    }
}

/// Workload 13's rows.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Reads {
    pub(crate) partition_sizes: String,
    pub(crate) rows: Vec<Row>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String,
    email: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    #[serde(rename = "Amount")]
    amount: i64,
}

/// Times `RUNS` runs of each side (after one warm-up of each), alternating which goes first;
/// each run performs `ops` operations. `setup` runs before every run of either side, outside
/// the clock.
async fn compare<S, SF, T, TF, R, RF>(
    account: &Account,
    read: &'static str,
    ops: usize,
    setup: S,
    tablekit: T,
    raw_side: R,
) -> Result<Row>
where
    S: Fn() -> SF,
    SF: std::future::Future<Output = Result<()>>,
    T: Fn() -> TF,
    TF: std::future::Future<Output = Result<()>>,
    R: Fn() -> RF,
    RF: std::future::Future<Output = Result<()>>,
{
    let (mut tk, mut rw) = (Vec::new(), Vec::new());
    let mut requests = 0;
    // Run 0 warms both sides up and sets how many runs measure them.
    let mut runs = RUNS;
    let mut run = 0;
    while run <= runs {
        let mut order = [true, false];
        if run % 2 == 1 {
            order.reverse();
        }
        for side in order {
            setup().await?;
            let before = account.metrics().snapshot();
            let (done, took): (Result<()>, Duration) = if side {
                timed(tablekit()).await
            } else {
                timed(raw_side()).await
            };
            done.map_err(|e| format!("{read}: {e}"))?;
            let ms = took.as_secs_f64() * 1e3 / ops as f64;
            if side {
                requests = account.metrics().snapshot().since(&before).requests();
            }
            if run > 0 {
                if side { &mut tk } else { &mut rw }.push(ms);
            } else if !took.is_zero() {
                let needed = MEASURED_FOR.as_secs_f64() / took.as_secs_f64();
                runs = runs.max((needed.ceil() as usize).min(MAX_RUNS));
            }
        }
        run += 1;
    }
    Ok(Row {
        read,
        runs,
        tablekit: Figure::of(tk, "ms"),
        raw_sdk: Figure::of(rw, "ms"),
        requests: requests as f64 / ops as f64,
    })
}

async fn fresh(account: &Account, prefix: &str) -> Result<Table> {
    let table = account
        .table(&tablekit_testkit::unique_table_name(prefix))
        .map_err(err)?;
    table.create().await.map_err(err)?;
    Ok(table)
}

async fn load(table: &Table, ops: Vec<Operation>) -> Result<()> {
    let report = table
        .bulk_write(ops, BulkOptions::default())
        .await
        .map_err(err)?;
    if report.is_complete() {
        Ok(())
    } else {
        Err(format!("loading {}: {report:?}", table.name()))
    }
}

/// Workload 13 on `account` (unlimited throughput, as workloads 1–7) at the emulator's table
/// `endpoint`.
pub(crate) async fn reads(account: &Account, endpoint: &str) -> Result<Reads> {
    let nothing = || async { Ok(()) };
    let mut rows = Vec::new();

    // Fan-out: every partition's query, IN_FLIGHT at a time.
    let (partitions, per) = FAN_OUT;
    let table = fresh(account, "benchfanout").await?;
    let ops = (0..partitions * per)
        .map(|i| {
            let (pk, rk) = keys(i, partitions);
            Operation::insert(&Entity::try_new(pk, rk, record(i)).map_err(err)?).map_err(err)
        })
        .collect::<Result<Vec<_>>>()?;
    load(&table, ops).await?;
    let pks: Vec<String> = (0..partitions).map(|p| keys(p, partitions).0).collect();
    let client = raw::table_client(endpoint, table.name(), true);
    let expect = |n: usize| {
        if n == partitions * per {
            Ok(())
        } else {
            Err(format!("read {n} entities of {}", partitions * per))
        }
    };
    rows.push(
        compare(
            account,
            "fan-out query, 100 partitions",
            1,
            nothing,
            || async {
                let counts: Vec<usize> = futures::stream::iter(pks.iter())
                    .map(|pk| async {
                        table
                            .query::<Record>()
                            .filter(Filter::partition(pk.as_str()))
                            .collect()
                            .await
                            .map(|v| v.len())
                            .map_err(err)
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .try_collect()
                    .await?;
                expect(counts.iter().sum())
            },
            || async {
                let counts: Vec<usize> = futures::stream::iter(pks.iter())
                    .map(|pk| raw::scan(&client, pk))
                    .buffer_unordered(IN_FLIGHT)
                    .try_collect()
                    .await?;
                expect(counts.iter().sum())
            },
        )
        .await?,
    );
    table.delete_table().await.map_err(err)?;

    // Log tail: the newest 10 of one partition, READS times.
    let (entries, newest) = TAIL;
    let table = fresh(account, "benchtailread").await?;
    let tail = tablekit_logtail::LogTail::<Claim>::new(table.clone());
    let start = Utc
        .with_ymd_and_hms(2026, 11, 1, 0, 0, 0)
        .single()
        .ok_or("time")?;
    for chunk in (0..entries).collect::<Vec<_>>().chunks(100) {
        let items: Vec<_> = chunk
            .iter()
            .map(|&i| {
                (
                    start + chrono::Duration::seconds(i as i64),
                    Claim { amount: i as i64 },
                )
            })
            .collect();
        tail.append_batch("claims", &items)
            .await
            .map_err(err)?
            .into_result()
            .map_err(err)?;
    }
    let client = raw::table_client(endpoint, table.name(), true);
    rows.push(
        compare(
            account,
            "log tail, newest 10 of 1,000",
            READS,
            nothing,
            || async {
                for _ in 0..READS {
                    let got = tail.latest("claims", newest).await.map_err(err)?;
                    if got.len() != newest {
                        return Err(format!("latest read {} entries", got.len()));
                    }
                }
                Ok(())
            },
            || async {
                for _ in 0..READS {
                    // The RowKey is inverted ticks: the partition's first entities are the
                    // newest.
                    let page = client
                        .query()
                        .filter("PartitionKey eq 'claims'")
                        .top(newest as u32)
                        .into_stream::<serde_json::Value>()
                        .next()
                        .await
                        .ok_or("no page")?
                        .map_err(err)?;
                    if page.entities.len() != newest {
                        return Err(format!("read {} entries", page.entities.len()));
                    }
                }
                Ok(())
            },
        )
        .await?,
    );
    table.delete_table().await.map_err(err)?;

    // Index lookup by e-mail address, READS times.
    use tablekit_index::{CopySpec, IndexRead as _, IndexSpec, IntraPartitionIndex};
    let table = fresh(account, "benchlookup").await?;
    let mut spec = IndexSpec::builder(|x: &Employee| x.department.clone());
    spec.primary(CopySpec::new("empid", |x: &Employee| x.id.clone()).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", |x: &Employee| x.email.clone()));
    let index = IntraPartitionIndex::new(table.clone(), spec.build().map_err(err)?);
    let employees: Vec<Employee> = (0..INDEXED)
        .map(|i| Employee {
            department: "Sales".into(),
            id: format!("{i:06}"),
            email: format!("e{i:06}@contoso.com"),
        })
        .collect();
    futures::stream::iter(employees.iter())
        .map(|e| index.insert(e))
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .map_err(err)?;
    let wanted: Vec<String> = (0..READS)
        .map(|i| format!("e{:06}@contoso.com", (i * 7919) % INDEXED))
        .collect();
    let client = raw::table_client(endpoint, table.name(), true);
    rows.push(
        compare(
            account,
            "index lookup by e-mail, 1,000 indexed",
            READS,
            nothing,
            || async {
                for email in &wanted {
                    index
                        .get_by(&by_email, "Sales", email)
                        .await
                        .map_err(err)?
                        .ok_or("missing")?;
                }
                Ok(())
            },
            || async {
                for email in &wanted {
                    // The index's copy of the entity: RowKey `email_{value}`.
                    client
                        .partition_key_client("Sales")
                        .entity_client(format!("email_{email}"))
                        .get::<serde_json::Value>()
                        .await
                        .map_err(err)?;
                }
                Ok(())
            },
        )
        .await?,
    );
    table.delete_table().await.map_err(err)?;

    // Purge of one partition: its keys read, deleted in transactions of 100.
    let table = fresh(account, "benchpurge").await?;
    let client = raw::table_client(endpoint, table.name(), true);
    let refill = || async {
        let ops = (0..PURGED)
            .map(|i| {
                let entity = Entity::try_new("old", format!("{i:08}"), record(i)).map_err(err)?;
                Operation::upsert_replace(&entity).map_err(err)
            })
            .collect::<Result<Vec<_>>>()?;
        load(&table, ops).await
    };
    rows.push(
        compare(
            account,
            "purge a partition of 1,000",
            1,
            refill,
            || async {
                let report = tablekit_retention::purge_partition(
                    &table,
                    "old",
                    tablekit_retention::PurgeOptions::default(),
                )
                .await
                .map_err(err)?;
                if report.deleted == PURGED {
                    Ok(())
                } else {
                    Err(format!("purged {}", report.deleted))
                }
            },
            || async { raw_purge(&client, "old").await.map(drop) },
        )
        .await?,
    );
    table.delete_table().await.map_err(err)?;

    Ok(Reads {
        partition_sizes: format!(
            "fan-out {partitions} × {per}; log tail 1 × {entries}; index 1 × {} (2 rows each); \
             purge 1 × {PURGED}",
            INDEXED
        ),
        rows,
    })
}

/// The raw SDK's purge: the partition's keys, page by page, then transactions of 100
/// deletes, IN_FLIGHT at a time. Returns the number deleted.
async fn raw_purge(client: &azure_data_tables::clients::TableClient, pk: &str) -> Result<usize> {
    #[derive(Deserialize)]
    struct Key {
        #[serde(rename = "RowKey")]
        row_key: String,
    }
    let mut stream = client
        .query()
        .filter(format!("PartitionKey eq '{pk}'"))
        .select("PartitionKey,RowKey")
        .into_stream::<Key>();
    let mut rks = Vec::new();
    while let Some(page) = stream.next().await {
        rks.extend(page.map_err(err)?.entities.into_iter().map(|k| k.row_key));
    }
    let partition = client.partition_key_client(pk);
    let deleted: Vec<usize> = futures::stream::iter(rks.chunks(100))
        .map(|chunk| {
            let partition = partition.clone();
            async move {
                let mut tx = partition.transaction();
                for rk in chunk {
                    tx = tx.delete(rk.clone(), None).map_err(err)?;
                }
                let response = tx.await.map_err(err)?;
                if response
                    .operation_responses
                    .iter()
                    .any(|r| !r.status_code.is_success())
                {
                    return Err("a delete failed".to_owned());
                }
                Ok(chunk.len())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(deleted.iter().sum())
}

/// tablekit's best time per operation at most this many times the raw SDK's best.
const MAX_RATIO: f64 = 1.15;

/// Workload 13's gates: each pattern read against the raw code, in the same run.
pub(crate) fn checks(r: &Reads) -> Vec<crate::report::Check> {
    r.rows
        .iter()
        .map(|row| crate::report::Check {
            criterion: format!(
                "{}: tablekit's time ≤ {MAX_RATIO}× the raw SDK code's (best of {} runs each)",
                row.read, row.runs
            ),
            measured: format!(
                "{:.2}× ({:.2} ms against {:.2} ms; {} requests per operation)",
                row.ratio(),
                row.tablekit.best(true),
                row.raw_sdk.best(true),
                crate::measure::fmt(row.requests)
            ),
            pass: row.ratio() <= MAX_RATIO,
        })
        .collect()
}

/// Workload 13 as a markdown section.
pub(crate) fn section(r: &Reads) -> String {
    let mut out = format!(
        "\n13. Pattern reads against the shortest raw-SDK code ({}), ms per operation.\n\n\
         | Read | tablekit | raw SDK | ratio (best runs) | requests |\n|---|---|---|---|---|\n",
        r.partition_sizes
    );
    for row in &r.rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {} |\n",
            row.read,
            row.tablekit.show(),
            row.raw_sdk.show(),
            row.ratio(),
            crate::measure::fmt(row.requests)
        ));
    }
    out
}
