//! Index entities kept apart from the entities (option 3: their own partitions; option 1:
//! blobs), updated by queued jobs, against Azurite.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Employee, employee, measured, table};
use tablekit_azure::{RequestKind, Table};
use tablekit_core::Properties;
use tablekit_core::filter::Filter;
use tablekit_core::{ErrorKind, IfMatch, Keys, Stored};
use tablekit_eventual::{HandlerRetry, WorkerOptions};
use tablekit_index::{EventualList, ListSpec};
use tablekit_testkit::{unique_container_name, unique_queue_name};

fn spec(max_list_bytes: Option<usize>) -> ListSpec<Employee> {
    let mut builder = ListSpec::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .with_property("EmployeeDetails");
    if let Some(max) = max_list_bytes {
        builder = builder.with_max_list_bytes(max);
    }
    builder.build().unwrap()
}

fn fast_worker() -> WorkerOptions {
    WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(100))
        .with_handler_retry(HandlerRetry::none())
}

fn pair(pk: &str, rk: &str) -> (String, String) {
    (pk.to_owned(), rk.to_owned())
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

async fn separate(prefix: &str, max: Option<usize>) -> (EventualList<Employee>, Table) {
    let table = table(prefix).await;
    let queue = table.account().queue(&unique_queue_name(prefix)).unwrap();
    let list = EventualList::separate(table.clone(), table.clone(), spec(max), queue);
    let (r, spent) = measured(&table, list.create()).await;
    r.unwrap();
    assert_eq!(
        spent.requests(),
        3,
        "one table (shared), the queue and its poison queue"
    );
    (list, table)
}

async fn blobs(prefix: &str) -> (EventualList<Employee>, Table) {
    let table = table(prefix).await;
    let account = table.account().clone();
    let container = account.container(&unique_container_name(prefix)).unwrap();
    let queue = account.queue(&unique_queue_name(prefix)).unwrap();
    let list = EventualList::blobs(table.clone(), container, spec(None), queue);
    list.create().await.unwrap();
    (list, table)
}

/// The organisation-wide Jones scenario, for either store.
async fn scenario(list: &EventualList<Employee>, table: &Table) {
    for (department, id, last) in [
        ("Sales", 152, "Jones"),
        ("Marketing", 7, "Jones"),
        ("Sales", 10, "Smith"),
    ] {
        let (r, spent) = measured(table, list.insert(&employee(department, id, last, "x@x"))).await;
        r.unwrap();
        assert_eq!(spent.requests(), 2, "enqueue, insert");
    }
    assert!(
        list.ids("Jones").await.unwrap().is_empty(),
        "not before the jobs run"
    );
    // One job at a time, so the requests of each are exact.
    let one_by_one = fast_worker().with_concurrency(1);
    let metrics = table.account().metrics().clone();
    let before = metrics.snapshot();
    let done = list.worker(one_by_one).drain().await.unwrap();
    assert_eq!(done.processed, 3);
    let spent = metrics.snapshot().since(&before);
    let steps: u64 = [
        RequestKind::Get,
        RequestKind::UpsertMerge,
        RequestKind::Replace,
        RequestKind::BlobGet,
        RequestKind::BlobPut,
    ]
    .iter()
    .map(|k| spent.requests_of(*k))
    .sum();
    // Each job reads the entity twice. A new table list takes a read, an empty upsert, a read
    // and a replace; extending one, a read and a replace (Jones: created, extended; Smith:
    // created). A blob list takes a read and a conditional put either way.
    let lists = if spent.requests_of(RequestKind::BlobGet) > 0 {
        3 * 2
    } else {
        4 + 2 + 4
    };
    assert_eq!(steps, 3 * 2 + lists, "{spent:?}");
    let (ids, spent) = measured(table, list.ids("Jones")).await;
    let ids: BTreeSet<_> = ids.unwrap().into_iter().collect();
    assert_eq!(
        ids,
        pairs(&[("Sales", "000152"), ("Marketing", "000007")]),
        "across departments"
    );
    assert_eq!(spent.requests(), 1);
    let (found, spent) = measured(table, list.lookup("Jones").collect()).await;
    assert_eq!(found.unwrap().len(), 2);
    assert_eq!(spent.requests(), 3, "the list, then one read per entity");
    // Page by page across partitions, in (PartitionKey, RowKey) order: Marketing first.
    let paged = list.lookup("Jones").with_page_size(1);
    let (page, spent) = measured(table, paged.page()).await;
    let page = page.unwrap();
    let keys_of = |items: &[Stored<Employee>]| -> Vec<(String, String)> {
        items
            .iter()
            .map(|s| (s.keys.pk().to_owned(), s.keys.rk().to_owned()))
            .collect()
    };
    assert_eq!(keys_of(&page.items), [pair("Marketing", "000007")]);
    assert_eq!(spent.requests(), 2, "the list, one point read");
    let token = page.continuation.expect("one more entry");
    let (page, spent) = measured(table, paged.clone().resume(token).page()).await;
    let page = page.unwrap();
    assert_eq!(keys_of(&page.items), [pair("Sales", "000152")]);
    assert!(page.is_last());
    assert_eq!(spent.requests(), 2);

    // A new last name: the entity at once, the lists when the job has run.
    let (r, spent) = measured(table, list.upsert(&employee("Sales", 152, "Smith", "x@x"))).await;
    r.unwrap();
    assert_eq!(spent.requests(), 3, "read, enqueue, write");
    assert_eq!(
        list.lookup("Jones").collect().await.unwrap().len(),
        1,
        "lookup skips entities that moved on"
    );
    let (pages, spent) = measured(
        table,
        futures::TryStreamExt::try_collect::<Vec<_>>(paged.pages()),
    )
    .await;
    let pages = pages.unwrap();
    assert_eq!(pages.len(), 2);
    assert_eq!(keys_of(&pages[0].items), [pair("Marketing", "000007")]);
    assert!(
        pages[1].items.is_empty() && pages[1].is_last(),
        "the entry whose value moved on is left out of its page"
    );
    assert_eq!(
        spent.requests(),
        3,
        "the list once, one point read per entry"
    );
    list.worker(fast_worker()).drain().await.unwrap();
    let jones: BTreeSet<_> = list.ids("Jones").await.unwrap().into_iter().collect();
    assert_eq!(jones, pairs(&[("Marketing", "000007")]));
    let smith: BTreeSet<_> = list.ids("Smith").await.unwrap().into_iter().collect();
    assert_eq!(smith, pairs(&[("Sales", "000010"), ("Sales", "000152")]));

    let (gone, spent) = measured(table, list.delete(("Marketing", "000007"), IfMatch::Any)).await;
    gone.unwrap();
    assert_eq!(spent.requests(), 3);
    list.worker(fast_worker()).drain().await.unwrap();
    assert!(list.ids("Jones").await.unwrap().is_empty());
    // Gone: `delete` says so, `delete_if_exists` answers false; one read each, no job.
    let (gone, spent) = measured(table, list.delete(("Marketing", "000007"), IfMatch::Any)).await;
    assert_eq!(gone.unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(spent.requests(), 1);
    let (gone, spent) = measured(table, list.delete_if_exists(("Marketing", "000007"))).await;
    assert!(!gone.unwrap());
    assert_eq!(spent.requests(), 1);
}

#[tokio::test]
async fn option_3_lists_in_their_own_partitions() {
    let (list, table) = separate("listsep", None).await;
    // On the heap: the whole scenario on the test thread's stack overflowed it in debug builds.
    Box::pin(scenario(&list, &table)).await;
    // The guide's layout: the name in the PartitionKey and the RowKey, pairs in the list.
    let row = table
        .get::<Properties>(&Keys::new("lastname_Smith", "lastname_Smith").unwrap())
        .await
        .unwrap()
        .unwrap();
    let details: Vec<(String, String)> =
        serde_json::from_str(row.value.get_str("EmployeeDetails").unwrap().unwrap()).unwrap();
    assert_eq!(details.len(), 2);
    list.jobs().delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn option_1_lists_in_blobs() {
    let (list, table) = blobs("listblob").await;
    // On the heap: the whole scenario on the test thread's stack overflowed it in debug builds.
    Box::pin(scenario(&list, &table)).await;
    list.jobs().delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn concurrent_jobs_never_lose_an_entry_and_long_lists_overflow() {
    let (list, table) = separate("listsepmany", Some(200)).await;
    let departments = ["Sales", "Marketing", "Finance", "Legal"];
    let writers: Vec<_> = (0..24u32)
        .map(|n| {
            let list = list.clone();
            let department = departments[n as usize % departments.len()];
            tokio::spawn(async move { list.insert(&employee(department, n, "Jones", "x@x")).await })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let options = fast_worker()
        .with_concurrency(8)
        .with_handler_retry(HandlerRetry::default());
    let metrics = table.account().metrics().clone();
    let before = metrics.snapshot();
    let done = list.worker(options).drain().await.unwrap();
    assert_eq!(done.processed, 24);
    let spent = metrics.snapshot().since(&before);
    // One list write per job: a conditional replace, or a transaction when the list
    // overflows (the new row and the base row that counts it together).
    assert!(
        spent.requests_of(RequestKind::Replace) + spent.requests_of(RequestKind::Transaction) >= 24
    );
    assert!(
        spent.requests_of(RequestKind::Transaction) >= 1,
        "{spent:?}"
    );
    let ids = list.ids("Jones").await.unwrap();
    let distinct: BTreeSet<_> = ids.iter().cloned().collect();
    assert_eq!(
        (ids.len(), distinct.len()),
        (24, 24),
        "every entity exactly once: {ids:?}"
    );
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("lastname_Jones"))
        .collect()
        .await
        .unwrap();
    assert!(rows.len() > 1, "the list overflowed into numbered rows");
    assert!(rows.iter().any(|r| r.keys.rk() == "lastname_Jones_1"));
    list.jobs().delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}
