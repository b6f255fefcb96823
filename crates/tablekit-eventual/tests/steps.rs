//! The idempotent primitives of `Steps` against Azurite: one request each, safe to repeat
//!.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tablekit_azure::Table;
use tablekit_azure::{RequestKind, UploadOptions};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{ETag, ErrorKind, IfMatch, Properties, Stored};
use tablekit_eventual::{Handler, HandlerRetry, Job, JobQueue, Steps, Worker};
use tablekit_testkit::unique_container_name;

use common::{ArchiveEmployee, Employee, archive_tables, at, employee, ids_in, keys, seed};

/// Employee `id` as a step reads it.
async fn read(steps: &Steps, table: &Table, id: u32) -> Option<Stored<Employee>> {
    steps.get(table, keys(id)).await.unwrap()
}

#[tokio::test]
async fn running_the_archive_steps_twice_leaves_the_entity_in_archive_only() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    seed(&tables.current, [456]).await;
    let steps = Steps::detached();
    let stored = read(&steps, &tables.current, 456)
        .await
        .expect("in Current");
    // The guide's steps 4 and 5, exactly as written, twice: no error the second time.
    for run in 0..2 {
        steps
            .upsert_replace(&tables.archive, &stored.value)
            .await
            .unwrap();
        let existed = steps
            .delete_if_exists(&tables.current, keys(456))
            .await
            .unwrap();
        assert_eq!(existed, run == 0);
    }
    assert_eq!(ids_in(&tables.archive).await, [456].into());
    assert!(ids_in(&tables.current).await.is_empty());
    tables.current.delete_table().await.unwrap();
    tables.archive.delete_table().await.unwrap();
}

#[tokio::test]
async fn the_archive_handler_is_idempotent_when_called_twice() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    seed(&tables.current, [1, 2]).await;
    let metrics = account.metrics().clone();
    metrics.reset();
    let steps = Steps::detached();
    tables
        .handle(ArchiveEmployee::new(1), &steps)
        .await
        .unwrap();
    // Get, upsert into Archive, delete from Current.
    common::assert_requests(
        &metrics.snapshot(),
        &[
            (RequestKind::Get, 1),
            (RequestKind::UpsertReplace, 1),
            (RequestKind::Delete, 1),
        ],
        &[],
    );
    metrics.reset();
    tables
        .handle(ArchiveEmployee::new(1), &steps)
        .await
        .unwrap();
    // A repeat reads Current, finds nothing, stops.
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::Get, 1)], &[]);
    assert_eq!(ids_in(&tables.archive).await, [1].into());
    assert_eq!(ids_in(&tables.current).await, [2].into());
    tables.current.delete_table().await.unwrap();
    tables.archive.delete_table().await.unwrap();
}

#[tokio::test]
async fn every_table_step_costs_one_request_and_tolerates_repetition() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    let table = &tables.current;
    let metrics = account.metrics().clone();
    let steps = Steps::detached();
    assert_eq!(
        (steps.attempt(), steps.retry(), steps.message_id()),
        (1, 0, "")
    );
    let nine = employee(9);
    let one = |kind: RequestKind| {
        common::assert_requests(&metrics.snapshot(), &[(kind, 1)], &[]);
        metrics.reset();
    };

    metrics.reset();
    assert!(read(&steps, table, 9).await.is_none());
    one(RequestKind::Get);
    let tag = steps.upsert_replace(table, &nine).await.unwrap();
    one(RequestKind::UpsertReplace);
    let mut age = Properties::new();
    age.insert("Age", 50i32);
    let merged = steps.upsert_merge(table, &at(9, &age)).await.unwrap();
    one(RequestKind::UpsertMerge);
    assert_ne!(tag, merged);

    // ETag-conditioned writes: the stale tag fails, the current one wins.
    let e = steps.replace(table, &nine, tag.into()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PreconditionFailed);
    one(RequestKind::Replace);
    let replaced = steps.replace(table, &nine, merged.into()).await.unwrap();
    one(RequestKind::Replace);
    let merged = steps
        .merge(table, &at(9, &age), (&replaced).into())
        .await
        .unwrap();
    one(RequestKind::Merge);

    let e = steps
        .delete(table, &nine, replaced.into())
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::PreconditionFailed,
        "changed since read"
    );
    one(RequestKind::Delete);
    assert!(steps.delete(table, &nine, (&merged).into()).await.unwrap());
    one(RequestKind::Delete);
    assert!(
        !steps.delete(table, &nine, merged.into()).await.unwrap(),
        "a repeat finds it gone"
    );
    one(RequestKind::Delete);

    steps.upsert_replace(table, &nine).await.unwrap();
    metrics.reset();
    assert!(steps.delete_if_exists(table, keys(9)).await.unwrap());
    one(RequestKind::Delete);
    assert!(!steps.delete_if_exists(table, keys(9)).await.unwrap());
    one(RequestKind::Delete);

    // A missing table is an error, not "absent".
    let gone = account.table("NoSuchTableHere").unwrap();
    let e = steps.delete_if_exists(&gone, ("a", "b")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = steps
        .delete(&gone, ("a", "b"), ETag::new("W/\"x\"").into())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    tables.current.delete_table().await.unwrap();
    tables.archive.delete_table().await.unwrap();
}

