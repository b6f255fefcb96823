//! `Series::add` when requests fail: an add whose merge response was lost is counted once,
//! an add whose merge was refused (503) while another writer added is not lost, and several
//! writers under lost responses count every add exactly once.

mod common;

use std::time::Duration;

use tablekit_azure::RetryPolicy;
use tablekit_series::{Series, SeriesLayout};
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};

/// Employee 000223's hourly series.
const KEYS: (&str, &str) = ("000223", "ImPerHour");

/// The first MERGE through the proxy gets `fault`.
fn first_merge(fault: Fault) -> Rule {
    Rule::new(
        Matcher::any().with_method("MERGE"),
        Occurrences::Nth(1),
        fault,
    )
}

#[tokio::test]
async fn an_add_whose_merge_response_was_lost_counts_once() {
    let (account, proxy) = common::proxied(common::settings());
    let table = common::reopen(&common::table("seriesdrop").await, &account);
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    series.add(KEYS, "H09", 1).await.unwrap();
    proxy.add_rule(first_merge(Fault::DropResponse));
    // The merge lands, its response is lost, the retry meets 412: the stored value is ours.
    assert_eq!(series.add(KEYS, "H09", 1).await.unwrap(), 2);
    assert_eq!(proxy.stats().faults_injected.drop_response, 1);
    let read = series.get(KEYS).await.unwrap().unwrap().value;
    assert_eq!(read.get("H09"), Some(2), "counted once, not twice");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_add_refused_with_503_while_another_writer_added_is_not_lost() {
    // A long first retry delay leaves room for the other writer between the refusal and
    // the retry.
    let slow_retry = common::settings().with_retry(RetryPolicy::exponential(
        1,
        Duration::from_secs(1),
        Duration::from_secs(1),
    ));
    let (account, proxy) = common::proxied(slow_retry);
    let direct = common::table("series503").await;
    let table = common::reopen(&direct, &account);
    let ours: Series = Series::new(table.clone(), SeriesLayout::hours());
    let theirs: Series = Series::new(direct.clone(), SeriesLayout::hours());
    theirs.add(KEYS, "H09", 5).await.unwrap();
    proxy.add_rule(first_merge(Fault::Status(503)));
    let adding = tokio::spawn(async move { ours.add(KEYS, "H09", 1).await });
    // Once our merge (5 → 6) has been refused, the other writer adds too (5 → 6). Our retry
    // then meets 412 on a stored 6 that is not ours, and must add again from the read.
    while proxy.stats().faults_injected.status == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(theirs.add(KEYS, "H09", 1).await.unwrap(), 6);
    assert_eq!(adding.await.unwrap().unwrap(), 7);
    let read = theirs.get(KEYS).await.unwrap().unwrap().value;
    assert_eq!(read.get("H09"), Some(7), "both increments counted");
    direct.delete_table().await.unwrap();
}

#[tokio::test]
async fn several_writers_with_lost_responses_count_every_add_exactly_once() {
    let contended = common::settings()
        .with_conflict_retry(
            tablekit_azure::ConflictRetry::default()
                .with_max_attempts(10_000)
                .with_initial_backoff(Duration::from_millis(1))
                .with_max_backoff(Duration::from_millis(40)),
        )
        // With 15% of some 600 requests faulted, the testkit's 5 attempts ran out on every
        // attempt of one request in about one run of 25 (0.15^5 per request), and the add
        // failed with a 503: what is tested is counting under faults, not running out of
        // retries, so each request gets 12 attempts (0.15^12 per request).
        .with_retry(RetryPolicy::exponential(
            11,
            Duration::from_millis(1),
            Duration::from_millis(20),
        ));
    let (account, proxy) = common::proxied(contended);
    let direct = common::table("seriesmany").await;
    let table = common::reopen(&direct, &account);
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    let (writers, adds) = (4i64, 50i64);
    // Lost responses are the ambiguous case; resets and 503s mix refusals in.
    proxy.set_random(
        0.15,
        vec![Fault::DropResponse, Fault::Reset, Fault::Status(503)],
        0x5e_41,
    );
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let series = series.clone();
            tokio::spawn(async move {
                for _ in 0..adds {
                    series.add(KEYS, "H13", 1).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    proxy.clear();
    let faults = proxy.stats().faults_injected;
    assert!(faults.drop_response > 0, "{faults:?}");
    let reader: Series = Series::new(direct.clone(), SeriesLayout::hours());
    let read = reader.get(KEYS).await.unwrap().unwrap().value;
    assert_eq!(
        read.get("H13"),
        Some(writers * adds),
        "every add counted once ({} responses lost)",
        faults.drop_response
    );
    assert!(read.other().is_empty(), "the ledger is not a user property");
    direct.delete_table().await.unwrap();
}

/// Every MERGE through the proxy gets `fault`.
fn every_merge(fault: Fault) -> Rule {
    Rule::new(Matcher::any().with_method("MERGE"), Occurrences::All, fault)
}

#[tokio::test]
async fn an_add_that_gives_up_says_whether_it_was_counted() {
    // Found by the explorer (`series.add`, an outage of lost responses or of late applies at
    // the merge): every attempt of the merge ends without an answer, the first one applied.
    // The add used to fail with a transport error although it was counted, so a caller
    // repeating it counted it twice. It now settles the outcome with the ledger.
    let (account, proxy) = common::proxied(common::settings());
    let table = common::reopen(&common::table("seriessettle").await, &account);
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    series.add(KEYS, "H09", 1).await.unwrap();

    proxy.add_rule(every_merge(Fault::DropResponse));
    assert_eq!(
        series.add(KEYS, "H09", 1).await.unwrap(),
        2,
        "every response lost, the first merge applied: counted, and said so"
    );
    proxy.clear();

    // Every attempt reset before it reaches the service: not counted, and said so with a
    // definite error; repeating the add counts it once.
    proxy.add_rule(every_merge(Fault::Reset));
    let err = series.add(KEYS, "H09", 1).await.unwrap_err();
    assert_ne!(err.kind(), tablekit_core::ErrorKind::Indeterminate, "{err}");
    proxy.clear();
    assert_eq!(series.add(KEYS, "H09", 1).await.unwrap(), 3);
    let read = series.get(KEYS).await.unwrap().unwrap().value;
    assert_eq!(read.get("H09"), Some(3), "each add counted once");
    table.delete_table().await.unwrap();
}
