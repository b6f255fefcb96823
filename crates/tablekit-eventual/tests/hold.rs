//! The worker's hold on a message bounds its handler's writes; deferrals are not attempts;
//! jobs of a later version are left for an upgraded worker — against Azurite.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::{RequestKind, Settings, Table};
use tablekit_core::{Entity, ErrorKind, Keys, Properties, Result};
use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions};

use common::{job_queue, quick_options};

#[derive(Debug, Serialize, Deserialize)]
struct Touch {
    id: u32,
}

impl Job for Touch {
    const KIND: &'static str = "touch";
}

/// Waits `pause`, then upserts a row; records the error kind of a write that failed.
struct LateWriter {
    table: Table,
    pause: Duration,
    refused: Arc<AtomicU64>,
}

impl Handler<Touch> for LateWriter {
    async fn handle(&self, job: Touch, steps: &Steps) -> Result<()> {
        tokio::time::sleep(self.pause).await;
        let row = Entity::new(
            Keys::new("p", job.id.to_string())?,
            Properties::new().with("At", "late"),
        );
        let written = steps.upsert_replace(&self.table, &row).await;
        if let Err(e) = &written {
            if e.kind() == ErrorKind::DeadlineExceeded {
                self.refused.fetch_add(1, Ordering::SeqCst);
            }
        }
        written.map(|_| ())
    }
}

#[tokio::test]
async fn a_handler_cannot_send_a_write_that_could_land_after_the_worker_loses_the_message() {
    let account = common::account();
    let table = tablekit_testkit::fixtures::table_on(&account, "hold").await;
    let queue: JobQueue<Touch> = job_queue(&account, "hold").await;
    queue.enqueue(&Touch { id: 1 }).await.unwrap();
    let refused = Arc::new(AtomicU64::new(0));
    // The worker holds the message for 3 s; every extension of the hold fails (500 on the
    // queue's updates), so the hold ends 3 s after the dequeue was sent.
    let p = tablekit_testkit::fixtures::proxied(account.settings().clone());
    p.queue.add_rule(tablekit_testkit::Rule::new(
        tablekit_testkit::Matcher::any().with_method("PUT"),
        tablekit_testkit::Occurrences::All,
        tablekit_testkit::Fault::Status(500),
    ));
    let through = p.account.queue(queue.queue().name()).unwrap();
    let handler = LateWriter {
        table: table.clone(),
        pause: Duration::from_millis(2_500),
        refused: refused.clone(),
    };
    let options = quick_options().with_max_dequeue_count(1);
    let worker = Worker::new(
        JobQueue::new(through).with_poison(queue.poison().clone()),
        handler,
        options,
    );
    let report = worker.drain().await.unwrap();
    // The hold ended 3 s after the dequeue was sent and no extension landed: at 2.5 s a
    // write landing up to 2 s later (1 s timeout + 1 s server timeout) would land after it.
    assert_eq!(refused.load(Ordering::SeqCst), 1, "{report:?}");
    assert!(
        table.get::<Properties>(("p", "1")).await.unwrap().is_none(),
        "nothing written"
    );
    queue.delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_hold_not_longer_than_the_late_landing_is_refused_before_any_request() {
    let account = common::account();
    let queue: JobQueue<Touch> = JobQueue::new(account.queue("never-created-hold").unwrap());
    let metrics = account.metrics().clone();
    metrics.reset();
    let handler = LateWriter {
        table: account.table("NeverCreated").unwrap(),
        pause: Duration::ZERO,
        refused: Arc::default(),
    };
    // 1 s request timeout + 1 s server timeout: a 2 s hold leaves no time to send anything.
    let options = quick_options().with_visibility_timeout(Duration::from_secs(2));
    let e = Worker::new(queue, handler, options)
        .drain()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("visibility_timeout"), "{e}");
    assert_eq!(metrics.snapshot().requests(), 0);
    // With the default settings (30 s request timeout), the default 2-minute hold is fine.
    assert!(Settings::default().late_landing() < WorkerOptions::default().visibility_timeout);
}

