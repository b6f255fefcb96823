//! Throughput governance against Azurite behind the testkit's throttle model: the rate meter,
//! admission control, adaptation to throttling, retry hints, scheduling of bulk writes across
//! partitions, and governance switched off.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablekit_azure::{
    Account, BulkOptions, RequestKind, RetryPolicy, Settings, Table, ThroughputPolicy,
};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Properties};
use tablekit_testkit::fixtures::{self, fast_retries};
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule, ThrottleMode, ThrottleModel};

fn insert(pk: &str, i: usize) -> Operation {
    Operation::insert(
        &Entity::try_new(pk, format!("{i:05}"), Properties::new().with("V", i as i64)).unwrap(),
    )
    .unwrap()
}

fn inserts(pk: &str, n: usize) -> Vec<Operation> {
    (0..n).map(|i| insert(pk, i)).collect()
}

async fn created(account: &Account, prefix: &str) -> Table {
    fixtures::table_on(account, prefix).await
}

#[tokio::test]
async fn the_meter_counts_transaction_operations_single_operations_and_returned_entities() {
    // Budgets far above what the test sends: the proxy only counts.
    let proxied = fixtures::proxied(fast_retries());
    let throttle = proxied.table.set_throttle(ThrottleModel::default());
    let account = &proxied.account;
    let table = created(account, "meter").await;
    throttle.reset_stats();
    account.metrics().reset();

    let mut ops = inserts("a", 150);
    ops.extend(inserts("b", 100));
    let report = table.bulk_write(ops, BulkOptions::default()).await.unwrap();
    assert!(report.is_complete());
    for i in 0..3 {
        table
            .insert(&Entity::try_new("c", format!("{i}"), Properties::new()).unwrap())
            .await
            .unwrap();
    }
    let read = table
        .query::<Properties>()
        .filter(Filter::partition("a"))
        .with_page_size(60)
        .collect()
        .await
        .unwrap();
    assert_eq!(read.len(), 150);

    let m = account.metrics().snapshot();
    // 150 + 100 operations in three transactions, 3 inserts, 150 entities read in 3 pages.
    assert_eq!(m.entities_metered, 250 + 3 + 150, "{m:?}");
    assert_eq!(m.requests_of(RequestKind::Transaction), 3);
    assert_eq!(m.requests_of(RequestKind::Query), 3);
    // The service-side model counted the same entities, partition by partition.
    let stats = throttle.stats();
    assert_eq!(stats.admitted_entities, m.entities_metered, "{stats:?}");
    assert_eq!(stats.admitted_in("a"), 300);
    assert_eq!(stats.admitted_in("b"), 100);
    assert_eq!(stats.admitted_in("c"), 3);
    // The last thing served was partition "a": the hottest in the window.
    assert_eq!(
        m.hottest_partitions.first().map(|(pk, _)| pk.clone()),
        Some(format!("{}/a", table.name())),
        "{m:?}"
    );
    assert!(m.account_rate > 0);
    assert_eq!(m.throttled_responses, 0);
}

#[tokio::test]
async fn a_hot_partition_waits_for_budget_while_the_cold_ones_finish() {
    // The service serves 100 entities/s per partition; the client keeps to 95 % of that.
    let model = ThrottleModel::default()
        .with_per_partition(100.0)
        .with_per_account(10_000.0);
    let proxied = fixtures::proxied(
        fast_retries()
            .with_throughput(ThroughputPolicy::default().with_targets(100.0, 10_000.0))
            .with_concurrency(4),
    );
    let account = &proxied.account;
    let table = created(account, "hotcold").await;
    let throttle = proxied.table.set_throttle(model);
    account.metrics().reset();

    // The hot partition comes first in plan order: 6 transactions of 100, ~6 s of its budget.
    // The cold ones need one transaction of 30 each.
    let mut ops = inserts("a-hot", 600);
    for pk in ["b-cold", "c-cold", "d-cold"] {
        ops.extend(inserts(pk, 30));
    }
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    let last = Arc::new(Mutex::new(0));
    let options = BulkOptions::default().with_progress(move |p| {
        let mut last = last.lock().unwrap();
        seen.lock().unwrap().push(p.done - *last);
        *last = p.done;
    });
    let report = table.bulk_write(ops, options).await.unwrap();
    assert!(report.is_complete(), "{:?}", report.failures().next());

    // Progress after each transaction: 100 for the hot partition's, 30 for a cold one's.
    let sizes = sizes.lock().unwrap().clone();
    let second_hot = sizes
        .iter()
        .enumerate()
        .filter(|(_, n)| **n == 100)
        .nth(1)
        .map(|(i, _)| i)
        .unwrap();
    let cold_before = sizes[..second_hot].iter().filter(|n| **n == 30).count();
    assert_eq!(
        cold_before, 3,
        "every cold partition finishes while the hot one waits for budget: {sizes:?}"
    );
    let m = account.metrics().snapshot();
    let stats = throttle.stats();
    assert!(
        m.throttled_responses <= 1 && stats.throttled <= 1,
        "the client kept under the service's budget: {m:?} {stats:?}"
    );
    assert!(m.budget_waits >= 5, "the hot partition waited: {m:?}");
    assert!(m.budget_wait > Duration::ZERO);
}

