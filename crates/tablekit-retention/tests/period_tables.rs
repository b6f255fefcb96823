//! Table-per-period storage against Azurite: routing by time, fan-out over exactly the touched
//! tables, dropping expired tables one request each, tables created ahead.

mod common;

use chrono::{DateTime, Duration, Utc};
use tablekit::TableEntity;
use tablekit_azure::RequestKind;
use tablekit_core::filter::Filter;
use tablekit_core::{ErrorKind, Properties, Stored};
use tablekit_retention::{Period, PeriodQuery, PeriodTables, PeriodToken};

/// One sign-in: per-user partitions, the sign-in time in the RowKey — no insert hot spot
/// (§5.8).
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{user}", row_key = "{at:ticks}")]
struct Signin {
    user: String,
    at: DateTime<Utc>,
    succeeded: bool,
}

fn signin(user: &str, at: DateTime<Utc>) -> Signin {
    Signin {
        user: user.into(),
        at,
        succeeded: true,
    }
}

#[tokio::test]
async fn daily_tables_route_fan_out_and_drop_one_request_each() {
    let account = common::account();
    let metrics = account.metrics().clone();
    let prefix = common::prefix("Signins");
    let days = PeriodTables::new(&account, &prefix, Period::Day).unwrap();
    let today = common::at("2026-11-22T00:00:00Z");
    let day = |n: i64| today - Duration::days(n);

    // Five daily tables, made by routed writes: the first write of a day creates its table.
    for n in 0..5 {
        let at = day(n) + Duration::hours(9);
        metrics.reset();
        days.insert(at, &signin("alice", at)).await.unwrap();
        common::assert_requests(&metrics.snapshot(), Some(RequestKind::Insert), 2);
        common::assert_requests(&metrics.snapshot(), Some(RequestKind::TableCreate), 1);
        common::assert_requests(&metrics.snapshot(), None, 3); // insert, create, insert
        metrics.reset();
        let later = at + Duration::hours(3);
        days.insert(later, &signin("bob", later)).await.unwrap();
        common::assert_requests(&metrics.snapshot(), None, 1); // the table exists now
    }
    assert_eq!(
        days.table_name(day(0)).unwrap(),
        format!("{prefix}20261122")
    );
    // Many entities in one expiring table: they go with a single delete.
    let expiring = days.table_for(day(4)).unwrap();
    let many: Vec<_> = (0..250)
        .map(|i| {
            let at = day(4) + Duration::seconds(i);
            tablekit_core::batch::Operation::insert(&signin("carol", at)).unwrap()
        })
        .collect();
    assert!(
        expiring
            .bulk_write(many, Default::default())
            .await
            .unwrap()
            .is_complete()
    );

    // A 3-day query reads exactly the 3 tables it touches.
    metrics.reset();
    let alice: Vec<Stored<Signin>> = days
        .query(day(3), day(0))
        .filter(Filter::partition("alice"))
        .collect()
        .await
        .unwrap();
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Query), 3);
    common::assert_requests(&metrics.snapshot(), None, 3);
    let got: Vec<_> = alice.iter().map(|s| s.value.at).collect();
    let expected: Vec<_> = (1..=3).rev().map(|n| day(n) + Duration::hours(9)).collect();
    assert_eq!(got, expected, "oldest table first");
    // Filters given one after another are combined with `and`: still bob's partition only.
    let bob: Vec<Stored<Signin>> = days
        .query(day(3), day(0))
        .filter(Filter::partition("bob"))
        .filter(Filter::eq("Succeeded", true))
        .collect()
        .await
        .unwrap();
    assert_eq!(bob.len(), 3);
    assert!(bob.iter().all(|s| s.value.user == "bob"), "{bob:?}");
    let tables: Vec<String> = days
        .tables_between(day(3), day(0))
        .unwrap()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(tables, [3, 2, 1].map(|n| days.table_name(day(n)).unwrap()));

    // Drop what ended at or before the cutoff: days 4, 3 and 2.
    let cutoff = day(1);
    metrics.reset();
    let report = days.drop_older_than(cutoff).await.unwrap();
    assert_eq!(
        report.dropped,
        [4, 3, 2].map(|n| days.table_name(day(n)).unwrap())
    );
    assert_eq!(
        report.kept,
        [1, 0].map(|n| days.table_name(day(n)).unwrap())
    );
    let spent = metrics.snapshot();
    common::assert_requests(&spent, Some(RequestKind::TableList), 1);
    common::assert_requests(&spent, Some(RequestKind::TableDelete), 3); // one request per table
    common::assert_requests(&spent, None, 4);

    // Claim 45: the dropped table and all its entities are gone; queries on it fail.
    let err = expiring
        .typed::<Signin>()
        .query()
        .filter(Filter::partition("carol"))
        .collect()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // The fan-out skips periods without a table.
    let all: Vec<Stored<Signin>> = days
        .query(day(4), today + Duration::days(1))
        .collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 4, "alice and bob on the two kept days");

    // Safe to re-run: nothing more to drop.
    metrics.reset();
    let again = days.drop_older_than(cutoff).await.unwrap();
    assert!(again.dropped.is_empty());
    common::assert_requests(&metrics.snapshot(), None, 1);
    days.drop_older_than(today + Duration::days(2))
        .await
        .unwrap();
    assert!(days.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_resumed_period_query_equals_the_unresumed_read_and_select_projects() {
    let account = common::account();
    let metrics = account.metrics().clone();
    let days = PeriodTables::new(&account, &common::prefix("Resume"), Period::Day).unwrap();
    let today = common::at("2026-11-22T00:00:00Z");
    let day = |n: i64| today - Duration::days(n);
    // Days 4, 3 and 1 have 7 sign-ins each; day 2 has no table.
    for n in [4, 3, 1] {
        for i in 0..7 {
            let at = day(n) + Duration::minutes(i);
            days.insert(at, &signin(&format!("user{i}"), at))
                .await
                .unwrap();
        }
    }
    let read: PeriodQuery<Signin> = days.query(day(4), today);
    let whole = read.clone().collect().await.unwrap();
    assert_eq!(whole.len(), 21);

    // Page after page of 3, each from a new read resumed from the token saved as text.
    let mut resumed = Vec::new();
    let mut tables = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut page_read = read.clone().with_page_size(3);
        if let Some(saved) = token.take() {
            page_read = page_read.resume(saved.parse().unwrap());
        }
        let page = page_read.page().await.unwrap();
        assert!(page.items.len() <= 3);
        // Each sign-in was written to the table of its time.
        tables.extend(
            page.items
                .iter()
                .map(|s| days.table_name(s.value.at).unwrap()),
        );
        resumed.extend(page.items);
        match page.continuation {
            Some(next) => token = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(resumed, whole, "the resumed read is the same read");
    tables.dedup();
    assert_eq!(
        tables,
        [4, 3, 1].map(|n| days.table_name(day(n)).unwrap()),
        "each table read in turn; the missing day is skipped"
    );

    // The pages of one read end with a token naming the next table.
    let pages: Vec<_> = {
        use futures::TryStreamExt as _;
        read.clone()
            .with_page_size(7)
            .pages()
            .try_collect()
            .await
            .unwrap()
    };
    let next_tables: Vec<Option<&str>> = pages
        .iter()
        .map(|p| p.continuation.as_ref().map(PeriodToken::table))
        .collect();
    let name = |n: i64| days.table_name(day(n)).unwrap();
    assert!(next_tables.contains(&Some(name(3).as_str())));
    assert_eq!(next_tables.last(), Some(&None));
    assert!(pages.last().is_some_and(|p| p.is_last()));
    assert!(pages[..pages.len() - 1].iter().all(|p| !p.is_last()));

    // A projection reads only the properties asked for; keys are always there.
    let projected: Vec<Stored<Properties>> = days
        .query(day(4), today)
        .select(["Succeeded"])
        .collect()
        .await
        .unwrap();
    assert_eq!(projected.len(), 21);
    for stored in &projected {
        assert_eq!(
            stored.value.get("Succeeded").and_then(|v| v.as_bool()),
            Some(true)
        );
        assert!(stored.value.get("User").is_none(), "{:?}", stored.value);
    }

    // A token of a table outside the range is refused before any request.
    metrics.reset();
    let outside: PeriodToken = days.table_name(today).unwrap().parse().unwrap();
    let err = read.clone().resume(outside).collect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!("".parse::<PeriodToken>().is_err());
    common::assert_requests(&metrics.snapshot(), None, 0);
    days.drop_older_than(today + Duration::days(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn other_tables_sharing_the_prefix_are_never_dropped() {
    let account = common::account();
    let prefix = common::prefix("Keep");
    let days = PeriodTables::new(&account, &prefix, Period::Day).unwrap();
    let hours = PeriodTables::new(&account, &prefix, Period::Hour).unwrap();
    let foreign = [
        format!("{prefix}X20261101"),
        format!("{prefix}2026110"),
        format!("{prefix}20261131"),
    ];
    for name in &foreign {
        account.table(name).unwrap().create().await.unwrap();
    }
    let at = common::at("2026-11-01T10:00:00Z");
    let metrics = account.metrics().clone();
    metrics.reset();
    days.create_if_not_exists(at).await.unwrap();
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::TableCreate), 1);
    common::assert_requests(&metrics.snapshot(), None, 1);
    hours.create_if_not_exists(at).await.unwrap();
    assert_eq!(hours.table_name(at).unwrap(), format!("{prefix}2026110110"));

    let report = days
        .drop_older_than(common::at("2100-01-01T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(report.dropped, [format!("{prefix}20261101")]);
    let left = account.list_tables(&prefix).await.unwrap();
    for name in foreign.iter().chain([&format!("{prefix}2026110110")]) {
        assert!(left.contains(name), "{name} must survive: {left:?}");
    }
    let report = hours
        .drop_older_than(common::at("2100-01-01T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(report.dropped, [format!("{prefix}2026110110")]);
    for name in &foreign {
        account.table(name).unwrap().delete_table().await.unwrap();
    }
}

#[tokio::test]
async fn the_next_period_is_created_ahead_and_expired_periods_refuse_writes() {
    let account = common::account();
    let metrics = account.metrics().clone();
    let prefix = common::prefix("Months");
    let now = Utc::now();
    let months = PeriodTables::new(&account, &prefix, Period::Month)
        .unwrap()
        .with_retention(Duration::days(60));
    metrics.reset();
    let next = months.create_ahead(now).await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 1);
    let next_start = Period::Month
        .next(Period::Month.start_of(now).unwrap())
        .unwrap();
    assert_eq!(next.name(), months.table_name(next_start).unwrap());
    metrics.reset();
    let listed = months.list().await.unwrap();
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::TableList), 1);
    common::assert_requests(&metrics.snapshot(), None, 1);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].start, listed[0].name.as_str()),
        (next_start, next.name())
    );
    // Ahead of time means the first write of the next period is one request.
    metrics.reset();
    months
        .upsert_replace(next_start, &signin("dave", next_start))
        .await
        .unwrap();
    common::assert_requests(&metrics.snapshot(), None, 1);

    metrics.reset();
    let long_ago = now - Duration::days(200);
    let err = months
        .insert(long_ago, &signin("erin", long_ago))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    common::assert_requests(&metrics.snapshot(), None, 0); // refused before any request
    metrics.reset();
    let report = months.drop_expired(now).await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 1); // the listing; nothing expired
    assert!(report.dropped.is_empty());
    assert_eq!(report.kept, [next.name().to_owned()]);
    next.delete_table().await.unwrap();

    let no_retention = PeriodTables::new(&account, &prefix, Period::Month).unwrap();
    assert!(no_retention.drop_expired(now).await.is_err());
}

#[test]
fn prefixes_that_could_make_bad_or_ambiguous_names_are_refused() {
    let account = common::account();
    for bad in ["", "1abc", "Sign-ins", "Signins2", &"a".repeat(56)] {
        let err = PeriodTables::new(&account, bad, Period::Day).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
    assert!(PeriodTables::new(&account, &"a".repeat(55), Period::Day).is_ok());
    assert!(PeriodTables::new(&account, "ab", Period::Month).is_ok());
    let days = PeriodTables::new(&account, "Signins", Period::Day).unwrap();
    assert_eq!(
        days.table_name(common::at("2026-11-22T23:59:59Z")).unwrap(),
        "Signins20261122"
    );
    assert!(
        days.tables_between(
            common::at("2026-11-22T00:00:00Z"),
            common::at("2026-11-21T00:00:00Z")
        )
        .is_err()
    );
    assert!(days.parse("Signins20261122").is_some());
    assert!(days.parse("Signins2026112").is_none());
}
