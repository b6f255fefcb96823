//! The intra-partition secondary index.

use tablekit_azure::Account;
use tablekit_core::{ErrorKind, IfMatch, Properties, Stored};
use tablekit_index::{IndexRead as _, IntraPartitionIndex};
use tablekit_testkit::explore::Scenario;

use super::model::{Employee, directory, ensure, new_table, rows, text};
use super::outcome::Outcome;

fn index(account: &Account, table: &str) -> IntraPartitionIndex<Employee> {
    IntraPartitionIndex::new(account.table(table).expect("table name"), directory().spec)
}

/// Where an employee's family of rows (`empid_…` and `email_…`) is in one partition.
#[derive(Debug, Clone, PartialEq)]
enum Family {
    Absent,
    /// Both rows, holding this age.
    Complete(i32),
    /// Some rows, or rows that disagree.
    Broken(String),
}

fn family(rows: &[Stored<Properties>], e: &Employee) -> Family {
    let primary = rows
        .iter()
        .find(|r| r.keys.rk() == format!("empid_{}", e.id));
    let email = rows
        .iter()
        .find(|r| r.keys.rk() == format!("email_{}", e.email));
    match (primary, email) {
        (None, None) => Family::Absent,
        (Some(p), Some(c)) => {
            let age = |r: &Stored<Properties>| r.value.get_i64("Age").ok().flatten();
            if age(p) == age(c) && text(c, "Id") == Some(e.id.as_str()) {
                Family::Complete(age(p).unwrap_or_default() as i32)
            } else {
                Family::Broken(format!("copies disagree: {:?} vs {:?}", p.value, c.value))
            }
        }
        (p, _) => Family::Broken(format!(
            "only {} of the family",
            if p.is_some() {
                "the primary"
            } else {
                "the email copy"
            }
        )),
    }
}

/// `IntraPartitionIndex::relocate`: Jones moves from Sales to Marketing.
pub struct Relocate;

/// The table and the two values.
pub struct RelocateCtx {
    table: String,
    before: Employee,
    after: Employee,
}

impl Scenario for Relocate {
    type Ctx = RelocateCtx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "index.intra.relocate"
    }

    fn invariant(&self) -> &'static str {
        "the entity's family is complete in exactly one partition — the new one on Ok, the old one on a refusal — or, when the outcome is Indeterminate or the process stopped, in one or both, as the error says; never in neither"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<RelocateCtx, String> {
        let table = new_table(direct, "xrelocate").await?;
        let before = Employee::jones("Sales", 223);
        index(direct, &table)
            .insert(&before)
            .await
            .map_err(|e| e.to_string())?;
        let after = Employee {
            department: "Marketing".into(),
            ..before.clone()
        };
        Ok(RelocateCtx {
            table,
            before,
            after,
        })
    }

    async fn operate(&self, ctx: &RelocateCtx, account: &Account) -> Outcome {
        let index = index(account, &ctx.table);
        let result = async {
            let current = index
                .get("Sales", ctx.before.id.as_str())
                .await?
                .expect("prepared");
            index.relocate(&current, &ctx.after).await
        }
        .await;
        Outcome::of(&result)
    }

    /// Another writer changes the age of the entity in its old partition, if it is still
    /// there, conditioned on what it read.
    async fn act(&self, ctx: &RelocateCtx, direct: &Account, _actor: u8) {
        let index = index(direct, &ctx.table);
        if let Ok(Some(current)) = index.get("Sales", ctx.before.id.as_str()).await {
            let older = Employee {
                age: 35,
                ..ctx.before.clone()
            };
            let _ = index.replace(&current, &older).await;
        }
        let _ = IfMatch::Any;
    }

    async fn check(
        &self,
        ctx: &RelocateCtx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let table = direct.table(&ctx.table).map_err(|e| e.to_string())?;
        let old = family(&rows(&table, "Sales").await?, &ctx.before);
        let new = family(&rows(&table, "Marketing").await?, &ctx.after);
        for (name, f) in [("old", &old), ("new", &new)] {
            if let Family::Broken(why) = f {
                return Err(format!("the {name} partition: {why}"));
            }
        }
        let (in_old, in_new) = (old != Family::Absent, new != Family::Absent);
        ensure(in_old || in_new, || {
            "the entity is in neither partition".into()
        })?;
        match report {
            Some(Outcome::Ok) => ensure(in_new && !in_old, || {
                format!("Ok, but old: {old:?}, new: {new:?}")
            }),
            Some(outcome @ Outcome::Err { kind, .. }) if *kind == ErrorKind::Indeterminate => {
                // The error says where the entity is; it must be there.
                let says = |place: &str| outcome.message().contains(place);
                let holds = (!says("is in both partitions") || (in_old && in_new))
                    && (!says("is in its old partition") || in_old)
                    && (!says("is in its new partition") || in_new);
                let says_where = says("is in both partitions")
                    || says("is in its old partition")
                    || says("is in its new partition");
                ensure(holds && says_where, || {
                    format!("{outcome:?}, but old: {old:?}, new: {new:?}")
                })
            }
            Some(outcome) => ensure(in_old && !in_new, || {
                format!("{outcome:?} (a refusal), but old: {old:?}, new: {new:?}")
            }),
            None => Ok(()),
        }
    }
}
