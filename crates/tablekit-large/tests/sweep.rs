//! The sweeper never deletes a blob a write will still reference: every entity write lands
//! within the store's grace period after its blob's upload started, every sweep waits at
//! least that long (and as long as the blob's writer recorded), ages come from the service's
//! clock, and a configuration that breaks the rule is refused before any request.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tablekit_azure::RetryPolicy;
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
    Rule::new(Matcher::any().with_method("PUT"), occurrences, fault)
}

#[tokio::test]
async fn a_late_entity_write_keeps_its_blob_through_concurrent_sweeps() {
    // Each attempt may take 2 s; one retry (plus the immediate one after a broken
    // connection): a write lands at the latest 4 × 2 s plus the tiny delays after it starts.
    let settings = common::fast_retries()
        .with_retry(RetryPolicy::exponential(
            1,
            Duration::from_millis(10),
            Duration::from_millis(10),
        ))
        .with_request_timeout(Duration::from_secs(2));
    let proxied = tablekit_testkit::fixtures::proxied(settings);
    let (table, container) = common::resources(&proxied.account, "largelate").await;
    let builder = LargeEntities::builder(table, container)
        .with_commit_deadline(Duration::from_secs(1))
        .with_clock_allowance(Duration::from_secs(1));
    let required = builder.clone().build().unwrap().required_grace();
    assert_eq!(
        required,
        Duration::from_secs(1)
            + proxied.account.settings().write_settles_within()
            + Duration::from_secs(1)
    );
    // The shortest grace period these writes fit in.
    let store = builder.with_grace(required).build().unwrap();
    let min = store.grace();
    let old = store
        .upsert(&bare(), payload(10_000, 1))
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
    // write lands; it is refused. The sweeps run with the store's.
    let too_short = SweepOptions::default().with_grace(Duration::from_secs(2));
    assert!(store.sweep(too_short).await.is_err());
    let options = SweepOptions::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sweeper = {
        let (store, stop, options) = (store.clone(), stop.clone(), options.clone());
        tokio::spawn(async move {
            let mut reports = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(report) = store.sweep(options.clone()).await {
                    reports.push(report);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            reports
        })
    };

    let new = payload(10_000, 2);
    let put = store.upsert(&bare(), new.clone()).await;
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
async fn a_grace_under_the_store_grace_is_refused_before_any_request() {
    let account = common::account();
    let store = common::store(&account, "largegrace").await;
    assert_eq!(store.grace(), Duration::from_secs(3600), "the default");
    store.upsert(&bare(), payload(1_000, 1)).await.unwrap();
    let metrics = account.metrics().clone();
    metrics.reset();
    // Above the commit deadline (10 minutes) plus a minute: what an old rule allowed.
    let err = store
        .sweep(SweepOptions::default().with_grace(Duration::from_secs(660)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), tablekit_core::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("SweepOptions::grace"), "{err}");
    let just_under = SweepOptions::default()
        .with_grace(store.grace() - Duration::from_millis(1))
        .with_dry_run(true);
    assert!(store.sweep(just_under).await.is_err());
    assert_eq!(
        metrics.snapshot().requests(),
        0,
        "refused before any request"
    );

    // The store's grace itself, and the explicit escape hatch, are accepted.
    let at_min = store
        .sweep(SweepOptions::default().with_grace(store.grace()))
        .await
        .unwrap();
    assert_eq!((at_min.listed, at_min.young), (1, 1));
    let unsafe_short = SweepOptions::default()
        .with_grace(Duration::from_secs(1))
        .with_allow_unsafe_grace(true)
        .with_dry_run(true);
    assert_eq!(
        store.sweep(unsafe_short).await.unwrap().grace,
        Duration::from_secs(1)
    );
    assert!(store.sweep(SweepOptions::immediate()).await.is_ok());
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_blob_whose_upload_outlasts_the_commit_deadline_is_never_referenced() {
    // The deadline runs from the start of the upload, before the service stamps the blob's
    // Last-Modified; an upload slower than the deadline is dropped and made again. The
    // client and server timeouts (5 s) let the held upload finish in one attempt.
    let proxied = tablekit_testkit::fixtures::proxied(
        common::fast_retries().with_request_timeout(Duration::from_secs(5)),
    );
    let (table, container) = common::resources(&proxied.account, "largeslow").await;
    let store = LargeEntities::builder(table, container)
        .with_commit_deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    store.upsert(&bare(), payload(10_000, 1)).await.unwrap();
    proxied.blob.add_rule(Rule::new(
        Matcher::any().with_method("PUT"),
        Occurrences::Nth(1),
        Fault::Delay(Duration::from_millis(1500)),
    ));
    let metrics = proxied.account.metrics().clone();
    metrics.reset();
    let new = payload(10_000, 2);
    let written = store.upsert(&bare(), new.clone()).await.unwrap();
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

#[tokio::test]
async fn a_writer_with_longer_settings_than_the_sweeper_keeps_its_blob() {
    // The writer's first entity write is refused with 503 and retried 8 s later: by its own
    // settings it may land more than 10 s after it starts.
    let writer_settings = common::fast_retries()
        .with_retry(
            RetryPolicy::default()
                .with_schedule(vec![Duration::from_secs(8)])
                .with_jitter(0.0)
                .with_immediate_first_retry_on_connection_error(false)
                .with_max_retry_after(Duration::ZERO),
        )
        .with_request_timeout(Duration::from_secs(1));
    let proxied = tablekit_testkit::fixtures::proxied(writer_settings);
    let (table, container) = common::resources(&proxied.account, "largewriter").await;
    let builder = LargeEntities::builder(table.clone(), container.clone())
        .with_commit_deadline(Duration::from_secs(1))
        .with_clock_allowance(Duration::from_secs(1));
    let required = builder.clone().build().unwrap().required_grace();
    assert!(required > Duration::from_secs(10), "{required:?}");
    let writer = builder.with_grace(required).build().unwrap();
    // The sweeper is another process of the same store, with quick settings of its own (two
    // attempts of 1 s, 10 ms apart) and, wrongly, a shorter grace of 6 s: it still leaves the
    // blob alone as long as its writer said.
    let sweeper_account = tablekit_testkit::fixtures::account_with(
        common::fast_retries()
            .with_retry(
                RetryPolicy::default()
                    .with_schedule(vec![Duration::from_millis(10)])
                    .with_jitter(0.0)
                    .with_immediate_first_retry_on_connection_error(false)
                    .with_max_retry_after(Duration::ZERO),
            )
            .with_request_timeout(Duration::from_secs(1)),
    );
    let sweeper = LargeEntities::builder(
        sweeper_account.table(table.name()).unwrap(),
        sweeper_account.container(container.name()).unwrap(),
    )
    .with_commit_deadline(Duration::from_secs(1))
    .with_clock_allowance(Duration::from_secs(1))
    .with_grace(Duration::from_secs(6))
    .build()
    .unwrap();
    writer.upsert(&bare(), payload(10_000, 1)).await.unwrap();

    proxied
        .table
        .add_rule(table_puts(Occurrences::Nth(1), Fault::Status(503)));
    let stop = Arc::new(AtomicBool::new(false));
    let sweeps = {
        let (sweeper, stop) = (sweeper.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reports = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(report) = sweeper.sweep(SweepOptions::default()).await {
                    reports.push(report);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            reports
        })
    };
    let new = payload(10_000, 2);
    let written = writer.upsert(&bare(), new.clone()).await;
    stop.store(true, Ordering::SeqCst);
    let reports = sweeps.await.unwrap();
    proxied.table.clear();
    let written = written.expect("the retry succeeded");
    let blob = written.reference.unwrap().name;
    for report in &reports {
        assert!(
            !report.deleted.contains(&blob),
            "a sweep deleted the blob of a write in flight: {report:?}"
        );
    }
    let read = common::read_raw(&writer, KEYS)
        .await
        .unwrap_or_else(|e| panic!("the entity references a missing blob: {e}"))
        .unwrap();
    assert_eq!(read.payload, new);
    common::cleanup(&writer).await;
}

/// A codec that passes entities through unchanged, but takes `stall` to encode a write while
/// `slow` is set: a key store that answers late, between a writer's commit-deadline check and
/// its entity write.
#[derive(Debug)]
struct SlowCodec {
    slow: AtomicBool,
    stall: Duration,
}

impl tablekit_azure::EntityCodec for SlowCodec {
    fn encode<'a>(
        &'a self,
        _table: &'a str,
        _keys: &'a tablekit_core::Keys,
        properties: Properties,
        _kind: tablekit_core::batch::OperationKind,
    ) -> futures::future::BoxFuture<'a, tablekit_core::Result<Properties>> {
        Box::pin(async move {
            if self.slow.load(Ordering::SeqCst) {
                tokio::time::sleep(self.stall).await;
            }
            Ok(properties)
        })
    }

    fn decode<'a>(
        &'a self,
        _table: &'a str,
        _keys: &'a tablekit_core::Keys,
        properties: Properties,
    ) -> futures::future::BoxFuture<'a, tablekit_core::Result<Properties>> {
        Box::pin(async move { Ok(properties) })
    }
}

