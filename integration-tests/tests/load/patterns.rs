//! The pattern side of the load: one fixture shared by the 64 tasks, what each task keeps
//! to reconcile its own writes, and the reconciliation itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, Container, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Keys, Properties, Result};
use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions};
use tablekit_index::{CopyHandle, CopySpec, IndexRead as _, IndexSpec, IntraPartitionIndex};
use tablekit_large::LargeEntities;
use tablekit_logtail::{LogEntry, LogTail};
use tablekit_series::{Series, SeriesLayout, WideEntities};
use tablekit_testkit::{unique_container_name, unique_queue_name};

use crate::common;

/// Series entities shared by the tasks (4 writers each) and the slots they add to.
pub(crate) const SERIES: usize = 16;
pub(crate) const SLOTS: usize = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Employee {
    pub(crate) department: String,
    pub(crate) id: String,
    pub(crate) email: String,
    pub(crate) version: i64,
}

pub(crate) fn employee(task: u64, id: u64, version: i64) -> Employee {
    Employee {
        department: format!("task{task:02}"),
        id: format!("{id:06}"),
        email: format!("e{id}.v{version}@task{task}.contoso.com"),
        version,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Line {
    pub(crate) seq: i64,
}

/// "Archive entity N of task T": moved from Current to Archive by the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Archive {
    pub(crate) task: u64,
    pub(crate) n: u64,
}

impl Job for Archive {
    const KIND: &'static str = "load-archive";
}

pub(crate) fn archive_keys(task: u64, n: u64) -> Keys {
    Keys::new(format!("task{task:02}"), format!("{n:06}")).unwrap()
}

pub(crate) struct Archiver {
    pub(crate) current: Table,
    pub(crate) archive: Table,
}

impl Handler<Archive> for Archiver {
    async fn handle(&self, job: Archive, steps: &Steps) -> Result<()> {
        let keys = archive_keys(job.task, job.n);
        let Some(row) = steps.get::<Properties>(&self.current, &keys).await? else {
            return Ok(());
        };
        steps
            .upsert_replace(&self.archive, &Entity::new(keys.clone(), &row.value))
            .await?;
        steps.delete(&self.current, &keys, row.if_match()).await?;
        Ok(())
    }
}

/// Payload `version` of large entity `slot` of `task`: 8 to 40 KiB, different each time.
pub(crate) fn payload(task: u64, slot: usize, version: u64) -> Vec<u8> {
    let len = 8192 + ((task * 131 + slot as u64 * 17 + version * 7919) % (32 * 1024)) as usize;
    (0..len)
        .map(|i| (i as u64 ^ (task << 3) ^ version.wrapping_mul(31)) as u8)
        .collect()
}

/// Version `v` of a task's wide entity: 120 or 320 properties (1 or 2 shards), all `v`.
pub(crate) fn wide_version(v: i64) -> BTreeMap<String, i64> {
    let size = if v % 2 == 0 { 120 } else { 320 };
    (0..size).map(|i| (format!("P{i:03}"), v)).collect()
}

pub(crate) struct Fixture {
    pub(crate) index: IntraPartitionIndex<Employee>,
    /// The index's email copy.
    pub(crate) by_email: CopyHandle<Employee>,
    pub(crate) log: LogTail<Line>,
    pub(crate) series: Series<i64>,
    pub(crate) large: LargeEntities,
    pub(crate) wide: WideEntities,
    pub(crate) jobs: JobQueue<Archive>,
    pub(crate) current: Table,
    pub(crate) archive: Table,
    pub(crate) worker: Worker<Archive, Archiver>,
    container: Container,
    tables: Vec<Table>,
}

impl Fixture {
    pub(crate) async fn create(account: &Account) -> Self {
        let index_table = common::table(account, "loadindex").await;
        let log_table = common::table(account, "loadlog").await;
        let series_table = common::table(account, "loadseries").await;
        let large_table = common::table(account, "loadlarge").await;
        let wide_table = common::table(account, "loadwide").await;
        let current = common::table(account, "loadcurrent").await;
        let archive = common::table(account, "loadarchive").await;
        let container = account
            .container(&unique_container_name("loadlarge"))
            .unwrap();
        container.create().await.unwrap();
        let jobs = JobQueue::new(account.queue(&unique_queue_name("loadjobs")).unwrap());
        jobs.create().await.unwrap();
        let mut spec = IndexSpec::builder(|e: &Employee| e.department.clone());
        spec.primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).with_width(6));
        let by_email = spec.secondary(CopySpec::new("email", |e: &Employee| e.email.clone()));
        let spec = spec.build().unwrap();
        let worker = Worker::new(
            jobs.clone(),
            Archiver {
                current: current.clone(),
                archive: archive.clone(),
            },
            WorkerOptions::default()
                .with_poll_interval(Duration::from_millis(20))
                .with_idle_backoff_max(Duration::from_millis(200)),
        );
        Self {
            index: IntraPartitionIndex::new(index_table.clone(), spec),
            by_email,
            log: LogTail::new(log_table.clone()),
            series: Series::new(series_table.clone(), SeriesLayout::hours()),
            large: LargeEntities::builder(large_table.clone(), container.clone())
                .build()
                .unwrap(),
            wide: WideEntities::new(wide_table.clone()),
            jobs,
            current: current.clone(),
            archive: archive.clone(),
            worker,
            container,
            tables: vec![
                index_table,
                log_table,
                series_table,
                large_table,
                wide_table,
                current,
                archive,
            ],
        }
    }

    pub(crate) async fn delete(self) {
        self.jobs.delete_queues().await.unwrap();
        self.container.delete_container().await.unwrap();
        for t in self.tables {
            t.delete_table().await.unwrap();
        }
    }
}

