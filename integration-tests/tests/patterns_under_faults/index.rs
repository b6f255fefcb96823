//! Indexes under faults: the intra-partition index, the inter-partition index, and index
//! entities in the entities' partition (option 2), in partitions of their own (option 3) and
//! in blobs (option 1).
//!
//! The indexes kept by queued jobs get two more faults, with a worker running while the
//! writes are made: primary writes held by the proxy for longer than the request timeout (the
//! client retries while the first attempt lands late, after the job may have been delivered),
//! and lost dequeue responses (the job's first delivery the worker sees has dequeue count 2).

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::Settings;
use tablekit_core::filter::Filter;
use tablekit_core::{IfMatch, Keys, Properties, TableEntity};
use tablekit_eventual::{Handler, Job, Worker, WorkerOptions};
use tablekit_index::{
    CopyHandle, CopyHandler, CopyJob, CopySpec, EventualList, IndexRead as _, IndexSpec,
    InterPartitionIndex, IntraPartitionIndex, ListSpec, SamePartitionList,
};
use tablekit_testkit::{
    Fault, FaultProxy, Matcher, Occurrences, Rule, unique_container_name, unique_queue_name,
};

use crate::{Figures, arm, common, disarm, fast_worker, lost_and_duplicated};

/// A request timeout the slow writes outlast; it also bounds how long a job waits for a write
/// that never lands (see `Settings::write_settles_within`), keeping the jobs' deadlines
/// within a minute.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the proxy holds a slow primary write: longer than [`REQUEST_TIMEOUT`].
const SLOW_WRITE: Duration = Duration::from_secs(3);

/// The patient retries of the other scenarios, with [`REQUEST_TIMEOUT`].
fn job_settings() -> Settings {
    common::patient().with_request_timeout(REQUEST_TIMEOUT)
}

/// A worker for the jobs' scenarios: as [`fast_worker`], but a handler waiting for a slow
/// write extends its message every second (not every half second), and a job may be
/// delivered 10 times — lost responses to visibility extensions hand a waiting job to another
/// delivery.
fn job_worker() -> WorkerOptions {
    fast_worker()
        .with_visibility_timeout(Duration::from_secs(5))
        .with_max_dequeue_count(10)
}

/// Adds the jobs' faults to the mix: pairs of consecutive writes matching `writes` (the
/// primary's, `PUT`) held for [`SLOW_WRITE`] — the first attempt lands after the client gave
/// up on it, the retry finds it landed — and lost responses of some of the dequeues.
fn arm_jobs(p: &common::Proxied, seed: u64, writes: &str) {
    arm(p, seed);
    for k in [3, 17, 41] {
        p.table.add_rule(Rule::new(
            Matcher::any().with_method("PUT").with_path_contains(writes),
            Occurrences::Range(k, k + 1),
            Fault::Delay(SLOW_WRITE),
        ));
    }
    lose_dequeue_responses(&p.queue);
}

/// Loses the response of every 4th dequeue among the first 160: the messages it took stay
/// hidden for the visibility timeout, then come back with a higher dequeue count.
fn lose_dequeue_responses(queue: &FaultProxy) {
    for _ in 0..40 {
        queue.add_rule(Rule::new(
            Matcher::any()
                .with_method("GET")
                .with_path_contains("/messages")
                .with_query_contains("visibilitytimeout"),
            Occurrences::Nth(4),
            Fault::DropResponse,
        ));
    }
}

/// Runs `worker` while `writes` runs, as a service would, and returns what `writes` returned.
async fn serving<J: Job, H: Handler<J>, F: Future>(worker: &Worker<J, H>, writes: F) -> F::Output {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let worker = worker.clone();
        async move {
            worker
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
        }
    });
    let out = writes.await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    out
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String,
    last_name: String,
    email: String,
    round: i32,
}

/// Where the lists find an employee: its department and id.
impl TableEntity for Employee {
    fn keys(&self) -> tablekit_core::Result<Keys> {
        Keys::new(&self.department, &self.id)
    }
}

/// Employee `i` as written in `round`: a new email every round, a last name that changes
/// every other round.
fn employee(department: &str, i: usize, round: i32) -> Employee {
    const NAMES: [&str; 4] = ["Jones", "Smith", "Lee", "Cao"];
    Employee {
        department: department.into(),
        id: format!("{i:06}"),
        last_name: NAMES[(i + round as usize / 2) % NAMES.len()].into(),
        email: email(i, round),
        round,
    }
}

