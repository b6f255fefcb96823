//! The worker against Azurite: request counts, batches, concurrency, visibility extension,
//! handler retries and option checks.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tablekit_azure::RequestKind;
use tablekit_core::{Error, ErrorKind, Result, Target};
use tablekit_eventual::{Handler, JobQueue, Steps, Worker, WorkerOptions};
use tokio::sync::oneshot;

use common::{
    ArchiveEmployee, Probe, Slow, archive_tables, cleanup, ids_in, job_queue, quick_options, seed,
};

#[tokio::test]
async fn one_job_costs_a_dequeue_its_steps_and_a_delete() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    seed(&tables.current, [223]).await;
    let queue: JobQueue<ArchiveEmployee> = job_queue(&account, "archive").await;
    let metrics = account.metrics().clone();
    metrics.reset();
    queue.enqueue(&ArchiveEmployee::new(223)).await.unwrap();
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueuePut, 1)], &[]);

    metrics.reset();
    let options = quick_options().with_concurrency(1);
    let worker = Worker::new(queue.clone(), tables.clone(), options);
    let report = worker.drain().await.unwrap();
    // One dequeue with the message and one that finds the queue empty, the handler's three
    // steps, one delete of the message, and drain's check that nothing is left.
    common::assert_requests(
        &metrics.snapshot(),
        &[
            (RequestKind::QueueGet, 2),
            (RequestKind::Get, 1),
            (RequestKind::UpsertReplace, 1),
            (RequestKind::Delete, 1),
            (RequestKind::QueueDeleteMessage, 1),
            (RequestKind::QueueMetadata, 1),
        ],
        &[],
    );
    assert_eq!(
        (report.dequeued, report.processed, report.deleted),
        (1, 1, 1)
    );
    assert_eq!(
        report.failed_attempts + report.poisoned + report.extensions,
        0
    );
    assert_eq!(worker.stats(), report);
    assert_eq!(ids_in(&tables.archive).await, [223].into());
    assert!(ids_in(&tables.current).await.is_empty());
    cleanup(&queue, &tables).await;
}

#[tokio::test]
async fn a_batch_is_taken_in_one_dequeue_and_each_message_is_deleted_once() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    seed(&tables.current, 0..20).await;
    let queue: JobQueue<ArchiveEmployee> = job_queue(&account, "batch").await;
    for id in 0..20 {
        queue.enqueue(&ArchiveEmployee::new(id)).await.unwrap();
    }
    let metrics = account.metrics().clone();
    metrics.reset();
    let options = quick_options().with_concurrency(20);
    let report = Worker::new(queue.clone(), tables.clone(), options)
        .drain()
        .await
        .unwrap();
    let s = metrics.snapshot();
    assert_eq!((report.processed, report.dequeued), (20, 20));
    // Per message: its three steps and one delete. Dequeues: one that took all 20 (the
    // worker had 20 free slots), then polls that found nothing until the handlers finished.
    let polls = s.requests_of(RequestKind::QueueGet);
    assert!(polls >= 2);
    common::assert_requests(
        &s,
        &[
            (RequestKind::QueueDeleteMessage, 20),
            (RequestKind::Get, 20),
            (RequestKind::UpsertReplace, 20),
            (RequestKind::Delete, 20),
        ],
        &[RequestKind::QueueGet, RequestKind::QueueMetadata],
    );
    assert_eq!(ids_in(&tables.archive).await, (0..20).collect());
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    cleanup(&queue, &tables).await;
}

/// A job whose handler records how many handlers run at once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
    runs: AtomicU64,
}

struct Concurrent(Arc<Gauge>, usize);
impl Handler<Probe> for Concurrent {
    async fn handle(&self, _job: Probe, _steps: &Steps) -> Result<()> {
        let now = self.0.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.max.fetch_max(now, Ordering::SeqCst);
        self.0.runs.fetch_add(1, Ordering::SeqCst);
        // Stay busy until the expected number run together (or give up after a while, so a
        // worker running fewer at once fails the assertion instead of hanging).
        for _ in 0..200 {
            if self.0.max.load(Ordering::SeqCst) >= self.1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn runs_exactly_n_handlers_at_once() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "concurrency").await;
    for i in 0..12 {
        queue.enqueue(&Probe(i)).await.unwrap();
    }
    let gauge = Arc::new(Gauge::default());
    let options = quick_options().with_concurrency(4);
    let report = Worker::new(queue.clone(), Concurrent(gauge.clone(), 4), options)
        .drain()
        .await
        .unwrap();
    assert_eq!(report.processed, 12);
    assert_eq!(gauge.runs.load(Ordering::SeqCst), 12);
    assert_eq!(
        gauge.max.load(Ordering::SeqCst),
        4,
        "never more, and reached"
    );
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn a_handler_slower_than_the_visibility_timeout_keeps_its_message() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "extend").await;
    queue.enqueue(&Probe(1)).await.unwrap();
    // Extensions every second keep a 2 s timeout from ever lapsing, with a second of slack
    // for a slow request on a busy machine.
    let options = quick_options().with_visibility_timeout(Duration::from_secs(3));
    let worker = Worker::new(queue.clone(), Slow(Duration::from_millis(4_500)), options);
    let metrics = account.metrics().clone();
    metrics.reset();
    // A second worker, on its own account, polls the queue the whole time the handler runs.
    let rival_queue: JobQueue<Probe> =
        JobQueue::new(common::account().queue(queue.queue().name()).unwrap());
    let rival_options = quick_options()
        .with_poll_interval(Duration::from_millis(50))
        .with_idle_backoff_max(Duration::from_millis(100));
    let rival = Worker::new(rival_queue, Slow(Duration::ZERO), rival_options);
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let competitor = tokio::spawn({
        let rival = rival.clone();
        async move {
            rival
                .run_until(async {
                    let _ = done_rx.await;
                })
                .await
        }
    });
    let report = worker.drain().await.unwrap();
    done_tx.send(()).unwrap();
    let rival_report = competitor.await.unwrap().unwrap();
    assert_eq!(rival_report.dequeued, 0, "the rival never got the message");
    assert!(
        rival_queue_polls(&rival) >= 20,
        "the rival polled throughout"
    );
    assert_eq!((report.processed, report.deleted), (1, 1));
    assert!(report.extensions >= 4, "{report:?}");
    let s = metrics.snapshot();
    // One request per extension, besides the message's delete and the polls.
    common::assert_requests(
        &s,
        &[
            (RequestKind::QueueUpdate, report.extensions),
            (RequestKind::QueueDeleteMessage, 1),
        ],
        &[RequestKind::QueueGet, RequestKind::QueueMetadata],
    );
    assert_eq!(report.lost_receipts, 0);
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    queue.delete_queues().await.unwrap();
}

