//! `tablekit-eventual`: the design guide's archive job run by a worker, and a handler using
//! every `Steps` primitive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit_azure::{Account, Table};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{Entity, Keys, Properties, Result, Stored};
use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker};
use tablekit_testkit::explore::{Entry, Scenario};
use tablekit_testkit::unique_queue_name;

use super::model::{Employee, ensure, left_on, new_table, rows, worker_options};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![Entry::new(ArchiveJob), Entry::new(EveryStep)]
}

/// "Archive employee N": the job names the employee; the handler reads the data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArchiveEmployee {
    department: String,
    id: String,
}

impl Job for ArchiveEmployee {
    const KIND: &'static str = "archive-employee";
}

/// The README's archive handler: get from Current, upsert into Archive, delete from Current
/// under the ETag read; absent from Current means an earlier run finished.
struct Archiver {
    current: Table,
    archive: Table,
}

impl Handler<ArchiveEmployee> for Archiver {
    async fn handle(&self, job: ArchiveEmployee, steps: &Steps) -> Result<()> {
        let keys = (job.department, job.id);
        let Some(employee): Option<Stored<Employee>> = steps.get(&self.current, keys).await? else {
            return Ok(());
        };
        steps.upsert_replace(&self.archive, &employee.value).await?;
        steps
            .delete(&self.current, &employee.value, employee.if_match())
            .await?;
        Ok(())
    }
}

/// The tables and queue of an archive run, and whether the writer changed the employee.
pub struct ArchiveCtx {
    current: String,
    archive: String,
    queue: String,
    employee: Employee,
    /// The writer's change was stored (the job must then archive the changed employee).
    changed: AtomicBool,
    /// The operation's enqueue returned `Ok`.
    enqueued: AtomicBool,
}

impl ArchiveCtx {
    fn jobs(&self, account: &Account) -> JobQueue<ArchiveEmployee> {
        JobQueue::new(account.queue(&self.queue).expect("queue name"))
    }

    fn worker(&self, account: &Account) -> Worker<ArchiveEmployee, Archiver> {
        let archiver = Archiver {
            current: account.table(&self.current).expect("table name"),
            archive: account.table(&self.archive).expect("table name"),
        };
        Worker::new(self.jobs(account), archiver, worker_options())
    }

    fn job(&self) -> ArchiveEmployee {
        ArchiveEmployee {
            department: self.employee.department.clone(),
            id: self.employee.id.clone(),
        }
    }

    /// The employee as the writer changes it.
    fn changed(&self) -> Employee {
        Employee {
            age: 35,
            ..self.employee.clone()
        }
    }
}

/// What the operation returned: the enqueue's outcome and the drain's.
pub type JobReport = (Outcome, Outcome);

/// The archive job: enqueued, then run by a worker that drains the queue.
pub struct ArchiveJob;

impl Scenario for ArchiveJob {
    type Ctx = ArchiveCtx;
    type Report = JobReport;

