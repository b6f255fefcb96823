//! Backfilling a newly declared copy over an existing table: paging, checkpoints, stop and
//! resume without duplicates.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{directory, employee, measured, table};
use tablekit_azure::{BulkOptions, Progress, RequestKind, Table};
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::filter::{Filter, ROW_KEY};
use tablekit_core::{Entity, Error, Keys, Result};
use tablekit_index::{
    BackfillOptions, BackfillState, Checkpoint, IntraPartitionIndex, MemoryCheckpoint,
    TableCheckpoint,
};

const DEPARTMENTS: [&str; 5] = ["Sales", "Marketing", "Finance", "Legal", "Support"];

fn email(department: &str, id: u32) -> String {
    format!("e{id:05}.{}@contoso.com", department.to_lowercase())
}

/// `per_department` employees in each department, stored the way the table looked before the
/// email copy was declared: only `empid_` rows.
async fn seed(table: &Table, departments: &[&str], per_department: u32) {
    let ops = departments
        .iter()
        .flat_map(|d| (0..per_department).map(move |id| (d, id)))
        .map(|(d, id)| {
            let e = employee(d, id, "Jones", &email(d, id));
            let keys = Keys::new(*d, format!("empid_{}", e.id)).unwrap();
            Operation::insert(&Entity::new(keys, e)).unwrap()
        })
        .collect();
    let report = table.bulk_write(ops, BulkOptions::default()).await.unwrap();
    assert!(report.is_complete());
}

async fn email_copies(table: &Table) -> Vec<(String, String)> {
    let filter = Filter::ge(ROW_KEY, "email_").and(Filter::lt(ROW_KEY, "email`"));
    table
        .query::<Properties>()
        .filter(filter)
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.keys.pk().to_owned(), r.keys.rk().to_owned()))
        .collect()
}