/// Fails its first `fail` runs with `error`, then succeeds; records attempts and re-runs.
struct Flaky {
    fail: u64,
    error: fn() -> Error,
    runs: AtomicU64,
    seen: std::sync::Mutex<Vec<(u64, u32)>>,
}

impl Flaky {
    fn new(fail: u64, error: fn() -> Error) -> Self {
        Self {
            fail,
            error,
            runs: AtomicU64::new(0),
            seen: Default::default(),
        }
    }
}

impl Handler<Probe> for Flaky {
    async fn handle(&self, _job: Probe, steps: &Steps) -> Result<()> {
        self.seen
            .lock()
            .unwrap()
            .push((steps.attempt(), steps.retry()));
        if self.runs.fetch_add(1, Ordering::SeqCst) < self.fail {
            return Err((self.error)());
        }
        Ok(())
    }
}

fn busy() -> Error {
    tablekit_core::wire::error_from_response(
        503,
        Some("ServerBusy".into()),
        String::new(),
        Target::table("t"),
        None,
    )
}

fn bad() -> Error {
    Error::decode(Target::default(), "Age", "not a number")
}

#[tokio::test]
async fn transient_failures_rerun_the_handler_within_one_dequeue() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "rerun").await;
    queue.enqueue(&Probe(1)).await.unwrap();
    let worker = Worker::new(queue.clone(), Flaky::new(2, busy), quick_options());
    let report = worker.drain().await.unwrap();
    assert_eq!(
        (
            report.dequeued,
            report.retries,
            report.processed,
            report.failed_attempts
        ),
        (1, 2, 1, 0)
    );
    assert_eq!(
        *worker.handler().seen.lock().unwrap(),
        [(1, 0), (1, 1), (1, 2)]
    );
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn a_permanent_failure_waits_for_the_next_delivery_or_the_failure_backoff() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "backoff").await;
    queue.enqueue(&Probe(1)).await.unwrap();
    let options = quick_options()
        .with_visibility_timeout(Duration::from_secs(60))
        .with_failure_backoff(Duration::ZERO);
    let metrics = account.metrics().clone();
    metrics.reset();
    let worker = Worker::new(queue.clone(), Flaky::new(1, bad), options);
    let report = worker.drain().await.unwrap();
    // Not re-run in the same dequeue; made visible again at once (one update) rather than
    // after the 60 s timeout, and done on the second delivery.
    assert_eq!(*worker.handler().seen.lock().unwrap(), [(1, 0), (2, 0)]);
    assert_eq!(
        (
            report.retries,
            report.failed_attempts,
            report.processed,
            report.dequeued
        ),
        (0, 1, 1, 2)
    );
    // The delay is one update; the second delivery ends with one delete.
    common::assert_requests(
        &metrics.snapshot(),
        &[
            (RequestKind::QueueUpdate, 1),
            (RequestKind::QueueDeleteMessage, 1),
        ],
        &[RequestKind::QueueGet, RequestKind::QueueMetadata],
    );
    queue.delete_queues().await.unwrap();
}

/// Signals when it starts, then waits for permission (or forever).
#[tokio::test]
async fn invalid_options_are_refused_before_any_request() {
    let account = common::account();
    let queue: JobQueue<Probe> = JobQueue::new(account.queue("never-created").unwrap());
    account.metrics().reset();
    for options in [
        WorkerOptions::default().with_concurrency(0),
        WorkerOptions::default().with_visibility_timeout(Duration::ZERO),
    ] {
        let worker = Worker::new(queue.clone(), Slow(Duration::ZERO), options);
        let e = worker.drain().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let e = worker.run_until(async {}).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    assert_eq!(account.metrics().snapshot().requests(), 0);
    // A missing queue makes drain fail rather than spin.
    let worker = Worker::new(queue, Slow(Duration::ZERO), quick_options());
    assert_eq!(
        worker.drain().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

/// How many dequeues a worker sent (its account is its own).
fn rival_queue_polls<H: Handler<Probe>>(w: &Worker<Probe, H>) -> u64 {
    w.queue()
        .queue()
        .account()
        .metrics()
        .snapshot()
        .requests_of(RequestKind::QueueGet)
}
