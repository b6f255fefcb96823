//! [`PeriodTables`]: one table per period, writes routed by time, queries fanned out over a
//! time range, expired periods dropped a table at a time.

use std::future::Future;

use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt as _, TryStreamExt as _};
use tablekit_azure::{Account, Table};
use tablekit_core::limits::validate_table_name;
use tablekit_core::{AsEntity, ETag, Error, NameKind, Result};

use crate::period::Period;
use crate::query::PeriodQuery;

/// One table of a [`PeriodTables`] set, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeriodTable {
    /// The table's name, e.g. `Signins20261122`.
    pub name: String,
    /// The start of its period.
    pub start: DateTime<Utc>,
    /// The start of the next period: the table holds `[start, end)`.
    pub end: DateTime<Utc>,
}

/// What [`PeriodTables::drop_older_than`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DropReport {
    /// Tables deleted (or found already gone), oldest first.
    pub dropped: Vec<String>,
    /// Tables of the set that were kept, oldest first.
    pub kept: Vec<String>,
}

/// The high volume delete pattern of the design guide: entities that expire together live in
/// one table per period — `{prefix}{yyyyMMdd}` for days (`Signins20261122`),
/// `{prefix}{yyyyMMddHH}` for hours, `{prefix}{yyyyMM}` for months — so deleting a period's
/// data is one delete-table request, however many entities it holds.
///
/// Every name is valid (the prefix is checked) and belongs to one period only, so a name is
/// never reused for other data. On Azure, re-creating a table soon after deleting it can fail
/// with 409 `TableBeingDeleted`: don't write to a period after
/// dropping it. [`PeriodTables::with_retention`] makes such writes fail before any request.
///
/// New tables are throttled for a while on Azure until the service has learned their load:
/// [`PeriodTables::create_ahead`] creates the next period's table before it is needed.
#[derive(Debug, Clone)]
pub struct PeriodTables {
    account: Account,
    prefix: String,
    period: Period,
    retention: Option<TimeDelta>,
}

