//! `tablekit-retention`: reads across period tables, and the bulk partition purge.

use chrono::{DateTime, Duration, Utc};
use futures::TryStreamExt as _;
use tablekit_azure::{Account, BulkOptions};
use tablekit_core::batch::Operation;
use tablekit_core::{Entity, ErrorKind, Keys, Properties, Stored};
use tablekit_retention::{Period, PeriodQuery, PeriodTables, PurgeOptions, purge_partition};
use tablekit_testkit::explore::{Entry, Scenario};
use tablekit_testkit::unique_table_name;

use super::model::{ensure, new_table, rows};
use super::outcome::Outcome;

/// The scenarios of this module.
pub fn entries() -> Vec<Entry> {
    vec![Entry::new(PeriodRead), Entry::new(Purge)]
}

/// Whether a read or purge error is one a fault explains (the request did not get through
/// after its retries), rather than an answer about the data.
fn transient(outcome: &Outcome) -> bool {
    [
        ErrorKind::Transport,
        ErrorKind::Throttled,
        ErrorKind::Service,
        ErrorKind::Indeterminate,
        ErrorKind::DeadlineExceeded,
    ]
    .iter()
    .any(|k| outcome.is(*k))
}

/// The last day of the range (exclusive): the read covers the four days before it.
fn today() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T00:00:00Z")
        .expect("RFC 3339")
        .to_utc()
}

/// Days (before [`today`]) that have a table, and the entities each holds; day 2 has none.
const DAYS: [i64; 3] = [4, 3, 1];
const PER_DAY: usize = 5;

/// Entity `i` of day `n`: three users' partitions, the minute as the RowKey.
fn signin(n: i64, i: usize) -> Entity<Properties> {
    Entity::new(
        Keys::new(format!("user{}", i % 3), format!("{i:04}")).expect("keys"),
        Properties::new().with("Day", n).with("Minute", i as i64),
    )
}

/// One entity read: its table's period (the name without the run's prefix), keys and value.
type Item = (String, Keys, Properties);

/// What one read returned, or its error.
type Read = Result<Vec<Item>, Outcome>;

/// The entities read, each with the period of the table it was written to (its `Day`).
fn flatten(items: Vec<Stored<Properties>>, days: &PeriodTables, out: &mut Vec<Item>) {
    out.extend(items.into_iter().map(|s| {
        let day = s.value.get_i64("Day").ok().flatten().unwrap_or_default();
        let table = days
            .table_name(today() - Duration::days(day))
            .unwrap_or_default();
        let period = table.strip_prefix(days.prefix()).unwrap_or(&table);
        (period.to_owned(), s.keys, s.value)
    }));
}

/// Where two reads first differ, in a line.
fn first_difference(got: &[Item], want: &[Item]) -> String {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        Some(i) => format!("entity {i} is {:?}, expected {:?}", got[i], want[i]),
        None => format!("{} entities, expected {}", got.len(), want.len()),
    }
}

/// The set of daily tables of a run.
pub struct PeriodCtx {
    prefix: String,
}

impl PeriodCtx {
    fn days(&self, account: &Account) -> PeriodTables {
        PeriodTables::new(account, &self.prefix, Period::Day).expect("prefix")
    }

    fn query(&self, account: &Account) -> PeriodQuery<Properties> {
        self.days(account)
            .query(today() - Duration::days(4), today())
            .with_page_size(3)
    }
}

/// `PeriodTables::query` over four days (one without a table), three entities a page: read
/// whole, read a page at a time resumed from each page's token as text (a page that fails
/// is asked for again, up to three times), and the first seven.
pub struct PeriodRead;

impl Scenario for PeriodRead {
    type Ctx = PeriodCtx;
    type Report = Vec<Read>;

