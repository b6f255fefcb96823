//! `tablekit-azure`: read-modify-write loops (`update_with`, `ConflictLoop::run`) and the
//! single-entity writes.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

use tablekit_azure::{Account, Table};
use tablekit_core::{ETag, Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_testkit::explore::{Entry, Scenario};

use super::model::{ensure, new_table};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry::new(Counter::UpdateWith),
        Entry::new(Counter::ConflictLoop),
        Entry::new(SingleEntity),
    ]
}

const PK: &str = "p";

/// Whether a failed write may still have been applied: every error but the answers that say
/// it was not (a conflict, a missing entity or table, refused input).
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
        ),
    }
}

/// The number of increments a counter run makes.
const INCREMENTS: u32 = 3;

/// A counter incremented `INCREMENTS` times, one call after the other, by one of the two
/// read-modify-write loops.
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    /// `Table::update_with`.
    UpdateWith,
    /// `ConflictLoop::run` around a read, then a replace under the ETag read or an insert.
    ConflictLoop,
}

/// What the increments came to, counted as they end.
#[derive(Default)]
pub struct CounterCtx {
    table: String,
    /// Calls that returned `Ok` after no transport retry: applied exactly once.
    exact: AtomicU32,
    /// Calls that returned `Ok` after a transport retry (an outcome was unknown meanwhile).
    retried: AtomicU32,
    /// Calls that failed with an error that leaves the write open, or that the stop cut off.
    unknown: AtomicU32,
    /// Calls that failed with an answer saying nothing was written (a conflict).
    refused: AtomicU32,
    /// The other writer's increment was stored.
    actor_added: AtomicBool,
}

fn counter_keys() -> Keys {
    Keys::new(PK, "counter").expect("keys")
}

fn count(value: Option<&Properties>) -> i64 {
    value
        .and_then(|p| p.get_i64("N").ok().flatten())
        .unwrap_or(0)
}

/// One increment by `update_with`.
async fn update_with(table: &Table) -> tablekit_core::Result<()> {
    table
        .update_with(counter_keys(), |old: Option<Properties>| {
            Properties::new().with("N", count(old.as_ref()) + 1)
        })
        .await
        .map(|_| ())
}

/// One increment by the conflict loop of `ConflictLoop`'s documentation.
async fn conflict_loop(table: &Table) -> tablekit_core::Result<()> {
    let keys = counter_keys();
    table
        .account()
        .conflict_loop()
        .run(|_attempt| async {
            let current = table.get::<Properties>(&keys).await?;
            let n = count(current.as_ref().map(|c| &c.value));
            let next = Entity::new(keys.clone(), Properties::new().with("N", n + 1));
            match current {
                Some(c) => table.replace(&next, c.if_match()).await,
                None => table.insert(&next).await,
            }
        })
        .await
        .map(|_| ())
}

impl Scenario for Counter {
    type Ctx = CounterCtx;
    type Report = Vec<Outcome>;

