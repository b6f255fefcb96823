//! The inter-partition secondary index: copies kept by queued jobs.

use tablekit_azure::Account;
use tablekit_core::{Properties, Stored};
use tablekit_index::{IndexRead as _, InterPartitionIndex};
use tablekit_testkit::explore::Scenario;
use tablekit_testkit::unique_queue_name;

use super::model::{
    Employee, SKEW, directory, ensure, left_on, new_table, rows, text, worker_options,
};
use super::outcome::Outcome;

/// The table and queue of a run.
pub struct Names {
    table: String,
    queue: String,
    /// The employee as prepared.
    before: Employee,
}

fn index(account: &Account, names: &Names) -> InterPartitionIndex<Employee> {
    let table = account.table(&names.table).expect("table name");
    let queue = account.queue(&names.queue).expect("queue name");
    InterPartitionIndex::builder(table, directory().spec, queue)
        .with_clock_skew_allowance(SKEW)
        .build()
        .expect("index")
}

async fn prepare(direct: &Account, prefix: &str) -> Result<Names, String> {
    let names = Names {
        table: new_table(direct, prefix).await?,
        queue: unique_queue_name(prefix),
        before: Employee::jones("Sales", 223),
    };
    let index = index(direct, &names);
    index.create().await.map_err(|e| e.to_string())?;
    index
        .insert(&names.before)
        .await
        .map_err(|e| e.to_string())?;
    index
        .worker(worker_options())
        .drain()
        .await
        .map_err(|e| e.to_string())?;
    Ok(names)
}

/// Every copy of the employee matches its primary, or a job for it is queued or poisoned.
async fn check_copies(direct: &Account, names: &Names) -> Result<(), String> {
    let index = index(direct, names);
    let (queued, poisoned) = left_on(&index.jobs()).await?;
    if queued + poisoned > 0 {
        return Ok(());
    }
    let table = direct.table(&names.table).map_err(|e| e.to_string())?;
    let primary = index
        .get("Sales", names.before.id.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let copies: Vec<Stored<Properties>> = rows(&table, "email_Sales")
        .await?
        .into_iter()
        .filter(|r| text(r, "Id") == Some(names.before.id.as_str()))
        .collect();
    let found: Vec<&str> = copies.iter().map(|c| c.keys.rk()).collect();
    match &primary {
        None => ensure(copies.is_empty(), || {
            format!("the entity is gone, its email copies {found:?} stayed, nothing queued")
        }),
        Some(p) => {
            ensure(found == [p.value.email.as_str()], || {
                format!(
                    "the primary's email is {}, the copies are {found:?}, nothing queued",
                    p.value.email
                )
            })?;
            let age = copies[0].value.get_i64("Age").ok().flatten();
            ensure(age == Some(i64::from(p.value.age)), || {
                format!("the copy holds age {age:?}, the primary {}", p.value.age)
            })
        }
    }
}

/// `InterPartitionIndex::upsert` changes the email from A to B, the worker drains, another
/// `upsert` changes it to C, the worker drains again: a copy write of the first job may land
/// late, after the second job's.
pub struct PutTwice;

impl Scenario for PutTwice {
    type Ctx = Names;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "index.inter.upsert"
    }

    fn invariant(&self) -> &'static str {
        "after the workers drain, every copy matches its primary, or a job for it is queued or poisoned; never a stale copy with an empty queue"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<Names, String> {
        prepare(direct, "xinterput").await
    }

    async fn operate(&self, names: &Names, account: &Account) -> Outcome {
        let index = index(account, names);
        let result = async {
            let mut e = names.before.clone();
            e.email = "b@contoso.com".into();
            index.upsert(&e).await?;
            // The first job runs before the second write.
            index.worker(worker_options()).drain().await?;
            e.email = "c@contoso.com".into();
            e.age = 40;
            index.upsert(&e).await
        }
        .await;
        Outcome::of(&result)
    }

    async fn recover(
        &self,
        names: &Names,
        account: &Account,
        _report: Option<&Outcome>,
    ) -> Result<(), String> {
        index(account, names)
            .worker(worker_options())
            .drain()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Another writer changes the age, through the index.
    async fn act(&self, names: &Names, direct: &Account, _actor: u8) {
        let index = index(direct, names);
        if let Ok(Some(current)) = index.get("Sales", names.before.id.as_str()).await {
            let mut e = current.value.clone();
            e.age += 100;
            let _ = index.upsert(&e).await;
        }
    }

    async fn check(
        &self,
        names: &Names,
        direct: &Account,
        _report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        check_copies(direct, names).await
    }
}
