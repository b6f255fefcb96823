//! Worker processes on one queue: a worker SIGKILLed mid-run and replaced, four competing
//! workers, and a graceful SIGTERM. Each worker is this test binary re-run as a child with
//! `worker_child` selected and its job in the environment.

mod common;

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt as _;
use tablekit_azure::Account;
use tablekit_eventual::{JobQueue, Worker, WorkerOptions, shutdown_signal};
use tablekit_testkit::TestStorage;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use common::{ArchiveEmployee, Archiver, archive_tables, ids_in, job_queue, seed};

/// Set in a child: `<mode> <queue> <Current table> <Archive table>`.
const CHILD_ENV: &str = "TABLEKIT_EVENTUAL_CHILD";
/// The connection string a child uses.
const CHILD_STORAGE_ENV: &str = "TABLEKIT_EVENTUAL_CHILD_STORAGE";

/// The settings of these tests' accounts: the fixtures' one-second request timeout (the
/// workers' 3 s visibility must outlast a late landing), with more and longer retries —
/// several worker processes at once, beside other test binaries, slow the emulator past a
/// second now and then, and these tests are about processes, not about giving up.
fn patient() -> tablekit_azure::Settings {
    common::fast_retries().with_retry(tablekit_azure::RetryPolicy::exponential(
        8,
        Duration::from_millis(50),
        Duration::from_secs(1),
    ))
}

/// The worker process. A no-op in a normal test run; the tests below run this binary again
/// with only this test selected and `TABLEKIT_EVENTUAL_CHILD` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let [mode, queue, current, archive]: [&str; 4] = spec
        .split(' ')
        .collect::<Vec<_>>()
        .try_into()
        .expect("child spec");
    let account =
        Account::from_connection_string(&std::env::var(CHILD_STORAGE_ENV).expect("storage"))
            .unwrap()
            .with_settings(patient())
            .unwrap();
    let handler = Archiver {
        current: account.table(current).unwrap(),
        archive: account.table(archive).unwrap(),
        // A signal must find handlers half way through their writes, so that a stop that
        // did not let them finish would show (an employee in both tables).
        pause: if mode == "signal" {
            Duration::from_millis(200)
        } else {
            Duration::ZERO
        },
    };
    let options = WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_max_dequeue_count(10)
        .with_concurrency(16)
        .with_poll_interval(Duration::from_millis(50))
        .with_idle_backoff_max(Duration::from_millis(300));
    let jobs: JobQueue<ArchiveEmployee> = JobQueue::new(account.queue(queue).unwrap());
    let worker = Worker::new(jobs, handler, options);
    let report = match mode {
        "drain" => worker.drain().await,
        "signal" => {
            println!("CHILD_READY");
            worker.run_until(shutdown_signal()).await
        }
        other => panic!("unknown mode {other}"),
    }
    .unwrap();
    println!(
        "CHILD_REPORT processed={} released={} poisoned={} failed_attempts={} queue_errors={} lost_receipts={}",
        report.processed,
        report.released,
        report.poisoned,
        report.failed_attempts,
        report.queue_errors,
        report.lost_receipts
    );
}

fn spawn_worker(mode: &str, queue: &JobQueue<ArchiveEmployee>, tables: &Archiver) -> Child {
    let storage = TestStorage::shared().expect("test storage");
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "worker_child", "--nocapture", "--test-threads=1"])
        .env(
            CHILD_ENV,
            format!(
                "{mode} {} {} {}",
                queue.queue().name(),
                tables.current.name(),
                tables.archive.name()
            ),
        )
        .env(CHILD_STORAGE_ENV, storage.connection_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a worker process")
}

/// Waits for a child to exit successfully and returns its report line's numbers.
async fn finish(child: Child) -> WorkerReportLine {
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "worker failed: {}\n{stdout}",
        out.status
    );
    WorkerReportLine::parse(&stdout)
}

#[derive(Debug)]
struct WorkerReportLine {
    processed: u64,
    released: u64,
    poisoned: u64,
    failed_attempts: u64,
    queue_errors: u64,
    lost_receipts: u64,
}

impl WorkerReportLine {
    fn parse(stdout: &str) -> Self {
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("CHILD_REPORT ").map(|(_, r)| r.to_owned()))
            .unwrap_or_else(|| panic!("no report in {stdout}"));
        let field = |name: &str| -> u64 {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {line}"))
        };
        Self {
            processed: field("processed"),
            released: field("released"),
            poisoned: field("poisoned"),
            failed_attempts: field("failed_attempts"),
            queue_errors: field("queue_errors"),
            lost_receipts: field("lost_receipts"),
        }
    }
}

