//! Data series against Azurite: claim 43 (a one-slot merge leaves the others unchanged),
//! claim 48 (the read ETag detects a lost update, the wildcard loses it), concurrent adds,
//! the ledger of recent adds, and the request count of every operation.

mod common;

use tablekit::TableEntity;
use tablekit_azure::RequestKind;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Entity, ErrorKind, IfMatch, Stored};
use tablekit_series::{ADDS_KEPT, ADDS_PROPERTY, Series, SeriesLayout};

/// Employee 000223's hourly series.
const KEYS: (&str, &str) = ("000223", "ImPerHour");

/// A property bag at `keys`, for writes that go around the series.
fn bag(keys: (&str, &str), properties: Properties) -> Entity<Properties> {
    Entity::try_new(keys.0, keys.1, properties).unwrap()
}

#[tokio::test]
async fn merging_one_slot_leaves_the_other_23_unchanged() {
    let table = common::table("series43").await;
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    let hours: Vec<(String, i64)> = (0..24).map(|h| (format!("H{h:02}"), 100 + h)).collect();
    series
        .upsert_slots(KEYS, hours.iter().map(|(s, v)| (s.as_str(), *v)))
        .await
        .unwrap();
    // A property that is not a slot survives slot writes too.
    table
        .merge(
            &bag(KEYS, Properties::new().with("Employee", "Jun Cao")),
            IfMatch::Any,
        )
        .await
        .unwrap();
    let before = series.get(KEYS).await.unwrap().unwrap();

    series.upsert_slot(KEYS, "H13", 999).await.unwrap();

    let after = series.get(KEYS).await.unwrap().unwrap();
    assert_ne!(after.etag, before.etag);
    assert_eq!(after.value.get("H13"), Some(999));
    for (slot, value) in after.value.iter().filter(|(s, _)| *s != "H13") {
        assert_eq!(value, before.value.get(slot), "{slot} changed");
    }
    assert_eq!(after.value.iter().filter(|(_, v)| v.is_some()).count(), 24);
    assert_eq!(
        after.value.other().get_str("Employee").unwrap(),
        Some("Jun Cao")
    );
    assert_eq!(
        after.value.total(),
        Some(before.value.total().unwrap() - 113 + 999)
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn every_operation_costs_what_its_docs_say() {
    let table = common::table("seriescount").await;
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    let metrics = table.account().metrics().clone();

    metrics.reset();
    assert_eq!(series.add(KEYS, "H09", 5).await.unwrap(), 5);
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 2, "add on a new series: read + insert");
    assert_eq!(
        (
            spent.requests_of(RequestKind::Get),
            spent.requests_of(RequestKind::Insert)
        ),
        (1, 1)
    );

    metrics.reset();
    assert_eq!(series.add(KEYS, "H09", 2).await.unwrap(), 7);
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 2, "add without conflict: read + merge");
    assert_eq!(
        (
            spent.requests_of(RequestKind::Get),
            spent.requests_of(RequestKind::Merge)
        ),
        (1, 1)
    );

    metrics.reset();
    series.upsert_slot(KEYS, "H10", 3).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 1, "set is one unconditional merge");
    assert_eq!(spent.requests_of(RequestKind::UpsertMerge), 1);

    metrics.reset();
    series
        .upsert_slots(KEYS, [("H11", 1), ("H12", 2)])
        .await
        .unwrap();
    assert_eq!(metrics.snapshot().requests_of(RequestKind::UpsertMerge), 1);
    assert_eq!(metrics.snapshot().requests(), 1);

    // `upsert_slot` creates a missing series too, still in one request.
    let other = ("000224", "ImPerHour");
    metrics.reset();
    series.upsert_slot(other, "H00", 1).await.unwrap();
    assert_eq!(metrics.snapshot().requests(), 1);

    metrics.reset();
    let read = series.get(KEYS).await.unwrap().unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "the whole series is one point read"
    );
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Get), 1);
    let written: Vec<(&str, i64)> = read
        .value
        .iter()
        .filter_map(|(s, v)| v.map(|v| (s, v)))
        .collect();
    assert_eq!(written, [("H09", 7), ("H10", 3), ("H11", 1), ("H12", 2)]);
    assert_eq!(read.value.get_or_zero("H00"), 0);

    let other_read = series.get(other).await.unwrap().unwrap();
    metrics.reset();
    series.delete(other, other_read.if_match()).await.unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "a conditional delete is one request"
    );
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Delete), 1);
    let err = series
        .delete(KEYS, other_read.if_match())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");

    metrics.reset();
    assert!(series.delete_if_exists(KEYS).await.unwrap());
    assert!(!series.delete_if_exists(KEYS).await.unwrap());
    assert_eq!(metrics.snapshot().requests(), 2, "one per delete");
    metrics.reset();
    assert!(series.get(KEYS).await.unwrap().is_none());
    assert_eq!(metrics.snapshot().requests(), 1);

    // Unknown slots are refused before any request.
    metrics.reset();
    for err in [
        series.upsert_slot(KEYS, "H24", 1).await.unwrap_err(),
        series.add(KEYS, "h01", 1).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    let err = series
        .upsert_slots(KEYS, [("H01", 1), ("H01", 2)])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn deleting_a_missing_series_is_not_found_and_delete_if_exists_says_false() {
    let table = common::table("seriesdel").await;
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    let metrics = table.account().metrics().clone();

    metrics.reset();
    let err = series.delete(KEYS, IfMatch::Any).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        matches!(&err, tablekit_core::Error::NotFound { target } if target.keys.is_some()),
        "the entity is missing, not the table: {err}"
    );
    assert!(!series.delete_if_exists(KEYS).await.unwrap());
    assert_eq!(metrics.snapshot().requests(), 2, "one request each");

    series.upsert_slot(KEYS, "H00", 1).await.unwrap();
    series.delete(KEYS, IfMatch::Any).await.unwrap();
    assert!(series.get(KEYS).await.unwrap().is_none());

    // Keys that are not keys are refused before any request.
    metrics.reset();
    let err = series
        .delete(("000223", "a/b"), IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn sixteen_tasks_adding_fifty_times_end_at_exactly_800() {
    let table = common::table("series800").await;
    let account = common::contended_account();
    let series: Series = Series::new(common::reopen(&table, &account), SeriesLayout::hours());
    series
        .upsert_slots(KEYS, [("H12", 42), ("H14", 7)])
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let series = series.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    series.add(KEYS, "H13", 1).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let read = series.get(KEYS).await.unwrap().unwrap().value;
    assert_eq!(read.get("H13"), Some(800), "no increment is lost");
    assert_eq!((read.get("H12"), read.get("H14")), (Some(42), Some(7)));
    assert_eq!(read.iter().filter(|(_, v)| v.is_some()).count(), 3);
    let spent = account.metrics().snapshot();
    assert!(spent.conflict_retries > 0, "the tasks did contend");
    assert_eq!(
        spent.conflicts_412 + spent.conflicts_409,
        spent.conflict_retries
    );
    table.delete_table().await.unwrap();
}

/// A department's row, with the number of its employees.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "Department")]
struct Department {
    department: String,
    employee_count: i64,
}

#[tokio::test]
async fn the_read_etag_detects_a_lost_update_and_the_wildcard_loses_it() {
    let table = common::table("claim48").await;
    let departments = table.typed::<Department>();
    let sales = ("Sales", "Department");
    let count = |n: i64| Department {
        department: "Sales".into(),
        employee_count: n,
    };
    departments.insert(&count(5)).await.unwrap();

    // Two writers read the same state and each adds one employee.
    let a = departments.get(sales).await.unwrap().unwrap();
    let b = departments.get(sales).await.unwrap().unwrap();
    let next = |s: &Stored<Department>| count(s.value.employee_count + 1);
    departments.merge(&next(&a), a.if_match()).await.unwrap();
    // With the ETag it read, the second writer is told someone got there first …
    let err = departments
        .merge(&next(&b), b.if_match())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    let now = departments.get(sales).await.unwrap().unwrap();
    assert_eq!(now.value.employee_count, 6);
    // … and re-reading makes its increment count.
    departments
        .merge(&next(&now), now.if_match())
        .await
        .unwrap();
    let both = departments.get(sales).await.unwrap().unwrap();
    assert_eq!(both.value.employee_count, 7);

    // With the wildcard ETag the same race loses an increment without any error.
    let a = departments.get(sales).await.unwrap().unwrap();
    let b = departments.get(sales).await.unwrap().unwrap();
    departments.merge(&next(&a), IfMatch::Any).await.unwrap();
    departments.merge(&next(&b), IfMatch::Any).await.unwrap();
    let lost = departments.get(sales).await.unwrap().unwrap();
    assert_eq!(lost.value.employee_count, 8, "two increments, one counted");

    // A series slot added through `Series::add` is the safe version of the same update.
    let counter: Series = Series::new(
        table.clone(),
        SeriesLayout::fixed(["EmployeeCount"]).unwrap(),
    );
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let counter = counter.clone();
            tokio::spawn(async move { counter.add(sales, "EmployeeCount", 1).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let read = counter.get(sales).await.unwrap().unwrap();
    assert_eq!(read.value.get("EmployeeCount"), Some(10));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn stored_values_of_another_type_are_typed_errors_and_doubles_work() {
    let table = common::table("seriestypes").await;
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    table
        .upsert_merge(&bag(KEYS, Properties::new().with("H01", "seven")))
        .await
        .unwrap();
    let err = series.add(KEYS, "H01", 1).await.unwrap_err();
    assert!(
        matches!(&err, tablekit_core::Error::Decode { property, .. } if property == "H01"),
        "{err}"
    );
    assert!(series.get(KEYS).await.is_err());
    // An Int32 written by another SDK reads as an i64 slot.
    table
        .upsert_merge(&bag(
            KEYS,
            Properties::new().with("H01", EdmValue::Int32(7)),
        ))
        .await
        .unwrap();
    assert_eq!(series.add(KEYS, "H01", 1).await.unwrap(), 8);

    let cpu: Series<f64> = Series::new(table.clone(), SeriesLayout::numbered::<60>("M").unwrap());
    let host = ("web01", "CpuPerMinute");
    cpu.upsert_slot(host, "M07", 0.25).await.unwrap();
    assert_eq!(cpu.add(host, "M07", 0.5).await.unwrap(), 0.75);
    let read = cpu.get(host).await.unwrap().unwrap();
    assert_eq!(read.value.get("M07"), Some(0.75));
    assert_eq!(read.value.values().len(), 60);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn adds_keep_a_ledger_of_their_ids_unless_the_layout_fills_the_entity() {
    let table = common::table("seriesledger").await;
    let series: Series = Series::new(table.clone(), SeriesLayout::hours());
    assert!(series.layout().keeps_add_ledger());
    let raw_rows = table.typed::<Properties>();
    for n in 1..=40 {
        assert_eq!(series.add(KEYS, "H01", 1).await.unwrap(), n);
        let raw = raw_rows.get(KEYS).await.unwrap().unwrap();
        let ledger: Vec<&str> = raw
            .value
            .get_str(ADDS_PROPERTY)
            .unwrap()
            .unwrap()
            .split(' ')
            .collect();
        assert_eq!(ledger.len(), (n as usize).min(ADDS_KEPT), "add {n}");
        let distinct: std::collections::BTreeSet<_> = ledger.iter().collect();
        assert_eq!(distinct.len(), ledger.len(), "one id per add");
    }
    // `upsert_slot` leaves the ledger alone; `get` does not show it.
    series.upsert_slot(KEYS, "H02", 7).await.unwrap();
    let read = series.get(KEYS).await.unwrap().unwrap().value;
    assert_eq!((read.get("H01"), read.get("H02")), (Some(40), Some(7)));
    assert!(read.other().is_empty());

    // 252 slots leave no room for it: adds still count, without the ledger.
    let full: Series = Series::new(table.clone(), SeriesLayout::numbered::<252>("D").unwrap());
    assert!(!full.layout().keeps_add_ledger());
    let other = ("000223", "ImPerDay");
    full.add(other, "D100", 2).await.unwrap();
    assert_eq!(full.add(other, "D100", 3).await.unwrap(), 5);
    let raw = raw_rows.get(other).await.unwrap().unwrap();
    assert!(raw.value.get(ADDS_PROPERTY).is_none());
    table.delete_table().await.unwrap();
}
