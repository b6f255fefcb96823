//! The pattern operations of the load mix.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use tablekit_core::{Entity, Keys, Properties};
use tablekit_index::IndexRead as _;

use crate::patterns::{self, Archive, Fixture, Line, Own, SERIES, SLOTS};
use crate::{Rng, Tally};

/// One pattern operation (`k` in 8..16); returns its name for the latency report.
pub(crate) async fn pattern_op(
    k: u64,
    task: u64,
    rng: &mut Rng,
    fx: &Fixture,
    tally: &Tally,
    mine: &mut Own,
) -> &'static str {
    let partition = format!("task{task:02}");
    match k {
        8 => {
            // A new employee, or a new email for one: the stale copy goes in the same
            // transaction.
            let id = rng.next(mine.employees.len() as u64 + 1);
            let version = mine.employees.get(&id).map_or(0, |v| v + 1);
            fx.index
                .upsert(&patterns::employee(task, id, version))
                .await
                .unwrap();
            mine.employees.insert(id, version);
            "index.upsert"
        }
        9 => {
            if !mine.employees.is_empty() {
                let pick = rng.next(mine.employees.len() as u64) as usize;
                let (&id, &version) = mine.employees.iter().nth(pick).unwrap();
                let e = patterns::employee(task, id, version);
                let found = fx
                    .index
                    .get_by(&fx.by_email, &partition, &e.email)
                    .await
                    .unwrap();
                assert_eq!(found.map(|s| s.value), Some(e), "the latest email finds it");
            }
            "index.get_by"
        }
        10 => {
            fx.log
                .append(&partition, &Line { seq: mine.lines })
                .await
                .unwrap();
            mine.lines += 1;
            "log.append"
        }
        11 => {
            let latest = fx.log.latest(&partition, 5).await.unwrap();
            assert_eq!(
                latest.first().map(|l| l.value.seq),
                (mine.lines > 0).then(|| mine.lines - 1)
            );
            "log.latest"
        }
        12 => {
            let (n, slot) = (task as usize % SERIES, rng.next(SLOTS as u64) as usize);
            fx.series
                .add(&patterns::series_keys(n), &format!("H{slot:02}"), 1)
                .await
                .unwrap();
            tally.adds.0[n][slot].fetch_add(1, Ordering::Relaxed);
            "series.add"
        }
        13 => {
            let slot = rng.next(2) as usize;
            let version = mine.large.get(&slot).map_or(0, |v| v + 1);
            let keys = Keys::new(partition.as_str(), format!("{slot}")).unwrap();
            let data = patterns::payload(task, slot, version);
            fx.large
                .upsert(
                    &Entity::new(keys.clone(), Properties::new().with("V", version as i64)),
                    data.clone(),
                )
                .await
                .unwrap();
            mine.large.insert(slot, version);
            let read = fx.large.get::<Properties>(&keys).await.unwrap().unwrap();
            assert_eq!(read.payload.as_ref(), data.as_slice());
            "large.put+get"
        }
        14 => {
            // An entity to archive, and the job that moves it (a worker runs meanwhile).
            let n = mine.archived;
            fx.current
                .insert(&Entity::new(
                    patterns::archive_keys(task, n),
                    Properties::new().with("N", n as i64),
                ))
                .await
                .unwrap();
            fx.jobs.enqueue(&Archive { task, n }).await.unwrap();
            mine.archived += 1;
            "job.enqueue"
        }
        _ => {
            let keys = Keys::new(partition.as_str(), "Wide").unwrap();
            let v = mine.wide.map_or(0, |v| v + 1);
            fx.wide
                .upsert(&Entity::new(keys.clone(), patterns::wide_version(v)))
                .await
                .unwrap();
            mine.wide = Some(v);
            let read = fx.wide.get::<BTreeMap<String, i64>>(&keys).await.unwrap();
            assert_eq!(read.unwrap().value, patterns::wide_version(v));
            "wide.write+read"
        }
    }
}