#[tokio::test]
async fn a_5000_entity_backfill_stopped_after_one_page_resumes_to_exactly_one_copy_each() {
    let table = table("backfill5k").await;
    seed(&table, &DEPARTMENTS, 1000).await;
    let checkpoint = TableCheckpoint::new(table.clone(), Keys::new("backfill", "email").unwrap());
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let options = || {
        let seen = Arc::clone(&seen);
        BackfillOptions::default().with_progress(move |p| seen.lock().unwrap().push(*p))
    };

    let index = IntraPartitionIndex::new(table.clone(), directory().spec);
    let first = index
        .backfill(&checkpoint, options().with_max_pages(1))
        .await
        .unwrap();
    assert_eq!(first.pages, 1);
    assert!(!first.done && first.continuation.is_some());
    assert_eq!((first.scanned, first.written), (1000, 1000));
    assert_eq!(email_copies(&table).await.len(), 1000, "one page done");
    assert_eq!(checkpoint.load().await.unwrap().as_ref(), Some(&first));

    // Another process picks it up from the saved checkpoint.
    let index = IntraPartitionIndex::new(table.clone(), directory().spec);
    let done = index.backfill(&checkpoint, options()).await.unwrap();
    assert!(done.done && done.continuation.is_none());
    assert_eq!(done.written, 5000);
    assert_eq!(done.skipped, 0);
    let reports = seen.lock().unwrap().clone();
    assert_eq!(
        reports.len() as u64,
        done.pages,
        "progress after every page"
    );
    // Each run counts its own: the first one page, the second the other four.
    assert_eq!(reports[0].done, 1000);
    assert!(reports[1..].windows(2).all(|w| w[0].done < w[1].done));
    assert_eq!(reports.last().unwrap().done, 4000);
    assert!(
        reports
            .iter()
            .all(|p| p.total.is_none() && p.failed == 0 && p.unknown == 0)
    );

    let copies = email_copies(&table).await;
    assert_eq!(copies.len(), 5000);
    let distinct: BTreeSet<_> = copies.iter().cloned().collect();
    assert_eq!(distinct.len(), 5000, "no duplicates");
    let expected: BTreeSet<(String, String)> = DEPARTMENTS
        .iter()
        .flat_map(|d| (0..1000).map(move |id| (d.to_string(), format!("email_{}", email(d, id)))))
        .collect();
    assert_eq!(distinct, expected, "every entity has its copy");
    for d in DEPARTMENTS {
        let report = index.verify(d).await.unwrap();
        assert!(report.is_consistent(), "{d}: {report:?}");
        assert_eq!(report.primaries, 1000);
    }
    // A finished backfill does nothing more.
    let (again, spent) = measured(
        &table,
        index.backfill(&checkpoint, BackfillOptions::default()),
    )
    .await;
    assert_eq!(again.unwrap(), done);
    assert_eq!(spent.requests(), 1, "only the checkpoint is read");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn backfill_requests_are_pages_transactions_and_checkpoints() {
    let table = table("backfillcount").await;
    seed(&table, &["Sales"], 150).await;
    let checkpoint = TableCheckpoint::new(table.clone(), Keys::new("backfill", "email").unwrap());
    let index = IntraPartitionIndex::new(table.clone(), directory().spec);
    let progress: Arc<Mutex<Option<Progress>>> = Arc::default();
    let last = Arc::clone(&progress);
    let options = BackfillOptions::default()
        .with_partition("Sales")
        .with_page_size(100)
        .with_progress(move |p| *last.lock().unwrap() = Some(*p));
    let (state, spent) = measured(&table, index.backfill(&checkpoint, options)).await;
    let state = state.unwrap();
    assert_eq!((state.pages, state.written, state.done), (2, 150, true));
    assert_eq!(spent.requests_of(RequestKind::Get), 1, "checkpoint load");
    assert_eq!(spent.requests_of(RequestKind::Query), 2, "one per page");
    assert_eq!(
        spent.requests_of(RequestKind::UpsertReplace),
        2,
        "one save per page"
    );
    // 100 entities × (guard + copy) = 200 operations: 2 transactions; then 50 × 2: 1.
    assert_eq!(spent.requests_of(RequestKind::Transaction), 3);
    assert_eq!(spent.requests(), 8);
    let progress = progress.lock().unwrap().unwrap();
    assert_eq!(
        (progress.done, progress.requests),
        (150, 2 + 3),
        "pages and transactions; the checkpoint's own requests are its own"
    );
    table.delete_table().await.unwrap();
}

/// A checkpoint whose next save fails: a crash after a page's copies were written but before
/// its checkpoint was.
#[derive(Default)]
struct Flaky {
    inner: MemoryCheckpoint,
    fail_next_save: AtomicBool,
}

impl Checkpoint for Flaky {
    async fn load(&self) -> Result<Option<BackfillState>> {
        self.inner.load().await
    }

    async fn save(&self, state: &BackfillState) -> Result<()> {
        if self.fail_next_save.swap(false, Ordering::SeqCst) {
            return Err(Error::Indeterminate {
                target: tablekit_core::Target::default(),
                reason: "simulated crash".into(),
            });
        }
        self.inner.save(state).await
    }
}

#[tokio::test]
async fn a_page_redone_after_a_lost_checkpoint_writes_no_duplicates() {
    let table = table("backfillcrash").await;
    seed(&table, &["Sales", "Marketing"], 120).await;
    let d = directory();
    let index = IntraPartitionIndex::new(table.clone(), d.spec.clone());
    let checkpoint = Flaky::default();
    let options = BackfillOptions::default().with_page_size(100);
    // First page written, its checkpoint lost.
    checkpoint.fail_next_save.store(true, Ordering::SeqCst);
    assert!(index.backfill(&checkpoint, options.clone()).await.is_err());
    assert_eq!(checkpoint.inner.state(), None);
    assert_eq!(email_copies(&table).await.len(), 100);
    // Stopped from outside before any page: nothing happens.
    let stop = Arc::new(AtomicBool::new(true));
    let stopped = index
        .backfill(&checkpoint, options.clone().with_stop(Arc::clone(&stop)))
        .await
        .unwrap();
    assert_eq!(stopped.pages, 0);
    // The rerun starts over at page one and finishes.
    let done = index.backfill(&checkpoint, options).await.unwrap();
    assert!(done.done);
    let copies = email_copies(&table).await;
    let distinct: BTreeSet<_> = copies.iter().collect();
    assert_eq!((copies.len(), distinct.len()), (240, 240));
    for d in ["Sales", "Marketing"] {
        assert!(index.verify(d).await.unwrap().is_consistent());
    }
    // Only some copies: the primary, or a copy of another declaration, is refused before
    // any request.
    for refused in [d.by_id.id(), directory().by_email.id()] {
        let (r, spent) = measured(
            &table,
            index.backfill(
                &MemoryCheckpoint::new(),
                BackfillOptions::default().with_copy(refused),
            ),
        )
        .await;
        assert_eq!(
            r.unwrap_err().kind(),
            tablekit_core::ErrorKind::InvalidArgument
        );
        assert_eq!(spent.requests(), 0);
    }
    table.delete_table().await.unwrap();
}