fn email(i: usize, round: i32) -> String {
    format!("e{i}.r{round}@contoso.com")
}

/// The declaration, and the handle of its email copy.
fn spec() -> (IndexSpec<Employee>, CopyHandle<Employee>) {
    let mut spec = IndexSpec::builder(|e: &Employee| e.department.clone());
    spec.primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", |e: &Employee| e.email.clone()));
    (spec.build().unwrap(), by_email)
}

fn by_last_name(prefix: &str) -> ListSpec<Employee> {
    let builder = ListSpec::builder("lastname", |e: &Employee| e.last_name.clone());
    let builder = if prefix.is_empty() {
        builder
    } else {
        builder.with_prefix(prefix)
    };
    builder.build().unwrap()
}

/// Ids written in rounds 0..=`rounds` and then deleted every fifth: which survive, in which
/// round's state.
const ROUNDS: i32 = 3;

fn deleted(i: usize) -> bool {
    i % 5 == 0
}

#[tokio::test]
async fn intra_partition_index_keeps_every_copy_in_step() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultintra").await;
    let (spec, email_copy) = spec();
    let index = IntraPartitionIndex::new(table.clone(), spec);
    let n = 40;
    let mut ops = 0;
    arm(&p, 0x2_01);
    for i in 0..n {
        index.insert(&employee("Sales", i, 0)).await.unwrap();
        ops += 1;
    }
    for round in 1..=ROUNDS {
        for i in 0..n {
            index.upsert(&employee("Sales", i, round)).await.unwrap();
            ops += 1;
        }
    }
    for i in (0..n).filter(|&i| deleted(i)) {
        index
            .delete(("Sales", format!("{i:06}")), IfMatch::Any)
            .await
            .unwrap();
        ops += 1;
    }
    let faults = disarm(&p);

    let report = index.verify("Sales").await.unwrap();
    assert!(
        report.is_consistent(),
        "no stale or missing copy: {report:?}"
    );
    let mut lost = 0;
    for i in 0..n {
        let id = format!("{i:06}");
        let got = index.get("Sales", &id).await.unwrap().map(|s| s.value);
        let by_email = index
            .get_by(&email_copy, "Sales", email(i, ROUNDS))
            .await
            .unwrap()
            .map(|s| s.value);
        let want = (!deleted(i)).then(|| employee("Sales", i, ROUNDS));
        if got != want || by_email != want {
            lost += 1;
        }
        for round in 0..ROUNDS {
            let old = index.get_by(&email_copy, "Sales", email(i, round)).await;
            assert!(
                old.unwrap().is_none(),
                "stale email copy of {id} round {round}"
            );
        }
    }
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap()
        .len();
    let live = (0..n).filter(|&i| !deleted(i)).count();
    Figures {
        pattern: "intra-partition index",
        operations: ops,
        faults,
        lost,
        duplicated: rows.saturating_sub(2 * live),
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn inter_partition_index_converges_after_the_workers_drain() {
    let p = common::proxied(job_settings());
    let table = common::table(&p.account, "faultinter").await;
    let queue = p.account.queue(&unique_queue_name("faultinter")).unwrap();
    // Writers and workers share one clock here: no allowance for skew in the jobs' deadlines.
    let (spec, email_copy) = spec();
    let index = InterPartitionIndex::builder(table.clone(), spec, queue)
        .with_clock_skew_allowance(Duration::ZERO)
        .build()
        .unwrap();
    index.create().await.unwrap();
    let departments = ["Sales", "Marketing"];
    let n = 30;
    arm_jobs(&p, 0x2_02, "empid_");
    let worker = index.worker(job_worker());
    let ops = serving(&worker, async {
        let mut ops = 0;
        for i in 0..n {
            index
                .insert(&employee(departments[i % 2], i, 0))
                .await
                .unwrap();
            ops += 1;
        }
        for round in 1..=ROUNDS {
            for i in 0..n {
                index
                    .upsert(&employee(departments[i % 2], i, round))
                    .await
                    .unwrap();
                ops += 1;
            }
        }
        for i in (0..n).filter(|&i| deleted(i)) {
            let id = format!("{i:06}");
            index
                .delete((departments[i % 2], id), IfMatch::Any)
                .await
                .unwrap();
            ops += 1;
        }
        ops
    })
    .await;
    worker.drain().await.unwrap();
    let under_faults = worker.stats();
    let faults = disarm(&p);
    worker.drain().await.unwrap();
    let requeued = requeue_exhausted_jobs(&index, &worker).await;

    for department in departments {
        let report = index.verify(department).await.unwrap();
        assert!(
            report.is_consistent(),
            "after the workers drained, no stale or missing copy: {report:?}"
        );
    }
    let mut lost = 0;
    for i in 0..n {
        let department = departments[i % 2];
        let by_email = index
            .get_by(&email_copy, department, email(i, ROUNDS))
            .await
            .unwrap()
            .map(|s| s.value);
        let want = (!deleted(i)).then(|| employee(department, i, ROUNDS));
        if by_email != want {
            lost += 1;
        }
        for round in 0..ROUNDS {
            let old = index.get_by(&email_copy, department, email(i, round)).await;
            assert!(old.unwrap().is_none(), "stale copy of {i} round {round}");
        }
    }
    let rows = table
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .len();
    let live = (0..n).filter(|&i| !deleted(i)).count();
    assert_eq!(index.jobs().approximate_len().await.unwrap(), 0);
    assert!(faults.delay > 0, "slow writes: {faults:?}");
    println!(
        "  inter-partition jobs under faults: {} dequeued, {} processed, {} failed attempts, {} lost receipts; {requeued} re-queued after running out of deliveries",
        under_faults.dequeued,
        under_faults.processed,
        under_faults.failed_attempts,
        under_faults.lost_receipts
    );
    Figures {
        pattern: "inter-partition index",
        operations: ops,
        faults,
        lost,
        duplicated: rows.saturating_sub(2 * live),
    }
    .report(&p);
    index.jobs().delete_queues().await.unwrap();
    table.delete_table().await.unwrap();
}

/// Checks the poisoned jobs once the faults stopped, re-queues the ones that ran out of
/// deliveries and drains again; returns how many it re-queued.
///
/// A job delivered past its deadline that finds no entity cannot tell a write that never
/// landed from one that landed and was deleted since: it is poisoned, as documented. That may
/// happen only to the entities deleted at the end; any other such job is a lost update.
///
/// Lost responses to dequeues and to visibility extensions (which lose the message's receipt)
/// end deliveries: under these faults on a loaded machine, a job may use up its deliveries
/// and be poisoned for its dequeue count. Re-queuing is the documented remedy and always
/// safe: each such job, re-queued once the faults stopped, completes (or, for a deleted
/// entity, is poisoned again as above).
async fn requeue_exhausted_jobs(
    index: &InterPartitionIndex<Employee>,
    worker: &Worker<CopyJob, CopyHandler<Employee>>,
) -> usize {
    let only_deleted_or_exhausted = |records: &[tablekit_eventual::PoisonRecord], exhausted_ok| {
        for record in records {
            let row_key = record
                .reason
                .split("RowKey=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .and_then(|id| id.parse::<usize>().ok());
            let deleted_entity =
                row_key.is_some_and(deleted) && record.reason.contains("did not land by");
            let exhausted = exhausted_ok && record.reason.starts_with("dequeued ");
            assert!(deleted_entity || exhausted, "{records:?}");
        }
    };
    let poisoned = index.jobs().peek_poisoned(32).await.unwrap();
    only_deleted_or_exhausted(&poisoned, true);
    let mut requeued = 0;
    let taken = index
        .jobs()
        .take_poisoned(32, Duration::from_secs(600))
        .await
        .unwrap();
    for job in taken
        .iter()
        .filter(|p| p.record.reason.starts_with("dequeued "))
    {
        index.jobs().requeue(job).await.unwrap();
        requeued += 1;
    }
    worker.drain().await.unwrap();
    // The others are hidden for the rest of the test: what the poison queue shows now came
    // from the re-queued jobs.
    let again = index.jobs().peek_poisoned(32).await.unwrap();
    only_deleted_or_exhausted(&again, false);
    requeued
}

/// Writes `n` employees through `write` (insert in round 0, put in later rounds, deletes
/// last) and returns the operations sent.
async fn list_workload<W, D>(n: usize, mut write: W, mut delete: D) -> usize
where
    W: AsyncFnMut(&Employee, bool),
    D: AsyncFnMut(&str, &str),
{
    let mut ops = 0;
    for round in 0..=ROUNDS {
        for i in 0..n {
            write(&employee("Sales", i, round), round == 0).await;
            ops += 1;
        }
    }
    for i in (0..n).filter(|&i| deleted(i)) {
        delete("Sales", &format!("{i:06}")).await;
        ops += 1;
    }
    ops
}

/// Every surviving id under its final last name, as (last name, id).
fn expected_lists(n: usize) -> Vec<(String, String)> {
    (0..n)
        .filter(|&i| !deleted(i))
        .map(|i| {
            let e = employee("Sales", i, ROUNDS);
            (e.last_name, e.id)
        })
        .collect()
}

const NAMES: [&str; 4] = ["Jones", "Smith", "Lee", "Cao"];

#[tokio::test]
async fn index_entities_in_the_same_partition_list_every_id_once() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultlist2").await;
    let lists = SamePartitionList::new(table.clone(), by_last_name("lastname_")).unwrap();
    let n = 30;
    arm(&p, 0x2_03);
    let ops = list_workload(
        n,
        async |e, new| {
            if new {
                lists.insert(e).await.unwrap();
            } else {
                lists.upsert(e).await.unwrap();
            }
        },
        async |pk, rk| lists.delete((pk, rk), IfMatch::Any).await.unwrap(),
    )
    .await;
    let faults = disarm(&p);

    let mut found = Vec::new();
    for name in NAMES {
        for id in lists.ids("Sales", name).await.unwrap() {
            found.push((name.to_owned(), id));
        }
    }
    let (lost, duplicated) = lost_and_duplicated(&expected_lists(n), &found);
    Figures {
        pattern: "index entities (2)",
        operations: ops,
        faults,
        lost,
        duplicated,
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

async fn eventual_lists(p: &common::Proxied, lists: EventualList<Employee>, seed: u64) -> Figures {
    // Writers and workers share one clock here: no allowance for skew in the jobs' deadlines.
    let lists = lists.with_clock_skew_allowance(Duration::ZERO);
    lists.create().await.unwrap();
    let n = 30;
    // The entities' writes (their partition is the department), not the lists'.
    let entity_writes = format!("{}(PartitionKey='Sales'", lists.table().name());
    arm_jobs(p, seed, &entity_writes);
    let worker = lists.worker(job_worker());
    let ops = serving(
        &worker,
        list_workload(
            n,
            async |e, new| {
                if new {
                    lists.insert(e).await.unwrap();
                } else {
                    lists.upsert(e).await.unwrap();
                }
            },
            async |pk, rk| lists.delete((pk, rk), IfMatch::Any).await.unwrap(),
        ),
    )
    .await;
    worker.drain().await.unwrap();
    let faults = disarm(p);
    worker.drain().await.unwrap();
    assert!(faults.delay > 0, "slow writes: {faults:?}");

    let mut found = Vec::new();
    for name in NAMES {
        for (pk, rk) in lists.ids(name).await.unwrap() {
            assert_eq!(pk, "Sales");
            found.push((name.to_owned(), rk));
        }
    }
    assert_eq!(lists.jobs().approximate_len().await.unwrap(), 0);
    let poisoned = lists.jobs().peek_poisoned(32).await.unwrap();
    assert!(poisoned.is_empty(), "{poisoned:?}");
    let (lost, duplicated) = lost_and_duplicated(&expected_lists(n), &found);
    lists.jobs().delete_queues().await.unwrap();
    Figures {
        pattern: "",
        operations: ops,
        faults,
        lost,
        duplicated,
    }
}

#[tokio::test]
async fn index_entities_in_their_own_partitions_list_every_id_once_after_the_workers_drain() {
    let p = common::proxied(job_settings());
    let table = common::table(&p.account, "faultlist3").await;
    let queue = p.account.queue(&unique_queue_name("faultlist3")).unwrap();
    let lists = EventualList::separate(
        table.clone(),
        table.clone(),
        by_last_name("lastname_"),
        queue,
    );
    let figures = eventual_lists(&p, lists, 0x2_04).await;
    Figures {
        pattern: "index entities (3)",
        ..figures
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn index_entities_in_blobs_list_every_id_once_after_the_workers_drain() {
    let p = common::proxied(job_settings());
    let table = common::table(&p.account, "faultlist1").await;
    let queue = p.account.queue(&unique_queue_name("faultlist1")).unwrap();
    let container = p
        .account
        .container(&unique_container_name("faultlist1"))
        .unwrap();
    let lists = EventualList::blobs(
        table.clone(),
        container.clone(),
        by_last_name("lastname_"),
        queue,
    );
    let figures = eventual_lists(&p, lists, 0x2_05).await;
    Figures {
        pattern: "index entities (1)",
        ..figures
    }
    .report(&p);
    container.delete_container().await.unwrap();
    table.delete_table().await.unwrap();
}
