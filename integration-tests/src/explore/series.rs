//! `tablekit-series`: data series (one entity, one property per slot) and wide entities
//! (shards of one partition, written in one transaction).

use std::sync::atomic::{AtomicBool, Ordering};

use tablekit_azure::Account;
use tablekit_core::{Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_series::{Series, SeriesLayout, WideEntities};
use tablekit_testkit::explore::{Entry, Scenario};

use super::model::{ensure, new_table, rows};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry::new(Set),
        Entry::new(Add),
        Entry::new(WideWrite),
        Entry::new(WideDelete),
    ]
}

/// Employee 000223's hourly series.
const SERIES: (&str, &str) = ("000223", "ImPerHour");

fn series(account: &Account, table: &str) -> Series {
    Series::new(
        account.table(table).expect("table name"),
        SeriesLayout::hours(),
    )
}

/// The series' slots that the scenarios touch, read directly.
async fn slots(direct: &Account, table: &str) -> Result<(Option<i64>, Option<i64>), String> {
    let read = series(direct, table)
        .get(SERIES)
        .await
        .map_err(|e| format!("reading the series: {e}"))?
        .ok_or("the series is gone")?;
    Ok((read.value.get("H13"), read.value.get("H14")))
}

/// A series' table, whether the concurrent writer's add was counted, and whether a
/// repeated add's outcome stayed unknown.
pub struct SeriesCtx {
    table: String,
    actor_added: AtomicBool,
    /// A repeated add is under way (still set: its process stopped in the middle of it).
    repeating: AtomicBool,
    repeat_unknown: AtomicBool,
    /// The repeated add was counted: recovery, which may run again, is done.
    repeated: AtomicBool,
}

async fn prepare_series(direct: &Account, prefix: &str) -> Result<SeriesCtx, String> {
    let table = new_table(direct, prefix).await?;
    series(direct, &table)
        .upsert_slots(SERIES, [("H13", 5), ("H14", 1)])
        .await
        .map_err(|e| e.to_string())?;
    Ok(SeriesCtx {
        table,
        actor_added: AtomicBool::new(false),
        repeating: AtomicBool::new(false),
        repeat_unknown: AtomicBool::new(false),
        repeated: AtomicBool::new(false),
    })
}

/// Another process adds 10 to `H13`.
async fn add_ten(ctx: &SeriesCtx, direct: &Account) {
    if series(direct, &ctx.table)
        .add(SERIES, "H13", 10)
        .await
        .is_ok()
    {
        ctx.actor_added.store(true, Ordering::SeqCst);
    }
}

/// What a set or an add returned, and what a read right after it (through the same
/// account) saw of its slot.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotReport {
    outcome: Outcome,
    /// The value `add` returned.
    returned: Option<i64>,
    /// The slot as read right after a successful write.
    read: Option<Option<i64>>,
}

/// `Series::upsert_slot` of one slot, with another writer adding to another slot meanwhile.
pub struct Set;

impl Scenario for Set {
    type Ctx = SeriesCtx;
    type Report = SlotReport;

