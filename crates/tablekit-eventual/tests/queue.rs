//! `JobQueue` against Azurite: creation, enqueueing (with delays), the envelope on the wire,
//! and refusals before any request.

mod common;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::RequestKind;
use tablekit_core::{Error, ErrorKind};
use tablekit_eventual::{Job, JobQueue, MAX_JOB_BYTES};
use tablekit_testkit::unique_queue_name;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Reindex {
    table: String,
    key: String,
}
impl Job for Reindex {
    const KIND: &'static str = "reindex";
}

fn job() -> Reindex {
    Reindex {
        table: "Employees".into(),
        key: "Sales/000223".into(),
    }
}

#[tokio::test]
async fn create_makes_the_queue_and_its_poison_queue() {
    let account = common::account();
    let name = unique_queue_name("jobs");
    let queue: JobQueue<Reindex> = JobQueue::new(account.queue(&name).unwrap());
    assert_eq!(queue.poison().name(), format!("{name}-poison"));
    let metrics = account.metrics().clone();
    metrics.reset();
    queue.create().await.unwrap();
    queue.create().await.unwrap(); // already there: fine
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueueCreate, 4)], &[]);
    assert_eq!(queue.poison().approximate_len().await.unwrap(), 0);

    metrics.reset();
    queue.delete_queues().await.unwrap();
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueueDelete, 2)], &[]);
    assert_eq!(
        queue.approximate_len().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        queue.poison().approximate_len().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn enqueue_sends_one_message_in_a_kind_envelope() {
    let account = common::account();
    let queue: JobQueue<Reindex> = common::job_queue(&account, "enqueue").await;
    let metrics = account.metrics().clone();
    metrics.reset();
    queue.enqueue(&job()).await.unwrap();
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueuePut, 1)], &[]);
    let payload = queue.queue().peek(1).await.unwrap().remove(0);
    assert_eq!(
        String::from_utf8(payload).unwrap(),
        r#"{"kind":"reindex","job":{"table":"Employees","key":"Sales/000223"}}"#
    );
    metrics.reset();
    assert_eq!(queue.approximate_len().await.unwrap(), 1);
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueueMetadata, 1)], &[]);
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn enqueue_after_hides_the_job_until_its_delay_ends() {
    let account = common::account();
    let queue: JobQueue<Reindex> = common::job_queue(&account, "delayed").await;
    let metrics = account.metrics().clone();
    metrics.reset();
    queue
        .enqueue_after(&job(), Duration::from_secs(1))
        .await
        .unwrap();
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueuePut, 1)], &[]);
    assert!(queue.queue().peek(1).await.unwrap().is_empty(), "hidden");
    assert_eq!(queue.approximate_len().await.unwrap(), 1, "but counted");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(queue.queue().peek(1).await.unwrap().len(), 1, "visible now");
    queue.delete_queues().await.unwrap();
}

#[tokio::test]
async fn bad_jobs_are_refused_before_any_request() {
    let account = common::account();
    let queue: JobQueue<Reindex> =
        JobQueue::new(account.queue(&unique_queue_name("never")).unwrap());
    let metrics = account.metrics().clone();
    metrics.reset();
    let huge = Reindex {
        table: "x".repeat(MAX_JOB_BYTES),
        key: String::new(),
    };
    assert!(matches!(
        queue.enqueue(&huge).await,
        Err(Error::LimitExceeded { .. })
    ));
    assert_eq!(
        queue
            .enqueue_after(&job(), Duration::from_secs(8 * 24 * 3600))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    // A queue that does not exist is the service's answer, after one request.
    assert_eq!(
        queue.enqueue(&job()).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::QueuePut, 1)], &[]);
}

#[tokio::test]
async fn a_long_queue_name_still_gets_a_valid_poison_queue() {
    let account = common::account();
    let base = unique_queue_name("long");
    let name = format!("{base}{}", "q".repeat(63 - base.len()));
    assert_eq!(name.len(), 63);
    let queue: JobQueue<Reindex> = JobQueue::new(account.queue(&name).unwrap());
    assert!(queue.poison().name().ends_with("-poison"));
    assert!(queue.poison().name().len() <= 63);
    queue.create().await.unwrap();
    queue.delete_queues().await.unwrap();
    let explicit: JobQueue<Reindex> = JobQueue::new(account.queue(&name).unwrap())
        .with_poison(account.queue(&unique_queue_name("dead-letters")).unwrap());
    assert!(explicit.poison().name().starts_with("deadletters"));
}
