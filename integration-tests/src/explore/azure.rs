//! `tablekit-azure`: transactions and bulk writes.

use std::collections::BTreeMap;

use tablekit_azure::{Account, BulkOptions, OperationOutcome, Table};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{Entity, ErrorKind, Keys, Properties};
use tablekit_testkit::explore::Scenario;

use super::model::{ensure, new_table, rows};
use super::outcome::Outcome;

const PK: &str = "p";

fn entity(rk: &str, by: &str) -> Entity<Properties> {
    Entity::new(
        Keys::new(PK, rk).expect("keys"),
        Properties::new().with("By", by).with("Row", rk),
    )
}

/// The rows the operation writes: `r0`, `r1`, `r2`.
const ROWS: [&str; 3] = ["r0", "r1", "r2"];

/// Who wrote each row now, by RowKey: `"op"` (the operation), `"actor"`, or absent.
async fn writers(direct: &Account, table: &str) -> Result<BTreeMap<String, String>, String> {
    let table = direct.table(table).map_err(|e| e.to_string())?;
    Ok(rows(&table, PK)
        .await?
        .into_iter()
        .map(|r| {
            let by = r
                .value
                .get_str("By")
                .ok()
                .flatten()
                .unwrap_or("?")
                .to_owned();
            (r.keys.rk().to_owned(), by)
        })
        .collect())
}

/// Another writer upserts row `r1` with its own content. Returns whether it found the
/// operation's `r1` there first.
async fn overwrite_r1(direct: &Account, table: &str) -> bool {
    let Ok(table) = direct.table(table) else {
        return false;
    };
    let keys = Keys::new(PK, "r1").expect("keys");
    let before = table.get::<Properties>(&keys).await.ok().flatten();
    let _ = table.upsert_replace(&entity("r1", "actor")).await;
    before.is_some_and(|r| r.value.get_str("By").ok().flatten() == Some("op"))
}

/// A bulk write's table, and whether the actor found the operation's `r1` before it
/// overwrote it.
pub struct BulkCtx {
    table: String,
    actor_saw_op: std::sync::atomic::AtomicBool,
}

/// Whether the transaction was applied, as rows the actor cannot have written show:
/// `r0` and `r2` are the operation's alone.
fn applied(now: &BTreeMap<String, String>) -> bool {
    ["r0", "r2"]
        .iter()
        .any(|rk| now.get(*rk).map(String::as_str) == Some("op"))
}

/// `Table::submit`: one transaction inserting three entities.
pub struct Submit;

impl Scenario for Submit {
    type Ctx = String;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "azure.submit"
    }

    fn invariant(&self) -> &'static str {
        "Ok ⇒ the transaction is stored; an error other than Indeterminate ⇒ nothing of it is stored; Indeterminate ⇒ all or nothing"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<String, String> {
        new_table(direct, "xsubmit").await
    }

    async fn operate(&self, table: &String, account: &Account) -> Outcome {
        let table: Table = account.table(table).expect("table name");
        let plan = BatchPlan::atomic(
            ROWS.iter()
                .map(|rk| Operation::insert(&entity(rk, "op")).expect("op")),
        )
        .expect("plan");
        Outcome::of(&table.submit(&plan).await)
    }

    async fn act(&self, table: &String, direct: &Account, _actor: u8) {
        overwrite_r1(direct, table).await;
    }

    async fn check(
        &self,
        table: &String,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let now = writers(direct, table).await?;
        let applied = applied(&now);
        // Atomic: r0 and r2 together.
        ensure(now.get("r0") == now.get("r2"), || {
            format!("half a transaction: {now:?}")
        })?;
        match report {
            Some(Outcome::Ok) => ensure(applied, || format!("Ok, but stored: {now:?}")),
            Some(o) if o.is(ErrorKind::Indeterminate) => Ok(()),
            Some(o) => ensure(!applied, || {
                format!("{o:?}, but the transaction is stored: {now:?}")
            }),
            None => Ok(()),
        }
    }
}

/// `Table::bulk_write`: three inserts of one partition (one transaction).
pub struct BulkWrite;

impl Scenario for BulkWrite {
    type Ctx = BulkCtx;
    type Report = Vec<String>;

    fn name(&self) -> &'static str {
        "azure.bulk_write"
    }

    fn invariant(&self) -> &'static str {
        "Failed ⇒ not stored, Written ⇒ stored exactly (with the ETag reported), Unknown ⇒ either"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<BulkCtx, String> {
        Ok(BulkCtx {
            table: new_table(direct, "xbulk").await?,
            actor_saw_op: std::sync::atomic::AtomicBool::new(false),
        })
    }

    async fn operate(&self, ctx: &BulkCtx, account: &Account) -> Vec<String> {
        let table: Table = account.table(&ctx.table).expect("table name");
        let operations = ROWS
            .iter()
            .map(|rk| Operation::insert(&entity(rk, "op")).expect("op"))
            .collect();
        match table.bulk_write(operations, BulkOptions::default()).await {
            Ok(report) => report
                .outcomes
                .iter()
                .map(|o| match o {
                    OperationOutcome::Written(_) => "written".to_owned(),
                    OperationOutcome::Failed(e) => format!("failed: {e}"),
                    OperationOutcome::Unknown(e) => format!("unknown: {e}"),
                })
                .collect(),
            Err(e) => vec![format!("error: {e}")],
        }
    }

    async fn act(&self, ctx: &BulkCtx, direct: &Account, _actor: u8) {
        if overwrite_r1(direct, &ctx.table).await {
            ctx.actor_saw_op
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    async fn check(
        &self,
        ctx: &BulkCtx,
        direct: &Account,
        report: Option<&Vec<String>>,
        _baseline: Option<&Vec<String>>,
    ) -> Result<(), String> {
        let now = writers(direct, &ctx.table).await?;
        let saw = ctx.actor_saw_op.load(std::sync::atomic::Ordering::SeqCst);
        // Whether the operation's write of a row was ever stored.
        let stored =
            |rk: &str| now.get(rk).map(String::as_str) == Some("op") || (rk == "r1" && saw);
        let Some(outcomes) = report else {
            return Ok(());
        };
        for (rk, outcome) in ROWS.iter().zip(outcomes) {
            if outcome.starts_with("failed") {
                ensure(!stored(rk), || {
                    format!(
                        "{rk} reported {outcome}, but it was stored: {now:?} (the actor found it: {saw})"
                    )
                })?;
            }
            if outcome == "written" {
                ensure(stored(rk), || {
                    format!("{rk} reported written, but stored: {now:?}")
                })?;
            }
        }
        Ok(())
    }
}
