//! `tablekit-encryption`: writes through an encrypting table.

use std::sync::{Arc, Mutex};

use tablekit_azure::{Account, BulkOptions, OperationOutcome, Table};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{ETag, Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_encryption::{AesKeyWrap, EncryptionPolicy};
use tablekit_testkit::explore::{Entry, Scenario};

use super::model::{ensure, new_table};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![Entry::new(EncryptedWrites)]
}

/// The policy of the scenario: `Secret` is encrypted, `Plain` is not.
fn policy() -> EncryptionPolicy {
    let kek = Arc::new(AesKeyWrap::new("explore-kek", &[7u8; 32]).expect("key"));
    EncryptionPolicy::builder(kek)
        .properties(["Secret"])
        .build()
        .expect("policy")
}

/// `table` on `account`, encrypting.
fn encrypting(account: &Account, table: &str) -> Table {
    policy().table(&account.table(table).expect("table name"))
}

/// Row `rk` of partition `pk`, as `who` writes it.
fn row(pk: &str, rk: &str, who: &str) -> Entity<Properties> {
    Entity::new(
        Keys::new(pk, rk).expect("keys"),
        Properties::new()
            .with("Secret", format!("{who}'s secret of {rk}: naïve «x»"))
            .with("Plain", who),
    )
}

/// The rows each write makes, by (PartitionKey, RowKey).
const INSERTED: (&str, &str) = ("s", "inserted");
const REPLACED: (&str, &str) = ("s", "replaced");
const TRANSACTION: [(&str, &str); 2] = [("t", "t0"), ("t", "t1")];
const BULK: [(&str, &str); 4] = [("b", "b0"), ("b", "b1"), ("c", "c0"), ("c", "c1")];

/// What the writes returned, kept as they return (the process may stop).
#[derive(Debug, Clone, Default)]
pub struct Returned {
    insert: Option<Outcome>,
    replace: Option<Outcome>,
    submit: Option<Outcome>,
    /// Per bulk operation: `written`, `failed: …`, `unknown: …`, or the call's error.
    bulk: Option<Vec<String>>,
}

/// The table, the ETag of the row to replace, and what the writes returned.
pub struct EncryptedCtx {
    table: String,
    etag: ETag,
    returned: Mutex<Returned>,
}

/// An encrypting table: `insert`, `replace` under the ETag read, a transaction (`submit`)
/// and a `bulk_write` over two partitions.
pub struct EncryptedWrites;

impl Scenario for EncryptedWrites {
    type Ctx = EncryptedCtx;
    type Report = Returned;