#[tokio::test]
async fn an_entity_write_stalled_after_its_commit_deadline_check_never_lands_after_a_sweep() {
    // One retry 10 ms apart: a write lands at the latest about 4 s after it starts, and the
    // store's grace is the shortest these writes fit in. The codec then holds the entity
    // write for 7 s after the upload, past the grace less the clock allowance.
    let settings = common::fast_retries()
        .with_retry(
            RetryPolicy::default()
                .with_schedule(vec![Duration::from_millis(10)])
                .with_jitter(0.0)
                .with_immediate_first_retry_on_connection_error(false)
                .with_max_retry_after(Duration::ZERO),
        )
        .with_request_timeout(Duration::from_secs(1));
    let account = tablekit_testkit::fixtures::account_with(settings);
    let (table, container) = common::resources(&account, "largestall").await;
    let codec = Arc::new(SlowCodec {
        slow: AtomicBool::new(false),
        stall: Duration::from_secs(7),
    });
    let builder = LargeEntities::builder(table.with_codec(codec.clone()), container.clone())
        .with_commit_deadline(Duration::from_secs(1))
        .with_clock_allowance(Duration::from_secs(1));
    let grace = builder.clone().build().unwrap().required_grace();
    assert!(grace < codec.stall, "{grace:?}");
    let writer = builder.with_grace(grace).build().unwrap();
    let sweeper = LargeEntities::builder(table.clone(), container.clone())
        .with_commit_deadline(Duration::from_secs(1))
        .with_clock_allowance(Duration::from_secs(1))
        .with_grace(grace)
        .build()
        .unwrap();
    let old = payload(10_000, 1);
    writer.upsert(&bare(), old.clone()).await.unwrap();

    codec.slow.store(true, Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let sweeps = {
        let (sweeper, stop) = (sweeper.clone(), stop.clone());
        tokio::spawn(async move {
            let mut deleted = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(report) = sweeper.sweep(SweepOptions::default()).await {
                    deleted.extend(report.deleted);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            deleted
        })
    };
    let written = writer.upsert(&bare(), payload(10_000, 2)).await;
    stop.store(true, Ordering::SeqCst);
    let deleted = sweeps.await.unwrap();
    codec.slow.store(false, Ordering::SeqCst);

    // Either the write was refused unsent (the entity keeps its old value), or it landed
    // and its blob is there: never a reference to a swept blob.
    let read = common::read_raw(&writer, KEYS)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the entity references a missing blob: {e} (put: {written:?}, swept: {deleted:?})"
            )
        })
        .unwrap();
    assert_eq!(read.payload, old, "put: {written:?}");
    // Refused unsent: the write fails, and its blob, which nothing references, is deleted.
    let err = written.unwrap_err();
    assert_eq!(
        err.kind(),
        tablekit_core::ErrorKind::DeadlineExceeded,
        "{err}"
    );
    assert_eq!(
        common::blob_names(&sweeper).await,
        [read.reference.unwrap().name],
        "only the old blob is left"
    );
    common::cleanup(&sweeper).await;
}

