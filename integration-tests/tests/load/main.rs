//! Scenario 6: 64 concurrent tasks run a mix of table and pattern operations for 10 s (60 s
//! with `cargo xtask test --long`) while a worker runs the jobs they enqueue: no unexpected
//! error, every count reconciles with what is stored, and p50/p99 latencies are reported per
//! operation.

#[path = "../common/mod.rs"]
mod common;
mod ops;
mod patterns;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tablekit_azure::{SendOptions, Table};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Keys, Properties};
use tokio::sync::Mutex;

use patterns::{Adds, Fixture, Own};

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Counter {
    #[serde(rename = "Count")]
    count: i64,
}

const COUNTERS: usize = 4;

#[derive(Default)]
pub(crate) struct Tally {
    latencies: Mutex<BTreeMap<&'static str, Vec<Duration>>>,
    inserted: AtomicU64,
    deleted: AtomicU64,
    increments: [AtomicU64; COUNTERS],
    queued: AtomicU64,
    pub(crate) adds: Adds,
}

impl Tally {
    async fn record(&self, op: &'static str, took: Duration) {
        self.latencies
            .lock()
            .await
            .entry(op)
            .or_default()
            .push(took);
    }
}

/// A tiny deterministic generator per task (xorshift), so a failing run can be replayed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn worker(
    task: u64,
    table: Table,
    queue: tablekit_azure::Queue,
    fx: Arc<Fixture>,
    tally: Arc<Tally>,
    until: Instant,
) -> (u64, Own) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (task + 1));
    let partition = format!("task{task:02}");
    let mut own: Vec<String> = Vec::new();
    let mut mine = Own::default();
    let mut next = 0u64;
    while Instant::now() < until {
        let start = Instant::now();
        let op = match rng.next(16) {
            0 | 1 => {
                let rk = format!("{next:08}");
                next += 1;
                table
                    .insert(&Entity::new(
                        Keys::new(partition.as_str(), rk.as_str()).unwrap(),
                        Properties::new().with("Task", task as i64),
                    ))
                    .await
                    .unwrap();
                own.push(rk);
                tally.inserted.fetch_add(1, Ordering::Relaxed);
                "insert"
            }
            2 => {
                let rk = own.get(rng.next(own.len().max(1) as u64) as usize).cloned();
                if let Some(rk) = rk {
                    let got = table
                        .get::<Properties>(&Keys::new(partition.as_str(), rk.as_str()).unwrap())
                        .await
                        .unwrap();
                    assert!(got.is_some(), "an inserted entity is readable");
                }
                "get"
            }
            3 => {
                let c = rng.next(COUNTERS as u64) as usize;
                let keys = Keys::new("counters", format!("c{c}")).unwrap();
                table
                    .update_with::<Counter, _>(&keys, |v| Counter {
                        count: v.unwrap_or_default().count + 1,
                    })
                    .await
                    .unwrap();
                tally.increments[c].fetch_add(1, Ordering::Relaxed);
                "update_with"
            }
            4 => {
                let plan = BatchPlan::atomic((0..10).map(|i| {
                    let rk = format!("{:08}", next + i);
                    Operation::insert(&Entity::new(
                        Keys::new(partition.as_str(), rk).unwrap(),
                        Properties::new().with("Batch", true),
                    ))
                    .unwrap()
                }))
                .unwrap();
                table.submit(&plan).await.unwrap();
                own.extend((0..10).map(|i| format!("{:08}", next + i)));
                next += 10;
                tally.inserted.fetch_add(10, Ordering::Relaxed);
                "transaction"
            }
            5 => {
                let rows = table
                    .query::<Properties>()
                    .filter(Filter::partition(partition.as_str()))
                    .top(20)
                    .collect()
                    .await
                    .unwrap();
                assert!(rows.len() <= 20);
                "query"
            }
            6 => {
                if let Some(rk) = own.pop() {
                    assert!(
                        table
                            .delete_if_exists(&Keys::new(partition.as_str(), rk.as_str()).unwrap())
                            .await
                            .unwrap()
                    );
                    tally.deleted.fetch_add(1, Ordering::Relaxed);
                }
                "delete"
            }
            7 => {
                queue
                    .send(format!("task {task}").as_bytes(), SendOptions::default())
                    .await
                    .unwrap();
                tally.queued.fetch_add(1, Ordering::Relaxed);
                "queue.put"
            }
            k => ops::pattern_op(k, task, &mut rng, &fx, &tally, &mut mine).await,
        };
        tally.record(op, start.elapsed()).await;
    }
    (task, mine)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_of_mixed_operations_reconcile() {
    let seconds = if std::env::var_os("TABLEKIT_LONG").is_some() {
        60
    } else {
        10
    };
    // 64 tasks share 4 counters and 16 series: contention by design, so the ETag loops get
    // more attempts than the default 30.
    let account = common::account(
        common::patient()
            .with_conflict_retry(tablekit_azure::ConflictRetry::default().with_max_attempts(200)),
    );
    let table = common::table(&account, "load").await;
    let queue = account
        .queue(&tablekit_testkit::unique_queue_name("load"))
        .unwrap();
    queue.create().await.unwrap();
    let fx = Arc::new(Fixture::create(&account).await);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = {
        let worker = fx.worker.clone();
        tokio::spawn(async move {
            worker
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    let tally = Arc::new(Tally::default());
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            tokio::spawn(worker(
                t,
                table.clone(),
                queue.clone(),
                fx.clone(),
                tally.clone(),
                until,
            ))
        })
        .collect();
    let mut own = Vec::with_capacity(tasks.len());
    for t in tasks {
        own.push(t.await.expect("no task hit an unexpected error"));
    }
    let elapsed = started.elapsed();
    // The worker finishes what is queued, then stops.
    fx.worker.drain().await.unwrap();
    stop.send(()).unwrap();
    let served = serving.await.unwrap().unwrap();
    let jobs = fx.worker.stats();

    // Reconcile: every entity written and not deleted is there, and no increment was lost.
    let rows = table
        .query::<Properties>()
        .filter(Filter::ge("PartitionKey", "task").and(Filter::lt("PartitionKey", "tasl")))
        .allow_scan()
        .collect()
        .await
        .unwrap();
    let expected = tally.inserted.load(Ordering::Relaxed) - tally.deleted.load(Ordering::Relaxed);
    assert_eq!(rows.len() as u64, expected, "entities reconcile");
    for c in 0..COUNTERS {
        let stored = table
            .get::<Counter>(&Keys::new("counters", format!("c{c}")).unwrap())
            .await
            .unwrap()
            .map_or(0, |s| s.value.count);
        assert_eq!(
            stored as u64,
            tally.increments[c].load(Ordering::Relaxed),
            "counter {c}"
        );
    }
    assert_eq!(
        queue.approximate_len().await.unwrap() as u64,
        tally.queued.load(Ordering::Relaxed),
        "every put message is queued"
    );
    let checked = patterns::reconcile(&fx, &own, &tally.adds).await;

    let latencies = tally.latencies.lock().await;
    let mut all: Vec<Duration> = latencies.values().flatten().copied().collect();
    all.sort();
    let total = all.len();
    println!(
        "scenario 6: 64 tasks, {seconds} s, {total} operations ({:.0}/s), p50 {:?}, p99 {:?}",
        total as f64 / elapsed.as_secs_f64(),
        common::percentile(&all, 50.0),
        common::percentile(&all, 99.0)
    );
    for (op, mut durations) in latencies.clone() {
        durations.sort();
        println!(
            "  {op:<16} {:>6} ops  p50 {:>9.2?}  p99 {:>9.2?}",
            durations.len(),
            common::percentile(&durations, 50.0),
            common::percentile(&durations, 99.0)
        );
    }
    let metrics = account.metrics().snapshot();
    println!(
        "  requests {}, retries {}, conflict retries {}; jobs: {} enqueued, {} processed ({} while the load ran), 0 poisoned; {checked} pattern items reconciled; lost 0, duplicated 0",
        metrics.requests(),
        metrics.retries,
        metrics.conflict_retries,
        own.iter().map(|(_, o)| o.archived).sum::<u64>(),
        jobs.processed,
        served.processed
    );
    assert!(total > 1_000, "the load ran");
    assert_eq!(jobs.poisoned, 0);
    match Arc::try_unwrap(fx) {
        Ok(fx) => fx.delete().await,
        Err(_) => panic!("the fixture is still shared"),
    }
    queue.delete_queue().await.unwrap();
    table.delete_table().await.unwrap();
}
