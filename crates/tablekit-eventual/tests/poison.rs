//! Poison messages against Azurite: claim 38, undecodable messages, reading poison records
//! back and re-enqueueing them after a fix.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::{RequestKind, SendOptions};
use tablekit_core::{Error, Result};
use tablekit_eventual::{Handler, Job, JobQueue, PoisonRecord, Steps, Worker};

use common::{job_queue, quick_options};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Invoice {
    number: u32,
    note: String,
}
impl Job for Invoice {
    const KIND: &'static str = "send-invoice";
}

/// Fails every run until `fixed`; records the dequeue count of each run.
#[derive(Default)]
struct Broken {
    fixed: AtomicBool,
    attempts: Mutex<Vec<u64>>,
    done: AtomicU64,
}

impl Handler<Invoice> for Broken {
    async fn handle(&self, job: Invoice, steps: &Steps) -> Result<()> {
        self.attempts.lock().unwrap().push(steps.attempt());
        if !self.fixed.load(Ordering::SeqCst) {
            return Err(Error::decode(
                tablekit_core::Target::default(),
                "note",
                format!("invoice {} has no customer", job.number),
            ));
        }
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn invoice() -> Invoice {
    Invoice {
        number: 7,
        // Quotes, a newline and non-ASCII: the payload must survive byte for byte.
        note: "line \"one\"\nline two – ünïcode".into(),
    }
}

#[tokio::test]
async fn a_failing_message_reappears_with_a_higher_count_then_lands_in_poison() {
    let account = common::account();
    let queue: JobQueue<Invoice> = job_queue(&account, "invoices").await;
    queue.enqueue(&invoice()).await.unwrap();
    let original = queue.queue().peek(1).await.unwrap().remove(0);
    let options = quick_options()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_max_dequeue_count(3)
        .with_handler_retry(tablekit_eventual::HandlerRetry::none());
    let metrics = account.metrics().clone();
    metrics.reset();
    let worker = Worker::new(queue.clone(), Broken::default(), options);
    let report = worker.drain().await.unwrap();
    // Not deleted after a failure, the message came back after its visibility timeout with
    // a higher dequeue count; after the third, it moved to the poison queue.
    assert_eq!(*worker.handler().attempts.lock().unwrap(), [1, 2, 3]);
    assert_eq!(
        (
            report.dequeued,
            report.failed_attempts,
            report.poisoned,
            report.processed
        ),
        (3, 3, 1, 0)
    );
    let s = metrics.snapshot();
    // Three dequeues with the message (polls besides), three handler runs that send
    // nothing, then the move: one put on the poison queue and one delete.
    common::assert_requests(
        &s,
        &[
            (RequestKind::QueuePut, 1),
            (RequestKind::QueueDeleteMessage, 1),
        ],
        &[RequestKind::QueueGet, RequestKind::QueueMetadata],
    );
    assert_eq!(queue.approximate_len().await.unwrap(), 0);

    metrics.reset();
    let records = queue.peek_poisoned(32).await.unwrap();
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueuePeek, 1)], &[]);
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.payload, original, "the payload, byte for byte");
    assert_eq!(record.job::<Invoice>().unwrap(), invoice());
    assert_eq!(record.source_queue, queue.queue().name());
    assert_eq!(record.dequeue_count, 3);
    assert_eq!(record.kind.as_deref(), Some("send-invoice"));
    assert!(
        record.reason.contains("invoice 7 has no customer"),
        "{record:?}"
    );
    // The raw poison message is the documented format: header line, newline, payload.
    let raw = queue.poison().peek(1).await.unwrap().remove(0);
    assert!(raw.ends_with(&original) && raw.starts_with(b"tablekit-poison/1 {"));
    assert_eq!(PoisonRecord::parse(&raw).unwrap(), *record);
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn a_fixed_job_can_be_requeued_from_the_poison_queue() {
    let account = common::account();
    let queue: JobQueue<Invoice> = job_queue(&account, "requeue").await;
    queue.enqueue(&invoice()).await.unwrap();
    queue.enqueue(&invoice()).await.unwrap();
    let options = quick_options().with_max_dequeue_count(1);
    let worker = Worker::new(queue.clone(), Broken::default(), options);
    assert_eq!(worker.drain().await.unwrap().poisoned, 2);

    let metrics = account.metrics().clone();
    metrics.reset();
    let taken = queue
        .take_poisoned(32, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(taken.len(), 2);
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueueGet, 1)], &[]);
    assert!(taken[0].message().dequeue_count >= 1);

    metrics.reset();
    queue.requeue(&taken[0]).await.unwrap();
    common::assert_requests(
        &metrics.snapshot(),
        &[
            (RequestKind::QueuePut, 1),
            (RequestKind::QueueDeleteMessage, 1),
        ],
        &[],
    );
    metrics.reset();
    queue.discard(&taken[1]).await.unwrap();
    common::assert_requests(
        &metrics.snapshot(),
        &[(RequestKind::QueueDeleteMessage, 1)],
        &[],
    );
    assert_eq!(queue.poison().approximate_len().await.unwrap(), 0);
    assert_eq!(
        queue.queue().peek(1).await.unwrap()[0],
        taken[0].record.payload,
        "re-enqueued byte for byte"
    );

    worker.handler().fixed.store(true, Ordering::SeqCst);
    let report = worker.drain().await.unwrap();
    assert_eq!((report.processed, report.poisoned), (1, 0));
    assert_eq!(worker.handler().done.load(Ordering::SeqCst), 1);
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn undecodable_messages_and_foreign_kinds_are_poisoned_without_running_the_handler() {
    let account = common::account();
    let queue: JobQueue<Invoice> = job_queue(&account, "garbage").await;
    let garbage: Vec<u8> = (0..=255u8).rev().collect();
    let foreign = br#"{"kind":"archive-employee","job":{"department":"Sales"}}"#.to_vec();
    let malformed = br#"{"kind":"send-invoice","job":{"number":"seven"}}"#.to_vec();
    for payload in [&garbage, &foreign, &malformed] {
        queue
            .queue()
            .send(payload, SendOptions::default())
            .await
            .unwrap();
    }
    let worker = Worker::new(queue.clone(), Broken::default(), quick_options());
    let report = worker.drain().await.unwrap();
    assert_eq!((report.poisoned, report.failed_attempts), (3, 0));
    assert!(worker.handler().attempts.lock().unwrap().is_empty());
    let mut records = queue.peek_poisoned(32).await.unwrap();
    records.sort_by_key(|r| r.payload.clone());
    let by_payload = |p: &Vec<u8>| records.iter().find(|r| r.payload == *p).unwrap();
    assert!(by_payload(&garbage).reason.contains("not a tablekit job"));
    assert_eq!(by_payload(&garbage).kind, None);
    let r = by_payload(&foreign);
    assert!(
        r.reason.contains("`archive-employee` has no handler"),
        "{r:?}"
    );
    assert_eq!(r.kind.as_deref(), Some("archive-employee"));
    assert!(by_payload(&malformed).reason.contains("does not decode"));
    for r in &records {
        assert_eq!(r.dequeue_count, 1, "poisoned on the first delivery");
    }
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn a_message_whose_attempts_all_crashed_is_poisoned_on_arrival() {
    let account = common::account();
    let queue: JobQueue<Invoice> = job_queue(&account, "crashed").await;
    queue.enqueue(&invoice()).await.unwrap();
    // A consumer that dies after dequeuing: the message is never deleted.
    let taken = queue
        .queue()
        .receive(1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(taken[0].dequeue_count, 1);
    let options = quick_options().with_max_dequeue_count(1);
    let worker = Worker::new(queue.clone(), Broken::default(), options);
    let report = worker.drain().await.unwrap();
    assert_eq!((report.poisoned, report.dequeued), (1, 1));
    assert!(worker.handler().attempts.lock().unwrap().is_empty());
    let record = queue.peek_poisoned(1).await.unwrap().remove(0);
    assert_eq!(record.dequeue_count, 2);
    assert!(
        record.reason.contains("dequeued 2 times (max 1)"),
        "{record:?}"
    );
    assert_eq!(record.job::<Invoice>().unwrap(), invoice());
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn a_panicking_or_hanging_handler_is_a_failed_attempt() {
    struct Panics;
    impl Handler<Invoice> for Panics {
        async fn handle(&self, job: Invoice, _steps: &Steps) -> Result<()> {
            if job.number == 1 {
                panic!("invoice template missing");
            }
            std::future::pending().await
        }
    }
    let account = common::account();
    let queue: JobQueue<Invoice> = job_queue(&account, "panics").await;
    for number in [1, 2] {
        queue
            .enqueue(&Invoice {
                number,
                note: String::new(),
            })
            .await
            .unwrap();
    }
    let options = quick_options()
        .with_max_dequeue_count(1)
        .with_handler_timeout(Duration::from_millis(300));
    let report = Worker::new(queue.clone(), Panics, options)
        .drain()
        .await
        .unwrap();
    assert_eq!((report.failed_attempts, report.poisoned), (2, 2));
    let records = queue.peek_poisoned(32).await.unwrap();
    let reason = |n: u32| {
        records
            .iter()
            .find(|r| r.job::<Invoice>().unwrap().number == n)
            .unwrap()
            .reason
            .clone()
    };
    assert!(reason(1).contains("panicked: invoice template missing"));
    assert!(reason(2).contains("handler_timeout"));
    queue.delete_queues().await.unwrap();
}

/// Whether a message is kept until it is deleted: the service reports the expiration time of
/// a message put with `messagettl=-1` as the end of year 9999.
fn never_expires(message: &tablekit_azure::Message) -> bool {
    use chrono::Datelike as _;
    message.expires.year() == 9999
}

#[tokio::test]
async fn jobs_poison_records_and_requeued_jobs_never_expire() {
    let account = common::account();
    let queue: JobQueue<Invoice> = job_queue(&account, "forever").await;
    let hidden = Duration::from_secs(1);
    queue.enqueue(&invoice()).await.unwrap();
    let enqueued = queue.queue().receive(1, hidden).await.unwrap().remove(0);
    assert!(never_expires(&enqueued), "enqueue: {:?}", enqueued.expires);
    queue.queue().delete_message(&enqueued).await.unwrap();
    queue
        .enqueue_after(&invoice(), Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let delayed = queue.queue().receive(1, hidden).await.unwrap().remove(0);
    assert!(
        never_expires(&delayed),
        "enqueue_after: {:?}",
        delayed.expires
    );
    queue.queue().delete_message(&delayed).await.unwrap();

    queue.enqueue(&invoice()).await.unwrap();
    let options = quick_options().with_max_dequeue_count(1);
    let worker = Worker::new(queue.clone(), Broken::default(), options);
    assert_eq!(worker.drain().await.unwrap().poisoned, 1);
    let poisoned = queue.take_poisoned(1, hidden).await.unwrap().remove(0);
    assert!(
        never_expires(poisoned.message()),
        "poison record: {:?}",
        poisoned.message().expires
    );
    queue.requeue(&poisoned).await.unwrap();
    let requeued = queue.queue().receive(1, hidden).await.unwrap().remove(0);
    assert!(never_expires(&requeued), "requeue: {:?}", requeued.expires);
    queue.delete_queues().await.unwrap();
}
