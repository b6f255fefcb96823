//! Request spans against Azurite, captured through tracing-opentelemetry and the
//! OpenTelemetry SDK's in-memory span exporter: one CLIENT span per logical request, named
//! `{operation} {collection}`, with the database-client and Azure attributes; retries as
//! events; and no PartitionKey or RowKey value anywhere unless the account opts in.

mod common;
#[path = "common/otel.rs"]
mod otel;

use std::time::Duration;

use futures::TryStreamExt as _;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::trace::SpanData;
use otel::{attr, capture};
use tablekit_azure::{Account, SendOptions, Settings, Telemetry, UploadOptions};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::{CmpOp, Filter, ROW_KEY};
use tablekit_core::{Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_testkit::{Fault, unique_container_name, unique_queue_name, unique_table_name};

fn props(n: i32) -> Properties {
    Properties::new().with("N", n)
}

/// The spans named `{operation} {collection}`.
fn named<'a>(spans: &'a [SpanData], operation: &str, collection: &str) -> Vec<&'a SpanData> {
    let name = format!("{operation} {collection}");
    spans.iter().filter(|s| s.name == name).collect()
}

/// Asserts the attributes every request span has, and returns the span's status code.
#[track_caller]
fn assert_request_span(
    span: &SpanData,
    account: &Account,
    operation: &str,
    collection: &str,
    system: Option<&str>,
    namespace: &str,
    endpoint: &azure_core::Url,
) {
    let what = format!("{}: {:?}", span.name, span.attributes);
    assert_eq!(span.span_kind, SpanKind::Client, "{what}");
    assert_eq!(
        attr(span, "db.operation.name").as_deref(),
        Some(operation),
        "{what}"
    );
    assert_eq!(
        attr(span, "db.collection.name").as_deref(),
        Some(collection),
        "{what}"
    );
    assert_eq!(attr(span, "db.system.name").as_deref(), system, "{what}");
    assert_eq!(
        attr(span, "azure.resource_provider.namespace").as_deref(),
        Some(namespace),
        "{what}"
    );
    assert_eq!(
        attr(span, "server.address").as_deref(),
        endpoint.host_str(),
        "{what}"
    );
    assert_eq!(
        attr(span, "server.port"),
        endpoint.port_or_known_default().map(|p| p.to_string()),
        "{what}"
    );
    let status: u16 = attr(span, "http.response.status_code")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {what}"));
    assert!((200..600).contains(&status), "{what}");
    // The client's id is a fresh UUID per logical request; the service's is its answer's.
    let client = attr(span, "azure.client.request.id").unwrap_or_else(|| panic!("{what}"));
    assert!(uuid::Uuid::parse_str(&client).is_ok(), "{what}");
    assert!(
        attr(span, "azure.service.request.id").is_some_and(|id| !id.is_empty()),
        "{what}"
    );
    let _ = account;
}