#[tokio::test]
async fn a_writer_whose_writes_could_outlast_the_grace_is_refused_before_any_request() {
    let account = common::account();
    let (table, container) = common::resources(&account, "largerefused").await;
    // The default commit deadline (10 minutes) and allowance (1 minute) with a grace of
    // 11 minutes leave no room for the write itself.
    let store = LargeEntities::builder(table, container)
        .with_grace(Duration::from_secs(11 * 60 + 1))
        .build()
        .unwrap();
    assert!(store.required_grace() > store.grace());
    let metrics = account.metrics().clone();
    metrics.reset();
    for err in [
        store.upsert(&bare(), payload(1_000, 1)).await.unwrap_err(),
        store.insert(&bare(), payload(1_000, 1)).await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, tablekit_core::Error::InvalidConfig { part, .. } if part == "grace"),
            "{err}"
        );
        assert!(err.to_string().contains("with_grace"), "{err}");
    }
    assert_eq!(
        metrics.snapshot().requests(),
        0,
        "refused before any request"
    );
    // The same handle still sweeps: a sweep's safety does not depend on its settings.
    assert_eq!(
        store.sweep(SweepOptions::default()).await.unwrap().listed,
        0
    );
    // A grace that leaves no time for any write is refused when the store is built.
    let (table, container) = (store.table().clone(), store.container().clone());
    let err = LargeEntities::builder(table, container)
        .with_grace(Duration::from_secs(11 * 60))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), tablekit_core::ErrorKind::InvalidInput, "{err}");
    common::cleanup(&store).await;
}