    fn name(&self) -> &'static str {
        match self {
            Counter::UpdateWith => "azure.update_with",
            Counter::ConflictLoop => "azure.conflict_loop",
        }
    }

    fn invariant(&self) -> &'static str {
        match self {
            Counter::UpdateWith | Counter::ConflictLoop => {
                "with one writer each increment that returned Ok is applied exactly once, and one that failed or was cut off at most once; with another writer, as documented, an increment whose write had an unknown outcome may be lost or applied twice, and the others are exact"
            }
        }
    }

    /// Actor 0 is another writer adding one with `update_with`.
    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<CounterCtx, String> {
        Ok(CounterCtx {
            table: new_table(direct, "xcounter").await?,
            ..CounterCtx::default()
        })
    }

    async fn operate(&self, ctx: &CounterCtx, account: &Account) -> Vec<Outcome> {
        let table = account.table(&ctx.table).expect("table name");
        let mut outcomes = Vec::new();
        for _ in 0..INCREMENTS {
            // Until it returns, a call counts as cut off (the process may stop in it).
            ctx.unknown.fetch_add(1, Ordering::SeqCst);
            let retries = account.metrics().snapshot().retries;
            let result = match self {
                Counter::UpdateWith => update_with(&table).await,
                Counter::ConflictLoop => conflict_loop(&table).await,
            };
            let retried = account.metrics().snapshot().retries > retries;
            let outcome = Outcome::of(&result);
            ctx.unknown.fetch_sub(1, Ordering::SeqCst);
            let slot = match &outcome {
                Outcome::Ok if retried => &ctx.retried,
                Outcome::Ok => &ctx.exact,
                o if open(o) => &ctx.unknown,
                _ => &ctx.refused,
            };
            slot.fetch_add(1, Ordering::SeqCst);
            outcomes.push(outcome);
        }
        outcomes
    }

    async fn act(&self, ctx: &CounterCtx, direct: &Account, _actor: u8) {
        let Ok(table) = direct.table(&ctx.table) else {
            return;
        };
        if update_with(&table).await.is_ok() {
            ctx.actor_added.store(true, Ordering::SeqCst);
        }
    }

    async fn check(
        &self,
        ctx: &CounterCtx,
        direct: &Account,
        _report: Option<&Vec<Outcome>>,
        _baseline: Option<&Vec<Outcome>>,
    ) -> Result<(), String> {
        let table = direct.table(&ctx.table).map_err(|e| e.to_string())?;
        let stored = table
            .get::<Properties>(counter_keys())
            .await
            .map_err(|e| e.to_string())?;
        let n = count(stored.as_ref().map(|s| &s.value));
        let load = |a: &AtomicU32| i64::from(a.load(Ordering::SeqCst));
        let (exact, retried, unknown) = (load(&ctx.exact), load(&ctx.retried), load(&ctx.unknown));
        let actor = ctx.actor_added.load(Ordering::SeqCst);
        // With another writer, each increment whose outcome was unknown at some point may be
        // lost or applied twice (the book's "does not hold" for several writers).
        let (low, high) = if actor {
            (1 + exact, 1 + exact + 2 * (retried + unknown))
        } else {
            (exact + retried, exact + retried + unknown)
        };
        ensure((low..=high).contains(&n), || {
            format!(
                "the counter is {n}, expected {low}..={high}: {exact} exact, {retried} Ok after retries, {unknown} unknown, {} refused, the other writer's increment stored: {actor}",
                ctx.refused.load(Ordering::SeqCst)
            )
        })
    }
}

/// The single-entity writes, one key each.
const OPS: [&str; 4] = ["insert", "replace", "upsert_replace", "delete"];

/// Who wrote a row: the operation, the other writer, or its initial content.
fn by(value: &str) -> Properties {
    Properties::new().with("By", value)
}

fn entity(rk: &str, who: &str) -> Entity<Properties> {
    Entity::new(Keys::new(PK, rk).expect("keys"), by(who))
}

/// Where each write stood when the other writer ran.
const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const ACTOR_NEVER_RAN: u8 = u8::MAX;

/// The table, the ETags read when the rows were prepared, and what happened.
pub struct EntityCtx {
    table: String,
    etags: Mutex<Vec<ETag>>,
    /// Each write's progress.
    states: [AtomicU8; 4],
    /// Each write's progress when the other writer ran.
    seen_by_actor: [AtomicU8; 4],
    /// Each write's outcome, once it returned.
    outcomes: Mutex<Vec<Option<Outcome>>>,
}

/// `insert`, `replace` under the ETag read, `upsert_replace` and `delete` under the ETag read,
/// each of its own entity, one after the other.
pub struct SingleEntity;

impl Scenario for SingleEntity {
    type Ctx = EntityCtx;
    type Report = Vec<Option<Outcome>>;