    fn name(&self) -> &'static str {
        "series.upsert_slot"
    }

    fn invariant(&self) -> &'static str {
        "Ok ⇒ a read right after returns the value set; once a failed set is repeated, the slot holds it and every other slot holds exactly what its writers wrote"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<SeriesCtx, String> {
        prepare_series(direct, "xseriesset").await
    }

    async fn operate(&self, ctx: &SeriesCtx, account: &Account) -> SlotReport {
        let series = series(account, &ctx.table);
        let set = series.upsert_slot(SERIES, "H14", 7).await;
        let read = match &set {
            Ok(_) => series
                .get(SERIES)
                .await
                .ok()
                .flatten()
                .map(|s| s.value.get("H14")),
            Err(_) => None,
        };
        SlotReport {
            outcome: Outcome::of(&set),
            returned: None,
            read,
        }
    }

    /// A set is idempotent: a caller repeats one that failed.
    async fn recover(
        &self,
        ctx: &SeriesCtx,
        account: &Account,
        report: Option<&SlotReport>,
    ) -> Result<(), String> {
        if report.is_some_and(|r| r.outcome == Outcome::Ok) {
            return Ok(());
        }
        series(account, &ctx.table)
            .upsert_slot(SERIES, "H14", 7)
            .await
            .map(drop)
            .map_err(|e| format!("the repeated set failed: {e}"))
    }

    async fn act(&self, ctx: &SeriesCtx, direct: &Account, _actor: u8) {
        add_ten(ctx, direct).await;
    }

    async fn check(
        &self,
        ctx: &SeriesCtx,
        direct: &Account,
        report: Option<&SlotReport>,
        _baseline: Option<&SlotReport>,
    ) -> Result<(), String> {
        if let Some(SlotReport {
            read: Some(read), ..
        }) = report
        {
            ensure(*read == Some(7), || {
                format!("the set returned Ok, but a read right after saw {read:?}")
            })?;
        }
        let (h13, h14) = slots(direct, &ctx.table).await?;
        let added = ctx.actor_added.load(Ordering::SeqCst);
        ensure(h14 == Some(7), || format!("{report:?}: H14 holds {h14:?}"))?;
        let expected = if added { 15 } else { 5 };
        ensure(h13 == Some(expected), || {
            format!("{report:?}: the other writer's slot H13 holds {h13:?}, not {expected}")
        })
    }
}

/// `Series::add` of 1, with another writer adding 10 to the same slot meanwhile.
pub struct Add;

impl Scenario for Add {
    type Ctx = SeriesCtx;
    type Report = SlotReport;