pub(crate) fn series_keys(n: usize) -> Keys {
    Keys::new(format!("{n:06}"), "ImPerHour").unwrap()
}

/// What one task wrote through the patterns, to reconcile against what is stored.
#[derive(Debug, Default)]
pub(crate) struct Own {
    /// Indexed employee id → the version last put.
    pub(crate) employees: BTreeMap<u64, i64>,
    /// Log lines appended (sequence numbers 0..n).
    pub(crate) lines: i64,
    /// Large entity slot → the payload version last put.
    pub(crate) large: BTreeMap<usize, u64>,
    /// The wide entity's last version.
    pub(crate) wide: Option<i64>,
    /// Archive jobs enqueued (entities 0..n).
    pub(crate) archived: u64,
}

/// Series adds by entity and slot, shared by all tasks.
#[derive(Default)]
pub(crate) struct Adds(pub(crate) [[AtomicU64; SLOTS]; SERIES]);

/// Reads everything back and checks it against what the tasks did. Returns the number of
/// checked items.
pub(crate) async fn reconcile(fx: &Fixture, own: &[(u64, Own)], adds: &Adds) -> usize {
    let mut checked = 0;
    for (task, mine) in own {
        let department = format!("task{task:02}");
        // Intra-partition index: every copy in step, every employee findable by email.
        let report = fx.index.verify(&department).await.unwrap();
        assert!(report.is_consistent(), "{report:?}");
        assert_eq!(report.primaries, mine.employees.len());
        for (id, version) in &mine.employees {
            let e = employee(*task, *id, *version);
            let found = fx
                .index
                .get_by(&fx.by_email, &department, &e.email)
                .await
                .unwrap();
            assert_eq!(found.map(|s| s.value), Some(e), "indexed by email");
            checked += 1;
        }
        // Log tail: every line once, newest first.
        let lines: Vec<LogEntry<Line>> = fx.log.entries(&department).collect().await.unwrap();
        let seqs: Vec<i64> = lines.iter().map(|l| l.value.seq).collect();
        assert_eq!(
            seqs,
            (0..mine.lines).rev().collect::<Vec<_>>(),
            "log of {task}"
        );
        checked += seqs.len();
        // Large entities: the last payload, verified.
        for (slot, version) in &mine.large {
            let keys = Keys::new(&department, format!("{slot}")).unwrap();
            let read = fx
                .large
                .get::<Properties>(&keys)
                .await
                .unwrap()
                .expect("stored");
            assert_eq!(
                read.payload.as_ref(),
                payload(*task, *slot, *version).as_slice()
            );
            checked += 1;
        }
        // Wide entity: the last version, whole.
        if let Some(v) = mine.wide {
            let keys = Keys::new(&department, "Wide").unwrap();
            let read = fx.wide.get::<BTreeMap<String, i64>>(&keys).await.unwrap();
            assert_eq!(read.expect("stored").value, wide_version(v));
            checked += 1;
        }
    }
    // Every large entity references one blob, and no other blob is left.
    let blobs = fx.container.list(fx.large.prefix()).await.unwrap().len();
    let entities: usize = own.iter().map(|(_, o)| o.large.len()).sum();
    assert_eq!(blobs, entities, "one blob per large entity, no orphan");
    // Series: every add counted once.
    for (n, slots) in adds.0.iter().enumerate() {
        let stored = fx.series.get(&series_keys(n)).await.unwrap();
        for (s, count) in slots.iter().enumerate() {
            let got = stored
                .as_ref()
                .map_or(0, |st| st.value.get_or_zero(&format!("H{s:02}")));
            assert_eq!(
                got as u64,
                count.load(Ordering::Relaxed),
                "series {n} slot {s}"
            );
            checked += 1;
        }
    }
    // Archive jobs: every entity moved once, none left behind, no job left or poisoned.
    let archived: Vec<(String, String)> = fx
        .archive
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.pk().to_owned(), s.keys.rk().to_owned()))
        .collect();
    let expected: Vec<(String, String)> = own
        .iter()
        .flat_map(|(task, o)| {
            (0..o.archived).map(move |n| {
                let k = archive_keys(*task, n);
                (k.pk().to_owned(), k.rk().to_owned())
            })
        })
        .collect();
    assert_eq!(
        archived.len(),
        expected.len(),
        "every job's entity archived once"
    );
    assert_eq!(
        archived.iter().collect::<std::collections::BTreeSet<_>>(),
        expected.iter().collect(),
    );
    let left = fx
        .current
        .query::<Properties>()
        .filter(Filter::ge("PartitionKey", "task").and(Filter::lt("PartitionKey", "tasl")))
        .allow_scan()
        .collect()
        .await
        .unwrap();
    assert!(left.is_empty(), "nothing left in Current");
    assert_eq!(fx.jobs.approximate_len().await.unwrap(), 0);
    assert!(fx.jobs.peek_poisoned(32).await.unwrap().is_empty());
    checked + archived.len()
}
