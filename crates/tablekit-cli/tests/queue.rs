//! `tablekit queue peek` and `tablekit queue poison list | replay | purge` against Azurite,
//! with jobs a real worker poisoned. Requests are counted at a proxy in front of the queue
//! service.

mod support;

use serde::{Deserialize, Serialize};
use support::*;
use tablekit::azure::SendOptions;
use tablekit::core::{Error, Result};
use tablekit::eventual::{HandlerRetry, Job, JobQueue, Steps, Worker, WorkerOptions};
use tablekit_testkit::fixtures::{fast_retries, proxied};
use tablekit_testkit::unique_queue_name;

#[derive(Debug, Serialize, Deserialize)]
struct Chore {
    n: u32,
    fail: bool,
}

impl Job for Chore {
    const KIND: &'static str = "chore";
}

/// Fails the chores marked to fail, every time.
struct Flaky;

impl tablekit::eventual::Handler<Chore> for Flaky {
    async fn handle(&self, job: Chore, _: &Steps) -> Result<()> {
        if job.fail {
            return Err(Error::invalid_argument(
                "n",
                format!("chore {} cannot be done", job.n),
            ));
        }
        Ok(())
    }
}

/// Runs every job once: the failing ones go to the poison queue at their first failure.
async fn work(jobs: &JobQueue<Chore>) {
    let options = WorkerOptions::default()
        .with_max_dequeue_count(1)
        .with_handler_retry(HandlerRetry::none())
        .with_poll_interval(std::time::Duration::from_millis(50));
    Worker::new(jobs.clone(), Flaky, options)
        .drain()
        .await
        .expect("worker");
}

fn rows(run: &Run) -> Vec<Vec<String>> {
    run.stdout
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("  "))
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

#[tokio::test]
async fn poisoned_jobs_are_listed_replayed_and_purged() {
    let p = proxied(fast_retries());
    let cs = connection_string(&emulator().with_queue(p.queue.endpoint_for(&emulator().queue)));
    let name = unique_queue_name("cli-jobs");
    let jobs = JobQueue::<Chore>::new(p.account.queue(&name).unwrap());
    jobs.create().await.unwrap();
    for n in 1..=4 {
        jobs.enqueue(&Chore { n, fail: n < 4 }).await.unwrap();
    }
    work(&jobs).await;
    jobs.enqueue(&Chore { n: 5, fail: false }).await.unwrap();
    jobs.enqueue(&Chore { n: 6, fail: false }).await.unwrap();
    // A message put on the poison queue by hand, not by a worker.
    jobs.poison()
        .send(b"hand-made", SendOptions::default())
        .await
        .unwrap();
    let requests = || p.queue.stats().requests_seen;

    let before = requests();
    let peeked = run_on(&cs, &["queue", "peek", &name, "--payload"]).expect(0);
    assert_eq!(requests() - before, 1, "a peek is one request");
    let kinds: Vec<&str> = peeked
        .stdout
        .lines()
        .filter(|l| !l.starts_with("  "))
        .collect();
    assert_eq!(kinds.len(), 2, "{}", peeked.stdout);
    assert!(
        kinds.iter().all(|l| l.starts_with("chore\t")),
        "{}",
        peeked.stdout
    );
    assert!(peeked.stdout.contains("\"n\":5"), "{}", peeked.stdout);

    let before = requests();
    let listed = run_on(&cs, &["queue", "poison", "list", &name, "--payload"]).expect(0);
    assert_eq!(requests() - before, 1, "a poison list is one request");
    assert!(
        listed
            .stdout
            .starts_with("ID\tKIND\tDEQUEUED\tPOISONED AT\tREASON")
    );
    let poisoned = rows(&listed);
    assert_eq!(poisoned.len(), 4, "{}", listed.stdout);
    let chores: Vec<&Vec<String>> = poisoned.iter().filter(|r| r[1] == "chore").collect();
    assert_eq!(chores.len(), 3, "{}", listed.stdout);
    for row in &chores {
        assert_eq!(row[2], "1", "dequeued once: {row:?}");
        assert!(row[4].contains("cannot be done"), "{row:?}");
    }
    assert!(listed.stdout.contains("  hand-made"), "{}", listed.stdout);
    let first = poisoned
        .iter()
        .zip(
            listed
                .stdout
                .lines()
                .skip(1)
                .filter(|l| l.starts_with("  ")),
        )
        .find(|(_, payload)| payload.contains("\"n\":1"))
        .map(|(row, _)| row[0].clone())
        .expect("chore 1 is listed");

    // Without a terminal, --yes is required: refused before any request.
    let before = requests();
    let refused = run_on(&cs, &["queue", "poison", "replay", &name, "--id", &first]).expect(2);
    assert!(refused.stderr.contains("--yes"), "{}", refused.stderr);
    assert_eq!(requests() - before, 0);

    // One take of the 4, the replay (put + delete), the 3 others made visible again.
    let before = requests();
    run_on(
        &cs,
        &["queue", "poison", "replay", &name, "--id", &first, "--yes"],
    )
    .expect(0);
    assert_eq!(requests() - before, 6);
    let queued = jobs.queue().peek(32).await.unwrap();
    assert_eq!(queued.len(), 3, "chores 5, 6 and the replayed 1");
    assert!(
        queued
            .iter()
            .any(|m| String::from_utf8_lossy(m).contains("\"n\":1"))
    );
    assert_eq!(
        jobs.peek_poisoned(32).await.unwrap().len(),
        3,
        "the rest is visible again"
    );

    // --all replays every job, not the hand-made message.
    run_on(&cs, &["queue", "poison", "replay", &name, "--all", "--yes"]).expect(0);
    let left = jobs.peek_poisoned(32).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].payload, b"hand-made");
    assert_eq!(jobs.queue().peek(32).await.unwrap().len(), 5);

    // The hand-made message has no poisoning time (read as 1970): older than an hour.
    run_on(
        &cs,
        &[
            "queue",
            "poison",
            "purge",
            &name,
            "--older-than",
            "1h",
            "--yes",
        ],
    )
    .expect(0);
    assert!(jobs.peek_poisoned(32).await.unwrap().is_empty());

    // Poisoned again by the worker: a purge with --older-than keeps them, one without
    // deletes them all.
    work(&jobs).await;
    assert_eq!(jobs.peek_poisoned(32).await.unwrap().len(), 3);
    run_on(
        &cs,
        &[
            "queue",
            "poison",
            "purge",
            &name,
            "--older-than",
            "1h",
            "--yes",
        ],
    )
    .expect(0);
    assert_eq!(jobs.peek_poisoned(32).await.unwrap().len(), 3);
    let purged = run_on(&cs, &["queue", "poison", "purge", &name, "--yes"]).expect(0);
    assert!(purged.stderr.contains("purged 3"), "{}", purged.stderr);
    assert!(jobs.peek_poisoned(32).await.unwrap().is_empty());
    assert_eq!(jobs.approximate_len().await.unwrap(), 0);
    jobs.delete_queues().await.unwrap();
}
