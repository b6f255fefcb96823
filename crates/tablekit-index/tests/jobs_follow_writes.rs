//! Queued jobs never complete against an older primary: jobs of the inter-partition index and
//! of `EventualList` whose write lands after their first deliveries (which defer the job
//! instead of waiting), after a lost dequeue response, or never — against Azurite, through
//! fault proxies. These are regression tests for schedules the explorer covers
//! (`integration-tests/src/explore/`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use common::{EmailCard, Employee, directory, employee};
use tablekit_azure::{RequestKind, Settings, Table};
use tablekit_core::{ETag, Entity, Result};
use tablekit_eventual::{Handler, HandlerRetry, Job, Steps, Worker, WorkerOptions};
use tablekit_index::{
    CopyHandle, CopyJob, EventualList, IndexRead as _, InterPartitionIndex, ListSpec,
};
use tablekit_testkit::fixtures::{Proxied, assert_requests, fast_retries, proxied, table_on};
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule, unique_queue_name};

/// How long the proxy holds the primary write: past the first deliveries of its job.
const WRITE_DELAY: Duration = Duration::from_secs(3);

/// Fast retries; `request_timeout` decides how long a write may take to land, and so the
/// jobs' deadlines.
fn settings(request_timeout: Duration) -> Settings {
    fast_retries().with_request_timeout(request_timeout)
}

/// The tests' request timeout: a write held [`WRITE_DELAY`] lands within its attempts'
/// late landing, and the jobs' deadlines are about half a minute away.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Workers hold a message 1 s longer than a write of [`REQUEST_TIMEOUT`] may land late.
fn worker_options() -> WorkerOptions {
    WorkerOptions::default()
        .with_visibility_timeout(settings(REQUEST_TIMEOUT).late_landing() + Duration::from_secs(1))
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(100))
        .with_handler_retry(HandlerRetry::none())
        .with_max_dequeue_count(10)
}

/// A handler that records the dequeue count of every delivery it runs.
struct Seen<H> {
    inner: H,
    attempts: Arc<Mutex<Vec<u64>>>,
}

impl<J: Job, H: Handler<J>> Handler<J> for Seen<H> {
    async fn handle(&self, job: J, steps: &Steps) -> Result<()> {
        self.attempts.lock().unwrap().push(steps.attempt());
        self.inner.handle(job, steps).await
    }
}

/// A rule for the first `method` request whose path contains `path`.
fn first(method: &str, path: &str, fault: Fault) -> Rule {
    Rule::new(
        Matcher::any().with_method(method).with_path_contains(path),
        Occurrences::Nth(1),
        fault,
    )
}

/// Makes the response of the next dequeue that finds a message get lost: the message is
/// hidden for the worker's visibility timeout, then delivered with dequeue count 2.
fn lose_the_next_dequeue_response(p: &Proxied) {
    p.queue.add_rule(Rule::new(
        Matcher::any()
            .with_method("GET")
            .with_query_contains("numofmessages")
            .with_path_contains("/messages"),
        Occurrences::Nth(1),
        Fault::DropResponse,
    ));
}