impl PeriodTables {
    /// A set of period tables named `{prefix}{suffix}`. No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use chrono::{TimeDelta, Utc};
    /// use tablekit::TableEntity;
    /// use tablekit_azure::Account;
    /// use tablekit_retention::{Period, PeriodTables};
    ///
    /// /// One sign-in, in the table of its day.
    /// #[derive(TableEntity)]
    /// #[table(partition_key = "{user}", row_key = "{id}")]
    /// struct Signin {
    ///     user: String,
    ///     id: String,
    /// }
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// // Signins20261122, Signins20261123, …: a day's data is dropped with one request.
    /// let signins = PeriodTables::new(&Account::emulator(), "Signins", Period::Day)?
    ///     .with_retention(TimeDelta::days(30));
    /// let now = Utc::now();
    /// let signin = Signin { user: "user42".into(), id: "s1".into() };
    /// signins.insert(now, &signin).await?; // 1 request (3 when the day's table is new)
    /// signins.drop_expired(now).await?; // 1 listing + 1 per expired table
    /// # Ok(()) }
    /// ```
    ///
    /// The prefix must start with a letter, hold only ASCII letters and digits, **end with a
    /// letter** (so no other set's names can be read as this set's: after this prefix, another
    /// set's names have a letter where this set's have digits), and leave room for the
    /// suffix in 63 characters.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a prefix that breaks these rules.
    pub fn new(account: &Account, prefix: &str, period: Period) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidName {
            kind: NameKind::Table,
            name: prefix.to_owned(),
            reason: format!("a period table prefix {reason}"),
        };
        if !prefix.ends_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(invalid("must end with a letter"));
        }
        if prefix.len() + period.digits() > 63 {
            return Err(invalid(&format!(
                "may have at most {} characters for {period} tables",
                63 - period.digits()
            )));
        }
        validate_table_name(&format!("{prefix}{}", "0".repeat(period.digits())))?;
        Ok(Self {
            account: account.clone(),
            prefix: prefix.to_owned(),
            period,
            retention: None,
        })
    }

    /// Refuse writes to periods that ended more than `keep` ago (before any request), and let
    /// [`PeriodTables::drop_expired`] drop them.
    #[must_use]
    pub fn with_retention(mut self, keep: TimeDelta) -> Self {
        self.retention = Some(keep);
        self
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The period of each table.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The name of the table holding `time`, e.g. `Signins20261122`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside the years 1 to 9999.
    pub fn table_name(&self, time: DateTime<Utc>) -> Result<String> {
        let start = self.period.start_of(time)?;
        Ok(format!("{}{}", self.prefix, self.period.suffix(start)))
    }

    /// A handle on the table holding `time`. No request is sent.
    ///
    /// # Errors
    /// As [`PeriodTables::table_name`].
    pub fn table_for(&self, time: DateTime<Utc>) -> Result<Table> {
        self.account.table(&self.table_name(time)?)
    }

    /// The period of a table of this set, from its name; `None` for any other name.
    pub fn parse(&self, table_name: &str) -> Option<PeriodTable> {
        let start = self
            .period
            .parse_suffix(table_name.strip_prefix(&self.prefix)?)?;
        Some(PeriodTable {
            name: table_name.to_owned(),
            start,
            end: self.period.next(start).ok()?,
        })
    }

    /// The tables of the periods `[from, to)` touches, oldest first. No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `from > to` or outside the years 1 to 9999.
    pub fn tables_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<Table>> {
        if from > to {
            return Err(Error::invalid_argument(
                "range",
                format!("the range starts ({from}) after it ends ({to})"),
            ));
        }
        let mut tables = Vec::new();
        let mut start = self.period.start_of(from)?;
        while start < to {
            tables.push(self.table_for(start)?);
            start = self.period.next(start)?;
        }
        Ok(tables)
    }

    /// Creates the table holding `time` unless it exists, and returns a handle on it.
    ///
    /// Requests: 1. Consistency: the table exists when this returns.
    ///
    /// # Errors
    /// Before any request: a time out of range or past the retention. Then service errors,
    /// including 409 `TableBeingDeleted` on Azure for a period just dropped.
    pub async fn create_if_not_exists(&self, time: DateTime<Utc>) -> Result<Table> {
        self.check_retained(time)?;
        let table = self.table_for(time)?;
        table.create_if_not_exists().await?;
        Ok(table)
    }

    /// Creates the table of the period after the one holding `now`, so it exists — and has
    /// outgrown Azure's new-table throttling — before writes arrive. Run it once per period,
    /// e.g. from the job that drops expired tables.
    ///
    /// Requests: 1. Consistency: the table exists when this returns.
    ///
    /// # Errors
    /// As [`PeriodTables::create_if_not_exists`].
    pub async fn create_ahead(&self, now: DateTime<Utc>) -> Result<Table> {
        let next = self.period.next(self.period.start_of(now)?)?;
        self.create_if_not_exists(next).await
    }

    /// Inserts `entity` into the table of `time`'s period, creating the table if it is
    /// missing.
    ///
    /// Requests: 1 when the table exists; 3 when it does not (insert, create, insert).
    /// Consistency: strong.
    ///
    /// `entity` is a `#[derive(TableEntity)]` value or an [`Entity`](tablekit_core::Entity)
    /// with explicit keys.
    ///
    /// # Errors
    /// Before any request: a time out of range or past the retention, an invalid entity.
    /// [`Error::AlreadyExists`] when the keys are taken in that table.
    pub async fn insert<E: AsEntity + Sync>(
        &self,
        time: DateTime<Utc>,
        entity: &E,
    ) -> Result<ETag> {
        self.routed(time, |table| async move { table.insert(entity).await })
            .await
    }

    /// Inserts or replaces `entity` in the table of `time`'s period, creating the table if it
    /// is missing.
    ///
    /// Requests: 1 when the table exists; 3 when it does not. Consistency: strong.
    /// Idempotent.
    ///
    /// # Errors
    /// As [`PeriodTables::insert`], without the conflict.
    pub async fn upsert_replace<E: AsEntity + Sync>(
        &self,
        time: DateTime<Utc>,
        entity: &E,
    ) -> Result<ETag> {
        self.routed(
            time,
            |table| async move { table.upsert_replace(entity).await },
        )
        .await
    }

    /// Runs a write on the period's table; when the table is missing, creates it and runs the
    /// write once more. Costs nothing extra while the table exists.
    async fn routed<F, Fut>(&self, time: DateTime<Utc>, write: F) -> Result<ETag>
    where
        F: Fn(Table) -> Fut,
        Fut: Future<Output = Result<ETag>>,
    {
        self.check_retained(time)?;
        let table = self.table_for(time)?;
        match write(table.clone()).await {
            Err(Error::NotFound { target }) if target.keys.is_none() => {
                table.create_if_not_exists().await?;
                write(table).await
            }
            other => other,
        }
    }

    fn check_retained(&self, time: DateTime<Utc>) -> Result<()> {
        let Some(keep) = self.retention else {
            return Ok(());
        };
        let end = self.period.next(self.period.start_of(time)?)?;
        if end <= Utc::now() - keep {
            return Err(Error::invalid_argument(
                "time",
                format!(
                    "{time} is in an expired period (older than the retention of {keep}); its table may already be dropped"
                ),
            ));
        }
        Ok(())
    }

    /// A read of the entities in the tables of the periods `[from, to)` touches — and no
    /// other table — oldest table first, each table's in key order. Missing tables (periods
    /// without data, or already dropped) are skipped. Nothing is sent until a page or the
    /// stream is asked for; add a filter, a projection, a page size or a resume token to the
    /// [`PeriodQuery`] it returns.
    ///
    /// The range selects tables, not entities: a table whose period is partly inside the
    /// range is read whole. Put the time in the filter (e.g. a RowKey range) to trim it.
    ///
    /// Requests: one per page per touched table (at least one per table). Memory: at most
    /// two pages while streaming. Consistency: each page is consistent; tables are read one
    /// after the other. Without a filter it reads whole tables deliberately, so the scan
    /// policy is not applied; a filter is subject to the account's scan policy.
    ///
    /// The read's errors, before any request: `from > to` or a time out of range. Then
    /// query errors.
    ///
    /// # Examples
    /// ```no_run
    /// use chrono::{Duration, Utc};
    /// use tablekit_core::Properties;
    /// use tablekit_core::filter::Filter;
    /// use tablekit_retention::{PeriodQuery, PeriodTables};
    ///
    /// # async fn run(signins: PeriodTables) -> tablekit_core::Result<()> {
    /// let now = Utc::now();
    /// // The last three days' sign-ins of one user, 100 per request.
    /// let read: PeriodQuery<Properties> = signins
    ///     .query(now - Duration::days(3), now)
    ///     .filter(Filter::partition("user42"))
    ///     .with_page_size(100);
    /// let page = read.clone().page().await?;
    /// // The token names the table the page ended in: keep it as text, resume later.
    /// if let Some(token) = page.continuation {
    ///     let rest = read.resume(token.to_string().parse()?).collect().await?;
    ///     # let _ = rest;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn query<T>(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> PeriodQuery<T> {
        PeriodQuery::new(self.clone(), from, to)
    }

    /// The tables of this set that exist, oldest first.
    ///
    /// Requests: one per 1,000 tables whose name starts with the prefix. Consistency: a
    /// table being deleted may still be listed.
    ///
    /// # Errors
    /// Service errors.
    pub async fn list(&self) -> Result<Vec<PeriodTable>> {
        let mut tables: Vec<PeriodTable> = self
            .account
            .list_tables(&self.prefix)
            .await?
            .iter()
            .filter_map(|name| self.parse(name))
            .collect();
        tables.sort_by_key(|t| t.start);
        Ok(tables)
    }

    /// Deletes every table of this set whose whole period ended at or before `cutoff`, one
    /// delete-table request each (run with the account's bounded concurrency). Data newer than
    /// `cutoff` in a partly expired period is kept until its whole period has expired.
    ///
    /// Requests: [`PeriodTables::list`]'s, plus 1 per expired table.
    /// Consistency: each table (and all its entities) is gone when its request returns; on
    /// Azure the name stays unavailable for a while. Safe to re-run.
    ///
    /// # Errors
    /// Service errors; tables deleted before the error stay deleted.
    pub async fn drop_older_than(&self, cutoff: DateTime<Utc>) -> Result<DropReport> {
        let (expired, kept): (Vec<_>, Vec<_>) = self
            .list()
            .await?
            .into_iter()
            .partition(|t| t.end <= cutoff);
        let concurrency = self.account.settings().concurrency;
        // Futures that own their table handles: a closure borrowing each listed table would
        // make this future not `Send` (rustc's higher-ranked lifetime limitation).
        let mut deletes = Vec::with_capacity(expired.len());
        for t in &expired {
            let table = self.account.table(&t.name)?;
            deletes.push(async move { table.delete_table_if_exists().await });
        }
        futures::stream::iter(deletes)
            .buffer_unordered(concurrency.max(1))
            .try_collect::<Vec<bool>>()
            .await?;
        tracing::debug!(target: "tablekit", prefix = %self.prefix, dropped = expired.len(), "dropped expired period tables");
        Ok(DropReport {
            dropped: expired.into_iter().map(|t| t.name).collect(),
            kept: kept.into_iter().map(|t| t.name).collect(),
        })
    }

    /// [`PeriodTables::drop_older_than`]`(now − retention)`.
    ///
    /// Requests: as [`PeriodTables::drop_older_than`]. Consistency: as
    /// [`PeriodTables::drop_older_than`].
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] without a retention ([`PeriodTables::with_retention`]), before
    /// any request.
    pub async fn drop_expired(&self, now: DateTime<Utc>) -> Result<DropReport> {
        let keep = self.retention.ok_or_else(|| Error::InvalidConfig {
            part: "retention".into(),
            reason: "drop_expired needs PeriodTables::with_retention".into(),
        })?;
        self.drop_older_than(now - keep).await
    }
}
