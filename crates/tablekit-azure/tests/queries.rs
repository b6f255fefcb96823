//! Queries against Azurite: ordering, projection, paging, continuation tokens, scan policy.

mod common;

use futures::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use tablekit_azure::{ContinuationToken, RequestKind, ScanPolicy, Settings};
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, ErrorKind, Properties, QueryShape};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Row {
    #[serde(rename = "N")]
    n: i64,
    #[serde(rename = "Email")]
    email: String,
    #[serde(rename = "Notes")]
    notes: String,
}

#[derive(Debug, PartialEq, Deserialize)]
struct EmailOnly {
    #[serde(rename = "Email")]
    email: String,
}

async fn fill(table: &tablekit_azure::Table, partitions: &[&str], per_partition: usize) {
    let ops = partitions
        .iter()
        .flat_map(|pk| {
            (0..per_partition).map(move |i| {
                let row = Row {
                    n: i as i64,
                    email: format!("e{i}@x"),
                    notes: "n".repeat(50),
                };
                Operation::insert(&Entity::try_new(*pk, format!("{i:05}"), row).unwrap()).unwrap()
            })
        })
        .collect();
    let report = table.bulk_write(ops, Default::default()).await.unwrap();
    assert!(
        report.is_complete(),
        "{:?}",
        report.outcomes.iter().find(|o| !o.is_written())
    );
}