/// `IfMatch::Any` is a condition like any other: `delete` deletes whatever is stored and is
/// done when it runs again, `replace` and `merge` write whatever version is stored and fail
/// with `NotFound` once it is gone. Keys that are not keys are refused before any request.
#[tokio::test]
async fn conditional_steps_take_the_wildcard_as_table_writes_do() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    let table = &tables.current;
    seed(table, [3]).await;
    let metrics = account.metrics().clone();
    let steps = Steps::detached();
    metrics.reset();
    steps
        .replace(table, &employee(3), IfMatch::Any)
        .await
        .unwrap();
    steps
        .merge(table, &employee(3), IfMatch::Any)
        .await
        .unwrap();
    assert!(steps.delete(table, keys(3), IfMatch::Any).await.unwrap());
    assert!(
        !steps.delete(table, keys(3), IfMatch::Any).await.unwrap(),
        "a repeat finds it gone: done, not NotFound"
    );
    let gone = steps
        .replace(table, &employee(3), IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
    assert_eq!(metrics.snapshot().requests(), 5, "one request each");
    metrics.reset();
    // Keys that are not keys are refused before any request.
    let e = steps
        .delete_if_exists(table, ("Sales", "a/b"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(metrics.snapshot().requests(), 0);
    assert!(ids_in(table).await.is_empty(), "deleted");
    tables.current.delete_table().await.unwrap();
    tables.archive.delete_table().await.unwrap();
}

#[tokio::test]
async fn blob_steps_overwrite_and_delete_idempotently() {
    let account = common::account();
    let container = account.container(&unique_container_name("steps")).unwrap();
    container.create_if_not_exists().await.unwrap();
    let metrics = account.metrics().clone();
    let steps = Steps::detached();
    metrics.reset();
    for body in ["first", "second"] {
        steps
            .upload_blob(
                &container,
                "archive/000223.json",
                Bytes::from(body),
                UploadOptions::default(),
            )
            .await
            .unwrap();
    }
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::BlobPut, 2)], &[]);
    metrics.reset();
    let blob = steps
        .download_blob(&container, "archive/000223.json")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&blob.data[..], b"second");
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::BlobGet, 1)], &[]);
    metrics.reset();
    assert!(
        steps
            .delete_blob_if_exists(&container, "archive/000223.json")
            .await
            .unwrap()
    );
    assert!(
        !steps
            .delete_blob_if_exists(&container, "archive/000223.json")
            .await
            .unwrap()
    );
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::BlobDelete, 2)], &[]);
    // Bad input is refused before any request.
    metrics.reset();
    assert!(
        steps
            .upload_blob(&container, "", Bytes::new(), UploadOptions::default())
            .await
            .is_err()
    );
    assert_eq!(metrics.snapshot().requests(), 0);
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn a_transaction_step_is_atomic_repeatable_and_refuses_what_a_repeat_would_break() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    let table = &tables.current;
    let metrics = account.metrics().clone();
    let steps = Steps::detached();
    let (a, new_b) = (employee(1), employee(5));
    assert_eq!(keys(1).0, keys(5).0, "one partition");
    let tag = steps.upsert_replace(table, &a).await.unwrap();

    // Refused before any request: what a repeat after success would fail on for no reason.
    metrics.reset();
    let refused = [
        BatchPlan::atomic([Operation::insert(&new_b).unwrap()]).unwrap(),
        BatchPlan::atomic([Operation::delete(&a, IfMatch::Any).unwrap()]).unwrap(),
        BatchPlan::atomic([Operation::replace(&a, IfMatch::Any).unwrap()]).unwrap(),
        BatchPlan::best_effort([Operation::upsert_replace(&new_b).unwrap()]).unwrap(),
    ];
    for plan in &refused {
        let e = steps.submit(table, plan).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    assert_eq!(metrics.snapshot().requests(), 0);

    // An upsert and a write conditioned on the ETag read: one request, both written.
    let mut older = employee(1);
    older.age += 1;
    let plan = BatchPlan::atomic([
        Operation::upsert_replace(&new_b).unwrap(),
        Operation::replace(&older, IfMatch::ETag(tag.clone())).unwrap(),
    ])
    .unwrap();
    steps.submit(table, &plan).await.unwrap();
    common::assert_requests(&metrics.snapshot(), &[(RequestKind::Transaction, 1)], &[]);
    let stored = read(&steps, table, 1).await.unwrap();
    assert_eq!(stored.value, older);
    assert!(read(&steps, table, 5).await.is_some());

    // The repeat fails on the ETag the first run changed, and writes nothing.
    steps.delete_if_exists(table, &new_b).await.unwrap();
    let e = steps.submit(table, &plan).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}");
    assert!(read(&steps, table, 5).await.is_none(), "all or nothing");

    // Upserts alone repeat to the same state.
    let upserts = BatchPlan::atomic([Operation::upsert_replace(&new_b).unwrap()]).unwrap();
    steps.submit(table, &upserts).await.unwrap();
    steps.submit(table, &upserts).await.unwrap();
    assert_eq!(read(&steps, table, 5).await.unwrap().value, employee(5));
    tables.current.delete_table().await.unwrap();
    tables.archive.delete_table().await.unwrap();
}