    fn name(&self) -> &'static str {
        "azure.entity"
    }

    fn invariant(&self) -> &'static str {
        "Ok ⇒ the entity is as written (unless the other writer wrote it afterwards); AlreadyExists and PreconditionFailed ⇒ the other writer had written the keys; a delete is never NotFound (the entity is there when it starts); any other error ⇒ as before, as written, or as the other writer wrote it"
    }

    /// Actor 0 writes each of the four entities with content of its own (an upsert).
    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<EntityCtx, String> {
        let name = new_table(direct, "xentity").await?;
        let table = direct.table(&name).map_err(|e| e.to_string())?;
        let mut etags = Vec::new();
        for rk in &OPS[1..] {
            etags.push(
                table
                    .insert(&entity(rk, "init"))
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(EntityCtx {
            table: name,
            etags: Mutex::new(etags),
            states: Default::default(),
            seen_by_actor: [ACTOR_NEVER_RAN; 4].map(AtomicU8::new),
            outcomes: Mutex::new(vec![None; OPS.len()]),
        })
    }

    async fn operate(&self, ctx: &EntityCtx, account: &Account) -> Vec<Option<Outcome>> {
        let table = account.table(&ctx.table).expect("table name");
        let etags = ctx.etags.lock().expect("etags").clone();
        for (i, rk) in OPS.iter().enumerate() {
            ctx.states[i].store(RUNNING, Ordering::SeqCst);
            let mine = entity(rk, "op");
            let result = match i {
                0 => table.insert(&mine).await.map(|_| ()),
                1 => table
                    .replace(&mine, IfMatch::ETag(etags[0].clone()))
                    .await
                    .map(|_| ()),
                2 => table.upsert_replace(&mine).await.map(|_| ()),
                _ => {
                    table
                        .delete(&mine.keys, IfMatch::ETag(etags[2].clone()))
                        .await
                }
            };
            ctx.outcomes.lock().expect("outcomes")[i] = Some(Outcome::of(&result));
            ctx.states[i].store(DONE, Ordering::SeqCst);
        }
        ctx.outcomes.lock().expect("outcomes").clone()
    }

    async fn act(&self, ctx: &EntityCtx, direct: &Account, _actor: u8) {
        for (seen, state) in ctx.seen_by_actor.iter().zip(&ctx.states) {
            seen.store(state.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        let Ok(table) = direct.table(&ctx.table) else {
            return;
        };
        for rk in OPS {
            let _ = table.upsert_replace(&entity(rk, "actor")).await;
        }
    }

    async fn check(
        &self,
        ctx: &EntityCtx,
        direct: &Account,
        _report: Option<&Vec<Option<Outcome>>>,
        _baseline: Option<&Vec<Option<Outcome>>>,
    ) -> Result<(), String> {
        let table = direct.table(&ctx.table).map_err(|e| e.to_string())?;
        let outcomes = ctx.outcomes.lock().expect("outcomes").clone();
        for (i, rk) in OPS.iter().enumerate() {
            let stored = table
                .get::<Properties>((PK, *rk))
                .await
                .map_err(|e| e.to_string())?;
            let now = stored
                .as_ref()
                .and_then(|s| s.value.get_str("By").ok().flatten())
                .map(str::to_owned);
            let now = now.as_deref();
            let seen = ctx.seen_by_actor[i].load(Ordering::SeqCst);
            let actor_ran = seen != ACTOR_NEVER_RAN;
            // The other writer wrote before this write started, or while it ran.
            let actor_before = seen == NOT_STARTED || seen == RUNNING;
            let actor_after = seen == RUNNING || seen == DONE;
            let mine = if i == 3 { None } else { Some("op") };
            let before = if i == 0 { None } else { Some("init") };
            let outcome = outcomes[i].clone();
            let fail = |why: &str| {
                Err(format!(
                    "{rk}: {why}; it returned {outcome:?}, the entity holds {now:?}, the other writer ran {}",
                    match seen {
                        NOT_STARTED => "before it",
                        RUNNING => "while it ran",
                        DONE => "after it",
                        _ => "never",
                    }
                ))
            };
            let possible = |v: Option<&str>| v == now;
            let either =
                possible(before) || possible(mine) || (actor_ran && possible(Some("actor")));
            match &outcome {
                // Not run, or cut off by the stop: before, as written, or the other writer's.
                None => {
                    if !either {
                        return fail("not as before, as written nor as the other writer wrote it");
                    }
                }
                Some(Outcome::Ok) => {
                    // An insert, replace or delete under an ETag the other writer had changed
                    // before it started must fail.
                    if seen == NOT_STARTED && i != 2 {
                        return fail("Ok although the other writer had written the keys first");
                    }
                    let written = possible(mine)
                        || (actor_after && possible(Some("actor")))
                        // An upsert's late attempt may land after the other writer's.
                        || (i == 2 && actor_ran && possible(Some("actor")));
                    if !written {
                        return fail("Ok, but the entity is not as written");
                    }
                }
                Some(o) if o.is(ErrorKind::AlreadyExists) && i == 0 => {
                    if !actor_before {
                        return fail("AlreadyExists although nobody else wrote the keys");
                    }
                }
                Some(o) if o.is(ErrorKind::PreconditionFailed) && (i == 1 || i == 3) => {
                    if !actor_before {
                        return fail("PreconditionFailed although nobody else changed the entity");
                    }
                }
                // The entity was there when the delete started and nobody deletes it: a
                // delete whose retry meets 404 after an attempt that may have been applied,
                // and whose read-back finds another writer's entity, cannot tell whether it
                // took effect — Indeterminate, never NotFound.
                Some(o) if o.is(ErrorKind::NotFound) && i == 3 => {
                    return fail("NotFound although the entity was there when the delete started");
                }
                Some(o) if open(o) => {
                    if !either {
                        return fail("not as before, as written nor as the other writer wrote it");
                    }
                }
                Some(_) => return fail("an error this write cannot have"),
            }
        }
        Ok(())
    }
}
