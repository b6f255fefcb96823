//! `ConflictLoop::run` against Azurite: concurrent writers lose no update, every retry is
//! counted, and conflicts that are answers are not retried.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tablekit_azure::{ConflictRetry, Table};
use tablekit_core::{Entity, Error, ErrorKind, Keys, Properties, Target};

/// One increment of the counter at `keys`: read, then a write under the ETag read (or an
/// insert), run by `ConflictLoop::run`. Returns the attempts it took.
async fn increment(table: &Table, keys: &Keys, attempts: &AtomicU64) -> u32 {
    let last = AtomicU32::new(0);
    table
        .account()
        .conflict_loop()
        .run(|attempt| {
            // Attempts are numbered 1, 2, 3, … within one run.
            assert_eq!(attempt, last.fetch_add(1, Ordering::Relaxed) + 1);
            attempts.fetch_add(1, Ordering::Relaxed);
            async move {
                let current = table.get::<Properties>(keys).await?;
                let n = current.as_ref().and_then(|c| c.value.get_i64("N").unwrap());
                let next = Entity::new(
                    keys.clone(),
                    Properties::new().with("N", n.unwrap_or(0) + 1),
                );
                match current {
                    Some(c) => table.replace(&next, c.if_match()).await,
                    None => table.insert(&next).await,
                }
            }
        })
        .await
        .unwrap();
    last.load(Ordering::Relaxed)
}

#[tokio::test]
async fn sixteen_writers_running_conflict_loops_end_at_exactly_160() {
    let table = common::table("runloop").await;
    let keys = Keys::new("counters", "c").unwrap();
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let attempts = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (table, keys, attempts) = (table.clone(), keys.clone(), attempts.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    increment(&table, &keys, &attempts).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let spent = metrics.snapshot();
    let stored = table.get::<Properties>(&keys).await.unwrap().unwrap();
    assert_eq!(
        stored.value.get_i64("N").unwrap(),
        Some(160),
        "no increment is lost"
    );
    let attempts = attempts.load(Ordering::Relaxed);
    assert!(
        spent.conflict_retries > 0,
        "16 writers must conflict: {spent:?}"
    );
    assert_eq!(
        spent.conflict_retries,
        attempts - 160,
        "every attempt after the first of a run is a counted conflict retry"
    );
    assert_eq!(
        spent.conflicts_412 + spent.conflicts_409,
        spent.conflict_retries
    );
    // Two requests per attempt (a point read, then the write), plus any transient retry.
    assert_eq!(spent.requests() - spent.retries, 2 * attempts, "{spent:?}");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_conflict_returned_as_the_answer_and_other_errors_are_not_retried() {
    let account = common::account_with(
        common::fast_retries().with_conflict_retry(
            ConflictRetry::default()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(1))
                .with_max_backoff(Duration::from_millis(2)),
        ),
    );
    let conflict = || Error::PreconditionFailed {
        target: Target::entity("T", Keys::new("p", "r").unwrap()),
    };
    let runs = AtomicU32::new(0);

    // A conflict inside `Ok` is the answer: one attempt.
    let answer: Result<(), Error> = account
        .conflict_loop()
        .run(|_| {
            runs.fetch_add(1, Ordering::Relaxed);
            async { Ok(Err(conflict())) }
        })
        .await
        .unwrap();
    assert_eq!(answer.unwrap_err().kind(), ErrorKind::PreconditionFailed);
    assert_eq!(runs.swap(0, Ordering::Relaxed), 1);

    // An error that is not a conflict: returned at once.
    let err = account
        .conflict_loop()
        .run(|_| {
            runs.fetch_add(1, Ordering::Relaxed);
            async { Err::<(), _>(Error::encode("P", "x")) }
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Encode);
    assert_eq!(runs.swap(0, Ordering::Relaxed), 1);

    // Conflicts every time: the configured attempts, then the last conflict.
    let err = account
        .conflict_loop()
        .run(|_| {
            runs.fetch_add(1, Ordering::Relaxed);
            async { Err::<(), _>(conflict()) }
        })
        .await
        .unwrap_err();
    assert!(err.is_conflict());
    assert_eq!(runs.load(Ordering::Relaxed), 3);
    let spent = account.metrics().snapshot();
    assert_eq!(spent.conflict_retries, 2);
    assert_eq!(spent.requests(), 0);
}