/// "Retire employee 1": delete it, conditioned on the ETag read, and mark the retirement in
/// the same partition, in one transaction.
#[derive(Debug, Serialize, Deserialize)]
struct Retire;

impl Job for Retire {
    const KIND: &'static str = "retire";
}

struct Retirer {
    table: tablekit_azure::Table,
    /// Whether a duplicate of the job has already run the transaction (once).
    overtaken: AtomicBool,
}

impl Retirer {
    fn plan(&self, etag: &ETag) -> BatchPlan {
        let mut marker = Properties::new();
        marker.insert("Retired", "000001");
        BatchPlan::atomic([
            Operation::delete(keys(1), IfMatch::ETag(etag.clone())).unwrap(),
            Operation::upsert_replace(&at(5, marker)).unwrap(),
        ])
        .unwrap()
    }
}

impl Handler<Retire> for Retirer {
    async fn handle(&self, _job: Retire, steps: &Steps) -> tablekit_core::Result<()> {
        let Some(current): Option<Stored<Properties>> = steps.get(&self.table, keys(1)).await?
        else {
            return Ok(()); // retired by an earlier run
        };
        let plan = self.plan(&current.etag);
        if !self.overtaken.swap(true, Ordering::SeqCst) {
            // A duplicate of this job, holding the same read, commits the same transaction
            // first.
            Steps::detached().submit(&self.table, &plan).await?;
        }
        steps.submit(&self.table, &plan).await
    }
}

#[tokio::test]
async fn a_repeated_transaction_whose_conditioned_delete_took_effect_re_reads_and_converges() {
    let account = common::account();
    let tables = archive_tables(&account).await;
    let table = tables.current.clone();
    seed(&table, [1]).await;
    let rows = table.typed::<Properties>();
    let stored = rows.get(keys(1)).await.unwrap().expect("seeded");
    let handler = Retirer {
        table: table.clone(),
        overtaken: AtomicBool::new(false),
    };

    // Repeated, the delete meets 404 (the entity is gone), not 412: still a lost race, which
    // the worker re-runs so that the handler reads again.
    let steps = Steps::detached();
    let plan = handler.plan(&stored.etag);
    steps.submit(&table, &plan).await.unwrap();
    let e = steps.submit(&table, &plan).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}");
    assert!(HandlerRetry::retries(&e), "{e}");

    // Through a worker whose first delivery is its last: the job converges on its re-run
    // instead of failing for good.
    seed(&table, [1]).await;
    let queue: JobQueue<Retire> = common::job_queue(&account, "retire").await;
    queue.enqueue(&Retire).await.unwrap();
    let options = common::quick_options().with_max_dequeue_count(1);
    let worker = Worker::new(queue.clone(), handler, options);
    let report = worker.drain().await.unwrap();
    assert_eq!(
        (report.processed, report.poisoned, report.retries),
        (1, 0, 1),
        "{report:?}"
    );
    assert!(rows.get(keys(1)).await.unwrap().is_none());
    assert!(rows.get(keys(5)).await.unwrap().is_some());
    assert!(queue.peek_poisoned(1).await.unwrap().is_empty());
    common::cleanup(&queue, &tables).await;
}