/// Defers its job `times` times, then succeeds.
struct Deferring {
    times: u64,
    runs: Arc<AtomicU64>,
}

impl Handler<Touch> for Deferring {
    async fn handle(&self, _job: Touch, steps: &Steps) -> Result<()> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if steps.deferrals() < self.times {
            return steps.defer(Duration::from_secs(1));
        }
        Ok(())
    }
}

#[tokio::test]
async fn deferred_deliveries_are_not_attempts_and_cost_one_update_each() {
    let account = common::account();
    let queue: JobQueue<Touch> = job_queue(&account, "defer").await;
    queue.enqueue(&Touch { id: 7 }).await.unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    // Three deferrals with at most two attempts: deferrals do not count.
    let options = quick_options().with_max_dequeue_count(2);
    let metrics = account.metrics().clone();
    metrics.reset();
    let worker = Worker::new(
        queue.clone(),
        Deferring {
            times: 3,
            runs: runs.clone(),
        },
        options,
    );
    let report = worker.drain().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(
        (report.deferred, report.processed, report.poisoned),
        (3, 1, 0),
        "{report:?}"
    );
    assert_eq!(
        metrics.snapshot().requests_of(RequestKind::QueueUpdate),
        3,
        "one update per deferral"
    );
    assert!(queue.peek_poisoned(1).await.unwrap().is_empty());
    queue.delete_queues().await.unwrap();
}

#[derive(Debug, Serialize, Deserialize)]
struct TouchV2 {
    id: u32,
    #[serde(default)]
    reason: String,
}

impl Job for TouchV2 {
    const KIND: &'static str = "touch";
    const VERSION: u32 = 2;
}

struct Count(Arc<AtomicU64>);

impl<J: Job> Handler<J> for Count {
    async fn handle(&self, _job: J, _steps: &Steps) -> Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_runs_earlier_job_versions_and_leaves_later_ones_to_upgraded_workers() {
    let account = common::account();
    let old: JobQueue<Touch> = job_queue(&account, "versions").await;
    let new: JobQueue<TouchV2> = JobQueue::new(old.queue().clone());
    old.enqueue(&Touch { id: 1 }).await.unwrap();
    new.enqueue(&TouchV2 {
        id: 2,
        reason: "moved".into(),
    })
    .await
    .unwrap();
    let options = quick_options().with_max_dequeue_count(1);
    // A version-1 worker runs the version-1 job; the version-2 job fails its one attempt
    // ("left for an upgraded worker") and goes to the poison queue with its payload.
    let v1 = Arc::new(AtomicU64::new(0));
    let report = Worker::new(old.clone(), Count(v1.clone()), options.clone())
        .drain()
        .await
        .unwrap();
    assert_eq!(v1.load(Ordering::SeqCst), 1);
    assert_eq!((report.processed, report.poisoned), (1, 1), "{report:?}");
    let record = old.peek_poisoned(1).await.unwrap().remove(0);
    assert!(record.reason.contains("version 2"), "{}", record.reason);
    assert_eq!(record.kind.as_deref(), Some("touch@2"));
    // Re-queued, an upgraded worker runs it — and would run a version-1 job as well.
    let taken = old.take_poisoned(1, Duration::from_secs(30)).await.unwrap();
    old.requeue(&taken[0]).await.unwrap();
    old.enqueue(&Touch { id: 3 }).await.unwrap();
    let v2 = Arc::new(AtomicU64::new(0));
    let report = Worker::new(new.clone(), Count(v2.clone()), options)
        .drain()
        .await
        .unwrap();
    assert_eq!(v2.load(Ordering::SeqCst), 2, "{report:?}");
    assert_eq!(report.poisoned, 0);
    old.delete_queues().await.unwrap();
}
