//! Wide entities against Azurite: 365 properties and 3 MiB round trips, shrinking without a
//! stale shard, claim 44 (shards `01`/`02` updated in one transaction, read in one request),
//! refusals before any request, damaged data, conditional writes and deletes, concurrency and
//! request counts.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use tablekit::TableEntity;
use tablekit_azure::{RequestKind, Table};
use tablekit_core::filter::Filter;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, IntoKeys, Limit, Result};
use tablekit_series::{WideEntities, WideStored};

/// The bookkeeping properties every shard carries, as stored: a change of these names
/// would make existing wide entities unreadable.
const SHARD_COUNT_PROPERTY: &str = "WideShardCount";
const WRITE_ID_PROPERTY: &str = "WideWriteId";

/// A year of daily message counts of one employee: one property per day, under the
/// employee's PartitionKey and the series' name as RowKey.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{employee_id}", row_key = "{series}")]
struct Year {
    employee_id: String,
    series: String,
    employee: String,
    #[serde(flatten)]
    days: BTreeMap<String, i64>,
}

/// Employee 000223's daily counts.
const KEYS: (&str, &str) = ("000223", "DailyIm");

/// The year at `keys`, joined from its shards.
async fn read_year(wide: &WideEntities, keys: impl IntoKeys) -> Result<Option<WideStored<Year>>> {
    wide.get(keys).await
}

/// The properties at `keys`, joined from its shards.
async fn read_raw(
    wide: &WideEntities,
    keys: impl IntoKeys,
) -> Result<Option<WideStored<Properties>>> {
    wide.get(keys).await
}

/// The year at `keys` whose day `d` holds `seed × 1000 + d`.
fn year_at(keys: (&str, &str), seed: i64) -> Year {
    Year {
        employee_id: keys.0.into(),
        series: keys.1.into(),
        employee: "Jun Cao".into(),
        days: (1..=365)
            .map(|d| (format!("D{d:03}"), seed * 1000 + d))
            .collect(),
    }
}

fn year(seed: i64) -> Year {
    year_at(KEYS, seed)
}

/// A property bag at `keys`.
fn bag(keys: (&str, &str), properties: Properties) -> Entity<Properties> {
    Entity::try_new(keys.0, keys.1, properties).unwrap()
}

/// Every RowKey stored in the partition, to prove what the shards are.
async fn row_keys(table: &Table, pk: &str) -> Vec<String> {
    table
        .typed::<Properties>()
        .query()
        .filter(Filter::partition(pk))
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.keys.rk().to_owned())
        .collect()
}

/// `count` string properties of `chars` ASCII characters each.
fn strings(count: usize, chars: usize) -> Properties {
    (0..count)
        .map(|i| {
            let text: String = (0..chars)
                .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
                .collect();
            (format!("P{i:03}"), EdmValue::String(text))
        })
        .collect()
}

