//! Index entities kept apart (option 3): lists updated by queued jobs.

use std::time::Duration;

use tablekit_azure::{Account, Settings, ThroughputPolicy};
use tablekit_index::{EventualList, ListSpec};
use tablekit_testkit::explore::{self, Plan, Scenario};
use tablekit_testkit::unique_queue_name;

use super::model::{Employee, SKEW, ensure, left_on, new_table, worker_options};
use super::outcome::Outcome;

fn spec() -> ListSpec<Employee> {
    ListSpec::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .with_property("EmployeeDetails")
        .build()
        .expect("spec")
}

/// The table and queue of a run.
pub struct Names {
    table: String,
    queue: String,
}

fn list(account: &Account, names: &Names) -> EventualList<Employee> {
    let table = account.table(&names.table).expect("table name");
    let queue = account.queue(&names.queue).expect("queue name");
    EventualList::separate(table.clone(), table, spec(), queue).with_clock_skew_allowance(SKEW)
}

/// The account of the workers: another process, with the default (Azure's) budgets, not the
/// writer's starved one.
fn workers(account: &Account) -> Account {
    account
        .with_settings(
            account
                .settings()
                .clone()
                .with_throughput(ThroughputPolicy::default()),
        )
        .expect("settings")
}

/// Every employee of `ids` is listed under its last name, or a job for it is queued or
/// poisoned.
async fn check_listed(direct: &Account, names: &Names, ids: &[u32]) -> Result<(), String> {
    let list = list(direct, names);
    let (queued, poisoned) = left_on(&list.jobs()).await?;
    if queued + poisoned > 0 {
        return Ok(());
    }
    let found = list
        .lookup("Jones")
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut listed: Vec<String> = found.iter().map(|s| s.value.id.clone()).collect();
    listed.sort();
    let stored = direct.table(&names.table).map_err(|e| e.to_string())?;
    let mut present = Vec::new();
    for id in ids {
        let e = Employee::jones("Sales", *id);
        if stored
            .get::<tablekit_core::Properties>(&e)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            present.push(e.id);
        }
    }
    ensure(listed == present, || {
        format!("stored: {present:?}, listed under Jones: {listed:?}, nothing queued or poisoned")
    })
}

/// `EventualList::insert` of two employees into one partition by a writer whose throughput
/// budget for that partition is one entity every seven seconds, while a worker (another
/// process, with Azure's budgets) runs the jobs: the second insert would wait for budget
/// past its job's deadline (about six seconds with these settings).
pub struct GovernedInsert;

const IDS: [u32; 2] = [1, 2];

impl Scenario for GovernedInsert {
    type Ctx = Names;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "index.list.eventual.insert_governed"
    }

    fn invariant(&self) -> &'static str {
        "after the workers drain, every stored entity is listed under its value, or a job for it is queued or poisoned"
    }

    /// A 300 ms request timeout keeps the jobs' deadlines short (2 × 2.7 s + 0.5 s).
    fn settings(&self) -> Settings {
        explore::settings()
            .with_throughput(
                ThroughputPolicy::default()
                    .with_targets(0.15, 1_000.0)
                    .with_adaptive(false),
            )
            .with_request_timeout(Duration::from_millis(300))
    }

    /// Every run waits out a budget for seconds: a seeded sample in the suite, beside the
    /// ungoverned insert's single faults.
    fn suite_plan(&self) -> Plan {
        Plan::Random {
            seed: 25,
            count: 24,
        }
    }

    async fn prepare(&self, direct: &Account) -> Result<Names, String> {
        let names = Names {
            table: new_table(direct, "xlistgov").await?,
            queue: unique_queue_name("xlistgov"),
        };
        list(direct, &names)
            .create()
            .await
            .map_err(|e| e.to_string())?;
        Ok(names)
    }

    async fn operate(&self, names: &Names, account: &Account) -> Outcome {
        let list = list(account, names);
        let worker = self::list(&workers(account), names).worker(worker_options());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let inserts = async {
            let mut result = Ok(tablekit_core::ETag::new(""));
            for id in IDS {
                result = list.insert(&Employee::jones("Sales", id)).await;
                if result.is_err() {
                    break;
                }
            }
            let _ = stop.send(());
            result
        };
        let (result, _) = tokio::join!(
            inserts,
            worker.run_until(async {
                let _ = stopped.await;
            })
        );
        Outcome::of(&result)
    }

    async fn recover(
        &self,
        names: &Names,
        account: &Account,
        _report: Option<&Outcome>,
    ) -> Result<(), String> {
        // A job whose insert may still land waits out that deadline: polling for it every
        // second instead of every 100 ms keeps the recovery's requests (each one a fault point)
        // few.
        list(&workers(account), names)
            .worker(worker_options().with_idle_backoff_max(Duration::from_secs(1)))
            .drain()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn check(
        &self,
        names: &Names,
        direct: &Account,
        _report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        check_listed(direct, names, &IDS).await
    }
}
