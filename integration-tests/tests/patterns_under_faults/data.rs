//! Data layouts under faults: data series (increments), wide entities (sharded writes) and
//! large entities (payloads in blobs).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Keys, Properties};
use tablekit_large::{LargeEntities, SweepOptions};
use tablekit_series::{Series, SeriesLayout, WideEntities};
use tablekit_testkit::unique_container_name;

use crate::{Figures, arm, common, disarm};

#[tokio::test]
async fn series_adds_of_single_writers_are_never_lost_or_counted_twice() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultseries").await;
    let series = Series::<i64>::new(table.clone(), SeriesLayout::hours());
    let (writers, adds) = (4usize, 60usize);
    let slot = |k: usize| format!("H{:02}", k % 6);
    arm(&p, 0x2_21);
    // One writer per series entity, all at once.
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let series = series.clone();
            tokio::spawn(async move {
                let keys = Keys::new(format!("{w:06}"), "ImPerHour").unwrap();
                for k in 0..adds {
                    let after = series.add(&keys, &slot(k), 1).await.unwrap();
                    // The value returned is this writer's count for the slot so far.
                    assert_eq!(after as usize, k / 6 + 1, "writer {w}, add {k}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let faults = disarm(&p);

    let (mut lost, mut duplicated) = (0, 0);
    for w in 0..writers {
        let keys = Keys::new(format!("{w:06}"), "ImPerHour").unwrap();
        let stored = series.get(&keys).await.unwrap().expect("written").value;
        for s in 0..6 {
            let want = (0..adds).filter(|k| k % 6 == s).count() as i64;
            let got = stored.get_or_zero(&slot(s));
            lost += (want - got).max(0) as usize;
            duplicated += (got - want).max(0) as usize;
        }
        assert_eq!(stored.total(), Some(adds as i64));
    }
    Figures {
        pattern: "data series",
        operations: writers * adds,
        faults,
        lost,
        duplicated,
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

/// Several writers on one series under the whole fault mix: an add whose merge had an
/// unknown outcome (lost response, broken connection) settles it from the entity's ledger of
/// recent adds, so no add is lost or counted twice although others added meanwhile.
#[tokio::test]
async fn contended_series_adds_under_faults_are_all_counted_once() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultseriesmany").await;
    let series = Series::<i64>::new(table.clone(), SeriesLayout::hours());
    let keys = Keys::new("000223", "ImPerHour").unwrap();
    let (writers, adds) = (4usize, 40usize);
    arm(&p, 0x2_24);
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (series, keys) = (series.clone(), keys.clone());
            tokio::spawn(async move {
                for _ in 0..adds {
                    series.add(&keys, "H13", 1).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let faults = disarm(&p);
    let stored = series.get(&keys).await.unwrap().expect("written").value;
    let got = stored.get_or_zero("H13");
    let want = (writers * adds) as i64;
    Figures {
        pattern: "data series, 4 writers",
        operations: writers * adds,
        faults,
        lost: (want - got).max(0) as usize,
        duplicated: (got - want).max(0) as usize,
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

/// Version `v` of the wide entity: 100, 300 or 600 properties (1, 2 or 3 shards), each
/// holding `v`, so a read that mixed two writes shows two values.
fn version(v: i64) -> BTreeMap<String, i64> {
    let size = [100, 300, 600][v as usize % 3];
    (0..size).map(|i| (format!("P{i:03}"), v)).collect()
}

#[tokio::test]
async fn wide_entity_reads_see_one_whole_version_and_no_stale_shard_remains() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultwide").await;
    let wide = WideEntities::new(table.clone());
    let keys = Keys::new("000223", "DailyIm").unwrap();
    let counter = Keys::new("000223", "Updates").unwrap();
    let versions = 45i64;
    let updates = 30usize;
    arm(&p, 0x2_22);
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (wide, keys, done, reads) = (wide.clone(), keys.clone(), done.clone(), reads.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                if let Some(read) = wide.get::<BTreeMap<String, i64>>(&keys).await.unwrap() {
                    let v = *read.value.values().next().unwrap();
                    assert_eq!(read.value, version(v), "one whole version, never a mix");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    for v in 0..versions {
        wide.upsert(&Entity::new(keys.clone(), version(v)))
            .await
            .unwrap();
    }
    for _ in 0..updates {
        wide.update_with::<BTreeMap<String, i64>, _>(&counter, |old| {
            let n = old.and_then(|m| m.get("N").copied()).unwrap_or(0);
            BTreeMap::from([("N".to_owned(), n + 1)])
        })
        .await
        .unwrap();
    }
    done.store(true, Ordering::Relaxed);
    reader.await.unwrap();
    let faults = disarm(&p);

    let last = wide
        .get::<BTreeMap<String, i64>>(&keys)
        .await
        .unwrap()
        .expect("written");
    assert_eq!(last.value, version(versions - 1), "the last write won");
    let shards = table
        .query::<Properties>()
        .filter(Filter::partition("000223").and(Filter::lt("RowKey", "DailyIm`")))
        .collect()
        .await
        .unwrap();
    assert_eq!(
        shards.len(),
        last.version.shards.len(),
        "no stale shard of an earlier, wider version"
    );
    let n = wide
        .get::<BTreeMap<String, i64>>(&counter)
        .await
        .unwrap()
        .expect("written")
        .value["N"] as usize;
    println!(
        "  wide entities: {} concurrent reads, each one whole version",
        reads.load(Ordering::Relaxed)
    );
    Figures {
        pattern: "wide entities",
        operations: versions as usize + updates,
        faults,
        lost: updates.saturating_sub(n) + usize::from(last.value != version(versions - 1)),
        duplicated: n.saturating_sub(updates) + shards.len() - last.version.shards.len(),
    }
    .report(&p);
    table.delete_table().await.unwrap();
}

/// Payload `version` of entity `i`: 4 to 36 KiB, different every time.
fn payload(i: usize, version: usize) -> Vec<u8> {
    let len = 4096 + (i * 7919 + version * 104_729) % (32 * 1024);
    (0..len)
        .map(|j| (j as u64 * 31 + i as u64 * 17 + version as u64 * 101) as u8)
        .collect()
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Photo {
    id: String,
    version: i64,
}

#[tokio::test]
async fn large_entities_never_reference_a_missing_blob_and_a_sweep_leaves_no_orphan() {
    let p = common::proxied(common::patient());
    let table = common::table(&p.account, "faultlarge").await;
    let container = p
        .account
        .container(&unique_container_name("faultlarge"))
        .unwrap();
    container.create().await.unwrap();
    let store = LargeEntities::builder(table.clone(), container.clone())
        .with_property("Photo")
        .build()
        .unwrap();
    let (n, versions) = (30usize, 3usize);
    let keys = |i: usize| Keys::new("Sales", format!("{i:06}")).unwrap();
    let mut ops = 0;
    arm(&p, 0x2_23);
    for version in 0..versions {
        for i in 0..n {
            let meta = Photo {
                id: format!("{i:06}"),
                version: version as i64,
            };
            store
                .upsert(&Entity::new(keys(i), &meta), payload(i, version))
                .await
                .unwrap();
            // Read back at once, under faults: complete, verified, the value just written.
            let read = store.get::<Photo>(&keys(i)).await.unwrap().expect("stored");
            assert_eq!(read.entity.value, meta);
            assert_eq!(read.payload.as_ref(), payload(i, version).as_slice());
            ops += 2;
        }
    }
    let faults = disarm(&p);

    let sweep = store.sweep(SweepOptions::immediate()).await.unwrap();
    let mut referenced = BTreeSet::new();
    let mut lost = 0;
    for i in 0..n {
        let read = store.get::<Photo>(&keys(i)).await.unwrap().expect("stored");
        if read.payload.as_ref() != payload(i, versions - 1).as_slice() {
            lost += 1;
        }
        referenced.insert(read.reference.expect("a blob payload").name);
    }
    let blobs: BTreeSet<String> = container
        .list(store.prefix())
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    let unreferenced = blobs.difference(&referenced).count();
    assert_eq!(
        blobs, referenced,
        "after the sweep, exactly the referenced blobs remain"
    );
    println!(
        "  large entities: the sweep deleted {} unreferenced blobs",
        sweep.deleted.len()
    );
    Figures {
        pattern: "large entities",
        operations: ops,
        faults,
        lost,
        duplicated: unreferenced,
    }
    .report(&p);
    container.delete_container().await.unwrap();
    table.delete_table().await.unwrap();
}
