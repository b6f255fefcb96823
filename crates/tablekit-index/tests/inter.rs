//! The inter-partition secondary index against Azurite: the guide's layout, request counts, a
//! worker killed between the primary write and the copy, verify and repair, deletes.

mod common;

use std::time::Duration;

use common::{Directory, EmailCard, Employee, directory, employee, measured, table};
use tablekit_azure::{Queue, RequestKind, Table};
use tablekit_core::Properties;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::edm::to_properties;
use tablekit_core::filter::{Filter, ROW_KEY};
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys};
use tablekit_eventual::{HandlerRetry, WorkerOptions};
use tablekit_index::{
    CopyJob, FollowedWrite, IndexRead as _, InterPartitionIndex, WRITE_ID_PROPERTY,
};
use tablekit_testkit::unique_queue_name;

fn fast_worker() -> WorkerOptions {
    WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(100))
        .with_handler_retry(HandlerRetry::none())
}

async fn setup(prefix: &str) -> (InterPartitionIndex<Employee>, Table, Queue, Directory) {
    let table = table(prefix).await;
    let queue = table.account().queue(&unique_queue_name(prefix)).unwrap();
    let directory = directory();
    let index = InterPartitionIndex::new(table.clone(), directory.spec.clone(), queue.clone());
    index.create().await.unwrap();
    (index, table, queue, directory)
}