#[tokio::test]
async fn every_table_operation_has_one_client_span_with_its_attributes() {
    let capture = capture();
    let account = common::account();
    let name = unique_table_name("Spans");
    let table = account.table(&name).unwrap();
    table.create().await.unwrap();
    let keys = |rk: &str| Keys::new("p", rk).unwrap();
    let etag = table
        .insert(&Entity::new(keys("1"), props(1)))
        .await
        .unwrap();
    assert!(table.get::<Properties>(keys("1")).await.unwrap().is_some());
    assert!(
        table
            .get::<Properties>(keys("none"))
            .await
            .unwrap()
            .is_none()
    );
    let etag = table
        .replace(&Entity::new(keys("1"), props(2)), IfMatch::ETag(etag))
        .await
        .unwrap();
    table
        .merge(&Entity::new(keys("1"), props(3)), IfMatch::ETag(etag))
        .await
        .unwrap();
    table
        .upsert_replace(&Entity::new(keys("2"), props(4)))
        .await
        .unwrap();
    table
        .upsert_merge(&Entity::new(keys("3"), props(5)))
        .await
        .unwrap();
    let duplicate = table
        .insert(&Entity::new(keys("1"), props(1)))
        .await
        .unwrap_err();
    assert_eq!(duplicate.kind(), ErrorKind::AlreadyExists);
    table.delete(keys("3"), IfMatch::Any).await.unwrap();
    let plan = BatchPlan::atomic([
        Operation::insert(&Entity::new(keys("4"), props(6))).unwrap(),
        Operation::insert(&Entity::new(keys("5"), props(7))).unwrap(),
    ])
    .unwrap();
    table.submit(&plan).await.unwrap();
    // Four entities in pages of two: two query requests.
    let pages: Vec<_> = table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .with_page_size(2)
        .pages()
        .try_collect()
        .await
        .unwrap();
    assert!(pages.len() >= 2, "{} pages", pages.len());
    account.list_tables(&name).await.unwrap();
    table.delete_table().await.unwrap();

    let spans = capture.spans_of(&name);
    let endpoint = &account.endpoints().table;
    let check = |operation: &str, expected: usize| -> Vec<&SpanData> {
        let found = named(&spans, operation, &name);
        assert_eq!(found.len(), expected, "{operation}: {spans:#?}");
        for s in &found {
            assert_request_span(
                s,
                &account,
                operation,
                &name,
                Some("azure.table_storage"),
                "Microsoft.Tables",
                endpoint,
            );
        }
        found
    };
    check("create_table", 1);
    let inserts = check("insert", 2);
    check("replace", 1);
    check("merge", 1);
    check("upsert_replace", 1);
    check("upsert_merge", 1);
    check("delete", 1);
    check("delete_table", 1);
    let gets = check("get", 2);
    let queries = check("query", pages.len());
    let transactions = check("transaction", 1);

    // A success is not marked; a failure says what it was.
    let (failed, ok): (Vec<_>, Vec<_>) = inserts
        .iter()
        .partition(|s| attr(s, "error.type").is_some());
    assert_eq!((failed.len(), ok.len()), (1, 1));
    assert_eq!(
        attr(failed[0], "error.type").as_deref(),
        Some("AlreadyExists")
    );
    assert_eq!(
        attr(failed[0], "http.response.status_code").as_deref(),
        Some("409")
    );
    assert!(
        matches!(failed[0].status, Status::Error { .. }),
        "{:?}",
        failed[0].status
    );
    assert_eq!(ok[0].status, Status::Unset);
    // A missing entity is `None`, not an error, though the service answered 404.
    let missing = gets
        .iter()
        .find(|s| attr(s, "http.response.status_code").as_deref() == Some("404"))
        .expect("the get of a missing entity");
    assert_eq!(attr(missing, "error.type"), None);
    assert_eq!(missing.status, Status::Unset);
    assert_eq!(
        attr(transactions[0], "db.operation.batch.size").as_deref(),
        Some("2")
    );
    for q in &queries {
        assert_eq!(attr(q, "tablekit.query.shape").as_deref(), Some("Range"));
    }
    // Each logical request has its own client request id.
    let mut ids: Vec<_> = spans
        .iter()
        .filter_map(|s| attr(s, "azure.client.request.id"))
        .collect();
    let all = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all);

    // Listing tables names no collection: its span is the operation alone.
    let list = capture
        .spans()
        .into_iter()
        .filter(|s| s.name == "list_tables")
        .count();
    assert!(list >= 1);
}

#[tokio::test]
async fn a_failed_operation_of_a_transaction_fails_its_span() {
    let capture = capture();
    let account = common::account();
    let name = unique_table_name("SpanTx");
    let table = account.table(&name).unwrap();
    table.create().await.unwrap();
    let keys = |rk: &str| Keys::new("p", rk).unwrap();
    table
        .insert(&Entity::new(keys("2"), props(0)))
        .await
        .unwrap();
    let plan = BatchPlan::atomic([
        Operation::insert(&Entity::new(keys("1"), props(1))).unwrap(),
        Operation::insert(&Entity::new(keys("2"), props(2))).unwrap(),
    ])
    .unwrap();
    let error = table.submit(&plan).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyExists);
    table.delete_table().await.unwrap();

    let spans = capture.spans_of(&name);
    let tx = named(&spans, "transaction", &name);
    assert_eq!(tx.len(), 1, "{spans:#?}");
    assert_eq!(attr(tx[0], "error.type").as_deref(), Some("AlreadyExists"));
    assert_eq!(
        attr(tx[0], "db.response.status_code").as_deref(),
        Some("409")
    );
    assert!(matches!(tx[0].status, Status::Error { .. }));
}

