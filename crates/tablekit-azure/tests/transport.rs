//! The transport under faults and load: connection reuse, retries of transient failures only,
//! and verification of writes whose response was lost.

mod common;

use tablekit_azure::{BlobCondition, RequestKind, RetryPolicy, Settings, UploadOptions};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_testkit::{Fault, unique_container_name, unique_queue_name, unique_table_name};

/// An emulator closes a keep-alive connection idle for 5 s, and a request written on it as it
/// closes fails with its outcome unknown. Against an emulator's (path-style) endpoints the
/// pool drops a connection idle for 4 s, before the server does, and reuses a younger one.
#[tokio::test]
async fn against_an_emulator_an_idle_connection_is_dropped_before_the_server_closes_it() {
    use std::time::Duration;

    let p = common::proxied(Settings::default());
    let table = p.account.table(&unique_table_name("idle")).unwrap();
    table.create().await.unwrap();
    let keys = Keys::new("p", "r").unwrap();
    let write = |i: i32| {
        let (table, keys) = (table.clone(), keys.clone());
        async move {
            table
                .upsert_replace(&Entity::new(keys, Properties::new().with("I", i)))
                .await
                .unwrap()
        }
    };
    write(0).await;
    let accepted = || p.table.stats().connections_accepted;
    let before = accepted();
    // Idle for less than the pool keeps a connection: reused.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    write(1).await;
    assert_eq!(accepted(), before, "a connection idle for 1.5 s is reused");
    // Idle for longer than the pool keeps one, still shorter than the emulator does: the
    // pool has let it go, and the request opens a new one.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    write(2).await;
    assert_eq!(
        accepted(),
        before + 1,
        "a connection idle for 4.5 s is not reused against an emulator"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn two_hundred_sequential_requests_reuse_one_connection() {
    let p = common::proxied(Settings::default());
    let table = p.account.table(&unique_table_name("reuse")).unwrap();
    table.create().await.unwrap();
    p.table.reset_stats();
    let keys = Keys::new("p", "r").unwrap();
    for i in 0..200 {
        table
            .upsert_replace(&Entity::new(keys.clone(), Properties::new().with("I", i)))
            .await
            .unwrap();
    }
    let stats = p.table.stats();
    assert_eq!(stats.requests_forwarded, 200);
    assert!(
        stats.connections_accepted <= 2,
        "{} connections for 200 requests",
        stats.connections_accepted
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_injected_503_is_retried_and_a_400_is_not() {
    let p = common::proxied(common::fast_retries());
    let table = p.account.table(&unique_table_name("retry")).unwrap();
    table.create().await.unwrap();
    let metrics = p.account.metrics().clone();
    metrics.reset();
    p.table.fail_nth(1, Fault::Status(503));
    table
        .insert(&Entity::try_new("p", "1", Properties::new()).unwrap())
        .await
        .unwrap();
    let s = metrics.snapshot();
    assert_eq!(
        (s.requests_of(RequestKind::Insert), s.retries, s.throttled),
        (2, 1, 1)
    );
    assert!(
        table
            .get::<Properties>(&Keys::new("p", "1").unwrap())
            .await
            .unwrap()
            .is_some()
    );

    metrics.reset();
    p.table.fail_nth(1, Fault::Status(400));
    let err = table
        .insert(&Entity::try_new("p", "2", Properties::new()).unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    let s = metrics.snapshot();
    assert_eq!(
        (s.requests_of(RequestKind::Insert), s.retries),
        (1, 0),
        "a 400 is never retried"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn retries_give_up_after_the_schedule() {
    let settings = Settings::default().with_retry(RetryPolicy::exponential(
        2,
        std::time::Duration::from_millis(5),
        std::time::Duration::from_millis(5),
    ));
    let p = common::proxied(settings);
    let table = p.account.table(&unique_table_name("giveup")).unwrap();
    table.create().await.unwrap();
    p.table.add_rule(tablekit_testkit::Rule::new(
        tablekit_testkit::Matcher::any(),
        tablekit_testkit::Occurrences::All,
        Fault::Status(503),
    ));
    let err = table
        .get::<Properties>(&Keys::new("p", "r").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Throttled);
    assert_eq!(
        p.account.metrics().snapshot().requests_of(RequestKind::Get),
        3,
        "1 attempt + 2 retries"
    );
    p.table.clear();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_lost_insert_response_is_verified_not_reported_as_a_conflict() {
    let p = common::proxied(common::fast_retries());
    let table = p.account.table(&unique_table_name("lost")).unwrap();
    table.create().await.unwrap();
    let entity = Entity::try_new("p", "r", Properties::new().with("V", 42i64)).unwrap();
    p.table.fail_nth(1, Fault::DropResponse);
    let etag = table
        .insert(&entity)
        .await
        .expect("the write happened; the retry's 409 is ours");
    let stored = table
        .get::<Properties>(&entity.keys)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.etag, stored.value), (etag, entity.value.clone()));

    // But a 409 for an entity someone else wrote stays a conflict.
    let other = Entity::try_new("p", "other", Properties::new().with("V", 1i64)).unwrap();
    table.insert(&other).await.unwrap();
    p.table.fail_nth(1, Fault::Reset);
    let mine = Entity::new(other.keys.clone(), Properties::new().with("V", 2i64));
    let err = table.insert(&mine).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);

    // A transaction whose response was lost is verified the same way.
    let plan = BatchPlan::atomic((0..5).map(|i| {
        Operation::insert(
            &Entity::try_new("b", format!("{i}"), Properties::new().with("I", i)).unwrap(),
        )
        .unwrap()
    }))
    .unwrap();
    p.table.fail_nth(1, Fault::DropResponse);
    let done = table.submit(&plan).await.unwrap();
    assert_eq!(done[0].indices, [0, 1, 2, 3, 4]);
    // And a conditional write whose response was lost.
    let current = table
        .get::<Properties>(&entity.keys)
        .await
        .unwrap()
        .unwrap();
    p.table.fail_nth(1, Fault::DropResponse);
    table
        .merge(
            &Entity::new(entity.keys.clone(), Properties::new().with("W", 1)),
            current.if_match(),
        )
        .await
        .unwrap();
    p.table.fail_nth(1, Fault::DropResponse);
    table.delete(&entity.keys, IfMatch::Any).await.unwrap();
    assert!(
        table
            .get::<Properties>(&entity.keys)
            .await
            .unwrap()
            .is_none()
    );
    table.delete_table().await.unwrap();
}

/// A write refused with 503 (Server Busy) was never applied, so a conflict on its retry is
/// another writer's and must be reported, even when that writer stored the very same value.
/// Accepting it as "our earlier attempt" loses an update: two counters that both read 5 and
/// both write 6 would count one increment.
#[tokio::test]
async fn a_conflict_after_a_refused_attempt_is_not_taken_for_our_own_write() {
    let p = common::proxied(common::fast_retries());
    let table = p.account.table(&unique_table_name("refused")).unwrap();
    table.create().await.unwrap();
    let keys = Keys::new("counters", "c").unwrap();
    let count = |n: i64| Entity::new(keys.clone(), Properties::new().with("Count", n));
    table.insert(&count(5)).await.unwrap();
    // Both writers read Count = 5; the other one writes 6 first.
    let read = table.get::<Properties>(&keys).await.unwrap().unwrap();
    table.replace(&count(6), read.if_match()).await.unwrap();
    // Our replace (also 6, under the ETag we read) is refused with 503, then conflicts.
    p.table.fail_nth(1, Fault::Status(503));
    let err = table.replace(&count(6), read.if_match()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err:?}");
    // The same through a transaction and through a merge.
    p.table.fail_nth(1, Fault::Status(503));
    let plan =
        BatchPlan::atomic([Operation::replace(&count(6), read.if_match()).unwrap()]).unwrap();
    let err = table.submit(&plan).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err:?}");
    p.table.fail_nth(1, Fault::Status(503));
    let err = table.merge(&count(6), read.if_match()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err:?}");
    // And an insert refused with 503 whose keys another writer then took with equal data.
    p.table.fail_nth(1, Fault::Status(503));
    let err = table.insert(&count(6)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err:?}");
    // A lost response, by contrast, may hide an applied write: still verified.
    let read = table.get::<Properties>(&keys).await.unwrap().unwrap();
    p.table.fail_nth(1, Fault::DropResponse);
    table.replace(&count(7), read.if_match()).await.unwrap();
    assert_eq!(p.table.stats().faults_injected.status, 4);
    table.delete_table().await.unwrap();
}

/// Queue and blob requests get the same treatment: a lost response is verified, a conflict
/// after a refusal is reported.
#[tokio::test]
async fn lost_queue_and_blob_responses_are_verified_and_refusals_are_not() {
    let p = common::proxied(common::fast_retries());
    let queue = p.account.queue(&unique_queue_name("lost")).unwrap();
    queue.create().await.unwrap();
    queue.send(b"job", Default::default()).await.unwrap();
    let taken = queue
        .receive(1, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    // The delete lands, its response is lost, the retry's 404 is our own doing.
    p.queue.fail_nth(1, Fault::DropResponse);
    queue.delete_message(&taken[0]).await.unwrap();
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    assert_eq!(p.queue.stats().faults_injected.drop_response, 1);

    let container = p.account.container(&unique_container_name("lost")).unwrap();
    container.create().await.unwrap();
    let create_only = || UploadOptions::default().with_condition(BlobCondition::IfNotExists);
    p.blob.fail_nth(1, Fault::DropResponse);
    container
        .upload("ours", b"mine".to_vec(), create_only())
        .await
        .unwrap();
    // Refused with 503 while another writer created the name with the same bytes: theirs.
    container
        .upload("theirs", b"mine".to_vec(), create_only())
        .await
        .unwrap();
    p.blob.fail_nth(1, Fault::Status(503));
    let err = container
        .upload("theirs", b"mine".to_vec(), create_only())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed
        ),
        "{err:?}"
    );
    container.delete_container().await.unwrap();
    queue.delete_queue().await.unwrap();
}

#[test]
fn an_account_never_uses_connections_of_another_runtime() {
    // Regression: with one process-wide HTTP client, a runtime borrowed pooled connections
    // opened by other runtimes; when one of those shut down, the borrower's in-flight request
    // failed — sometimes after the service had applied it — and was retried.
    let cs = tablekit_testkit::TestStorage::shared()
        .unwrap()
        .connection_string()
        .to_owned();
    let table_name = unique_table_name("runtimes");
    let setup = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    setup.block_on(async {
        tablekit_azure::Account::from_connection_string(&cs)
            .unwrap()
            .table(&table_name)
            .unwrap()
            .create()
            .await
            .unwrap()
    });
    let (cs_b, name_b) = (cs.clone(), table_name.clone());
    let steady = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let account = tablekit_azure::Account::from_connection_string(&cs_b).unwrap();
            let table = account.table(&name_b).unwrap();
            for i in 0..400 {
                table
                    .upsert_replace(
                        &Entity::try_new(
                            "steady",
                            format!("{}", i % 20),
                            Properties::new().with("I", i),
                        )
                        .unwrap(),
                    )
                    .await
                    .unwrap();
            }
            let s = account.metrics().snapshot();
            (s.requests(), s.retries)
        })
    });
    // Meanwhile, short-lived runtimes come and go.
    for round in 0..40 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let account = tablekit_azure::Account::from_connection_string(&cs).unwrap();
            let table = account.table(&table_name).unwrap();
            let entities: Vec<_> = (0..8)
                .map(|i| {
                    Entity::try_new(format!("r{round}"), format!("{i}"), Properties::new()).unwrap()
                })
                .collect();
            futures::future::try_join_all(entities.iter().map(|e| table.upsert_replace(e)))
                .await
                .unwrap();
        });
        drop(runtime);
    }
    let (requests, retries) = steady.join().unwrap();
    assert_eq!(
        (requests, retries),
        (400, 0),
        "no request of the steady runtime failed"
    );
    setup.block_on(async {
        tablekit_azure::Account::from_connection_string(&cs)
            .unwrap()
            .table(&table_name)
            .unwrap()
            .delete_table()
            .await
            .unwrap()
    });
}
