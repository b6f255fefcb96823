//! Data series against Azurite: claim 43 (a one-slot merge leaves the others unchanged),
//! claim 48 (the read ETag detects a lost update, the wildcard loses it), concurrent adds,
//! the ledger of recent adds, and the request count of every operation.

mod common;

use tablekit_azure::RequestKind;
use tablekit_core::edm::{EdmValue, Properties};
use tablekit_core::{Entity, ErrorKind, IfMatch, Keys};
use tablekit_series::{ADDS_KEPT, ADDS_PROPERTY, Series, SeriesLayout};

fn keys() -> Keys {
    Keys::new("000223", "ImPerHour").unwrap()
}

#[tokio::test]
async fn claim_43_merging_one_slot_leaves_the_other_23_unchanged() {
    let table = common::table("series43").await;
    let series = Series::<i64>::new(table.clone(), SeriesLayout::hours());
    let hours: Vec<(String, i64)> = (0..24).map(|h| (format!("H{h:02}"), 100 + h)).collect();
    series
        .set_many(&keys(), hours.iter().map(|(s, v)| (s.as_str(), *v)))
        .await
        .unwrap();
    // A property that is not a slot survives slot writes too.
    table
        .merge(
            &Entity::new(keys(), Properties::new().with("Employee", "Jun Cao")),
            IfMatch::Any,
        )
        .await
        .unwrap();
    let before = series.read(&keys()).await.unwrap().unwrap();

    series.set(&keys(), "H13", 999).await.unwrap();

    let after = series.read(&keys()).await.unwrap().unwrap();
    assert_ne!(after.etag, before.etag);
    assert_eq!(after.value.get("H13"), Some(999));
    for (slot, value) in after.value.iter().filter(|(s, _)| *s != "H13") {
        assert_eq!(value, before.value.get(slot), "{slot} changed");
    }
    assert_eq!(after.value.iter().filter(|(_, v)| v.is_some()).count(), 24);
    assert_eq!(after.value.other().get_str("Employee"), Some("Jun Cao"));
    assert_eq!(
        after.value.total(),
        Some(before.value.total().unwrap() - 113 + 999)
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn every_operation_costs_what_its_docs_say() {
    let table = common::table("seriescount").await;
    let series = Series::<i64>::new(table.clone(), SeriesLayout::hours());
    let metrics = table.account().metrics().clone();

    metrics.reset();
    assert_eq!(series.add(&keys(), "H09", 5).await.unwrap(), 5);
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
    assert_eq!(series.add(&keys(), "H09", 2).await.unwrap(), 7);
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
    series.set(&keys(), "H10", 3).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 1, "set is one unconditional merge");
    assert_eq!(spent.requests_of(RequestKind::UpsertMerge), 1);

    metrics.reset();
    series
        .set_many(&keys(), [("H11", 1), ("H12", 2)])
        .await
        .unwrap();
    assert_eq!(metrics.snapshot().requests_of(RequestKind::UpsertMerge), 1);
    assert_eq!(metrics.snapshot().requests(), 1);

    // `set` creates a missing series too, still in one request.
    let other = Keys::new("000224", "ImPerHour").unwrap();
    metrics.reset();
    series.set(&other, "H00", 1).await.unwrap();
    assert_eq!(metrics.snapshot().requests(), 1);

    metrics.reset();
    let read = series.read(&keys()).await.unwrap().unwrap();
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

    let other_read = series.read(&other).await.unwrap().unwrap();
    metrics.reset();
    series
        .delete_if(&other, other_read.if_match())
        .await
        .unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "a conditional delete is one request"
    );
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Delete), 1);
    let err = series
        .delete_if(&keys(), other_read.if_match())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");

    metrics.reset();
    assert!(series.delete(&keys()).await.unwrap());
    assert!(!series.delete(&keys()).await.unwrap());
    assert_eq!(metrics.snapshot().requests(), 2, "one per delete");
    metrics.reset();
    assert!(series.read(&keys()).await.unwrap().is_none());
    assert_eq!(metrics.snapshot().requests(), 1);

    // Unknown slots are refused before any request.
    metrics.reset();
    for err in [
        series.set(&keys(), "H24", 1).await.unwrap_err(),
        series.add(&keys(), "h01", 1).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    let err = series
        .set_many(&keys(), [("H01", 1), ("H01", 2)])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(metrics.snapshot().requests(), 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn sixteen_tasks_adding_fifty_times_end_at_exactly_800() {
    let table = common::table("series800").await;
    let account = common::contended_account();
    let series = Series::<i64>::new(common::reopen(&table, &account), SeriesLayout::hours());
    series
        .set_many(&keys(), [("H12", 42), ("H14", 7)])
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let series = series.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    series.add(&keys(), "H13", 1).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let read = series.read(&keys()).await.unwrap().unwrap().value;
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

#[tokio::test]
async fn claim_48_the_read_etag_detects_a_lost_update_and_the_wildcard_loses_it() {
    let table = common::table("claim48").await;
    let dept = Keys::new("Sales", "Department").unwrap();
    let count = |n: i64| Entity::new(dept.clone(), Properties::new().with("EmployeeCount", n));
    table.insert(&count(5)).await.unwrap();

    // Two writers read the same state and each adds one employee.
    let a = table.get::<Properties>(&dept).await.unwrap().unwrap();
    let b = table.get::<Properties>(&dept).await.unwrap().unwrap();
    let next =
        |s: &tablekit_core::Stored<Properties>| s.value.get_i64("EmployeeCount").unwrap() + 1;
    table.merge(&count(next(&a)), a.if_match()).await.unwrap();
    // With the ETag it read, the second writer is told someone got there first …
    let err = table
        .merge(&count(next(&b)), b.if_match())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    let now = table.get::<Properties>(&dept).await.unwrap().unwrap();
    assert_eq!(now.value.get_i64("EmployeeCount"), Some(6));
    // … and re-reading makes its increment count.
    table
        .merge(&count(next(&now)), now.if_match())
        .await
        .unwrap();
    let both = table.get::<Properties>(&dept).await.unwrap().unwrap();
    assert_eq!(both.value.get_i64("EmployeeCount"), Some(7));

    // With the wildcard ETag the same race loses an increment without any error.
    let a = table.get::<Properties>(&dept).await.unwrap().unwrap();
    let b = table.get::<Properties>(&dept).await.unwrap().unwrap();
    table.merge(&count(next(&a)), IfMatch::Any).await.unwrap();
    table.merge(&count(next(&b)), IfMatch::Any).await.unwrap();
    let lost = table.get::<Properties>(&dept).await.unwrap().unwrap();
    assert_eq!(
        lost.value.get_i64("EmployeeCount"),
        Some(8),
        "two increments, one counted"
    );

    // A series slot added through `Series::add` is the safe version of the same update.
    let counter = Series::<i64>::new(
        table.clone(),
        SeriesLayout::fixed(["EmployeeCount"]).unwrap(),
    );
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let (counter, dept) = (counter.clone(), dept.clone());
            tokio::spawn(async move { counter.add(&dept, "EmployeeCount", 1).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let read = counter.read(&dept).await.unwrap().unwrap();
    assert_eq!(read.value.get("EmployeeCount"), Some(10));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn stored_values_of_another_type_are_typed_errors_and_doubles_work() {
    let table = common::table("seriestypes").await;
    let series = Series::<i64>::new(table.clone(), SeriesLayout::hours());
    table
        .upsert_merge(&Entity::new(keys(), Properties::new().with("H01", "seven")))
        .await
        .unwrap();
    let err = series.add(&keys(), "H01", 1).await.unwrap_err();
    assert!(
        matches!(&err, tablekit_core::Error::Decode { property, .. } if property == "H01"),
        "{err}"
    );
    assert!(series.read(&keys()).await.is_err());
    // An Int32 written by another SDK reads as an i64 slot.
    table
        .upsert_merge(&Entity::new(
            keys(),
            Properties::new().with("H01", EdmValue::Int32(7)),
        ))
        .await
        .unwrap();
    assert_eq!(series.add(&keys(), "H01", 1).await.unwrap(), 8);

    let cpu = Series::<f64>::new(table.clone(), SeriesLayout::numbered::<60>("M").unwrap());
    let host = Keys::new("web01", "CpuPerMinute").unwrap();
    cpu.set(&host, "M07", 0.25).await.unwrap();
    assert_eq!(cpu.add(&host, "M07", 0.5).await.unwrap(), 0.75);
    let read = cpu.read(&host).await.unwrap().unwrap();
    assert_eq!(read.value.get("M07"), Some(0.75));
    assert_eq!(read.value.values().len(), 60);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn adds_keep_a_ledger_of_their_ids_unless_the_layout_fills_the_entity() {
    let table = common::table("seriesledger").await;
    let series = Series::<i64>::new(table.clone(), SeriesLayout::hours());
    assert!(series.layout().keeps_add_ledger());
    for n in 1..=40 {
        assert_eq!(series.add(&keys(), "H01", 1).await.unwrap(), n);
        let raw = table.get::<Properties>(&keys()).await.unwrap().unwrap();
        let ledger: Vec<&str> = raw
            .value
            .get_str(ADDS_PROPERTY)
            .unwrap()
            .split(' ')
            .collect();
        assert_eq!(ledger.len(), (n as usize).min(ADDS_KEPT), "add {n}");
        let distinct: std::collections::BTreeSet<_> = ledger.iter().collect();
        assert_eq!(distinct.len(), ledger.len(), "one id per add");
    }
    // `set` leaves the ledger alone; `read` does not show it.
    series.set(&keys(), "H02", 7).await.unwrap();
    let read = series.read(&keys()).await.unwrap().unwrap().value;
    assert_eq!((read.get("H01"), read.get("H02")), (Some(40), Some(7)));
    assert!(read.other().is_empty());

    // 252 slots leave no room for it: adds still count, without the ledger.
    let full = Series::<i64>::new(table.clone(), SeriesLayout::numbered::<252>("D").unwrap());
    assert!(!full.layout().keeps_add_ledger());
    let other = Keys::new("000223", "ImPerDay").unwrap();
    full.add(&other, "D100", 2).await.unwrap();
    assert_eq!(full.add(&other, "D100", 3).await.unwrap(), 5);
    let raw = table.get::<Properties>(&other).await.unwrap().unwrap();
    assert!(raw.value.get(ADDS_PROPERTY).is_none());
    table.delete_table().await.unwrap();
}