#[tokio::test]
async fn queue_and_blob_operations_have_client_spans_without_a_database_system() {
    let capture = capture();
    let account = common::account();
    let qname = unique_queue_name("spans");
    let queue = account.queue(&qname).unwrap();
    queue.create().await.unwrap();
    queue.send(b"one", SendOptions::default()).await.unwrap();
    queue.peek(1).await.unwrap();
    let held = queue.receive(1, Duration::from_secs(30)).await.unwrap();
    let held = queue
        .update(&held[0], Duration::from_secs(30))
        .await
        .unwrap();
    queue.delete_message(&held).await.unwrap();
    queue.approximate_len().await.unwrap();
    queue.delete_queue().await.unwrap();

    let cname = unique_container_name("spans");
    let container = account.container(&cname).unwrap();
    container.create().await.unwrap();
    container
        .upload("a/b.txt", b"data".to_vec(), UploadOptions::default())
        .await
        .unwrap();
    assert!(container.download("a/b.txt").await.unwrap().is_some());
    assert!(container.download("missing").await.unwrap().is_none());
    container.properties("a/b.txt").await.unwrap();
    container
        .set_metadata(
            "a/b.txt",
            &[("k".to_owned(), "v".to_owned())].into(),
            IfMatch::Any,
        )
        .await
        .unwrap();
    container.list("a/").await.unwrap();
    container
        .delete_blob("a/b.txt", IfMatch::Any)
        .await
        .unwrap();
    container.delete_container().await.unwrap();

    let spans = capture.spans_of(&qname);
    for operation in [
        "create_queue",
        "put_message",
        "peek_messages",
        "get_messages",
        "update_message",
        "delete_message",
        "get_queue_metadata",
        "delete_queue",
    ] {
        let found = named(&spans, operation, &qname);
        assert_eq!(found.len(), 1, "{operation}: {spans:#?}");
        assert_request_span(
            found[0],
            &account,
            operation,
            &qname,
            None,
            "Microsoft.Storage",
            &account.endpoints().queue,
        );
    }
    let spans = capture.spans_of(&cname);
    for (operation, n) in [
        ("create_container", 1),
        ("put_blob", 1),
        ("get_blob", 2),
        ("get_blob_properties", 1),
        ("set_blob_metadata", 1),
        ("list_blobs", 1),
        ("delete_blob", 1),
        ("delete_container", 1),
    ] {
        let found = named(&spans, operation, &cname);
        assert_eq!(found.len(), n, "{operation}: {spans:#?}");
        for s in found {
            assert_request_span(
                s,
                &account,
                operation,
                &cname,
                None,
                "Microsoft.Storage",
                &account.endpoints().blob,
            );
            assert_eq!(s.status, Status::Unset, "a missing blob is `None`: {s:?}");
        }
    }
    // Blob names are not recorded.
    assert!(!capture.everything().contains("a/b.txt"));
}