#[tokio::test]
async fn a_retry_hint_delays_the_retry_and_request_charges_are_recorded() {
    let hint = Duration::from_millis(300);
    let proxied = fixtures::proxied(
        Settings::default()
            // Budgets are learned from 429s; the schedule (10 ms…) is shorter than the hint.
            .with_throughput(ThroughputPolicy::cosmos())
            .with_retry(
                RetryPolicy::exponential(6, Duration::from_millis(10), Duration::from_millis(100))
                    .with_max_retry_after(Duration::from_secs(5)),
            ),
    );
    let account = &proxied.account;
    let table = created(account, "hint").await;
    let throttle = proxied.table.set_throttle(
        ThrottleModel::default()
            .with_per_partition(50.0)
            .with_mode(ThrottleMode::TooManyRequests { retry_after: hint }),
    );
    account.metrics().reset();

    let first = BatchPlan::atomic(inserts("p", 50)).unwrap();
    table.submit(&first).await.unwrap();
    // The partition's bucket is empty: the next transaction is refused with 429 and a hint.
    let second = BatchPlan::atomic((50..100).map(|i| insert("p", i))).unwrap();
    table.submit(&second).await.unwrap();

    let m = account.metrics().snapshot();
    let refused = throttle.stats().throttled;
    assert!(refused >= 1, "the model refused the second transaction");
    assert_eq!(m.throttled_responses, refused);
    assert_eq!(m.retries, refused);
    assert_eq!(
        m.retry_after_hints,
        hint * refused as u32,
        "every refusal carried its hint: {m:?}"
    );
    assert!(
        m.retry_delay >= m.retry_after_hints,
        "each retry waited at least the hint: {m:?}"
    );
    assert!(m.budget_cuts >= 1, "{m:?}");
    assert!(
        account
            .metrics()
            .partition_budget_rate(table.name(), "p")
            .is_finite(),
        "the first 429 set a budget for the partition"
    );
    let charge = m.request_charge();
    let expected = refused as f64 * ThrottleMode::THROTTLED_REQUEST_CHARGE;
    assert!((charge - expected).abs() < 1e-9, "{charge} vs {expected}");
}

#[tokio::test]
async fn a_503_cuts_the_budget_it_hit_and_the_budget_grows_back() {
    let proxied = fixtures::proxied(
        fast_retries().with_throughput(ThroughputPolicy::default().with_targets(200.0, 4_000.0)),
    );
    let account = &proxied.account;
    let table = created(account, "aimd").await;
    let metrics = account.metrics().clone();
    let full = metrics.partition_budget_rate(table.name(), "p");
    assert_eq!(full, 200.0 * 0.95);

    // Partition "p" runs near its budget when it is refused: its budget is cut.
    table
        .submit(&BatchPlan::atomic(inserts("p", 100)).unwrap())
        .await
        .unwrap();
    proxied.table.add_rule(Rule::new(
        Matcher::any().with_path_contains("$batch"),
        Occurrences::Nth(1),
        Fault::Status(503),
    ));
    table
        .submit(&BatchPlan::atomic((100..150).map(|i| insert("p", i))).unwrap())
        .await
        .unwrap();
    // Halved, then grown back for as long as the retry waited for the smaller budget
    // (about half a second, at a tenth of the target per second).
    let cut = metrics.partition_budget_rate(table.name(), "p");
    assert!(cut < full * 0.75, "{cut} after a 503 (was {full})");
    assert_eq!(
        metrics.account_budget_rate(),
        4_000.0 * 0.95,
        "not the account's"
    );
    let m = metrics.snapshot();
    assert_eq!((m.throttled_responses, m.budget_cuts), (1, 1), "{m:?}");
    // Additive increase: it grows back while nothing is throttled.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(metrics.partition_budget_rate(table.name(), "p") > cut);

    // A partition far below its budget when refused: the account's budget is cut instead.
    proxied.table.clear();
    proxied.table.add_rule(Rule::new(
        Matcher::any().with_method("PUT"),
        Occurrences::Nth(1),
        Fault::Status(503),
    ));
    table
        .upsert_replace(&Entity::try_new("idle", "1", Properties::new()).unwrap())
        .await
        .unwrap();
    let account_rate = metrics.account_budget_rate();
    assert!(account_rate < 4_000.0 * 0.95 * 0.75, "{account_rate}");
    assert_eq!(
        metrics.partition_budget_rate(table.name(), "idle"),
        200.0 * 0.95
    );
    assert_eq!(metrics.snapshot().budget_cuts, 2);
}

/// The same work, governed or not: bulk writes over three partitions, a query, point reads.
async fn workload(table: &Table) {
    let mut ops = inserts("x", 230);
    ops.extend(inserts("y", 120));
    ops.extend(inserts("z", 10));
    assert!(
        table
            .bulk_write(ops, BulkOptions::default())
            .await
            .unwrap()
            .is_complete()
    );
    let read = table
        .query::<Properties>()
        .filter(Filter::partition("x"))
        .with_page_size(100)
        .collect()
        .await
        .unwrap();
    assert_eq!(read.len(), 230);
    for i in 0..5 {
        assert!(
            table
                .get::<Properties>(("y", format!("{i:05}")))
                .await
                .unwrap()
                .is_some()
        );
    }
}

#[tokio::test]
async fn governance_switched_off_sends_exactly_the_same_requests() {
    let off = fixtures::account_with(fast_retries().with_throughput(ThroughputPolicy::unlimited()));
    let on = fixtures::account_with(fast_retries());
    let mut counts = Vec::new();
    for account in [&off, &on] {
        let table = created(account, "offon").await;
        account.metrics().reset();
        workload(&table).await;
        let m = account.metrics().snapshot();
        assert_eq!(m.retries, 0, "{m:?}");
        counts.push((m.requests_by_kind.clone(), m.entities_metered));
        if std::ptr::eq(account, &off) {
            assert_eq!((m.budget_waits, m.budget_cuts), (0, 0), "{m:?}");
            assert_eq!(
                off.metrics().partition_budget_rate(table.name(), "x"),
                f64::INFINITY
            );
        }
        table.delete_table().await.unwrap();
    }
    assert_eq!(counts[0], counts[1]);
    assert_eq!(counts[0].1, 230 + 120 + 10 + 230 + 5);
}
