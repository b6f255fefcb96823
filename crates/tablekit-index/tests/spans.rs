//! The inter-partition index's step spans, captured through tracing-opentelemetry and the
//! OpenTelemetry SDK's in-memory span exporter: a queued copy job runs as an INTERNAL
//! `index job {table}` span inside the worker's `worker attempt {queue}` span, with its
//! requests as CLIENT spans under it; a repair is one `index repair {table}` span over its
//! requests; no span or event carries a key or indexed value.

mod common;
#[path = "../../tablekit-azure/tests/common/otel.rs"]
mod otel;

use std::time::Duration;

use common::{directory, employee, table};
use opentelemetry::trace::SpanKind;
use opentelemetry_sdk::trace::SpanData;
use tablekit_eventual::{HandlerRetry, WorkerOptions};
use tablekit_index::InterPartitionIndex;
use tablekit_testkit::unique_queue_name;

/// The one span named `name`, which must be INTERNAL.
fn step<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "{name}: {spans:#?}");
    assert_eq!(found[0].span_kind, SpanKind::Internal, "{name}");
    found[0]
}

/// The spans whose parent is `parent`.
fn children<'a>(spans: &'a [SpanData], parent: &SpanData) -> Vec<&'a SpanData> {
    let id = parent.span_context.span_id();
    spans.iter().filter(|s| s.parent_span_id == id).collect()
}

#[tokio::test]
async fn an_index_job_runs_in_its_worker_attempt_and_names_no_keys() {
    let capture = otel::capture();
    let table = table("idxspans").await;
    let queue = table
        .account()
        .queue(&unique_queue_name("idxspans"))
        .unwrap();
    let d = directory();
    let index = InterPartitionIndex::new(table.clone(), d.spec.clone(), queue.clone());
    index.create().await.unwrap();
    let (department, email) = ("Dept5ecret", "mail-5ecret@contoso.com");
    index
        .insert(&employee(department, 917_364, "Surname5ecret", email))
        .await
        .unwrap();
    let worker = index.worker(
        WorkerOptions::default()
            .with_visibility_timeout(Duration::from_secs(3))
            .with_poll_interval(Duration::from_millis(20))
            .with_idle_backoff_max(Duration::from_millis(100))
            .with_handler_retry(HandlerRetry::none()),
    );
    assert_eq!(worker.drain().await.unwrap().processed, 1);
    assert!(
        index
            .repair(department)
            .await
            .unwrap()
            .found
            .is_consistent()
    );

    let spans = capture.spans();
    let t = table.name();
    let attempt = step(&spans, &format!("worker attempt {}", queue.name()));
    let job = step(&spans, &format!("index job {t}"));
    assert_eq!(
        job.parent_span_id,
        attempt.span_context.span_id(),
        "the job runs inside its delivery"
    );
    let requests: Vec<(String, SpanKind)> = children(&spans, job)
        .into_iter()
        .map(|s| (s.name.to_string(), s.span_kind.clone()))
        .collect();
    assert!(
        requests.iter().any(|(n, _)| n == &format!("get {t}")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|(n, _)| n.starts_with("upsert") && n.ends_with(t)),
        "{requests:?}"
    );
    assert!(
        requests.iter().all(|(_, k)| *k == SpanKind::Client),
        "{requests:?}"
    );
    let repair = step(&spans, &format!("index repair {t}"));
    let audit: Vec<String> = children(&spans, repair)
        .into_iter()
        .map(|s| s.name.to_string())
        .collect();
    assert!(
        audit.iter().any(|n| n == &format!("query {t}")),
        "{audit:?}"
    );

    let everything = capture.everything();
    assert!(everything.contains(t));
    for secret in ["5ecret", "917364"] {
        let leaks: Vec<&str> = everything.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaks.is_empty(), "{secret} leaked: {leaks:#?}");
    }
    index.jobs().delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}