#[tokio::test]
async fn a_retried_request_is_one_span_with_a_retry_event_per_failed_attempt() {
    let capture = capture();
    let p = common::proxied(common::fast_retries());
    let name = unique_table_name("SpanRetry");
    let table = p.account.table(&name).unwrap();
    table.create().await.unwrap();
    p.table.fail_nth(1, Fault::Status(503));
    table
        .insert(&Entity::try_new("p", "1", props(1)).unwrap())
        .await
        .unwrap();
    table.delete_table().await.unwrap();

    let spans = capture.spans_of(&name);
    let insert = named(&spans, "insert", &name);
    assert_eq!(insert.len(), 1, "one span for both attempts: {spans:#?}");
    let span = insert[0];
    assert_eq!(
        attr(span, "http.request.resend_count").as_deref(),
        Some("1")
    );
    assert_eq!(
        attr(span, "http.response.status_code").as_deref(),
        Some("204")
    );
    assert_eq!(attr(span, "error.type"), None);
    let retries: Vec<_> = span.events.iter().filter(|e| e.name == "retry").collect();
    assert_eq!(retries.len(), 1, "{:?}", span.events);
    let event = |key: &str| {
        retries[0]
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(event("attempt").as_deref(), Some("1"));
    assert_eq!(event("http.response.status_code").as_deref(), Some("503"));
    assert_eq!(event("error.type").as_deref(), Some("Throttled"));
}

/// Every kind of table request on entities with the keys `pk` and `rk` (values that appear
/// nowhere else), failures included, and an expensive query whose filter quotes the RowKey.
async fn exercise_keys(account: &Account, (pk, rk): (&str, &str)) -> String {
    let name = unique_table_name("Secret");
    let table = account.table(&name).unwrap();
    table.create().await.unwrap();
    let keys = Keys::new(pk, rk).unwrap();
    let other = Keys::new(pk, format!("{rk}-2")).unwrap();
    table
        .insert(&Entity::new(keys.clone(), props(1)))
        .await
        .unwrap();
    let error = table
        .insert(&Entity::new(keys.clone(), props(1)))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(rk),
        "the error itself names the keys"
    );
    table.get::<Properties>(&keys).await.unwrap();
    table.get::<Properties>(&other).await.unwrap();
    table
        .upsert_merge(&Entity::new(keys.clone(), props(2)))
        .await
        .unwrap();
    table
        .update_with::<Properties, _>(&keys, |p| p.unwrap_or_default())
        .await
        .unwrap();
    let plan =
        BatchPlan::atomic([
            Operation::upsert_replace(&Entity::new(other.clone(), props(3))).unwrap(),
        ])
        .unwrap();
    table.submit(&plan).await.unwrap();
    table
        .query::<Properties>()
        .filter(Filter::partition(pk))
        .collect()
        .await
        .unwrap();
    table
        .query::<Properties>()
        .filter(Filter::compare(ROW_KEY, CmpOp::Eq, rk))
        .collect()
        .await
        .unwrap();
    table.delete(&other, IfMatch::Any).await.unwrap();
    assert!(table.delete(&other, IfMatch::Any).await.is_err());
    table.delete_table().await.unwrap();
    name
}

#[tokio::test]
async fn no_key_value_appears_in_any_span_or_event_by_default() {
    let capture = capture();
    let secrets = ("pk-5ecret-e9a1", "rk-5ecret-42c7");
    let name = exercise_keys(&common::account(), secrets).await;
    assert!(
        capture.spans_of(&name).len() >= 12,
        "the requests were captured"
    );
    let everything = capture.everything();
    assert!(everything.contains(&name), "the capture saw the table");
    for secret in [secrets.0, secrets.1] {
        let leaks: Vec<&str> = everything.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaks.is_empty(), "{secret} leaked: {leaks:#?}");
    }
}

#[tokio::test]
async fn key_values_are_recorded_when_the_account_opts_in() {
    let capture = capture();
    let settings =
        common::fast_retries().with_telemetry(Telemetry::default().with_record_keys(true));
    let (pk, rk) = ("pk-0pen-77d2", "rk-0pen-1b0e");
    let name = exercise_keys(&common::account_with(settings), (pk, rk)).await;
    let spans = capture.spans_of(&name);
    let get = named(&spans, "get", &name)
        .into_iter()
        .find(|s| attr(s, "tablekit.row_key").as_deref() == Some(rk))
        .expect("a get span with the RowKey");
    assert_eq!(attr(get, "tablekit.partition_key").as_deref(), Some(pk));
    let tx = named(&spans, "transaction", &name);
    assert_eq!(attr(tx[0], "tablekit.partition_key").as_deref(), Some(pk));
    assert!(capture.everything().contains(&format!("RowKey eq '{rk}'")));
}

#[tokio::test]
async fn an_account_with_the_cosmos_profile_names_its_system_azure_cosmosdb() {
    let capture = capture();
    // Azurite with the Cosmos DB Table API settings (what an account on a Cosmos DB endpoint
    // gets when built): the profile, not the host, decides.
    let account = common::account_with(Settings::cosmos().with_retry(common::fast_retries().retry));
    let name = unique_table_name("SpanCosmos");
    let table = account.table(&name).unwrap();
    table.create().await.unwrap();
    table
        .insert(&Entity::try_new("p", "1", props(1)).unwrap())
        .await
        .unwrap();
    table.delete_table().await.unwrap();

    let spans = capture.spans_of(&name);
    let insert = named(&spans, "insert", &name);
    assert_eq!(insert.len(), 1, "{spans:#?}");
    assert_eq!(
        attr(insert[0], "db.system.name").as_deref(),
        Some("azure.cosmosdb")
    );
    assert_eq!(
        attr(insert[0], "azure.resource_provider.namespace").as_deref(),
        Some("Microsoft.Tables")
    );
}