    fn name(&self) -> &'static str {
        "retention.period.query"
    }

    fn invariant(&self) -> &'static str {
        "every read that returns Ok returns exactly the entities (keys, ETags, values), tables and order of the fault-free run — the whole read, the read resumed page after page from text tokens, and the first seven; a read that fails fails with a transient error"
    }

    async fn prepare(&self, direct: &Account) -> Result<PeriodCtx, String> {
        let ctx = PeriodCtx {
            prefix: format!("{}T", unique_table_name("xper")),
        };
        let days = ctx.days(direct);
        for n in DAYS {
            let at = today() - Duration::days(n);
            for i in 0..PER_DAY {
                days.insert(at + Duration::minutes(i as i64), &signin(n, i))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(ctx)
    }

    async fn operate(&self, ctx: &PeriodCtx, account: &Account) -> Vec<Read> {
        let query = ctx.query(account);
        let days = ctx.days(account);
        let whole = match query.clone().pages().try_collect::<Vec<_>>().await {
            Ok(pages) => {
                let mut out = Vec::new();
                for page in pages {
                    flatten(page.items, &days, &mut out);
                }
                Ok(out)
            }
            Err(e) => Err(Outcome::of::<()>(&Err(e))),
        };
        let resumed = async {
            let mut out = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let mut read = query.clone();
                if let Some(text) = &token {
                    read = read.resume(text.parse().map_err(|e| Outcome::of::<()>(&Err(e)))?);
                }
                let mut tries = 0;
                let page = loop {
                    tries += 1;
                    match read.page().await {
                        Ok(page) => break page,
                        Err(e) if tries >= 3 => return Err(Outcome::of::<()>(&Err(e))),
                        Err(_) => {}
                    }
                };
                flatten(page.items, &days, &mut out);
                match page.continuation {
                    Some(next) => token = Some(next.to_string()),
                    None => return Ok(out),
                }
            }
        }
        .await;
        let first = query
            .clone()
            .top(7)
            .collect()
            .await
            .map(|items| {
                let mut out = Vec::new();
                flatten(items, &days, &mut out);
                out
            })
            .map_err(|e| Outcome::of::<()>(&Err(e)));
        vec![whole, resumed, first]
    }

    async fn check(
        &self,
        ctx: &PeriodCtx,
        _direct: &Account,
        report: Option<&Vec<Read>>,
        baseline: Option<&Vec<Read>>,
    ) -> Result<(), String> {
        let Some(reads) = report else {
            return Ok(());
        };
        // The fault-free run is checked against what was prepared: the days in order, each
        // table in key order.
        let days = PeriodTables::new(&Account::emulator(), &ctx.prefix, Period::Day)
            .map_err(|e| e.to_string())?;
        let mut expected: Vec<Item> = Vec::new();
        for n in DAYS {
            let table = days
                .table_name(today() - Duration::days(n))
                .map_err(|e| e.to_string())?;
            let period = table.strip_prefix(&ctx.prefix).unwrap_or(&table);
            let mut day: Vec<Entity<Properties>> = (0..PER_DAY).map(|i| signin(n, i)).collect();
            day.sort_by(|a, b| (a.keys.pk(), a.keys.rk()).cmp(&(b.keys.pk(), b.keys.rk())));
            expected.extend(
                day.into_iter()
                    .map(|e| (period.to_owned(), e.keys, e.value)),
            );
        }
        let names = ["the whole read", "the resumed read", "the first seven"];
        for (i, (name, read)) in names.iter().zip(reads).enumerate() {
            let got = match read {
                Ok(got) => got,
                Err(o) => {
                    ensure(transient(o), || format!("{name} failed with {o:?}"))?;
                    continue;
                }
            };
            match baseline.and_then(|b| b.get(i)) {
                Some(Ok(base)) => ensure(got == base, || {
                    format!(
                        "{name} differs from the fault-free run's: {}",
                        first_difference(got, base)
                    )
                })?,
                Some(Err(_)) => return Err(format!("the fault-free run's {name} failed")),
                None => {
                    let want = if i == 2 {
                        &expected[..7]
                    } else {
                        &expected[..]
                    };
                    ensure(got == want, || {
                        format!("{name}: {}", first_difference(got, want))
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// The partition purged, and its neighbours on either side.
const PURGED: &str = "p";
const NEIGHBOURS: [&str; 2] = ["o", "q"];
const IN_PURGED: usize = 150;
const IN_NEIGHBOUR: usize = 3;

fn item(pk: &str, i: usize) -> Entity<Properties> {
    Entity::new(
        Keys::new(pk, format!("{i:04}")).expect("keys"),
        Properties::new().with("I", i as i64).with("Pk", pk),
    )
}

fn purge_options() -> PurgeOptions {
    PurgeOptions::default().with_page_size(100)
}

/// `purge_partition` of a partition of 150 entities, 100 keys a page, between two partitions
/// that must stay untouched.
pub struct Purge;

impl Scenario for Purge {
    type Ctx = String;
    type Report = Outcome;

    fn name(&self) -> &'static str {
        "retention.purge"
    }

    fn invariant(&self) -> &'static str {
        "after the purge (run again by the recovery when it failed or stopped) the partition is empty and every entity of the neighbouring partitions is there unchanged; a purge racing another fails only with a transient error"
    }

    /// Actor 0 is another purge of the same partition.
    fn actors(&self) -> u8 {
        1
    }

    async fn prepare(&self, direct: &Account) -> Result<String, String> {
        let name = new_table(direct, "xpurge").await?;
        let table = direct.table(&name).map_err(|e| e.to_string())?;
        let mut operations = Vec::new();
        for i in 0..IN_PURGED {
            operations.push(Operation::insert(&item(PURGED, i)).map_err(|e| e.to_string())?);
        }
        for pk in NEIGHBOURS {
            for i in 0..IN_NEIGHBOUR {
                operations.push(Operation::insert(&item(pk, i)).map_err(|e| e.to_string())?);
            }
        }
        let report = table
            .bulk_write(operations, BulkOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        ensure(report.is_complete(), || "the table was not filled".into())?;
        Ok(name)
    }

    async fn operate(&self, table: &String, account: &Account) -> Outcome {
        let table = account.table(table).expect("table name");
        Outcome::of(&purge_partition(&table, PURGED, purge_options()).await)
    }

    /// A purge that failed or stopped is run again.
    async fn recover(
        &self,
        table: &String,
        account: &Account,
        report: Option<&Outcome>,
    ) -> Result<(), String> {
        if report == Some(&Outcome::Ok) {
            return Ok(());
        }
        let table = account.table(table).map_err(|e| e.to_string())?;
        purge_partition(&table, PURGED, purge_options())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn act(&self, table: &String, direct: &Account, _actor: u8) {
        if let Ok(table) = direct.table(table) {
            let _ = purge_partition(&table, PURGED, purge_options()).await;
        }
    }

    async fn check(
        &self,
        table: &String,
        direct: &Account,
        report: Option<&Outcome>,
        _baseline: Option<&Outcome>,
    ) -> Result<(), String> {
        let table = direct.table(table).map_err(|e| e.to_string())?;
        let left = rows(&table, PURGED).await?;
        ensure(left.is_empty(), || {
            format!("{} entities left in the purged partition", left.len())
        })?;
        for pk in NEIGHBOURS {
            let now: Vec<(Keys, Properties)> = rows(&table, pk)
                .await?
                .into_iter()
                .map(|s| (s.keys, s.value))
                .collect();
            let want: Vec<(Keys, Properties)> = (0..IN_NEIGHBOUR)
                .map(|i| {
                    let e = item(pk, i);
                    (e.keys, e.value)
                })
                .collect();
            ensure(now == want, || format!("partition {pk} holds {now:?}"))?;
        }
        match report {
            Some(o) if *o != Outcome::Ok => {
                ensure(transient(o), || format!("the purge failed with {o:?}"))
            }
            _ => Ok(()),
        }
    }
}