    fn name(&self) -> &'static str {
        "series.add"
    }

    fn invariant(&self) -> &'static str {
        "every add is counted exactly once: Ok ⇒ counted (the value returned is the slot's after it), any error but Indeterminate ⇒ not counted, so that repeating it leaves the slot exact; Indeterminate or a stopped process ⇒ once or not at all; the concurrent writer's add counts once"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<SeriesCtx, String> {
        prepare_series(direct, "xseriesadd").await
    }

    async fn operate(&self, ctx: &SeriesCtx, account: &Account) -> SlotReport {
        let added = series(account, &ctx.table).add(SERIES, "H13", 1).await;
        SlotReport {
            outcome: Outcome::of(&added),
            returned: added.as_ref().ok().copied(),
            read: None,
        }
    }

    /// An add that failed with anything but `Indeterminate` was not counted: a caller
    /// repeats it (until it is counted, or its outcome is unknown), once.
    async fn recover(
        &self,
        ctx: &SeriesCtx,
        account: &Account,
        report: Option<&SlotReport>,
    ) -> Result<(), String> {
        let Some(report) = report else {
            return Ok(());
        };
        if report.outcome == Outcome::Ok || report.outcome.is(ErrorKind::Indeterminate) {
            return Ok(());
        }
        // A round stopped in the middle of its add left it unknown: never add twice.
        if ctx.repeating.swap(true, Ordering::SeqCst) {
            ctx.repeat_unknown.store(true, Ordering::SeqCst);
        }
        if ctx.repeat_unknown.load(Ordering::SeqCst) || ctx.repeated.load(Ordering::SeqCst) {
            ctx.repeating.store(false, Ordering::SeqCst);
            return Ok(());
        }
        let repeated = series(account, &ctx.table).add(SERIES, "H13", 1).await;
        ctx.repeating.store(false, Ordering::SeqCst);
        match repeated {
            Ok(_) => {
                ctx.repeated.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::Indeterminate => {
                ctx.repeat_unknown.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => Err(format!("the repeated add failed: {e}")),
        }
    }

    async fn act(&self, ctx: &SeriesCtx, direct: &Account, _actor: u8) {
        add_ten(ctx, direct).await;
    }

    async fn check(
        &self,
        ctx: &SeriesCtx,
        direct: &Account,
        report: Option<&SlotReport>,
        _baseline: Option<&SlotReport>,
    ) -> Result<(), String> {
        let (h13, h14) = slots(direct, &ctx.table).await?;
        ensure(h14 == Some(1), || format!("an add touched H14: {h14:?}"))?;
        let base = if ctx.actor_added.load(Ordering::SeqCst) {
            15
        } else {
            5
        };
        let h13 = h13.unwrap_or_default();
        match report {
            Some(r) if r.outcome == Outcome::Ok => {
                ensure(h13 == base + 1, || {
                    format!("Ok, but H13 holds {h13}, not {}", base + 1)
                })?;
                let returned = r.returned.unwrap_or_default();
                ensure(returned == 6 || returned == 16, || {
                    format!("the add returned {returned}, which H13 never held")
                })
            }
            Some(r) if r.outcome.is(ErrorKind::Indeterminate) => {
                ensure(h13 == base || h13 == base + 1, || {
                    format!(
                        "{:?}, but H13 holds {h13}, not {base} or {}",
                        r.outcome,
                        base + 1
                    )
                })
            }
            Some(r) if ctx.repeat_unknown.load(Ordering::SeqCst) => {
                ensure(h13 == base || h13 == base + 1, || {
                    format!(
                        "{:?}, repeated with an unknown outcome, and H13 holds {h13}, not {base} or {}",
                        r.outcome,
                        base + 1
                    )
                })
            }
            Some(r) => ensure(h13 == base + 1, || {
                format!(
                    "{:?} (not counted), repeated until counted, but H13 holds {h13}, not {}",
                    r.outcome,
                    base + 1
                )
            }),
            None => ensure(h13 == base || h13 == base + 1, || {
                format!(
                    "the process stopped, and H13 holds {h13}, not {base} or {}",
                    base + 1
                )
            }),
        }
    }
}

/// The wide entity of the wide scenarios: a year of daily counts.
const WIDE: (&str, &str) = ("000223", "DailyIm");

/// Writer `code`'s value of the wide entity: `days` properties all holding `code`, so that a
/// read tells whose value it is and whether it is whole. 365 days take two shards, 200 one,
/// 600 three.
fn year(code: i64, days: usize) -> Entity<Properties> {
    let props: Properties = (1..=days)
        .map(|d| (format!("D{d:03}"), tablekit_core::EdmValue::Int64(code)))
        .collect();
    Entity::new(Keys::new(WIDE.0, WIDE.1).expect("keys"), props)
}

/// The old value (2 shards), the operation's (1 shard: its write deletes one) and the
/// concurrent writer's (3 shards).
const OLD: (i64, usize) = (1, 365);
const OP: (i64, usize) = (2, 200);
const ACTOR: (i64, usize) = (3, 600);

/// What a wide entity holds, read directly: absent, or one writer's whole value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wide {
    Absent,
    Whole(i64),
}

fn wide(account: &Account, table: &str) -> WideEntities {
    WideEntities::new(account.table(table).expect("table name"))
}

/// Whose whole value `props` is; an error for a mix or a partial value.
fn whose(props: &Properties) -> Result<i64, String> {
    let codes: std::collections::BTreeSet<i64> =
        props.iter().filter_map(|(_, v)| v.as_i64()).collect();
    let code = match codes.iter().collect::<Vec<_>>()[..] {
        [code] => *code,
        _ => return Err(format!("a mix of writes: values {codes:?}")),
    };
    let days = [OLD, OP, ACTOR]
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, d)| *d)
        .ok_or_else(|| format!("no writer wrote {code}"))?;
    ensure(props.len() == days, || {
        format!(
            "writer {code}'s value has {} of its {days} properties",
            props.len()
        )
    })?;
    Ok(code)
}

