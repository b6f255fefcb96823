//! Graceful shutdown and idling against Azurite: a stopping worker takes no new messages,
//! lets running handlers finish, then releases what it cannot finish; an idle worker only
//! polls, backing off.

mod common;

use std::sync::Arc;
use std::time::Duration;

use tablekit_azure::RequestKind;
use tablekit_core::Result;
use tablekit_eventual::{Handler, JobQueue, Steps, Worker, WorkerReport};
use tokio::sync::{Notify, Semaphore, oneshot};

use common::{Probe, Slow, job_queue, quick_options};

struct Gate {
    started: Arc<Notify>,
    go: Arc<Semaphore>,
}

impl Handler<Probe> for Gate {
    async fn handle(&self, _job: Probe, _steps: &Steps) -> Result<()> {
        self.started.notify_one();
        let _permit = self.go.acquire().await.expect("semaphore open");
        Ok(())
    }
}

#[tokio::test]
async fn shutdown_stops_dequeuing_and_lets_running_handlers_finish() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "graceful").await;
    for i in 0..3 {
        queue.enqueue(&Probe(i)).await.unwrap();
    }
    let started = Arc::new(Notify::new());
    let go = Arc::new(Semaphore::new(0));
    let handler = Gate {
        started: started.clone(),
        go: go.clone(),
    };
    let options = quick_options().with_concurrency(1);
    let worker = Worker::new(queue.clone(), handler, options);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let run = tokio::spawn({
        let worker = worker.clone();
        async move {
            worker
                .run_until(async {
                    let _ = stop_rx.await;
                })
                .await
        }
    });
    started.notified().await;
    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!run.is_finished(), "waits for the running handler");
    go.add_permits(10);
    let report = run.await.unwrap().unwrap();
    assert_eq!(
        (
            report.dequeued,
            report.processed,
            report.deleted,
            report.released
        ),
        (1, 1, 1, 0)
    );
    assert_eq!(
        queue.approximate_len().await.unwrap(),
        2,
        "the rest stay queued"
    );
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn shutdown_after_the_grace_period_releases_unfinished_messages() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "release").await;
    queue.enqueue(&Probe(1)).await.unwrap();
    let started = Arc::new(Notify::new());
    let handler = Gate {
        started: started.clone(),
        go: Arc::new(Semaphore::new(0)), // never finishes
    };
    let options = quick_options()
        .with_visibility_timeout(Duration::from_secs(60))
        .with_shutdown_grace(Duration::from_millis(100));
    let worker = Worker::new(queue.clone(), handler, options);
    let metrics = account.metrics().clone();
    let report = worker
        .run_until(async {
            started.notified().await;
            metrics.reset();
        })
        .await
        .unwrap();
    assert_eq!(
        (report.dequeued, report.processed, report.released),
        (1, 0, 1)
    );
    // Only the release.
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueueUpdate, 1)], &[]);
    // Released, not left hidden for 60 s: another consumer gets it at once.
    let again = queue
        .queue()
        .receive(1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].dequeue_count, 2);
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn an_idle_worker_only_polls_and_backs_off() {
    let account = common::account();
    let queue: JobQueue<Probe> = job_queue(&account, "idle").await;
    let options = quick_options()
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(80));
    let worker = Worker::new(queue.clone(), Slow(Duration::ZERO), options);
    let metrics = account.metrics().clone();
    metrics.reset();
    let report = worker
        .run_until(tokio::time::sleep(Duration::from_millis(600)))
        .await
        .unwrap();
    let s = metrics.snapshot();
    let polls = s.requests_of(RequestKind::QueueGet);
    // Waits of 20, 40, then 80 ms: about eight polls in 600 ms, never one per millisecond.
    assert!((2..=15).contains(&polls), "{polls} polls");
    common::assert_requests(&s, &[], &[RequestKind::QueueGet]);
    assert_eq!(report, WorkerReport::default());
    queue.delete_queues().await.unwrap();
}
