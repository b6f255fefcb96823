//! The worker's telemetry, captured through tracing-opentelemetry and the OpenTelemetry SDK's
//! in-memory span exporter: each delivery is one INTERNAL `worker attempt {queue}` span; a
//! handler's failure is logged with its `error.type`, and its text — which names the keys
//! the handler met — only when the account's `Telemetry::record_keys` allows key values. The
//! poison record keeps the whole text either way.

mod common;
#[path = "../../tablekit-azure/tests/common/otel.rs"]
mod otel;

use std::time::Duration;

use opentelemetry::trace::SpanKind;
use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, Telemetry};
use tablekit_core::{Error, Keys, Result, Target};
use tablekit_eventual::{Handler, HandlerRetry, Job, JobQueue, Steps, Worker, WorkerOptions};

#[derive(Debug, Serialize, Deserialize)]
struct Touch {
    row: String,
}
impl Job for Touch {
    const KIND: &'static str = "touch";
}

/// Meets a changed entity every time: a 412 naming its keys, which the worker re-runs, then
/// gives up on and poisons.
struct Contested;

impl Handler<Touch> for Contested {
    async fn handle(&self, job: Touch, _steps: &Steps) -> Result<()> {
        Err(Error::PreconditionFailed {
            target: Target::entity("Orders", Keys::new("Cust-5ecret", job.row).unwrap()),
        })
    }
}

fn options() -> WorkerOptions {
    common::quick_options()
        .with_max_dequeue_count(1)
        .with_handler_retry(
            HandlerRetry::default()
                .with_max_retries(1)
                .with_initial_backoff(Duration::from_millis(10))
                .with_max_backoff(Duration::from_millis(10)),
        )
}

/// Runs one failing job on `account` to its poison record; returns the queue's name and the
/// record's reason.
async fn fail_once(account: &Account, row: &str) -> (String, String) {
    let queue: JobQueue<Touch> = common::job_queue(account, "spans").await;
    queue.enqueue(&Touch { row: row.into() }).await.unwrap();
    let worker = Worker::new(queue.clone(), Contested, options());
    let report = worker.drain().await.unwrap();
    assert_eq!(
        (report.failed_attempts, report.poisoned),
        (1, 1),
        "{report:?}"
    );
    let records = queue.peek_poisoned(8).await.unwrap();
    let reason = records[0].reason.clone();
    let name = queue.queue().name().to_owned();
    queue.delete_queues().await.unwrap();
    (name, reason)
}

#[tokio::test]
async fn a_delivery_is_one_step_span_and_handler_errors_name_no_keys_unless_allowed() {
    let capture = otel::capture();

    // Default telemetry: no key value anywhere in spans or events.
    let (queue, reason) = fail_once(&common::account(), "Row-5ecret-a").await;
    assert!(
        reason.contains("Row-5ecret-a"),
        "the poison record keeps it: {reason}"
    );
    let spans = capture.spans();
    let attempts: Vec<_> = spans
        .iter()
        .filter(|s| s.name == format!("worker attempt {queue}"))
        .collect();
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    assert_eq!(attempts[0].span_kind, SpanKind::Internal);
    assert_eq!(
        otel::attr(attempts[0], "tablekit.job.kind").as_deref(),
        Some("touch")
    );
    let events: Vec<String> = attempts[0]
        .events
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    for event in [
        "re-running the handler",
        "job attempt failed",
        "moved a message to the poison queue",
    ] {
        assert!(events.iter().any(|e| e == event), "{event}: {events:?}");
    }
    let failed = attempts[0]
        .events
        .iter()
        .find(|e| e.name == "job attempt failed")
        .unwrap();
    let error_type = failed
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "error.type")
        .map(|kv| kv.value.to_string());
    assert_eq!(error_type.as_deref(), Some("PreconditionFailed"));
    let everything = capture.everything();
    for secret in ["Cust-5ecret", "Row-5ecret-a"] {
        let leaks: Vec<&str> = everything.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaks.is_empty(), "{secret} leaked: {leaks:#?}");
    }

    // Key values allowed: the events carry the handler's whole error.
    let settings = common::fast_retries();
    let settings = settings.with_telemetry(Telemetry::default().with_record_keys(true));
    let (_, reason) = fail_once(&common::account_with(settings), "Row-5ecret-b").await;
    assert!(reason.contains("Row-5ecret-b"));
    let everything = capture.everything();
    let shown: Vec<&str> = everything
        .lines()
        .filter(|l| l.contains("Row-5ecret-b"))
        .collect();
    assert!(
        shown.len() >= 3,
        "retry, failure and poison events: {shown:#?}"
    );
}