    fn name(&self) -> &'static str {
        "eventual.worker.archive"
    }

    fn invariant(&self) -> &'static str {
        "after the workers drain, the employee is in Archive exactly once — as the writer changed it, if its change was stored — and not in Current; the queue and the poison queue are empty"
    }

    /// Actor 0 is a second worker on the same queue; actor 1 a writer changing the employee
    /// in Current under the ETag it read.
    fn actors(&self) -> u8 {
        2
    }

    async fn prepare(&self, direct: &Account) -> std::result::Result<ArchiveCtx, String> {
        let ctx = ArchiveCtx {
            current: new_table(direct, "xcurrent").await?,
            archive: new_table(direct, "xarchive").await?,
            queue: unique_queue_name("xarchive"),
            employee: Employee::jones("Sales", 456),
            changed: AtomicBool::new(false),
            enqueued: AtomicBool::new(false),
        };
        ctx.jobs(direct).create().await.map_err(|e| e.to_string())?;
        direct
            .table(&ctx.current)
            .map_err(|e| e.to_string())?
            .insert(&ctx.employee)
            .await
            .map_err(|e| e.to_string())?;
        Ok(ctx)
    }

    async fn operate(&self, ctx: &ArchiveCtx, account: &Account) -> JobReport {
        let enqueued = ctx.jobs(account).enqueue(&ctx.job()).await;
        if enqueued.is_ok() {
            ctx.enqueued.store(true, Ordering::SeqCst);
        }
        let drained = ctx.worker(account).drain().await;
        (Outcome::of(&enqueued), Outcome::of(&drained))
    }

    /// A caller whose enqueue did not return `Ok` enqueues again (a job is at least once,
    /// so a duplicate is harmless), then the workers drain.
    async fn recover(
        &self,
        ctx: &ArchiveCtx,
        account: &Account,
        _report: Option<&JobReport>,
    ) -> std::result::Result<(), String> {
        if !ctx.enqueued.load(Ordering::SeqCst) {
            ctx.jobs(account)
                .enqueue(&ctx.job())
                .await
                .map_err(|e| format!("enqueue again: {e}"))?;
            ctx.enqueued.store(true, Ordering::SeqCst);
        }
        ctx.worker(account)
            .drain()
            .await
            .map(|_| ())
            .map_err(|e| format!("drain: {e}"))
    }

    async fn act(&self, ctx: &ArchiveCtx, direct: &Account, actor: u8) {
        match actor {
            // A second worker takes what it can for half a second; a handler it started
            // finishes within its shutdown grace.
            0 => {
                let _ = ctx
                    .worker(direct)
                    .run_until(tokio::time::sleep(Duration::from_millis(500)))
                    .await;
            }
            // Another writer changes the employee, if it is still in Current, under the
            // ETag it read.
            _ => {
                let Ok(current) = direct.table(&ctx.current) else {
                    return;
                };
                if let Ok(Some(stored)) = current.get::<Employee>(&ctx.employee).await {
                    if current
                        .replace(&ctx.changed(), stored.if_match())
                        .await
                        .is_ok()
                    {
                        ctx.changed.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    async fn check(
        &self,
        ctx: &ArchiveCtx,
        direct: &Account,
        _report: Option<&JobReport>,
        _baseline: Option<&JobReport>,
    ) -> std::result::Result<(), String> {
        let pk = &ctx.employee.department;
        let current = rows(&direct.table(&ctx.current).map_err(|e| e.to_string())?, pk).await?;
        ensure(current.is_empty(), || {
            format!("still in Current: {:?}", current.first().map(|r| &r.value))
        })?;
        let archived = direct
            .table(&ctx.archive)
            .map_err(|e| e.to_string())?
            .typed::<Employee>()
            .query()
            .allow_scan()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        let changed = ctx.changed.load(Ordering::SeqCst);
        let expected = if changed {
            ctx.changed()
        } else {
            ctx.employee.clone()
        };
        let found: Vec<&Employee> = archived.iter().map(|s| &s.value).collect();
        ensure(found == [&expected], || {
            format!(
                "Archive holds {found:?}, expected {expected:?} (the writer's change stored: {changed})"
            )
        })?;
        let (queued, poisoned) = left_on(&ctx.jobs(direct)).await?;
        ensure(queued + poisoned == 0, || {
            format!("{queued} messages left on the queue, {poisoned} on the poison queue")
        })
    }
}

/// A job for the handler that uses every step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EveryStepJob {
    partition: String,
}

impl Job for EveryStepJob {
    const KIND: &'static str = "every-step";
}

/// A row of partition `pk` holding `props`.
fn row(pk: &str, rk: &str, props: &[(&str, &str)]) -> Entity<Properties> {
    let value = props
        .iter()
        .fold(Properties::new(), |p, (name, value)| p.with(*name, *value));
    Entity::new(Keys::new(pk, rk).expect("keys"), value)
}

/// Uses each primitive once: the upserts and `delete_if_exists` as they are; the ETag
/// conditioned writes (replace, merge, delete, a transaction) after reading the row, and
/// only when the read shows the work is not done yet, as a handler must to be repeatable.
struct Stepper {
    table: Table,
}

impl Stepper {
    async fn read(&self, steps: &Steps, pk: &str, rk: &str) -> Result<Option<Stored<Properties>>> {
        steps.get(&self.table, (pk, rk)).await
    }
}

impl Handler<EveryStepJob> for Stepper {
    async fn handle(&self, job: EveryStepJob, steps: &Steps) -> Result<()> {
        let (t, pk) = (&self.table, job.partition.as_str());
        steps
            .upsert_replace(t, &row(pk, "u1", &[("V", "upserted")]))
            .await?;
        steps
            .upsert_merge(t, &row(pk, "u2", &[("M", "merged")]))
            .await?;
        steps.delete_if_exists(t, (pk, "d")).await?;
        if let Some(a) = self.read(steps, pk, "a").await? {
            if a.value.get_str("V").ok().flatten() != Some("replaced") {
                steps
                    .replace(t, &row(pk, "a", &[("V", "replaced")]), a.if_match())
                    .await?;
            }
        }
        if let Some(b) = self.read(steps, pk, "b").await? {
            if b.value.get_str("M").ok().flatten() != Some("merged") {
                steps
                    .merge(t, &row(pk, "b", &[("M", "merged")]), b.if_match())
                    .await?;
            }
        }
        if let Some(c) = self.read(steps, pk, "c").await? {
            steps.delete(t, &c.keys, c.if_match()).await?;
        }
        if let Some(f) = self.read(steps, pk, "f").await? {
            if f.value.get_str("V").ok().flatten() != Some("tx") {
                let plan = BatchPlan::atomic([
                    Operation::replace(&row(pk, "f", &[("V", "tx")]), f.if_match())?,
                    Operation::upsert_replace(&row(pk, "e", &[("V", "tx")]))?,
                ])?;
                steps.submit(t, &plan).await?;
            }
        }
        Ok(())
    }
}

/// The table and queue of a steps run.
pub struct StepsCtx {
    table: String,
    queue: String,
    enqueued: AtomicBool,
}

const STEPS_PK: &str = "p";

impl StepsCtx {
    fn jobs(&self, account: &Account) -> JobQueue<EveryStepJob> {
        JobQueue::new(account.queue(&self.queue).expect("queue name"))
    }

    fn worker(&self, account: &Account) -> Worker<EveryStepJob, Stepper> {
        let handler = Stepper {
            table: account.table(&self.table).expect("table name"),
        };
        Worker::new(self.jobs(account), handler, worker_options())
    }

    fn job(&self) -> EveryStepJob {
        EveryStepJob {
            partition: STEPS_PK.into(),
        }
    }
}

/// What the partition holds once the job ran, by RowKey: `c` and `d` deleted.
fn steps_end_state() -> Vec<(&'static str, Properties)> {
    let p = |props: &[(&str, &str)]| row(STEPS_PK, "x", props).value;
    vec![
        ("a", p(&[("V", "replaced")])),
        ("b", p(&[("Keep", "k"), ("M", "merged")])),
        ("e", p(&[("V", "tx")])),
        ("f", p(&[("V", "tx")])),
        ("u1", p(&[("V", "upserted")])),
        ("u2", p(&[("Keep", "k"), ("M", "merged")])),
    ]
}

/// A handler using every `Steps` primitive — `upsert_replace`, `upsert_merge`,
/// `delete_if_exists`, `delete`, `replace` and `merge` with the ETag read, and a
/// transaction — enqueued and run by a worker.
pub struct EveryStep;

impl Scenario for EveryStep {
    type Ctx = StepsCtx;
    type Report = JobReport;

    fn name(&self) -> &'static str {
        "eventual.steps"
    }

    fn invariant(&self) -> &'static str {
        "after the workers drain, the partition holds exactly the state one run of the handler makes, whatever ran more than once; the queue and the poison queue are empty"
    }

    async fn prepare(&self, direct: &Account) -> std::result::Result<StepsCtx, String> {
        let ctx = StepsCtx {
            table: new_table(direct, "xsteps").await?,
            queue: unique_queue_name("xsteps"),
            enqueued: AtomicBool::new(false),
        };
        ctx.jobs(direct).create().await.map_err(|e| e.to_string())?;
        let table = direct.table(&ctx.table).map_err(|e| e.to_string())?;
        let initial = [
            ("a", vec![("V", "orig")]),
            ("b", vec![("Keep", "k")]),
            ("c", vec![("V", "orig")]),
            ("d", vec![("V", "orig")]),
            ("f", vec![("V", "orig")]),
            ("u2", vec![("Keep", "k")]),
        ];
        for (rk, props) in initial {
            table
                .insert(&row(STEPS_PK, rk, &props))
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(ctx)
    }

    async fn operate(&self, ctx: &StepsCtx, account: &Account) -> JobReport {
        let enqueued = ctx.jobs(account).enqueue(&ctx.job()).await;
        if enqueued.is_ok() {
            ctx.enqueued.store(true, Ordering::SeqCst);
        }
        let drained = ctx.worker(account).drain().await;
        (Outcome::of(&enqueued), Outcome::of(&drained))
    }

    async fn recover(
        &self,
        ctx: &StepsCtx,
        account: &Account,
        _report: Option<&JobReport>,
    ) -> std::result::Result<(), String> {
        if !ctx.enqueued.load(Ordering::SeqCst) {
            ctx.jobs(account)
                .enqueue(&ctx.job())
                .await
                .map_err(|e| format!("enqueue again: {e}"))?;
            ctx.enqueued.store(true, Ordering::SeqCst);
        }
        ctx.worker(account)
            .drain()
            .await
            .map(|_| ())
            .map_err(|e| format!("drain: {e}"))
    }

    async fn check(
        &self,
        ctx: &StepsCtx,
        direct: &Account,
        _report: Option<&JobReport>,
        _baseline: Option<&JobReport>,
    ) -> std::result::Result<(), String> {
        let table = direct.table(&ctx.table).map_err(|e| e.to_string())?;
        let now: Vec<(String, Properties)> = rows(&table, STEPS_PK)
            .await?
            .into_iter()
            .map(|r| (r.keys.rk().to_owned(), r.value))
            .collect();
        let expected: Vec<(String, Properties)> = steps_end_state()
            .into_iter()
            .map(|(rk, p)| (rk.to_owned(), p))
            .collect();
        ensure(now == expected, || {
            format!("the partition holds {now:?}, expected {expected:?}")
        })?;
        let (queued, poisoned) = left_on(&ctx.jobs(direct)).await?;
        ensure(queued + poisoned == 0, || {
            format!("{queued} messages left on the queue, {poisoned} on the poison queue")
        })
    }
}