async fn cleanup(index: &InterPartitionIndex<Employee>, table: &Table) {
    index.jobs().delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn the_guides_layout_copies_follow_the_primary_through_the_queue() {
    let (index, table, _, d) = setup("inter").await;
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    let (r, spent) = measured(&table, index.insert(&jones)).await;
    r.unwrap();
    assert_eq!(
        (
            spent.requests_of(RequestKind::QueuePut),
            spent.requests_of(RequestKind::Insert),
            spent.requests()
        ),
        (1, 1, 2),
        "enqueue the job, insert the primary"
    );
    // The primary is readable at once, under the guide's keys.
    let primary = table
        .get::<Employee>(&Keys::new("empid_Sales", "000223").unwrap())
        .await
        .unwrap();
    assert_eq!(primary.unwrap().value, jones);
    let (got, spent) = measured(&table, index.get("Sales", "000223")).await;
    assert!(got.unwrap().is_some());
    assert_eq!(spent.requests(), 1);
    // The copy is not there until the job runs.
    assert!(
        index
            .get_by(&d.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_none()
    );
    let (report, spent) = measured(&table, index.verify("Sales")).await;
    let report = report.unwrap();
    assert_eq!(spent.requests(), 2, "one partition read per copy");
    assert_eq!(report.missing.len(), 1);
    assert_eq!(
        report.missing[0].keys,
        Keys::new("email_Sales", "jonesj@contoso.com").unwrap()
    );

    // The two partitions cannot share a transaction — refused before sending.
    let copy = |pk: &str, rk: &str| {
        Operation::upsert_replace(&Entity::try_new(pk, rk, &jones).unwrap()).unwrap()
    };
    let (refused, spent) = measured(&table, async {
        BatchPlan::atomic([
            copy("empid_Sales", "000223"),
            copy("email_Sales", "jonesj@contoso.com"),
        ])
    })
    .await;
    assert!(matches!(
        refused,
        Err(Error::CrossPartitionTransaction { .. })
    ));
    assert_eq!(spent.requests(), 0);

    let worker = index.worker(fast_worker());
    let (done, spent) = measured(&table, worker.drain()).await;
    assert_eq!(done.unwrap().processed, 1);
    assert_eq!(
        (
            spent.requests_of(RequestKind::Get),
            spent.requests_of(RequestKind::UpsertReplace)
        ),
        (2, 1),
        "the job: read the primary, upsert the copy, read the primary again"
    );
    let (card, spent) = measured(
        &table,
        index.get_by(&d.by_email, "Sales", "jonesj@contoso.com"),
    )
    .await;
    assert_eq!(card.unwrap().unwrap().value.id, "000223");
    assert_eq!(spent.requests(), 1, "get_by is one point query");
    assert!(index.verify("Sales").await.unwrap().is_consistent());

    // Ranges, as the guide writes them.
    for id in [100, 150, 199, 200] {
        index
            .insert(&employee(
                "Sales",
                id,
                "Smith",
                &format!("a{id}@contoso.com"),
            ))
            .await
            .unwrap();
    }
    worker.drain().await.unwrap();
    let literal = Filter::partition("empid_Sales")
        .and(Filter::ge(ROW_KEY, "000100"))
        .and(Filter::le(ROW_KEY, "000199"));
    let rows = table
        .query::<Properties>()
        .filter(literal)
        .collect()
        .await
        .unwrap();
    let (range, spent) = measured(
        &table,
        index
            .range_by(&d.by_id, "Sales", "000100"..="000199")
            .unwrap()
            .collect(),
    )
    .await;
    let range = range.unwrap();
    assert_eq!(spent.requests(), 1);
    assert_eq!(range.len(), rows.len());
    assert_eq!(
        range
            .iter()
            .map(|s| s.value.id.as_str())
            .collect::<Vec<_>>(),
        ["000100", "000150", "000199"]
    );
    let (a, spent) = measured(
        &table,
        index
            .range_by_prefix(&d.by_email, "Sales", "a")
            .unwrap()
            .collect(),
    )
    .await;
    let a = a.unwrap();
    assert_eq!(spent.requests(), 1);
    assert_eq!(a.len(), 4);
    assert!(a.windows(2).all(|w| w[0].value.email < w[1].value.email));
    cleanup(&index, &table).await;
}

#[tokio::test]
async fn a_killed_worker_leaves_a_missing_copy_that_verify_reports_and_a_restart_converges() {
    let (index, table, queue, d) = setup("interkill").await;
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    let (r, spent) = measured(&table, index.upsert(&jones)).await;
    r.unwrap();
    assert_eq!(spent.requests(), 3, "read, enqueue, write");
    // A worker takes the job and is killed before it writes the copy: the message stays
    // invisible until its visibility timeout ends.
    let taken = queue.receive(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(taken.len(), 1);
    let job: serde_json::Value = serde_json::from_slice(&taken[0].payload).unwrap();
    assert!(job.to_string().contains("000223"), "{job}");
    let report = index.verify("Sales").await.unwrap();
    assert_eq!(report.missing.len(), 1, "{report:?}");
    assert_eq!(report.missing[0].keys.rk(), "jonesj@contoso.com");
    // A restarted worker gets the message back after the timeout and converges.
    let done = index.worker(fast_worker()).drain().await.unwrap();
    assert_eq!(done.processed, 1);
    assert!(index.verify("Sales").await.unwrap().is_consistent());

    // The same with a new email, fixed by repair instead of a worker.
    let moved = Employee {
        email: "jun.jones@contoso.com".into(),
        ..jones.clone()
    };
    index.upsert(&moved).await.unwrap();
    assert_eq!(
        queue
            .receive(1, Duration::from_secs(1))
            .await
            .unwrap()
            .len(),
        1
    );
    let report = index.verify("Sales").await.unwrap();
    assert_eq!(
        (report.missing.len(), report.orphaned.len()),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(report.orphaned[0].keys.rk(), "jonesj@contoso.com");
    let (repaired, spent) = measured(&table, index.repair("Sales")).await;
    let repaired = repaired.unwrap();
    assert_eq!(
        (repaired.rewritten, repaired.deleted, repaired.skipped),
        (1, 1, 0)
    );
    assert_eq!(
        spent.requests(),
        2 + 3 + 1,
        "audit (2 partitions), one entity (2 reads + 1 upsert), one orphan delete"
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    // The job still queued runs later and changes nothing.
    assert_eq!(
        index.worker(fast_worker()).drain().await.unwrap().processed,
        1
    );
    let after = index.verify("Sales").await.unwrap();
    assert!(after.is_consistent(), "{after:?}");
    assert!(
        index
            .get_by(&d.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_none()
    );

    // Deleting: the primary at once, the copy when the job runs.
    let (gone, spent) = measured(&table, index.delete(("Sales", "000223"), IfMatch::Any)).await;
    gone.unwrap();
    assert_eq!(spent.requests(), 3, "read, enqueue, delete");
    index.worker(fast_worker()).drain().await.unwrap();
    let left = table
        .query::<Properties>()
        .filter(Filter::partition("email_Sales"))
        .collect()
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    cleanup(&index, &table).await;
}

#[tokio::test]
async fn a_job_that_runs_before_its_write_defers_until_it_lands() {
    let (index, table, _, d) = setup("intersettle").await;
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    // The job of an insert that has not landed yet.
    let job = CopyJob {
        index: format!("{}/empid", table.name()),
        partition: "Sales".into(),
        id: "000223".into(),
        stale: Vec::new(),
        fresh: Vec::new(),
        write: FollowedWrite {
            previous: None,
            write_id: Some("w-223".into()),
            deadline: chrono::Utc::now() + chrono::Duration::minutes(10),
        },
    };
    index.jobs().enqueue(&job).await.unwrap();
    let worker = index.worker(fast_worker());
    let running = tokio::spawn({
        let worker = worker.clone();
        async move { worker.drain().await }
    });
    // Its delivery finds the primary as it was before the write, and defers the job...
    while worker.stats().deferred == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(index.get("Sales", "000223").await.unwrap().is_none());
    assert_eq!(worker.stats().processed, 0);
    // ... the write lands, stamped with the job's write id, and a later delivery copies it.
    let mut primary = to_properties(&jones).unwrap();
    primary.insert(WRITE_ID_PROPERTY, "w-223");
    table
        .insert(&Entity::new(
            Keys::new("empid_Sales", "000223").unwrap(),
            primary,
        ))
        .await
        .unwrap();
    let report = running.await.unwrap().unwrap();
    assert_eq!((report.processed, report.failed_attempts), (1, 0));
    assert!(report.deferred >= 1, "{report:?}");
    let card = index
        .get_by(&d.by_email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap();
    assert_eq!(card.unwrap().value.email, jones.email);
    // The stamp stays on the primary, out of the way of `T`, and is not copied.
    assert_eq!(
        index.get("Sales", "000223").await.unwrap().unwrap().value,
        jones
    );
    let copy = table
        .get::<Properties>(&Keys::new("email_Sales", "jonesj@contoso.com").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(!copy.value.contains(WRITE_ID_PROPERTY));
    cleanup(&index, &table).await;
}

#[tokio::test]
async fn copies_can_live_in_their_own_table() {
    let primary = table("interprimary").await;
    let by_email = primary
        .account()
        .table(&tablekit_testkit::unique_table_name("interemail"))
        .unwrap();
    let queue = primary
        .account()
        .queue(&unique_queue_name("intertables"))
        .unwrap();
    let d = directory();
    let index = InterPartitionIndex::builder(primary.clone(), d.spec.clone(), queue)
        .with_copy_table(&d.by_email, by_email.clone())
        .build()
        .unwrap();
    let (r, spent) = measured(&primary, index.create()).await;
    r.unwrap();
    assert_eq!(
        spent.requests(),
        2 + 2,
        "two tables, the queue and its poison queue"
    );
    index
        .insert(&employee("Sales", 223, "Jones", "jonesj@contoso.com"))
        .await
        .unwrap();
    index.worker(fast_worker()).drain().await.unwrap();
    let copy = by_email
        .get::<EmailCard>(&Keys::new("email_Sales", "jonesj@contoso.com").unwrap())
        .await
        .unwrap();
    assert!(copy.is_some(), "the copy is in the email table");
    assert!(
        primary
            .get::<Properties>(&Keys::new("email_Sales", "jonesj@contoso.com").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    assert_eq!(index.table_of(&d.by_email).unwrap().name(), by_email.name());
    // A copy of another declaration, or the primary, cannot be placed.
    let builder = || {
        let unused = primary.account().queue("unused").unwrap();
        InterPartitionIndex::builder(primary.clone(), d.spec.clone(), unused)
    };
    let other = directory();
    for refused in [
        builder().with_copy_table(&other.by_email, by_email.clone()),
        builder().with_copy_table(&d.by_id, by_email.clone()),
    ] {
        assert_eq!(
            refused.build().unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
    index.jobs().delete_queues().await.unwrap();
    by_email.delete_table().await.unwrap();
    primary.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_backfill_writes_the_copies_of_existing_primaries_once() {
    let (index, table, _, d) = setup("interbackfill").await;
    let departments = ["Sales", "Marketing", "Finance"];
    let ops = departments
        .iter()
        .flat_map(|d| (0..100u32).map(move |id| employee(d, id, "Jones", &format!("e{id}.{d}@x"))))
        .map(|e| {
            let keys = Keys::new(format!("empid_{}", e.department), &e.id).unwrap();
            Operation::insert(&Entity::new(keys, e)).unwrap()
        })
        .collect();
    assert!(
        table
            .bulk_write(ops, Default::default())
            .await
            .unwrap()
            .is_complete()
    );
    let checkpoint = tablekit_index::MemoryCheckpoint::new();
    let options = tablekit_index::BackfillOptions::default()
        .with_page_size(100)
        .with_copy(d.by_email);
    let first = options.clone().with_max_pages(1);
    let (state, spent) = measured(&table, index.backfill(&checkpoint, first)).await;
    let state = state.unwrap();
    assert_eq!((state.pages, state.written, state.done), (1, 100, false));
    assert_eq!(
        (
            spent.requests_of(RequestKind::Query),
            spent.requests_of(RequestKind::Transaction),
            spent.requests()
        ),
        (2, 1, 3),
        "one page, its 100 copies in one partition: one transaction, then the page read again \
         (no primary changed: nothing more; memory checkpoint)"
    );
    let done = index.backfill(&checkpoint, options).await.unwrap();
    assert!(done.done);
    assert_eq!(done.written, 300);
    for d in departments {
        let report = index.verify(d).await.unwrap();
        assert!(report.is_consistent(), "{d}: {report:?}");
        assert_eq!(report.checked, 100);
    }
    cleanup(&index, &table).await;
}

#[tokio::test]
async fn deletes_by_the_entity_read_send_no_read_and_a_missing_entity_is_not_found() {
    let (index, table, _, d) = setup("interdelete").await;
    let jones = employee("Sales", 223, "Jones", "jonesj@contoso.com");
    index.insert(&jones).await.unwrap();
    let worker = index.worker(fast_worker());
    worker.drain().await.unwrap();
    let current = index.get("Sales", 223).await.unwrap().unwrap();

    // A stale ETag: refused, and its job finds the primary unchanged by it.
    index.upsert(&jones).await.unwrap();
    let (r, spent) = measured(&table, index.delete(&current.value, current.if_match())).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::PreconditionFailed);
    assert_eq!(spent.requests(), 2, "enqueue, a refused delete");
    worker.drain().await.unwrap();
    assert!(index.verify("Sales").await.unwrap().is_consistent());

    // The entity as read, under its ETag: enqueue and delete, no read.
    let current = index.get("Sales", 223).await.unwrap().unwrap();
    let (r, spent) = measured(&table, index.delete(&current.value, current.if_match())).await;
    r.unwrap();
    assert_eq!(spent.requests(), 2, "enqueue, delete");
    worker.drain().await.unwrap();
    assert!(
        index
            .get_by(&d.by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_none()
    );

    // Gone: `delete` says so, `delete_if_exists` answers false; one read each.
    let (r, spent) = measured(&table, index.delete(("Sales", 223), IfMatch::Any)).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(spent.requests(), 1);
    let (r, spent) = measured(&table, index.delete_if_exists(&jones)).await;
    assert!(!r.unwrap());
    assert_eq!(spent.requests(), 1);
    assert_eq!(
        index.jobs().approximate_len().await.unwrap(),
        0,
        "nothing enqueued"
    );
    cleanup(&index, &table).await;
}