    fn name(&self) -> &'static str {
        "encrypted.table"
    }

    fn invariant(&self) -> &'static str {
        "every stored row decrypts, to exactly what one write wrote, and is stored encrypted; Ok and Written ⇒ stored as written; a transaction is all or nothing, and stored only after Ok or Indeterminate; Failed and other errors ⇒ not stored"
    }

    async fn prepare(&self, direct: &Account) -> Result<EncryptedCtx, String> {
        let name = new_table(direct, "xencrypted").await?;
        let etag = encrypting(direct, &name)
            .insert(&row(REPLACED.0, REPLACED.1, "init"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(EncryptedCtx {
            table: name,
            etag,
            returned: Mutex::new(Returned::default()),
        })
    }

    async fn operate(&self, ctx: &EncryptedCtx, account: &Account) -> Returned {
        let table = encrypting(account, &ctx.table);
        let keep = |f: &dyn Fn(&mut Returned)| f(&mut ctx.returned.lock().expect("returned"));

        let inserted = table.insert(&row(INSERTED.0, INSERTED.1, "op")).await;
        keep(&|r| r.insert = Some(Outcome::of(&inserted)));

        let replaced = table
            .replace(
                &row(REPLACED.0, REPLACED.1, "op"),
                IfMatch::ETag(ctx.etag.clone()),
            )
            .await;
        keep(&|r| r.replace = Some(Outcome::of(&replaced)));

        let plan = BatchPlan::atomic(
            TRANSACTION
                .iter()
                .map(|(pk, rk)| Operation::insert(&row(pk, rk, "op")).expect("operation")),
        )
        .expect("plan");
        let submitted = table.submit(&plan).await;
        keep(&|r| r.submit = Some(Outcome::of(&submitted)));

        let operations = BULK
            .iter()
            .map(|(pk, rk)| Operation::insert(&row(pk, rk, "op")).expect("operation"))
            .collect();
        let bulk = match table.bulk_write(operations, BulkOptions::default()).await {
            Ok(report) => report
                .outcomes
                .iter()
                .map(|o| match o {
                    OperationOutcome::Written(_) => "written".to_owned(),
                    OperationOutcome::Failed(e) => format!("failed: {e}"),
                    OperationOutcome::Unknown(e) => format!("unknown: {e}"),
                })
                .collect(),
            Err(e) => vec![format!("error: {e}"); BULK.len()],
        };
        keep(&|r| r.bulk = Some(bulk.clone()));
        ctx.returned.lock().expect("returned").clone()
    }

    async fn check(
        &self,
        ctx: &EncryptedCtx,
        direct: &Account,
        _report: Option<&Returned>,
        _baseline: Option<&Returned>,
    ) -> Result<(), String> {
        let table = encrypting(direct, &ctx.table);
        let raw = direct.table(&ctx.table).map_err(|e| e.to_string())?;
        // Who wrote the row now stored, after checking it is stored encrypted and decrypts to
        // exactly what that writer wrote.
        let read = |pk: &'static str, rk: &'static str| {
            let (table, raw) = (table.clone(), raw.clone());
            async move {
                let plain = table
                    .get::<Properties>((pk, rk))
                    .await
                    .map_err(|e| format!("{pk}/{rk} does not decrypt: {e}"))?;
                let Some(plain) = plain else {
                    return Ok(None);
                };
                let who = plain
                    .value
                    .get_str("Plain")
                    .ok()
                    .flatten()
                    .unwrap_or("?")
                    .to_owned();
                ensure(plain.value == row(pk, rk, &who).value, || {
                    format!("{pk}/{rk} decrypts to {:?}", plain.value)
                })?;
                let stored = raw
                    .get::<Properties>((pk, rk))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|s| s.value);
                let secret = stored.as_ref().and_then(|s| s.get("Secret"));
                ensure(secret.is_some_and(|s| s.as_str().is_none()), || {
                    format!("{pk}/{rk} is not stored encrypted: {stored:?}")
                })?;
                Ok::<_, String>(Some(who))
            }
        };
        let returned = ctx.returned.lock().expect("returned").clone();

        let now = read(INSERTED.0, INSERTED.1).await?;
        let stored = now.as_deref() == Some("op");
        match &returned.insert {
            Some(Outcome::Ok) => ensure(stored, || format!("insert Ok, but {now:?}"))?,
            Some(o) if !open(o) => {
                return Err(format!(
                    "insert returned {o:?}, which nobody else can cause"
                ));
            }
            _ => ensure(now.is_none() || stored, || format!("inserted row: {now:?}"))?,
        }

        let now = read(REPLACED.0, REPLACED.1).await?;
        let replaced = now.as_deref() == Some("op");
        match &returned.replace {
            Some(Outcome::Ok) => ensure(replaced, || format!("replace Ok, but {now:?}"))?,
            Some(o) if !open(o) => {
                return Err(format!(
                    "replace returned {o:?}, which nobody else can cause"
                ));
            }
            _ => ensure(replaced || now.as_deref() == Some("init"), || {
                format!("replaced row: {now:?}")
            })?,
        }

        let mut tx = Vec::new();
        for (pk, rk) in TRANSACTION {
            tx.push(read(pk, rk).await?);
        }
        let all = tx.iter().all(|w| w.as_deref() == Some("op"));
        let none = tx.iter().all(Option::is_none);
        ensure(all || none, || format!("half a transaction: {tx:?}"))?;
        match &returned.submit {
            Some(Outcome::Ok) => ensure(all, || format!("submit Ok, but {tx:?}"))?,
            Some(o) if o.is(ErrorKind::Indeterminate) => {}
            Some(o) => ensure(none, || format!("submit returned {o:?}, but {tx:?}"))?,
            None => {}
        }

        for (i, (pk, rk)) in BULK.iter().enumerate() {
            let now = read(pk, rk).await?;
            let stored = now.as_deref() == Some("op");
            let outcome = returned.bulk.as_ref().and_then(|b| b.get(i));
            match outcome.map(String::as_str) {
                Some("written") => ensure(stored, || format!("{pk}/{rk} written, but {now:?}"))?,
                Some(o) if o.starts_with("failed") => {
                    ensure(now.is_none(), || format!("{pk}/{rk} {o}, but {now:?}"))?;
                }
                _ => ensure(now.is_none() || stored, || format!("{pk}/{rk}: {now:?}"))?,
            }
        }
        Ok(())
    }
}

/// Whether a failed write may still have been applied: every error but the answers that say
/// it was not.
fn open(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Ok => false,
        Outcome::Err { kind, .. } => !matches!(
            kind,
            ErrorKind::AlreadyExists
                | ErrorKind::PreconditionFailed
                | ErrorKind::NotFound
                | ErrorKind::InvalidInput
                | ErrorKind::InvalidArgument
                | ErrorKind::Encode
                | ErrorKind::LimitExceeded
                | ErrorKind::Corrupt
        ),
    }
}