/// Current and Archive with `n` employees in Current, and a queue with one archive job each.
async fn scenario(account: &Account, n: u32) -> (Archiver, JobQueue<ArchiveEmployee>) {
    let tables = archive_tables(account).await;
    seed(&tables.current, 0..n).await;
    let queue: JobQueue<ArchiveEmployee> = job_queue(account, "procs").await;
    futures::stream::iter(0..n)
        .map(|id| {
            let queue = queue.clone();
            async move { queue.enqueue(&ArchiveEmployee::new(id)).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<tablekit_core::Result<Vec<()>>>()
        .unwrap();
    (tables, queue)
}

/// Every employee archived exactly once with its data intact, none left in Current, none in
/// both, both queues empty.
async fn assert_all_archived(tables: &Archiver, queue: &JobQueue<ArchiveEmployee>, n: u32) {
    assert_eq!(ids_in(&tables.archive).await, (0..n).collect());
    assert!(ids_in(&tables.current).await.is_empty());
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    assert!(queue.peek_poisoned(1).await.unwrap().is_empty());
}

async fn wait_until_remaining_at_most(queue: &JobQueue<ArchiveEmployee>, n: usize) -> usize {
    loop {
        let left = queue.approximate_len().await.unwrap();
        if left <= n {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_killed_worker_is_replaced_and_every_job_is_archived_exactly_once() {
    let account = common::account_with(patient());
    let (tables, queue) = scenario(&account, 500).await;
    let mut first = spawn_worker("drain", &queue, &tables);
    let left = wait_until_remaining_at_most(&queue, 350).await;
    first.kill().await.unwrap(); // SIGKILL: no cleanup, messages in flight stay hidden
    assert!(left > 0, "killed mid-run");
    let after_kill = queue.approximate_len().await.unwrap();
    assert!(after_kill > 0, "work was left for the replacement");

    let second = finish(spawn_worker("drain", &queue, &tables)).await;
    assert!(second.processed > 0 && second.processed as usize <= after_kill);
    assert_eq!(second.poisoned, 0);
    assert_all_archived(&tables, &queue, 500).await;
    common::cleanup(&queue, &tables).await;
}

#[tokio::test]
async fn four_worker_processes_share_one_queue() {
    let account = common::account_with(patient());
    let (tables, queue) = scenario(&account, 500).await;
    let workers: Vec<Child> = (0..4)
        .map(|_| spawn_worker("drain", &queue, &tables))
        .collect();
    let reports = futures::future::join_all(workers.into_iter().map(finish)).await;
    let processed: Vec<u64> = reports.iter().map(|r| r.processed).collect();
    assert!(
        processed.iter().sum::<u64>() >= 500,
        "every job ran at least once: {processed:?}"
    );
    assert!(
        processed.iter().filter(|p| **p > 0).count() >= 2,
        "the work was shared: {processed:?}"
    );
    assert_all_archived(&tables, &queue, 500).await;
    common::cleanup(&queue, &tables).await;
}

#[tokio::test]
async fn sigterm_stops_a_worker_gracefully_between_jobs() {
    let account = common::account_with(patient());
    let (tables, queue) = scenario(&account, 200).await;
    // A put whose response was lost (a timeout under load) is retried and enqueues its job
    // twice, as `JobQueue::enqueue` documents. The checks below allow for those duplicates
    // and for nothing else.
    let duplicates = queue.approximate_len().await.unwrap() - 200;
    let mut child = spawn_worker("signal", &queue, &tables);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("CHILD_READY") {
            break;
        }
    }
    wait_until_remaining_at_most(&queue, 150).await;
    let pid = child.id().expect("running").to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        rest.push_str(&line);
        rest.push('\n');
    }
    let status = child.wait().await.unwrap();
    assert!(status.success(), "exited normally after SIGTERM: {status}");
    let report = WorkerReportLine::parse(&rest);
    assert_eq!(report.poisoned, 0);
    // Messages taken by a dequeue that completed after the signal were released unstarted;
    // handlers already running finished (the grace period is 30 s).
    assert!(report.released <= 16, "{report:?}");

    // Every job the worker started, it finished — unless one of its requests failed for
    // good, which the report counts: nobody is in both tables, and each employee still in
    // Current still has its message and no other job's message is left.
    let current = ids_in(&tables.current).await;
    let archived = ids_in(&tables.archive).await;
    let queued = queue.approximate_len().await.unwrap();
    let failures = report.failed_attempts + report.queue_errors + report.lost_receipts;
    let state = format!(
        "{report:?}; {} in Current, {} in Archive, {} in both, {queued} queued, \
         {duplicates} enqueued twice",
        current.len(),
        archived.len(),
        current.intersection(&archived).count()
    );
    assert!(
        current.intersection(&archived).count() as u64 <= failures,
        "{state}"
    );
    assert_eq!(current.union(&archived).count(), 200, "{state}");
    assert!(!current.is_empty(), "stopped before the end: {state}");
    assert!(
        queued >= current.len() && queued <= current.len() + duplicates + failures as usize,
        "{state}"
    );

    let options = common::quick_options().with_concurrency(16);
    let rest = Worker::new(queue.clone(), tables.clone(), options)
        .drain()
        .await
        .unwrap();
    assert!(
        (current.len()..=queued).contains(&(rest.processed as usize)),
        "{rest:?} after {state}"
    );
    assert_all_archived(&tables, &queue, 200).await;
    common::cleanup(&queue, &tables).await;
}