#[tokio::test]
async fn a_365_property_serde_value_round_trips_in_two_shards() {
    let table = common::table("wide365").await;
    let wide = WideEntities::new(table.clone());
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let version = wide.insert(&year(1)).await.unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "insert is one transaction"
    );
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Transaction), 1);
    assert_eq!(version.shards.len(), 2);
    assert!(version.shards.iter().all(|s| !s.etag.as_str().is_empty()));
    assert_eq!(
        row_keys(&table, "000223").await,
        ["DailyIm_01", "DailyIm_02"]
    );

    metrics.reset();
    let read = read_year(&wide, KEYS).await.unwrap().unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "the whole logical entity is one query"
    );
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Query), 1);
    assert_eq!(read.value, year(1));
    assert_eq!(read.version, version, "the read sees exactly the write");
    assert_eq!(
        read.if_match(),
        IfMatch::ETag(version.shards[0].etag.clone()),
        "the logical entity's ETag is its first shard's"
    );

    let err = wide.insert(&year(2)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert_eq!(
        read_year(&wide, KEYS).await.unwrap().unwrap().value,
        year(1)
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_3_mib_bag_round_trips_and_shrinking_leaves_no_stale_shard() {
    let table = common::table("wide3mib").await;
    let wide = WideEntities::new(table.clone());
    let metrics = table.account().metrics().clone();
    let keys = ("reports", "2026");
    // 96 × 32 Ki characters: 3 MiB of text (6 MiB as the service counts UTF-16).
    let big = strings(96, 32 * 1024);
    let text: usize = big.iter().map(|(_, v)| v.as_str().unwrap().len()).sum();
    assert_eq!(text, 3 << 20);

    metrics.reset();
    let version = wide.upsert(&bag(keys, big.clone())).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        2,
        "write: a projection read, then one transaction"
    );
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);
    assert_eq!(version.shards.len(), 7);

    metrics.reset();
    let read = read_raw(&wide, keys).await.unwrap().unwrap();
    assert_eq!(metrics.snapshot().requests(), 1);
    assert_eq!(read.value, big, "exact round trip");

    // 3 shards → 1: one transaction replaces shard 01 and deletes the other two.
    let three = strings(40, 30_000);
    let version = wide.upsert(&bag(keys, three)).await.unwrap();
    assert_eq!(version.shards.len(), 3);
    assert_eq!(
        row_keys(&table, "reports").await,
        ["2026_01", "2026_02", "2026_03"]
    );
    let small = Properties::new().with("Summary", "quiet year");
    metrics.reset();
    let version = wide.upsert(&bag(keys, small.clone())).await.unwrap();
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Transaction), 1);
    assert_eq!(version.shards.len(), 1);
    assert_eq!(
        row_keys(&table, "reports").await,
        ["2026_01"],
        "no stale shard"
    );
    assert_eq!(read_raw(&wide, keys).await.unwrap().unwrap().value, small);

    metrics.reset();
    wide.delete(keys, IfMatch::Any).await.unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        2,
        "delete: a projection read, then one transaction"
    );
    metrics.reset();
    assert!(!wide.delete_if_exists(keys).await.unwrap());
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "deleting an absent entity only reads"
    );
    assert!(row_keys(&table, "reports").await.is_empty());
    assert!(read_raw(&wide, keys).await.unwrap().is_none());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn shards_01_and_02_change_together_and_read_in_one_request() {
    let table = common::table("claim44").await;
    let wide = WideEntities::new(table.clone());
    let metrics = table.account().metrics().clone();
    // The guide's layout: RowKeys `01` and `02` under the employee's PartitionKey.
    let keys = ("000223", "");
    let first = wide.insert(&year_at(keys, 1)).await.unwrap();
    assert_eq!(row_keys(&table, "000223").await, ["01", "02"]);

    metrics.reset();
    let second = wide
        .replace(&year_at(keys, 2), first.if_match())
        .await
        .unwrap();
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        2,
        "a projection read, then both shards in one transaction"
    );
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);
    for (old, new) in first.shards.iter().zip(&second.shards) {
        assert_ne!(old.etag, new.etag, "shard {} rewritten", new.number);
    }

    // A replace from the stale version fails as a whole: neither shard changes.
    metrics.reset();
    let err = wide
        .replace(&year_at(keys, 3), first.if_match())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert!(
        matches!(&err, Error::PreconditionFailed { target } if target.keys.as_ref().map(|k| k.rk()) == Some("")),
        "the logical entity is named, not a shard: {err}"
    );
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Transaction), 1);
    metrics.reset();
    let read = read_year(&wide, keys).await.unwrap().unwrap();
    assert_eq!(
        metrics.snapshot().requests(),
        1,
        "one range query instead of two point reads"
    );
    assert_eq!(read.value, year_at(keys, 2));
    assert_eq!(read.version, second);

    // The same atomicity when the shard count would change under a stale version: the
    // delete of shard 02 is not committed either.
    let err = wide
        .replace(
            &bag(keys, Properties::new().with("D001", 1)),
            first.if_match(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(row_keys(&table, "000223").await, ["01", "02"]);
    assert_eq!(
        read_year(&wide, keys).await.unwrap().unwrap().value,
        year_at(keys, 2)
    );

    // `Any` replaces whatever is stored, but only what exists.
    let third = wide.replace(&year_at(keys, 3), IfMatch::Any).await.unwrap();
    assert_eq!(
        read_year(&wide, keys).await.unwrap().unwrap().version,
        third
    );
    metrics.reset();
    for condition in [IfMatch::Any, third.if_match()] {
        let err = wide.replace(&year(4), condition).await.unwrap_err();
        assert!(
            matches!(&err, Error::NotFound { target } if target.keys.is_some()),
            "{err}"
        );
    }
    assert_eq!(
        metrics.snapshot().requests(),
        2,
        "an absent entity is found absent by the projection read alone"
    );
    assert!(read_year(&wide, KEYS).await.unwrap().is_none());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn values_that_cannot_be_written_are_refused_before_any_request() {
    let table = common::table("widerefuse").await;
    let wide = WideEntities::new(table.clone());
    let metrics = table.account().metrics().clone();
    let keys = ("p", "big");
    metrics.reset();
    // 64 binary values of 64 KiB: 4 MiB, more than one transaction body holds.
    let binary: Properties = (0..64)
        .map(|i| {
            (
                format!("B{i:02}"),
                EdmValue::Binary(vec![i as u8; 64 * 1024]),
            )
        })
        .collect();
    for err in [
        wide.upsert(&bag(keys, binary.clone())).await.unwrap_err(),
        wide.insert(&bag(keys, binary)).await.unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                Error::LimitExceeded {
                    limit: Limit::TransactionBytes,
                    ..
                }
            ),
            "{err}"
        );
    }
    let reserved = Properties::new().with(SHARD_COUNT_PROPERTY, 3);
    assert_eq!(
        wide.upsert(&bag(keys, reserved)).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let too_long = Properties::new().with("S", "x".repeat(40_000));
    assert!(matches!(
        wide.upsert(&bag(keys, too_long)).await.unwrap_err(),
        Error::LimitExceeded {
            limit: Limit::PropertyBytes { .. },
            ..
        }
    ));
    assert_eq!(metrics.snapshot().requests(), 0);
    assert!(read_raw(&wide, keys).await.unwrap().is_none());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn shards_of_different_writes_are_never_joined() {
    let table = common::table("widetorn").await;
    let wide = WideEntities::new(table.clone());
    wide.insert(&year(1)).await.unwrap();
    // Damage the entity behind the toolkit's back: shard 02 from another write.
    table
        .merge(
            &bag(
                ("000223", "DailyIm_02"),
                Properties::new().with(WRITE_ID_PROPERTY, uuid::Uuid::new_v4()),
            ),
            IfMatch::Any,
        )
        .await
        .unwrap();
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let err = read_year(&wide, KEYS).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "a torn wide entity: {err}");
    assert!(err.to_string().contains("do not form one write"), "{err}");
    assert_eq!(
        metrics.snapshot().requests(),
        3,
        "read again before refusing"
    );
    // A rewrite repairs it: the projection read refuses too, so delete the rows first.
    for rk in ["DailyIm_01", "DailyIm_02"] {
        table.delete_if_exists(("000223", rk)).await.unwrap();
    }
    assert!(read_year(&wide, KEYS).await.unwrap().is_none());
    // Rows outside the shard pattern in the range are ignored.
    table
        .insert(&bag(
            ("000223", "DailyIm_05x"),
            Properties::new().with("N", 1),
        ))
        .await
        .unwrap();
    wide.upsert(&year(4)).await.unwrap();
    assert_eq!(
        read_year(&wide, KEYS).await.unwrap().unwrap().value,
        year(4)
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn deleting_a_missing_wide_entity_is_not_found_and_delete_if_exists_says_false() {
    let table = common::table("widedel").await;
    let wide = WideEntities::new(table.clone());
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let err = wide.delete(KEYS, IfMatch::Any).await.unwrap_err();
    assert!(
        matches!(&err, Error::NotFound { target } if target.keys.is_some()),
        "the logical entity is named: {err}"
    );
    assert!(!wide.delete_if_exists(KEYS).await.unwrap());
    assert_eq!(metrics.snapshot().requests(), 2, "one projection read each");

    wide.insert(&year(1)).await.unwrap();
    assert!(
        wide.delete_if_exists(&year(1)).await.unwrap(),
        "keys of an entity"
    );
    assert!(row_keys(&table, "000223").await.is_empty());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_delete_under_a_version_deletes_only_that_version() {
    let table = common::table("wideifmatch").await;
    let wide = WideEntities::new(table.clone());
    // Another process writing the same entity through its own client.
    let other = WideEntities::new(common::reopen(&table, &common::contended_account()));
    let metrics = table.account().metrics().clone();
    let first = wide.insert(&year(1)).await.unwrap();
    let read = read_year(&wide, KEYS).await.unwrap().unwrap();
    assert_eq!(read.if_match(), first.if_match());

    // A concurrent write after the read: the version read is stale.
    other.upsert(&year(2)).await.unwrap();
    metrics.reset();
    let err = wide.delete(KEYS, read.if_match()).await.unwrap_err();
    assert!(
        matches!(&err, Error::PreconditionFailed { target } if target.keys.as_ref().map(|k| k.rk()) == Some(KEYS.1)),
        "the logical entity is named: {err}"
    );
    let spent = metrics.snapshot();
    assert_eq!(
        (
            spent.requests(),
            spent.requests_of(RequestKind::Query),
            spent.requests_of(RequestKind::Transaction)
        ),
        (2, 1, 1),
        "a projection read, then one transaction that fails whole; no retry"
    );
    assert_eq!(
        row_keys(&table, "000223").await,
        ["DailyIm_01", "DailyIm_02"],
        "nothing is deleted"
    );
    let current = read_year(&wide, KEYS).await.unwrap().unwrap();
    assert_eq!(current.value, year(2), "the concurrent write is intact");

    // A stale version of another shape (3 shards then) fails the same way.
    let wider = Entity::new(KEYS.into_keys().unwrap(), strings(600, 8));
    let three = other.upsert(&wider).await.unwrap();
    assert_eq!(three.shards.len(), 3);
    other.upsert(&year(3)).await.unwrap();
    let err = wide.delete(KEYS, three.if_match()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(
        row_keys(&table, "000223").await,
        ["DailyIm_01", "DailyIm_02"]
    );

    // The current version deletes every shard in one transaction.
    let current = read_year(&wide, KEYS).await.unwrap().unwrap();
    assert_eq!(current.value, year(3));
    metrics.reset();
    wide.delete(KEYS, current.if_match()).await.unwrap();
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        2,
        "a projection read, then one transaction"
    );
    assert_eq!(spent.requests_of(RequestKind::Transaction), 1);
    assert!(
        row_keys(&table, "000223").await.is_empty(),
        "all shards gone"
    );

    // Absent: NotFound under any condition, after the projection read alone.
    metrics.reset();
    for condition in [IfMatch::Any, current.if_match()] {
        let err = wide.delete(KEYS, condition).await.unwrap_err();
        assert!(
            matches!(&err, Error::NotFound { target } if target.keys.is_some()),
            "{err}"
        );
    }
    assert_eq!(metrics.snapshot().requests(), 2, "one read each");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn concurrent_updates_of_a_wide_entity_are_never_lost() {
    let table = common::table("wideconc").await;
    let account = common::contended_account();
    let wide = WideEntities::new(common::reopen(&table, &account));
    wide.upsert(&year(0)).await.unwrap();
    let tasks: Vec<_> = (0..6)
        .map(|t| {
            let wide = wide.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    wide.update_with(KEYS, |y: Option<Year>| {
                        let mut y = y.expect("exists");
                        // Day 1 counts every update; day 365 moves between shards' owners.
                        *y.days.get_mut("D001").unwrap() += 1;
                        *y.days.get_mut("D365").unwrap() += t;
                        y
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let read = read_year(&wide, KEYS).await.unwrap().unwrap().value;
    assert_eq!(read.days["D001"], 1 + 18);
    assert_eq!(read.days["D365"], 365 + 3 * (0..6).sum::<i64>());
    assert_eq!(read.days["D200"], 200);

    // update_with costs one full read and one transaction without contention.
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let plain = WideEntities::new(table.clone());
    plain
        .update_with(KEYS, |y: Option<Year>| y.unwrap())
        .await
        .unwrap();
    let spent = metrics.snapshot();
    assert_eq!(spent.requests(), 2);
    assert_eq!(
        (
            spent.requests_of(RequestKind::Query),
            spent.requests_of(RequestKind::Transaction)
        ),
        (1, 1)
    );
    let range = Filter::row_range(
        "000223",
        Bound::Included("DailyIm_01"),
        Bound::Included("DailyIm_99"),
    );
    assert_eq!(
        table
            .typed::<Properties>()
            .query()
            .filter(range)
            .collect()
            .await
            .unwrap()
            .len(),
        2
    );
    table.delete_table().await.unwrap();
}
