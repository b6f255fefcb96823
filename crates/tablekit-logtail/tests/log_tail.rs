//! The log tail against Azurite: newest-first reads in one request, collision-free concurrent
//! appends, windows, keys written by .NET, request counts.

mod common;

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use tablekit_azure::RequestKind;
use tablekit_core::{Entity, ErrorKind, Properties};
use tablekit_logtail::LogTail;
use tablekit_logtail::key::time_of;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Claim {
    amount: i64,
    description: String,
}

fn claim(n: i64) -> Claim {
    Claim {
        amount: n,
        description: format!("claim {n}"),
    }
}

#[tokio::test]
async fn latest_10_is_one_request_and_the_10_newest_newest_first() {
    let table = common::table("tail").await;
    let metrics = table.account().metrics().clone();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let base = common::at("2026-11-22T10:00:00Z");
    // Appended out of time order: the order comes from the keys, not from insertion.
    let order = [
        7, 3, 19, 0, 12, 5, 24, 1, 16, 9, 22, 14, 2, 20, 11, 6, 18, 4, 23, 8,
    ];
    for &i in &order {
        metrics.reset();
        let at = base + Duration::minutes(i);
        let appended = tail.append_at("000123", at, &claim(i)).await.unwrap();
        common::assert_requests(&metrics.snapshot(), Some(RequestKind::Insert), 1);
        common::assert_requests(&metrics.snapshot(), None, 1);
        assert_eq!(appended.time, at);
        assert_eq!(time_of(appended.keys.rk()).unwrap(), at);
    }

    metrics.reset();
    let latest = tail.latest("000123", 10).await.unwrap();
    common::assert_requests(&metrics.snapshot(), None, 1); // latest(p, 10) = 1 request
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Query), 1);
    let mut newest: Vec<i64> = order.to_vec();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    let got: Vec<i64> = latest.iter().map(|e| e.value.amount).collect();
    assert_eq!(got, newest[..10]);
    for entry in &latest {
        assert_eq!(entry.time, base + Duration::minutes(entry.value.amount));
    }

    metrics.reset();
    assert!(tail.latest("000123", 0).await.unwrap().is_empty());
    common::assert_requests(&metrics.snapshot(), None, 0);
    let all = tail.latest("000123", 1_000).await.unwrap();
    assert_eq!(all.len(), order.len());
    common::assert_requests(&metrics.snapshot(), None, 1);
    assert!(tail.latest("nobody", 10).await.unwrap().is_empty());
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_thousand_appends_from_8_tasks_are_distinct_and_newest_first() {
    let table = common::table("tailconc").await;
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut appended = Vec::new();
                for i in 0..125 {
                    let n = task * 1_000 + i;
                    appended.push(tail.append("p", &claim(n)).await.unwrap());
                }
                appended
            })
        })
        .collect();
    let mut appended = Vec::new();
    for task in tasks {
        appended.extend(task.await.unwrap());
    }
    let keys: HashSet<String> = appended.iter().map(|a| a.keys.rk().to_owned()).collect();
    assert_eq!(keys.len(), 1_000, "every append got its own key");

    let metrics = table.account().metrics().clone();
    metrics.reset();
    let read: Vec<_> = tail.entries("p").collect().await.unwrap();
    assert_eq!(read.len(), 1_000);
    common::assert_requests(&metrics.snapshot(), None, 1); // one page of 1,000
    let read_keys: HashSet<String> = read.iter().map(|e| e.keys.rk().to_owned()).collect();
    assert_eq!(read_keys, keys);
    for pair in read.windows(2) {
        assert!(pair[0].keys.rk() < pair[1].keys.rk());
        assert!(pair[0].time >= pair[1].time, "newest first");
    }
    for a in &appended {
        assert_eq!(time_of(a.keys.rk()).unwrap(), a.time);
    }
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn entries_of_one_tick_never_collide_and_keep_their_time() {
    let table = common::table("tailtick").await;
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let same = common::at("2026-11-22T10:00:00.1234567Z");
    let later = same + Duration::nanoseconds(100);
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let tail = tail.clone();
            tokio::spawn(async move {
                for i in 0..40 {
                    tail.append_at("p", same, &claim(task * 100 + i))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    tail.append_at("p", later, &claim(-1)).await.unwrap();
    // One writer's entries of one tick: the later append sorts first.
    let first = tail.append_at("q", same, &claim(1)).await.unwrap();
    let second = tail.append_at("q", same, &claim(2)).await.unwrap();
    assert!(second.keys.rk() < first.keys.rk());

    let read: Vec<_> = tail.entries("p").collect().await.unwrap();
    assert_eq!(read.len(), 321);
    assert_eq!(read[0].value.amount, -1, "the later tick comes first");
    assert!(read[1..].iter().all(|e| e.time == same));
    let distinct: HashSet<&str> = read.iter().map(|e| e.keys.rk()).collect();
    assert_eq!(distinct.len(), 321);
    table.delete_table().await.unwrap();
}

/// `DateTime.MaxValue.Ticks - t.Ticks` as 19 digits, computed here from the .NET constants
/// alone (not with the crate's helpers).
fn dotnet_row_key(t: DateTime<Utc>) -> String {
    const MAX_TICKS: i64 = 3_155_378_975_999_999_999;
    const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;
    let ticks =
        UNIX_EPOCH_TICKS + t.timestamp() * 10_000_000 + i64::from(t.timestamp_subsec_nanos() / 100);
    format!("{:019}", MAX_TICKS - ticks)
}

#[tokio::test]
async fn keys_written_by_dotnet_are_read_in_order_with_their_times() {
    let table = common::table("taildotnet").await;
    let times = [
        "2014-07-31T15:04:00Z",
        "2014-07-31T15:05:30.5Z",
        "2014-07-31T15:05:59.9999999Z",
        "2026-11-22T10:00:00.1234567Z",
        "1999-12-31T23:59:59.0000001Z",
    ]
    .map(common::at);
    assert_eq!(dotnet_row_key(times[3]), "2516069591998765432");
    for (i, t) in times.iter().enumerate() {
        let entity = Entity::try_new(
            "empid",
            dotnet_row_key(*t),
            Properties::new()
                .with("Amount", i as i64)
                .with("Description", format!("claim {i}")),
        )
        .unwrap();
        table.insert(&entity).await.unwrap();
    }
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let read = tail.latest("empid", 10).await.unwrap();
    let mut expected = times.to_vec();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(read.iter().map(|e| e.time).collect::<Vec<_>>(), expected);
    for entry in &read {
        assert_eq!(times[entry.value.amount as usize], entry.time);
        assert_eq!(entry.keys.rk(), dotnet_row_key(entry.time));
    }
    let window = tail
        .window("empid", times[0], common::at("2014-07-31T15:06:00Z"))
        .collect()
        .await
        .unwrap();
    assert_eq!(
        window.iter().map(|e| e.time).collect::<Vec<_>>(),
        vec![times[2], times[1], times[0]]
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_window_is_one_range_query_newest_first() {
    let table = common::table("tailwin").await;
    let metrics = table.account().metrics().clone();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let base = common::at("2026-11-22T10:00:00Z");
    let items: Vec<_> = (0..30)
        .map(|i| (base + Duration::minutes(i), claim(i)))
        .collect();
    metrics.reset();
    let report = tail.append_batch("p", &items).await.unwrap();
    assert!(report.is_complete());
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Transaction), 1);
    common::assert_requests(&metrics.snapshot(), None, 1);

    metrics.reset();
    let window = tail
        .window(
            "p",
            base + Duration::minutes(5),
            base + Duration::minutes(12),
        )
        .collect()
        .await
        .unwrap();
    common::assert_requests(&metrics.snapshot(), None, 1);
    let got: Vec<i64> = window.iter().map(|e| e.value.amount).collect();
    assert_eq!(got, (5..12).rev().collect::<Vec<_>>());

    metrics.reset();
    let paged = tail
        .clone()
        .with_page_size(10)
        .window("p", base, base + Duration::minutes(30))
        .collect()
        .await
        .unwrap();
    assert_eq!(paged.len(), 30);
    assert!(metrics.snapshot().requests() >= 3);
    metrics.reset();
    let empty = tail.window("p", base, base).collect().await.unwrap();
    assert!(empty.is_empty());
    common::assert_requests(&metrics.snapshot(), None, 0);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn batches_are_split_at_100_per_transaction() {
    let table = common::table("tailbatch").await;
    let metrics = table.account().metrics().clone();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let now = Utc::now();
    let items: Vec<_> = (0..250).map(|i| (now, claim(i))).collect();
    metrics.reset();
    let appended = tail
        .append_batch("p", &items)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    common::assert_requests(&metrics.snapshot(), Some(RequestKind::Transaction), 3);
    assert_eq!(appended.len(), 250);
    assert_eq!(tail.latest("p", 1_000).await.unwrap().len(), 250);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let table = common::table("tailbad").await;
    let metrics = table.account().metrics().clone();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    metrics.reset();
    let err = tail.append("a/b", &claim(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let too_early = common::at("0001-01-01T00:00:00Z") - Duration::seconds(1);
    let err = tail.append_at("p", too_early, &claim(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Encode);
    let now = Utc::now();
    let err = tail
        .window("p", now, now - Duration::seconds(1))
        .collect()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(tail.latest("a#b", 10).await.is_err());
    common::assert_requests(&metrics.snapshot(), None, 0);

    let missing: LogTail<Claim> = LogTail::new(common::account().table("NoSuchTable0").unwrap());
    let err = missing.latest("p", 10).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // A RowKey that is not a log-tail key is reported, not skipped silently.
    table
        .insert(&Entity::try_new("p", "not-ticks", claim(1)).unwrap())
        .await
        .unwrap();
    let err = tail.latest("p", 1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_resumed_read_equals_the_unresumed_read_and_select_projects() {
    let table = common::table("tailresume").await;
    let metrics = table.account().metrics().clone();
    let tail: LogTail<Claim> = LogTail::new(table.clone());
    let base = common::at("2026-11-22T10:00:00Z");
    let items: Vec<_> = (0..30)
        .map(|i| (base + Duration::minutes(i), claim(i)))
        .collect();
    assert!(tail.append_batch("p", &items).await.unwrap().is_complete());
    let (from, to) = (base + Duration::minutes(2), base + Duration::minutes(27));

    for read in [tail.entries("p"), tail.window("p", from, to)] {
        let whole = read.clone().collect().await.unwrap();
        // One page of 7, its token kept as text, the rest in a new read from the token.
        metrics.reset();
        let first = read.clone().with_page_size(7).page().await.unwrap();
        common::assert_requests(&metrics.snapshot(), None, 1);
        assert_eq!(first.items.len(), 7);
        let saved = first.continuation.expect("more entries follow").to_string();
        metrics.reset();
        let rest = read
            .clone()
            .with_page_size(7)
            .resume(saved.parse().unwrap())
            .collect()
            .await
            .unwrap();
        let pages = (whole.len() - 7).div_ceil(7) as u64;
        common::assert_requests(&metrics.snapshot(), Some(RequestKind::Query), pages);
        let resumed: Vec<_> = first.items.into_iter().chain(rest).collect();
        assert_eq!(resumed, whole, "the resumed read is the same read");
    }

    // A projection reads only the properties asked for; keys and times are always there.
    let raw: LogTail<Properties> = LogTail::new(table.clone());
    let projected = raw.entries("p").select(["Amount"]).collect().await.unwrap();
    assert_eq!(projected.len(), 30);
    for (entry, amount) in projected.iter().zip((0..30).rev()) {
        assert_eq!(entry.value.get_i64("Amount").unwrap(), Some(amount));
        assert!(
            entry.value.get("Description").is_none(),
            "{:?}",
            entry.value
        );
        assert_eq!(entry.time, base + Duration::minutes(amount));
    }
    // `first` and `top` bound the read.
    metrics.reset();
    let newest = tail.entries("p").first().await.unwrap().unwrap();
    assert_eq!(newest.value, claim(29));
    let three = tail.entries("p").top(3).collect().await.unwrap();
    assert_eq!(
        three.iter().map(|e| e.value.amount).collect::<Vec<_>>(),
        [29, 28, 27]
    );
    common::assert_requests(&metrics.snapshot(), None, 2);
    table.delete_table().await.unwrap();
}