/// Waits (without asserting on time) until a job is on `queue`: its write is in flight.
async fn job_enqueued(len: impl AsyncFn() -> usize) {
    while len().await == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// --- The inter-partition index ---------------------------------------------------------

/// The email copy's handle.
type ByEmail = CopyHandle<Employee, EmailCard>;

async fn inter(p: &Proxied, prefix: &str) -> (InterPartitionIndex<Employee>, Table, ByEmail) {
    let table = table_on(&p.account, prefix).await;
    let queue = p.account.queue(&unique_queue_name(prefix)).unwrap();
    let d = directory();
    // Writer and workers share one clock here.
    let index = InterPartitionIndex::builder(table.clone(), d.spec, queue)
        .with_clock_skew_allowance(Duration::ZERO)
        .build()
        .unwrap();
    index.create().await.unwrap();
    (index, table, d.by_email)
}

fn jones() -> Employee {
    employee("Sales", 223, "Jones", "jonesj@contoso.com")
}

fn moved() -> Employee {
    Employee {
        email: "jun.jones@contoso.com".into(),
        age: 35,
        ..jones()
    }
}

/// Stores Jones and runs its job, so its email copy exists before the write under test.
async fn stored_jones(index: &InterPartitionIndex<Employee>) {
    index.insert(&jones()).await.unwrap();
    let done = index.worker(worker_options()).drain().await.unwrap();
    assert_eq!(done.processed, 1);
}

/// Runs `options`' worker while `moved()` is put with its primary write delayed, and returns
/// the dequeue counts of the deliveries the handler ran.
async fn put_delayed(
    p: &Proxied,
    index: &InterPartitionIndex<Employee>,
    options: WorkerOptions,
    before_the_worker: impl FnOnce(),
) -> Vec<u64> {
    p.table
        .add_rule(first("PUT", "empid_Sales", Fault::Delay(WRITE_DELAY)));
    let writing = tokio::spawn({
        let index = index.clone();
        async move { index.upsert(&moved()).await }
    });
    job_enqueued(async || index.jobs().approximate_len().await.unwrap()).await;
    before_the_worker();
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = Seen {
        inner: index.handler(),
        attempts: Arc::clone(&attempts),
    };
    Worker::new(index.jobs(), seen, options)
        .drain()
        .await
        .unwrap();
    writing.await.unwrap().unwrap();
    assert_eq!(p.table.stats().faults_injected.delay, 1);
    attempts.lock().unwrap().clone()
}

/// The copies match the new primary, and the job is neither queued nor poisoned.
async fn assert_copies_follow_the_move(index: &InterPartitionIndex<Employee>, by_email: &ByEmail) {
    let primary = index.get("Sales", "000223").await.unwrap().unwrap();
    assert_eq!(primary.value, moved(), "the write landed");
    let card = index
        .get_by(by_email, "Sales", "jun.jones@contoso.com")
        .await
        .unwrap();
    assert_eq!(
        card.map(|c| c.value.email).as_deref(),
        Some("jun.jones@contoso.com"),
        "the copy of the new email"
    );
    let old = index
        .get_by(by_email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap();
    assert!(old.is_none(), "the old email's copy is gone: {old:?}");
    let report = index.verify("Sales").await.unwrap();
    assert!(report.is_consistent(), "{report:?}");
    assert_eq!(index.jobs().approximate_len().await.unwrap(), 0);
    assert!(index.jobs().peek_poisoned(1).await.unwrap().is_empty());
}

async fn cleanup(p: &Proxied, jobs: &tablekit_eventual::JobQueue<impl Job>, tables: &[&Table]) {
    p.table.clear();
    p.queue.clear();
    jobs.delete_queues().await.unwrap();
    for table in tables {
        table.delete_table().await.unwrap();
    }
}

#[tokio::test]
async fn a_copy_job_delivered_before_its_write_lands_defers_then_follows_the_write() {
    let p = proxied(settings(REQUEST_TIMEOUT));
    let (index, table, by_email) = inter(&p, "followslow").await;
    stored_jones(&index).await;
    // The first deliveries find the primary as it was and defer the job, holding no
    // handler slot, while the write is held by the proxy.
    let attempts = put_delayed(&p, &index, worker_options(), || {}).await;
    assert!(attempts.starts_with(&[1, 2]), "{attempts:?}");
    assert_copies_follow_the_move(&index, &by_email).await;
    cleanup(&p, &index.jobs(), &[&table]).await;
}

#[tokio::test]
async fn a_copy_job_first_seen_at_dequeue_count_2_follows_a_write_that_lands_later() {
    let p = proxied(settings(REQUEST_TIMEOUT));
    let (index, table, by_email) = inter(&p, "followlost").await;
    stored_jones(&index).await;
    let attempts = put_delayed(&p, &index, worker_options(), || {
        lose_the_next_dequeue_response(&p)
    })
    .await;
    assert_eq!(p.queue.stats().faults_injected.drop_response, 1);
    assert_eq!(attempts.first(), Some(&2), "{attempts:?}");
    assert_copies_follow_the_move(&index, &by_email).await;
    cleanup(&p, &index.jobs(), &[&table]).await;
}

#[tokio::test]
async fn a_copy_job_whose_write_never_lands_ends_in_poison_and_leaves_the_old_copies() {
    // A short request timeout: the write settles, and the job's deadline passes, in seconds.
    let p = proxied(settings(Duration::from_millis(500)));
    let (index, table, by_email) = inter(&p, "follownever").await;
    stored_jones(&index).await;
    // Every attempt of the primary write is refused until the writer gives up.
    p.table.add_rule(Rule::new(
        Matcher::any()
            .with_method("PUT")
            .with_path_contains("empid_Sales"),
        Occurrences::All,
        Fault::Status(503),
    ));
    let refused = index.upsert(&moved()).await.unwrap_err();
    assert!(refused.is_retryable(), "{refused}");
    // Deferrals while the write may still land do not count toward the two attempts.
    let options = worker_options()
        .with_max_dequeue_count(2)
        .with_visibility_timeout(Duration::from_secs(3));
    let report = index.worker(options).drain().await.unwrap();
    assert_eq!((report.poisoned, report.processed), (1, 0), "{report:?}");
    assert!(report.deferred >= 2, "{report:?}");
    let record = index.jobs().peek_poisoned(1).await.unwrap().remove(0);
    assert!(
        record.reason.contains("did not land by"),
        "{}",
        record.reason
    );
    let job = record.job::<CopyJob>().unwrap();
    assert!(
        record.poisoned_at > job.write.deadline,
        "given up only after the deadline: {record:?}, {job:?}"
    );
    // The copies still describe the primary as it is: the write that never landed is not
    // in them.
    let primary = index.get("Sales", "000223").await.unwrap().unwrap();
    assert_eq!(primary.value, jones());
    assert!(
        index
            .get_by(&by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        index
            .get_by(&by_email, "Sales", "jun.jones@contoso.com")
            .await
            .unwrap()
            .is_none()
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    cleanup(&p, &index.jobs(), &[&table]).await;
}

/// A backfill's copy write held in the network until after the job of a write that changed
/// the entity meanwhile: the job moved the copy to the new email; the backfill's old copy
/// then landed. The backfill, once none of its writes can land any more, reads its page of
/// primaries again and converges the one that changed, so the old copy does not stay.
#[tokio::test]
async fn a_backfill_copy_landing_after_a_later_job_is_converged_away() {
    // Attempts time out after 4 s and may land until 8 s after they were sent; the proxy
    // holds the backfill's first transaction 7 s, so the job below runs in between.
    let settings = settings(Duration::from_secs(4));
    let p = proxied(settings.clone());
    let (index, table, by_email) = inter(&p, "backfilllate").await;
    let options =
        worker_options().with_visibility_timeout(settings.late_landing() + Duration::from_secs(1));
    index.insert(&jones()).await.unwrap();
    assert_eq!(
        index
            .worker(options.clone())
            .drain()
            .await
            .unwrap()
            .processed,
        1
    );
    // As before the email copy was declared: the primary alone.
    table
        .delete(
            ("email_Sales", "jonesj@contoso.com"),
            tablekit_core::IfMatch::Any,
        )
        .await
        .unwrap();
    p.table.add_rule(first(
        "POST",
        "$batch",
        Fault::Delay(Duration::from_secs(7)),
    ));
    let backfilling = tokio::spawn({
        let index = index.clone();
        async move {
            index
                .backfill(
                    &tablekit_index::MemoryCheckpoint::new(),
                    tablekit_index::BackfillOptions::default(),
                )
                .await
        }
    });
    // The backfill's retry wrote the old email's copy; the held first attempt has not landed.
    while index
        .get_by(&by_email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap()
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    index.upsert(&moved()).await.unwrap();
    assert_eq!(index.worker(options).drain().await.unwrap().processed, 1);
    let state = backfilling.await.unwrap().unwrap();
    assert!(state.done, "{state:?}");
    assert_eq!(p.table.stats().faults_injected.delay, 1);
    assert_copies_follow_the_move(&index, &by_email).await;
    cleanup(&p, &index.jobs(), &[&table]).await;
}

// --- EventualList ------------------------------------------------------------------------

fn by_last_name() -> ListSpec<Employee> {
    ListSpec::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .build()
        .unwrap()
}

async fn lists(p: &Proxied, prefix: &str) -> (EventualList<Employee>, Table, Table) {
    let entities = table_on(&p.account, &format!("{prefix}e")).await;
    let rows = table_on(&p.account, &format!("{prefix}l")).await;
    let queue = p.account.queue(&unique_queue_name(prefix)).unwrap();
    let list = EventualList::separate(entities.clone(), rows.clone(), by_last_name(), queue)
        .with_clock_skew_allowance(Duration::ZERO);
    list.create().await.unwrap();
    (list, entities, rows)
}

fn smith() -> Employee {
    Employee {
        last_name: "Smith".into(),
        ..jones()
    }
}

/// As [`put_delayed`], for a list: Jones becomes Smith with the entity write delayed.
async fn list_put_delayed(
    p: &Proxied,
    list: &EventualList<Employee>,
    options: WorkerOptions,
    before_the_worker: impl FnOnce(),
) -> Vec<u64> {
    list.insert(&jones()).await.unwrap();
    list.worker(worker_options()).drain().await.unwrap();
    assert_eq!(list.lookup("Jones").collect().await.unwrap().len(), 1);
    let entity_path = format!("{}(", list.table().name());
    p.table
        .add_rule(first("PUT", &entity_path, Fault::Delay(WRITE_DELAY)));
    let writing = tokio::spawn({
        let list = list.clone();
        async move { list.upsert(&smith()).await }
    });
    job_enqueued(async || list.jobs().approximate_len().await.unwrap()).await;
    before_the_worker();
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = Seen {
        inner: list.handler(),
        attempts: Arc::clone(&attempts),
    };
    Worker::new(list.jobs(), seen, options)
        .drain()
        .await
        .unwrap();
    writing.await.unwrap().unwrap();
    assert_eq!(p.table.stats().faults_injected.delay, 1);
    attempts.lock().unwrap().clone()
}

async fn assert_listed_under_the_new_value(list: &EventualList<Employee>) {
    let found = list.lookup("Smith").collect().await.unwrap();
    assert_eq!(
        found.iter().map(|s| s.value.clone()).collect::<Vec<_>>(),
        [smith()],
        "lookup finds the entity under its new value"
    );
    assert!(list.ids("Jones").await.unwrap().is_empty());
    assert_eq!(list.jobs().approximate_len().await.unwrap(), 0);
    assert!(list.jobs().peek_poisoned(1).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_list_job_delivered_before_its_write_lands_defers_then_follows_the_write() {
    let p = proxied(settings(REQUEST_TIMEOUT));
    let (list, entities, rows) = lists(&p, "followlistslow").await;
    let attempts = list_put_delayed(&p, &list, worker_options(), || {}).await;
    assert!(attempts.starts_with(&[1, 2]), "{attempts:?}");
    assert_listed_under_the_new_value(&list).await;
    cleanup(&p, &list.jobs(), &[&entities, &rows]).await;
}

#[tokio::test]
async fn a_list_job_first_seen_at_dequeue_count_2_follows_a_write_that_lands_later() {
    let p = proxied(settings(REQUEST_TIMEOUT));
    let (list, entities, rows) = lists(&p, "followlistlost").await;
    let attempts = list_put_delayed(&p, &list, worker_options(), || {
        lose_the_next_dequeue_response(&p)
    })
    .await;
    assert_eq!(p.queue.stats().faults_injected.drop_response, 1);
    assert_eq!(attempts.first(), Some(&2), "{attempts:?}");
    assert_listed_under_the_new_value(&list).await;
    cleanup(&p, &list.jobs(), &[&entities, &rows]).await;
}

#[tokio::test]
async fn a_pending_job_defers_after_one_read_and_past_its_deadline_fails_inserts_included() {
    let table = common::table("followreads").await;
    let queue = table
        .account()
        .queue(&unique_queue_name("followreads"))
        .unwrap();
    let index = InterPartitionIndex::new(table.clone(), directory().spec, queue);
    let etag = table
        .insert(&Entity::new(
            index
                .keys_by(&index.spec().primary_handle(), "Sales", 223)
                .unwrap(),
            jones(),
        ))
        .await
        .unwrap();
    let job = |id: &str, previous: Option<ETag>, deadline| CopyJob {
        index: format!("{}/empid", table.name()),
        partition: "Sales".into(),
        id: id.into(),
        stale: Vec::new(),
        fresh: Vec::new(),
        write: tablekit_index::FollowedWrite {
            previous,
            write_id: Some("never".into()),
            deadline,
        },
    };
    let metrics = table.account().metrics().clone();
    let steps = Steps::detached();

    // An update still pending past its deadline: one read, and the permanent failure.
    metrics.reset();
    let e = index
        .handler()
        .handle(job("000223", Some(etag.clone()), Utc::now()), &steps)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), tablekit_core::ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("did not land by"), "{e}");
    assert_requests(&metrics.snapshot(), None, 1);

    // Before its deadline: one read, and the delivery defers the job (1 s the first time),
    // never waiting in place.
    let steps = Steps::detached();
    metrics.reset();
    let deadline = Utc::now() + chrono::Duration::seconds(60);
    index
        .handler()
        .handle(job("000223", Some(etag), deadline), &steps)
        .await
        .unwrap();
    assert_eq!(steps.deferred(), Some(Duration::from_secs(1)));
    assert_requests(&metrics.snapshot(), Some(RequestKind::Get), 1);
    assert_requests(&metrics.snapshot(), None, 1);

    // An insert that finds no entity past its deadline never landed, or landed and was
    // deleted since: it cannot tell, so it fails like an update — to the poison queue, from
    // where re-queuing it is safe — after its one read.
    let steps = Steps::detached();
    metrics.reset();
    let e = index
        .handler()
        .handle(job("000224", None, Utc::now()), &steps)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("did not land by"), "{e}");
    assert_eq!(steps.deferred(), None);
    assert_requests(&metrics.snapshot(), None, 1);
    table.delete_table().await.unwrap();
}
