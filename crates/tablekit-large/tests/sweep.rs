//! The sweeper never deletes a blob a write will still reference: its grace period covers
//! the commit deadline and the longest a write may take to land, ages come from the
//! service's clock, and a configuration that breaks the rule is refused before any request.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tablekit_azure::{RetryPolicy, Settings};
use tablekit_core::{Entity, Properties};
use tablekit_large::{LargeEntities, SweepOptions};
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};

/// The entity every test writes.
const KEYS: (&str, &str) = ("Sales", "000223");

/// The entity at [`KEYS`], with no properties besides its payload.
fn bare() -> Entity<Properties> {
    Entity::try_new(KEYS.0, KEYS.1, Properties::new()).unwrap()
}

fn payload(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn table_puts(occurrences: Occurrences, fault: Fault) -> Rule {
    Rule {
        matcher: Matcher::any().with_method("PUT"),
        occurrences,
        fault,
    }
}

#[tokio::test]
async fn a_late_entity_write_keeps_its_blob_through_concurrent_sweeps() {
    // Each attempt may take 2 s; one retry (plus the immediate one after a broken
    // connection): a write lands at the latest 4 × 2 s plus the tiny delays after it starts.
    let settings = Settings {
        retry: RetryPolicy::exponential(1, Duration::from_millis(10), Duration::from_millis(10)),
        request_timeout: Duration::from_secs(2),
        ..common::fast_retries()
    };
    let proxied = tablekit_testkit::fixtures::proxied(settings);
    let (table, container) = common::resources(&proxied.account, "largelate").await;
    let store = LargeEntities::builder(table, container)
        .with_commit_deadline(Duration::from_secs(1))
        .with_clock_allowance(Duration::from_secs(1))
        .build()
        .unwrap();
    let min = store.min_sweep_grace();
    assert_eq!(
        min,
        Duration::from_secs(1)
            + store.table().account().settings().write_settles_within()
            + Duration::from_secs(1)
    );
    let old = store
        .put(&bare(), payload(10_000, 1))
        .await
        .unwrap()
        .reference
        .unwrap()
        .name;

    // The entity write's first attempt is held by the proxy past its timeout and then
    // delivered (it lands 5 s after it was sent); the retries never arrive. The put gives
    // up, keeping its blob, and the late attempt then makes the entity reference it.
    proxied.table.add_rule(table_puts(
        Occurrences::Nth(1),
        Fault::Delay(Duration::from_secs(5)),
    ));
    proxied
        .table
        .add_rule(table_puts(Occurrences::FromNth(1), Fault::Reset));

    // A grace above the commit deadline plus a second would delete the blob before the
    // write lands; it is refused. The sweeps run with the minimum.
    let too_short = SweepOptions {
        grace: Some(Duration::from_secs(2)),
        ..SweepOptions::default()
    };
    assert!(store.sweep(&too_short).await.is_err());
    let options = SweepOptions::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sweeper = {
        let (store, stop, options) = (store.clone(), stop.clone(), options.clone());
        tokio::spawn(async move {
            let mut reports = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(report) = store.sweep(&options).await {
                    reports.push(report);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            reports
        })
    };

    let new = payload(10_000, 2);
    let put = store.put(&bare(), new.clone()).await;
    assert!(put.is_err(), "every attempt timed out or broke: {put:?}");
    // Wait for the late attempt to land.
    let mut landed = None;
    for _ in 0..200 {
        let current = store
            .get_entity::<Properties>(KEYS)
            .await
            .unwrap()
            .unwrap()
            .1
            .unwrap();
        if current.name != old {
            landed = Some(current.name);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let landed = landed.expect("the delayed entity write landed");
    stop.store(true, Ordering::SeqCst);
    let reports = sweeper.await.unwrap();
    proxied.table.clear();

    assert!(
        reports
            .iter()
            .any(|r| r.listed == 2 && r.young >= 1 && r.referenced == 0),
        "sweeps ran while the blob was not yet referenced: {reports:?}"
    );
    for report in &reports {
        assert_eq!(report.grace, min);
        assert!(report.service_time.is_some(), "{report:?}");
        assert!(
            !report.deleted.contains(&landed),
            "a sweep deleted the blob the late write references: {report:?}"
        );
    }
    let read = common::read_raw(&store, KEYS)
        .await
        .unwrap_or_else(|e| panic!("the entity references a missing blob: {e}"))
        .unwrap();
    assert_eq!(read.payload, new);
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_grace_under_the_safe_minimum_is_refused_before_any_request() {
    let account = common::account();
    let store = common::store(&account, "largegrace").await;
    store.put(&bare(), payload(1_000, 1)).await.unwrap();
    let metrics = account.metrics().clone();
    metrics.reset();
    // Above the commit deadline (10 minutes) plus a minute: what the old rule allowed.
    let err = store
        .sweep(&SweepOptions {
            grace: Some(Duration::from_secs(660)),
            ..SweepOptions::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), tablekit_core::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("SweepOptions::grace"), "{err}");
    let just_under = SweepOptions {
        grace: Some(store.min_sweep_grace() - Duration::from_millis(1)),
        dry_run: true,
        ..SweepOptions::default()
    };
    assert!(store.sweep(&just_under).await.is_err());
    assert_eq!(
        metrics.snapshot().requests(),
        0,
        "refused before any request"
    );

    // The minimum itself, and the explicit escape hatch, are accepted.
    let at_min = store
        .sweep(&SweepOptions {
            grace: Some(store.min_sweep_grace()),
            ..SweepOptions::default()
        })
        .await
        .unwrap();
    assert_eq!((at_min.listed, at_min.young), (1, 1));
    let unsafe_short = SweepOptions {
        grace: Some(Duration::from_secs(1)),
        allow_unsafe_grace: true,
        dry_run: true,
    };
    assert_eq!(
        store.sweep(&unsafe_short).await.unwrap().grace,
        Duration::from_secs(1)
    );
    assert!(store.sweep(&SweepOptions::immediate()).await.is_ok());
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_blob_whose_upload_outlasts_the_commit_deadline_is_never_referenced() {
    // The deadline runs from the start of the upload, before the service stamps the blob's
    // Last-Modified; an upload slower than the deadline is dropped and made again.
    let proxied = common::proxied();
    let (table, container) = common::resources(&proxied.account, "largeslow").await;
    let store = LargeEntities::builder(table, container)
        .with_commit_deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    store.put(&bare(), payload(10_000, 1)).await.unwrap();
    proxied.blob.add_rule(Rule {
        matcher: Matcher::any().with_method("PUT"),
        occurrences: Occurrences::Nth(1),
        fault: Fault::Delay(Duration::from_millis(1500)),
    });
    let metrics = proxied.account.metrics().clone();
    metrics.reset();
    let new = payload(10_000, 2);
    let written = store.put(&bare(), new.clone()).await.unwrap();
    proxied.blob.clear();
    let spent = metrics.snapshot();
    assert_eq!(
        (
            spent.requests_of(tablekit_azure::RequestKind::BlobPut),
            spent.requests_of(tablekit_azure::RequestKind::BlobDelete)
        ),
        (2, 2),
        "the slow blob was deleted and uploaded again, then the old one deleted: {spent:?}"
    );
    assert_eq!(
        spent.requests(),
        6,
        "read, upload, delete, upload, replace, delete"
    );
    assert_eq!(
        common::blob_names(&store).await,
        [written.reference.unwrap().name]
    );
    assert_eq!(
        common::read_raw(&store, KEYS)
            .await
            .unwrap()
            .unwrap()
            .payload,
        new
    );
    common::cleanup(&store).await;
}
