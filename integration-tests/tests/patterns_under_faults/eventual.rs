//! Eventually consistent transactions under faults: the design guide's archive scenario.

use serde::{Deserialize, Serialize};
use tablekit_azure::{BulkOptions, Table};
use tablekit_core::batch::Operation;
use tablekit_core::{Entity, Keys, Result};
use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker};
use tablekit_testkit::unique_queue_name;

use crate::{Figures, arm, common, disarm, fast_worker, lost_and_duplicated};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    first_name: String,
    age: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArchiveEmployee {
    department: String,
    employee_id: String,
}

impl Job for ArchiveEmployee {
    const KIND: &'static str = "archive-employee";
}

/// The guide's handler: read from Current, upsert into Archive, delete from Current if
/// unchanged since the read.
struct Archiver {
    current: Table,
    archive: Table,
}

impl Handler<ArchiveEmployee> for Archiver {
    async fn handle(&self, job: ArchiveEmployee, steps: &Steps) -> Result<()> {
        let keys = Keys::new(job.department, job.employee_id)?;
        let Some(employee) = steps.get::<Employee>(&self.current, &keys).await? else {
            return Ok(());
        };
        steps
            .upsert_replace(&self.archive, &Entity::new(keys.clone(), &employee.value))
            .await?;
        steps
            .delete(&self.current, &keys, employee.if_match())
            .await?;
        Ok(())
    }
}

fn keys(i: usize) -> Keys {
    Keys::new(["Sales", "Marketing"][i % 2], format!("{i:06}")).unwrap()
}

async fn all_keys(table: &Table) -> Vec<(String, String)> {
    table
        .query::<Employee>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.pk().to_owned(), s.keys.rk().to_owned()))
        .collect()
}

#[tokio::test]
async fn archive_jobs_move_every_employee_exactly_once() {
    // A 1 s request timeout: the workers' 3 s hold on a message exceeds how late a request
    // may land (2 s).
    let p =
        common::proxied(common::patient().with_request_timeout(std::time::Duration::from_secs(1)));
    let current = common::table(&p.account, "faultcurrent").await;
    let archive = common::table(&p.account, "faultarchive").await;
    let n = 80;
    let seed: Vec<Operation> = (0..n)
        .map(|i| {
            let e = Employee {
                first_name: format!("E{i}"),
                age: 20 + i as i32 % 40,
            };
            Operation::insert(&Entity::new(keys(i), e)).unwrap()
        })
        .collect();
    let seeded = current
        .bulk_write(seed, BulkOptions::default())
        .await
        .unwrap();
    assert!(seeded.is_complete());
    let queue = JobQueue::<ArchiveEmployee>::new(
        p.account.queue(&unique_queue_name("faultarchive")).unwrap(),
    );
    queue.create().await.unwrap();
    let worker = Worker::new(
        queue.clone(),
        Archiver {
            current: current.clone(),
            archive: archive.clone(),
        },
        fast_worker(),
    );

    arm(&p, 0x2_31);
    // One worker serves the queue while the jobs arrive, as in production; a second one
    // drains it afterwards (two consumers of one queue: scaling out).
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = {
        let worker = worker.clone();
        tokio::spawn(async move {
            worker
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    for i in 0..n {
        let k = keys(i);
        queue
            .enqueue(&ArchiveEmployee {
                department: k.pk().to_owned(),
                employee_id: k.rk().to_owned(),
            })
            .await
            .unwrap();
    }
    worker.drain().await.unwrap();
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    let faults = disarm(&p);
    worker.drain().await.unwrap();
    let totals = worker.stats();

    let expected: Vec<(String, String)> = (0..n)
        .map(|i| (keys(i).pk().to_owned(), keys(i).rk().to_owned()))
        .collect();
    let archived = all_keys(&archive).await;
    let (lost, duplicated) = lost_and_duplicated(&expected, &archived);
    assert!(all_keys(&current).await.is_empty(), "none left in Current");
    assert_eq!(
        queue.approximate_len().await.unwrap(),
        0,
        "the queue is empty"
    );
    assert!(
        queue.peek_poisoned(32).await.unwrap().is_empty(),
        "nothing poisoned"
    );
    assert!(
        totals.processed >= n as u64,
        "every job processed: {totals:?}"
    );
    assert_eq!(totals.poisoned, 0);
    println!(
        "  archive jobs: {} handler runs for {n} jobs (more after lost put responses), {} failed attempts, {} lost receipts",
        totals.processed, totals.failed_attempts, totals.lost_receipts
    );
    Figures {
        pattern: "eventual (archive)",
        operations: n,
        faults,
        lost,
        duplicated,
    }
    .report(&p);
    queue.delete_queues().await.unwrap();
    current.delete_table().await.unwrap();
    archive.delete_table().await.unwrap();
}