#[tokio::test]
async fn paging_returns_everything_once_and_tokens_resume_elsewhere() {
    let table = common::table("paging").await;
    fill(&table, &["p"], 2_500).await;
    let query = table
        .query::<Row>()
        .filter(Filter::partition("p"))
        .with_page_size(1_000);
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let all: Vec<_> = query.clone().stream().try_collect().await.unwrap();
    assert_eq!(all.len(), 2_500);
    let mut seen: Vec<i64> = all.iter().map(|s| s.value.n).collect();
    seen.dedup();
    assert_eq!(
        seen,
        (0..2_500).collect::<Vec<_>>(),
        "each exactly once, in RowKey order"
    );
    assert_eq!(
        metrics.snapshot().requests_of(RequestKind::Query),
        3,
        "2,500 at 1,000 per page = 3 requests"
    );

    // Page 1, then the token travels as text to a fresh Table (another process, in effect).
    let first = query.page().await.unwrap();
    assert_eq!(first.items.len(), 1_000);
    let saved = first.continuation.unwrap().to_string();
    let json = serde_json::to_string(&saved.parse::<ContinuationToken>().unwrap()).unwrap();
    let token: ContinuationToken = serde_json::from_str(&json).unwrap();
    let fresh = common::reopen(&table);
    let rest: Vec<_> = fresh
        .query::<Row>()
        .filter(Filter::partition("p"))
        .with_page_size(1_000)
        .resume(token)
        .collect()
        .await
        .unwrap();
    assert_eq!(rest.len(), 1_500);
    assert_eq!(rest.first().unwrap().value.n, 1_000);
    assert_eq!(rest.last().unwrap().value.n, 2_499);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn the_next_page_is_read_ahead_and_a_dropped_stream_costs_at_most_one_more_request() {
    let table = common::table("readahead").await;
    fill(&table, &["p"], 300).await;
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let pages_of = |ahead: bool| {
        Box::pin(
            table
                .query::<Row>()
                .filter(Filter::partition("p"))
                .with_page_size(100)
                .with_read_ahead(ahead)
                .pages(),
        )
    };
    let mut pages = pages_of(true);
    use futures::StreamExt as _;
    let first = pages.next().await.unwrap().unwrap();
    assert_eq!(first.items.len(), 100);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // The second page was requested while the first was handed out.
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Query), 2);
    drop(pages);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        metrics.snapshot().requests_of(RequestKind::Query),
        2,
        "dropping the stream stops reading ahead"
    );

    // Without read-ahead, a page is requested only when the caller asks for it.
    metrics.reset();
    let mut pages = pages_of(false);
    assert_eq!(pages.next().await.unwrap().unwrap().items.len(), 100);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Query), 1);
    let rest: usize = pages
        .map(|page| page.unwrap().items.len())
        .fold(0, |sum, n| async move { sum + n })
        .await;
    assert_eq!(rest, 200);
    assert_eq!(metrics.snapshot().requests_of(RequestKind::Query), 3);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn page_size_caps_each_page_and_top_caps_the_total() {
    let table = common::table("pagesize").await;
    fill(&table, &["p"], 120).await;
    let pages: Vec<_> = table
        .query::<Row>()
        .filter(Filter::partition("p"))
        .with_page_size(50)
        .pages()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        pages.iter().map(|p| p.items.len()).collect::<Vec<_>>(),
        [50, 50, 20]
    );
    let top = table
        .query::<Row>()
        .filter(Filter::partition("p"))
        .top(70)
        .with_page_size(50)
        .collect()
        .await
        .unwrap();
    assert_eq!(top.len(), 70);
    let err = table
        .query::<Row>()
        .with_page_size(1_001)
        .page()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LimitExceeded);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn results_are_ordered_and_scans_cross_partitions() {
    let table = common::table("ordering").await;
    fill(&table, &["b", "a", "c"], 3).await;
    let all = table.query::<Row>().collect().await.unwrap();
    let keys: Vec<(String, String)> = all
        .iter()
        .map(|s| (s.keys.pk().to_owned(), s.keys.rk().to_owned()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "ascending by PartitionKey, then RowKey");
    let by_email = table
        .query::<Row>()
        .filter(Filter::eq("Email", "e1@x"))
        .collect()
        .await
        .unwrap();
    assert_eq!(
        by_email.len(),
        3,
        "a table scan finds matches in every partition"
    );
    let in_a = table
        .query::<Row>()
        .filter(Filter::partition("a").and(Filter::eq("Email", "e1@x")))
        .collect()
        .await
        .unwrap();
    assert_eq!(in_a.len(), 1, "a partition scan stays in its partition");
    table.delete_table().await.unwrap();
}

/// `filter` called again narrows the query: `.filter(partition).filter(n)` is the partition
/// scan `partition and n`, not a table scan for `n` alone (the second call once replaced the
/// first). A scan policy that refuses table scans lets it through, and it takes one request.
#[tokio::test]
async fn filters_given_one_after_another_are_combined_with_and() {
    let table = common::table("filterand").await;
    fill(&table, &["a", "b", "c"], 10).await;
    let strict = table
        .account()
        .with_settings(Settings::default().with_scan_policy(ScanPolicy::deny_table_scans()))
        .unwrap();
    let query = strict
        .table(table.name())
        .unwrap()
        .query::<Row>()
        .filter(Filter::partition("b"))
        .filter(Filter::ge("N", 7_i64));
    assert_eq!(query.shape(), QueryShape::PartitionScan);
    strict.metrics().reset();
    let rows = query
        .collect()
        .await
        .expect("a partition scan passes a policy that refuses table scans");
    let found: Vec<(&str, i64)> = rows.iter().map(|s| (s.keys.pk(), s.value.n)).collect();
    assert_eq!(found, [("b", 7), ("b", 8), ("b", 9)]);
    assert_eq!(
        strict.metrics().snapshot().requests_of(RequestKind::Query),
        1,
        "one request: the service read one partition"
    );
    table.delete_table().await.unwrap();
}

/// What the service itself returns for `$select=Email`, asked through the raw SDK so that
/// nothing of tablekit's is in the request: the selected property and the ETag, none of the
/// other properties. Azure also returns PartitionKey, RowKey and Timestamp; Azurite omits
/// them — which is why tablekit adds them to every projection (next test).
#[tokio::test]
async fn the_service_returns_only_the_selected_properties_and_the_etag() {
    let table = common::table("projraw").await;
    fill(&table, &["p"], 2).await;
    let mut pages = table
        .client()
        .query()
        .filter("PartitionKey eq 'p'")
        .select("Email")
        .into_stream::<serde_json::Map<String, serde_json::Value>>();
    let mut rows = Vec::new();
    while let Some(page) = pages.next().await {
        rows.extend(page.expect("raw SDK query").entities);
    }
    assert_eq!(rows.len(), 2);
    let emulator = tablekit_testkit::TestStorage::shared()
        .unwrap()
        .is_emulator();
    for row in &rows {
        let user: Vec<&str> = row
            .keys()
            .map(String::as_str)
            .filter(|k| !k.starts_with("odata.") && !k.contains('@'))
            .filter(|k| !matches!(*k, "PartitionKey" | "RowKey" | "Timestamp"))
            .collect();
        assert_eq!(user, ["Email"], "only the selected property: {row:?}");
        assert!(row.contains_key("odata.etag"), "the ETag: {row:?}");
        let system = ["PartitionKey", "RowKey", "Timestamp"].map(|k| row.contains_key(k));
        if emulator {
            assert_eq!(
                system, [false; 3],
                "Azurite omits the system properties: {row:?}"
            );
        } else {
            assert_eq!(
                system, [true; 3],
                "Azure returns the system properties: {row:?}"
            );
        }
    }
    table.delete_table().await.unwrap();
}

/// What tablekit makes of a projection: the selected properties as the value, and — because
/// it asks for them on every service — keys, Timestamp and ETag in `Stored`.
#[tokio::test]
async fn a_projection_yields_the_selected_properties_with_keys_timestamp_and_etag() {
    let table = common::table("projection").await;
    fill(&table, &["p"], 2).await;
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .select(["Email"])
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row.value.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["Email"]
        );
        assert_eq!(
            (row.keys.pk(), row.keys.rk()),
            ("p", format!("{i:05}").as_str())
        );
        assert!(!row.etag.as_str().is_empty() && row.timestamp.is_some());
    }
    let typed = table
        .query::<EmailOnly>()
        .filter(Filter::partition("p"))
        .select_fields()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        typed[1].value,
        EmailOnly {
            email: "e1@x".into()
        }
    );
    let err = table
        .query::<Properties>()
        .select(["Manager Rating"])
        .page()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn the_scan_policy_can_refuse_table_scans_before_sending() {
    let table = common::table("scanpolicy").await;
    let strict = table
        .account()
        .with_settings(Settings::default().with_scan_policy(ScanPolicy::deny_table_scans()))
        .unwrap();
    let strict_table = strict.table(table.name()).unwrap();
    let query = strict_table
        .query::<Properties>()
        .filter(Filter::eq("LastName", "Jones"));
    assert_eq!(query.shape(), QueryShape::TableScan);
    let err = query.clone().page().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(
        strict.metrics().snapshot().requests(),
        0,
        "refused before any request"
    );
    assert!(
        query.allow_scan().page().await.is_ok(),
        "an explicit override is honoured"
    );
    let point = strict_table
        .query::<Properties>()
        .filter(Filter::partition("p").and(Filter::eq("RowKey", "r")));
    assert_eq!(point.shape(), QueryShape::Point);
    assert!(point.page().await.is_ok());
    table.delete_table().await.unwrap();
}
