//! Index entities in the entities' partition (option 2): `SamePartitionList`.

use tablekit_azure::Account;
use tablekit_core::{ErrorKind, Properties};
use tablekit_index::{ListSpec, SamePartitionList};
use tablekit_testkit::explore::Scenario;

use super::model::{Employee, ensure, new_table};
use super::outcome::Outcome;

fn list(account: &Account, table: &str) -> SamePartitionList<Employee> {
    let spec = ListSpec::builder("lastname", Employee::LAST_NAME)
        .with_prefix("lastname_")
        .build()
        .expect("spec");
    SamePartitionList::new(account.table(table).expect("table name"), spec).expect("list")
}

/// Whether the employee is in a partition: stored, listed, both or neither.
async fn presence(
    list: &SamePartitionList<Employee>,
    e: &Employee,
) -> Result<(bool, bool), String> {
    let stored = list
        .table()
        .get::<Properties>(e)
        .await
        .map_err(|x| x.to_string())?
        .is_some();
    let listed = list
        .ids(&e.department, &e.last_name)
        .await
        .map_err(|x| x.to_string())?
        .contains(&e.id);
    Ok((stored, listed))
}

/// `SamePartitionList::relocate`: Jones moves from Sales to Marketing with its list entry.
pub struct Relocate;

/// The table and the two values.
pub struct Ctx {
    table: String,
    before: Employee,
    after: Employee,
}

impl Scenario for Relocate {
    type Ctx = Ctx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "index.list.same_partition.relocate"
    }

    fn invariant(&self) -> &'static str {
        "the entity is stored and listed in exactly one partition — the new one on Ok, the old one on a refusal — or, when the outcome is Indeterminate or the process stopped, in one or both, as the error says; never in neither, never stored without its list entry"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<Ctx, String> {
        let table = new_table(direct, "xlistmove").await?;
        let before = Employee::jones("Sales", 223);
        list(direct, &table)
            .insert(&before)
            .await
            .map_err(|e| e.to_string())?;
        let after = Employee {
            department: "Marketing".into(),
            ..before.clone()
        };
        Ok(Ctx {
            table,
            before,
            after,
        })
    }

    async fn operate(&self, ctx: &Ctx, account: &Account) -> Outcome {
        let list = list(account, &ctx.table);
        let result = async {
            let current = list
                .table()
                .get::<Employee>(&ctx.before)
                .await?
                .expect("prepared");
            list.relocate(&current, &ctx.after).await
        }
        .await;
        Outcome::of(&result)
    }

    /// Another writer changes the age of the entity in its old partition, if it is still
    /// there, conditioned on what it read.
    async fn act(&self, ctx: &Ctx, direct: &Account, _actor: u8) {
        let list = list(direct, &ctx.table);
        if let Ok(Some(current)) = list.table().get::<Employee>(&ctx.before).await {
            let older = Employee {
                age: 35,
                ..ctx.before.clone()
            };
            let _ = list.replace(&current, &older).await;
        }
    }

    async fn check(
        &self,
        ctx: &Ctx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let list = list(direct, &ctx.table);
        let old = presence(&list, &ctx.before).await?;
        let new = presence(&list, &ctx.after).await?;
        for (name, (stored, listed)) in [("old", old), ("new", new)] {
            ensure(stored == listed, || {
                format!("the {name} partition: stored {stored}, listed {listed}")
            })?;
        }
        let (in_old, in_new) = (old.0, new.0);
        ensure(in_old || in_new, || {
            "the entity is in neither partition".into()
        })?;
        match report {
            Some(Outcome::Ok) => ensure(in_new && !in_old, || {
                format!("Ok, but in old: {in_old}, in new: {in_new}")
            }),
            Some(outcome) if outcome.is(ErrorKind::Indeterminate) => {
                let says = |place: &str| outcome.message().contains(place);
                let holds = (!says("is in both partitions") || (in_old && in_new))
                    && (!says("is in its old partition") || in_old)
                    && (!says("is in its new partition") || in_new);
                ensure(holds, || {
                    format!("{outcome:?}, but in old: {in_old}, in new: {in_new}")
                })
            }
            Some(outcome) => ensure(in_old && !in_new, || {
                format!("{outcome:?} (a refusal), but in old: {in_old}, in new: {in_new}")
            }),
            None => Ok(()),
        }
    }
}
