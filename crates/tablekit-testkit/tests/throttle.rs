//! The throttle model in front of a real Azurite: what it admits never exceeds its budget,
//! partitions are throttled apart, a transaction costs its operations and a query the entities
//! it scanned, and refusals look like the service's. Assertions are on counts; where time
//! enters, it is measured around a run and bounds what the model may have admitted.

#![cfg(feature = "azure")]

#[allow(unused_imports)] // Only the client is used here.
mod support;

use std::ops::Bound;
use std::time::{Duration, Instant};

use support::Client;
use tablekit_azure::{RetryPolicy, Settings, Table};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, Keys, Properties, ThrottleScope};
use tablekit_testkit::fixtures::{Proxied, proxied};
use tablekit_testkit::{Fault, ThrottleMode, ThrottleModel, unique_table_name};
use tokio::task::JoinSet;

/// Every refusal reaches the test: no retries.
fn no_retries() -> Settings {
    Settings::default().with_retry(RetryPolicy::none())
}

async fn created_table(p: &Proxied, prefix: &str) -> Table {
    let table = p.account.table(&unique_table_name(prefix)).unwrap();
    table.create().await.unwrap();
    table
}

fn entity(pk: &str, rk: &str) -> Entity<Properties> {
    Entity::try_new(pk, rk, Properties::new().with("N", 1)).unwrap()
}

/// A partition budget only: the account is unlimited.
fn per_partition(rate: f64, burst: Duration) -> ThrottleModel {
    ThrottleModel::default()
        .with_per_partition(rate)
        .with_per_account(f64::INFINITY)
        .with_burst(burst)
}

/// Asserts that `result` is the model's refusal of a partition as the client sees it:
/// 503 `ServerBusy` naming the partition.
#[track_caller]
fn assert_server_busy<T: std::fmt::Debug>(result: &Result<T, Error>) {
    assert_refused_for(result, ThrottleScope::Partition);
}

/// Asserts that `result` is a 503 `ServerBusy` whose message names `scope`.
#[track_caller]
fn assert_refused_for<T: std::fmt::Debug>(result: &Result<T, Error>, scope: ThrottleScope) {
    match result {
        Err(Error::Throttled {
            status,
            code,
            scope: named,
            ..
        }) => {
            assert_eq!((*status, code.as_deref()), (503, Some("ServerBusy")));
            assert_eq!(*named, scope, "{result:?}");
        }
        other => panic!("expected 503 ServerBusy, got {other:?}"),
    }
}