/// The wide entity, read directly and checked whole; and no row in its shard range beyond
/// the shards of that value (a narrower write deletes the shards it no longer needs).
async fn wide_now(direct: &Account, table: &str) -> Result<Wide, String> {
    let read = wide(direct, table)
        .get::<Properties>(WIDE)
        .await
        .map_err(|e| format!("reading the wide entity: {e}"))?;
    let rows = rows(&direct.table(table).map_err(|e| e.to_string())?, WIDE.0).await?;
    let stored = rows.len();
    match read {
        None => {
            ensure(stored == 0, || {
                format!("absent, but {stored} rows are left")
            })?;
            Ok(Wide::Absent)
        }
        Some(read) => {
            let code = whose(&read.value)?;
            let shards = read.version.shards.len();
            ensure(stored == shards, || {
                format!("writer {code}'s value has {shards} shards, but {stored} rows are stored")
            })?;
            Ok(Wide::Whole(code))
        }
    }
}

/// A wide entity's table, the condition of the old value, and whether the concurrent
/// writer's write succeeded.
pub struct WideCtx {
    table: String,
    old: IfMatch,
    actor_wrote: AtomicBool,
}

async fn prepare_wide(direct: &Account, prefix: &str) -> Result<WideCtx, String> {
    let table = new_table(direct, prefix).await?;
    let old = wide(direct, &table)
        .upsert(&year(OLD.0, OLD.1))
        .await
        .map_err(|e| e.to_string())?
        .if_match();
    Ok(WideCtx {
        table,
        old,
        actor_wrote: AtomicBool::new(false),
    })
}

/// Another process writes its own value (three shards).
async fn write_actor(ctx: &WideCtx, direct: &Account) {
    if wide(direct, &ctx.table)
        .upsert(&year(ACTOR.0, ACTOR.1))
        .await
        .is_ok()
    {
        ctx.actor_wrote.store(true, Ordering::SeqCst);
    }
}

/// What a wide write returned, and whose value a read right after it saw.
#[derive(Debug, Clone, PartialEq)]
pub struct WideReport {
    outcome: Outcome,
    read: Option<Result<i64, String>>,
}

/// `WideEntities::upsert` of a narrower value (two shards become one), and a read after it.
pub struct WideWrite;

impl Scenario for WideWrite {
    type Ctx = WideCtx;
    type Report = WideReport;

    fn name(&self) -> &'static str {
        "series.wide.upsert"
    }

    fn invariant(&self) -> &'static str {
        "the wide entity is always one writer's whole value with no stale shard: Ok ⇒ the new one (or a concurrent writer's), and a read right after returns it; Indeterminate ⇒ the old or the new; any other error ⇒ the old (or a concurrent writer's)"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<WideCtx, String> {
        prepare_wide(direct, "xwidewrite").await
    }

    async fn operate(&self, ctx: &WideCtx, account: &Account) -> WideReport {
        let wide = wide(account, &ctx.table);
        let written = wide.upsert(&year(OP.0, OP.1)).await;
        let read = match &written {
            Ok(_) => match wide.get::<Properties>(WIDE).await {
                Ok(Some(read)) => Some(whose(&read.value)),
                Ok(None) => Some(Err("absent".into())),
                Err(e) if e.kind() == ErrorKind::Corrupt => Some(Err(e.to_string())),
                // A read that failed for the faults is no answer.
                Err(_) => None,
            },
            Err(_) => None,
        };
        WideReport {
            outcome: Outcome::of(&written),
            read,
        }
    }

    async fn act(&self, ctx: &WideCtx, direct: &Account, _actor: u8) {
        write_actor(ctx, direct).await;
    }

    async fn check(
        &self,
        ctx: &WideCtx,
        direct: &Account,
        report: Option<&WideReport>,
        _baseline: Option<&WideReport>,
    ) -> Result<(), String> {
        let now = wide_now(direct, &ctx.table).await?;
        let actor = ctx.actor_wrote.load(Ordering::SeqCst);
        let actors = actor && now == Wide::Whole(ACTOR.0);
        let Some(report) = report else {
            return ensure(
                matches!(now, Wide::Whole(c) if c == OLD.0 || c == OP.0) || actors,
                || format!("the process stopped, and the entity holds {now:?}"),
            );
        };
        if let Some(read) = &report.read {
            ensure(*read == Ok(OP.0) || (actor && *read == Ok(ACTOR.0)), || {
                format!("the write returned Ok, but a read right after saw {read:?}")
            })?;
        }
        match &report.outcome {
            Outcome::Ok => ensure(now == Wide::Whole(OP.0) || actors, || {
                format!("Ok, but the entity holds {now:?}")
            }),
            o if o.is(ErrorKind::Indeterminate) => ensure(
                now == Wide::Whole(OLD.0) || now == Wide::Whole(OP.0) || actors,
                || format!("{o:?}, but the entity holds {now:?}"),
            ),
            o => ensure(now == Wide::Whole(OLD.0) || actors, || {
                format!("{o:?} (not written), but the entity holds {now:?}")
            }),
        }
    }
}

/// `WideEntities::delete` of a two-shard entity under the version it was written at, while
/// another process may write it (three shards).
pub struct WideDelete;

impl Scenario for WideDelete {
    type Ctx = WideCtx;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "series.wide.delete"
    }

    fn invariant(&self) -> &'static str {
        "only the version named, all shards or none — never a torn value, never a later writer's value deleted: Ok ⇒ no row is left (or a concurrent writer's whole value, written after the delete); PreconditionFailed ⇒ nothing deleted: a concurrent writer's whole value; Indeterminate ⇒ the old value whole or nothing (or a concurrent writer's); any other error ⇒ the old value whole (or a concurrent writer's)"
    }

    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<WideCtx, String> {
        prepare_wide(direct, "xwidedel").await
    }

    async fn operate(&self, ctx: &WideCtx, account: &Account) -> Outcome {
        Outcome::of(
            &wide(account, &ctx.table)
                .delete(WIDE, ctx.old.clone())
                .await,
        )
    }

    async fn act(&self, ctx: &WideCtx, direct: &Account, _actor: u8) {
        write_actor(ctx, direct).await;
    }

    async fn check(
        &self,
        ctx: &WideCtx,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let now = wide_now(direct, &ctx.table).await?;
        let actor = ctx.actor_wrote.load(Ordering::SeqCst);
        // The actor only writes: if its write succeeded and nothing is left, the delete ran
        // after it and removed a version other than the one it named.
        ensure(!(actor && now == Wide::Absent), || {
            format!(
                "{report:?}, and the concurrent write succeeded, yet nothing is left: the delete \
                 removed a version other than the one it named"
            )
        })?;
        let actors = actor && now == Wide::Whole(ACTOR.0);
        match report {
            Some(Outcome::Ok) => ensure(now == Wide::Absent || actors, || {
                format!("Ok, but the entity holds {now:?}")
            }),
            Some(o) if o.is(ErrorKind::NotFound) => ensure(now == Wide::Absent || actors, || {
                format!("{o:?}, but the entity holds {now:?}")
            }),
            // The version was stale: someone wrote since, and the only other writer is the
            // actor (whose write may have landed even if it reported an error).
            Some(o) if o.is(ErrorKind::PreconditionFailed) => {
                ensure(now == Wide::Whole(ACTOR.0), || {
                    format!(
                        "{o:?} (not deleted, the version was stale), but the entity holds {now:?}"
                    )
                })
            }
            Some(o) if !o.is(ErrorKind::Indeterminate) => {
                ensure(now == Wide::Whole(OLD.0) || actors, || {
                    format!("{o:?} (not deleted), but the entity holds {now:?}")
                })
            }
            _ => ensure(
                now == Wide::Absent || now == Wide::Whole(OLD.0) || actors,
                || format!("{report:?}, but the entity holds {now:?}"),
            ),
        }
    }
}