async fn count_in(table: &Table, pk: &str) -> usize {
    table
        .query::<Properties>()
        .filter(Filter::partition(pk))
        .collect()
        .await
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_inserts_beyond_a_partitions_budget_get_server_busy_and_never_exceed_it() {
    let p = proxied(no_retries());
    let table = created_table(&p, "throttlehot").await;
    // 20 entities/s, 2.5 s deep: 50 at once, then 20 a second.
    let (rate, depth) = (20.0, 50.0);
    let started = Instant::now();
    let throttle = p
        .table
        .set_throttle(per_partition(rate, Duration::from_millis(2_500)));

    // 200 inserts into one partition, 8 at a time, as fast as the client goes.
    let mut tasks = JoinSet::new();
    for t in 0..8 {
        let table = table.clone();
        tasks.spawn(async move {
            let mut results = Vec::new();
            for i in 0..25 {
                results.push(table.insert(&entity("hot", &format!("{t}-{i:02}"))).await);
            }
            results
        });
    }
    let mut hot = Vec::new();
    while let Some(results) = tasks.join_next().await {
        hot.extend(results.unwrap());
    }
    // Then another partition, interleaved with more inserts into the throttled one.
    let mut cold = Vec::new();
    let mut hot_later = Vec::new();
    for i in 0..40 {
        cold.push(table.insert(&entity("cold", &format!("{i:02}"))).await);
        hot_later.push(table.insert(&entity("hot", &format!("later-{i:02}"))).await);
    }
    let elapsed = started.elapsed().as_secs_f64();

    let refused = |results: &[Result<_, Error>]| {
        results
            .iter()
            .filter(|r| r.is_err())
            .for_each(assert_server_busy);
        results.iter().filter(|r| r.is_err()).count() as u64
    };
    let (hot_refused, later_refused) = (refused(&hot), refused(&hot_later));
    let admitted_hot = 240 - hot_refused - later_refused;
    assert!(
        hot_refused > 0,
        "200 inserts in {elapsed:.1} s: over budget unless they took more than 7.5 s"
    );
    assert!(
        later_refused > 0,
        "the hot partition is still throttled while the cold one is written"
    );
    assert!(
        cold.iter().all(Result::is_ok),
        "40 inserts into a fresh partition of depth 50"
    );
    // The bound: a full bucket, plus what the rate earned over the whole run.
    assert!(
        admitted_hot as f64 <= depth + rate * elapsed,
        "{admitted_hot} admitted in {elapsed:.2} s"
    );

    // The model's counts agree with the client's and with what Azurite stored.
    let stats = throttle.stats();
    assert_eq!(stats.admitted_in("hot"), admitted_hot);
    assert_eq!(stats.admitted_in("cold"), 40);
    assert_eq!(stats.throttled, hot_refused + later_refused);
    assert_eq!(stats.throttled_by_partition, stats.throttled);
    assert_eq!(p.table.stats().throttled, stats.throttled);
    assert_eq!(
        throttle.admitted_between(started, Instant::now()),
        admitted_hot + 40
    );
    p.table.clear_throttle();
    assert_eq!(count_in(&table, "hot").await as u64, admitted_hot);
    assert_eq!(count_in(&table, "cold").await, 40);
    table.delete_table().await.unwrap();
}

fn inserts(pk: &str, n: usize) -> BatchPlan {
    BatchPlan::atomic((0..n).map(|i| Operation::insert(&entity(pk, &format!("{i:03}"))).unwrap()))
        .unwrap()
}

#[tokio::test]
async fn a_transaction_costs_one_entity_per_operation() {
    let p = proxied(no_retries());
    let table = created_table(&p, "throttlebatch").await;
    // 50 deep, refilling one a second: nothing the test does refills a bucket noticeably.
    let throttle = p
        .table
        .set_throttle(per_partition(1.0, Duration::from_secs(50)));

    // A full bucket admits a transaction larger than itself, which leaves it in debt.
    table.submit(&inserts("big", 100)).await.unwrap();
    assert_eq!(throttle.stats().admitted_in("big"), 100);
    assert_server_busy(&table.insert(&entity("big", "after")).await);

    // A bucket that is not full refuses it outright, and nothing of it is written.
    for i in 0..10 {
        table
            .insert(&entity("part", &format!("single-{i}")))
            .await
            .unwrap();
    }
    assert_server_busy(&table.submit(&inserts("part", 100)).await);
    // A transaction within what is left passes.
    table.submit(&inserts("part", 30)).await.unwrap();

    let stats = throttle.stats();
    assert_eq!(
        (stats.admitted_in("big"), stats.admitted_in("part")),
        (100, 40)
    );
    assert_eq!(stats.throttled, 2);
    p.table.clear_throttle();
    assert_eq!(count_in(&table, "big").await, 100);
    assert_eq!(count_in(&table, "part").await, 40);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_query_is_charged_the_entities_it_returned_after_its_response() {
    let p = proxied(no_retries());
    let table = created_table(&p, "throttlequery").await;
    table.submit(&inserts("q", 30)).await.unwrap();
    // 20 deep: the query is admitted on one token, then its 30 entities leave a debt of 10.
    let throttle = p
        .table
        .set_throttle(per_partition(1.0, Duration::from_secs(20)));
    assert_eq!(count_in(&table, "q").await, 30);
    assert_eq!(throttle.stats().admitted_in("q"), 30);
    let keys = Keys::new("q", "000").unwrap();
    assert_server_busy(&table.get::<Properties>(&keys).await);
    // A query pinned to the indebted partition is refused before it is sent.
    let refused = table
        .query::<Properties>()
        .filter(Filter::partition("q"))
        .collect()
        .await;
    assert_server_busy(&refused);
    // Another partition is served; its empty page costs one.
    assert_eq!(count_in(&table, "empty").await, 0);
    let stats = throttle.stats();
    assert_eq!(stats.admitted_in("empty"), 1);
    assert_eq!((stats.admitted_entities, stats.throttled), (31, 2));
    p.table.clear_throttle();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_filtered_query_is_charged_every_entity_it_scanned_not_only_those_it_returned() {
    let p = proxied(no_retries());
    let table = created_table(&p, "throttlescan").await;
    let plan = BatchPlan::atomic((0..30_i32).map(|i| {
        let e = Entity::try_new("s", format!("{i:03}"), Properties::new().with("N", i)).unwrap();
        Operation::insert(&e).unwrap()
    }))
    .unwrap();
    table.submit(&plan).await.unwrap();
    let throttle = p
        .table
        .set_throttle(per_partition(1_000.0, Duration::from_secs(10)));
    let query = |filter: Filter| table.query::<Properties>().filter(filter);
    let in_s = |more: Filter| Filter::partition("s").and(more);

    // One entity matches: the service read the partition's 30 to find it.
    let found = query(in_s(Filter::eq("N", 7))).collect().await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(throttle.stats().admitted_in("s"), 30);

    // A page that stops at its size covered the range through its last entity: N ≥ 10, two
    // to a page, is rows 000 to 011.
    throttle.reset_stats();
    let page = query(in_s(Filter::ge("N", 10)))
        .with_page_size(2)
        .page()
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(page.continuation.is_some());
    assert_eq!(throttle.stats().admitted_in("s"), 12);

    // Key conditions bound the scan, with or without another condition.
    throttle.reset_stats();
    let rows =
        |from: &str, to: &str| Filter::row_range("s", Bound::Included(from), Bound::Excluded(to));
    assert_eq!(query(rows("010", "015")).collect().await.unwrap().len(), 5);
    assert_eq!(
        throttle.stats().admitted_in("s"),
        5,
        "keys alone: what it returned"
    );
    throttle.reset_stats();
    let one = query(rows("010", "020").and(Filter::eq("N", 12)))
        .collect()
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(
        throttle.stats().admitted_in("s"),
        10,
        "the ten rows of the range"
    );
    p.table.clear_throttle();
    table.delete_table().await.unwrap();
}

#[test]
fn shared_buckets_span_proxies_faults_come_first_and_429_carries_retry_hints() {
    let p = proxied(no_retries());
    // An account budget of 2 for the table and blob proxies together, in Cosmos's manner.
    let model = ThrottleModel::default()
        .with_per_account(0.05)
        .with_burst(Duration::from_secs(40))
        .with_mode(ThrottleMode::TooManyRequests {
            retry_after: Duration::from_millis(1_500),
        });
    let throttle = p.table.set_throttle(model);
    p.blob.set_throttle(throttle.clone());
    p.table.fail_nth(1, Fault::Status(500));
    let mut table = Client::connect(p.table.addr());
    let mut blob = Client::connect(p.blob.addr());
    let tables = "/devstoreaccount1/Tables";
    let containers = "/devstoreaccount1?comp=list";

    // The fault is decided first, and a faulted request is not charged.
    let faulted = table.get(tables);
    assert_eq!(faulted.status(), 500);
    assert_eq!(faulted.header("x-tablekit-fault"), Some("status"));
    assert_eq!(throttle.stats().admitted_requests, 0);
    // Two requests through two proxies use the account's two tokens; they reach Azurite,
    // which refuses them for want of credentials.
    assert!(!table.get(tables).is_synthetic());
    assert!(!blob.get(containers).is_synthetic());
    for refused in [blob.get(containers), table.get(tables)] {
        assert_eq!(refused.status(), 429, "{}", refused.head);
        assert_eq!(refused.header("x-tablekit-fault"), Some("throttle"));
        assert_eq!(refused.header("x-ms-error-code"), Some("TooManyRequests"));
        assert_eq!(refused.header("x-ms-retry-after-ms"), Some("1500"));
        assert_eq!(refused.header("retry-after"), Some("2"));
        assert!(refused.body_text().contains(r#""code":"TooManyRequests""#));
    }
    let stats = throttle.stats();
    assert_eq!(
        (
            stats.admitted_requests,
            stats.throttled,
            stats.throttled_by_account
        ),
        (2, 2, 2)
    );
    assert_eq!(
        (p.table.stats().throttled, p.blob.stats().throttled),
        (1, 1)
    );
    assert_eq!(p.table.stats().faults_injected.status, 1);

    // Without the model, requests pass again on the same connections.
    p.table.clear_throttle();
    p.blob.clear_throttle();
    assert!(!table.get(tables).is_synthetic());
    assert!(!blob.get(containers).is_synthetic());
}

#[tokio::test]
async fn the_same_partition_key_in_two_tables_is_two_partitions_with_two_budgets() {
    let p = proxied(no_retries());
    let (first, second) = (
        created_table(&p, "throttletablea").await,
        created_table(&p, "throttletableb").await,
    );
    // 20 deep, refilling one a second: nothing the test does refills a bucket noticeably.
    let throttle = p
        .table
        .set_throttle(per_partition(1.0, Duration::from_secs(20)));

    // Single inserts, a transaction and a query, each drawing on the partition "p" of its table.
    // 40 into a full bucket of 20: 20 in debt, so the first table's "p" refuses everything
    // for the next 20 s.
    first.submit(&inserts("p", 40)).await.unwrap();
    assert_server_busy(&first.insert(&entity("p", "over")).await);
    for i in 0..10 {
        second
            .insert(&entity("p", &format!("single-{i}")))
            .await
            .unwrap();
    }
    assert_eq!(
        second
            .query::<Properties>()
            .filter(Filter::partition("p"))
            .collect()
            .await
            .unwrap()
            .len(),
        10,
        "the second table's partition had its own budget for the query"
    );
    assert_server_busy(
        &first
            .query::<Properties>()
            .filter(Filter::partition("p"))
            .collect()
            .await,
    );

    let stats = throttle.stats();
    // The stats are by PartitionKey, summed over the tables: 40 + 10 + the query's 10.
    assert_eq!(stats.admitted_in("p"), 60);
    assert_eq!(stats.throttled, 2);
    p.table.clear_throttle();
    for table in [first, second] {
        table.delete_table().await.unwrap();
    }
}

#[tokio::test]
async fn a_refusal_names_the_account_or_the_partition_as_the_service_does() {
    let p = proxied(no_retries());
    let table = created_table(&p, "throttlescope").await;
    // The account 5 deep and refilling one entity in 20 s; partitions unlimited.
    p.table.set_throttle(
        ThrottleModel::default()
            .with_per_partition(f64::INFINITY)
            .with_per_account(0.05)
            .with_burst(Duration::from_secs(100)),
    );
    table.submit(&inserts("a", 5)).await.unwrap();
    let refused = table.insert(&entity("b", "1")).await;
    assert_refused_for(&refused, ThrottleScope::Account);
    let shown = refused.unwrap_err().to_string();
    assert!(
        shown.contains("over the account limit"),
        "the service's message is shown: {shown}"
    );
    p.table.clear_throttle();
    table.delete_table().await.unwrap();
}
