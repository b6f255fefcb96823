//! The step spans of large entities, captured through tracing-opentelemetry and the
//! OpenTelemetry SDK's in-memory span exporter: a put is one INTERNAL `blob offload {table}`
//! span with its requests (read, upload, insert) as CLIENT spans under it; reads and deletes
//! likewise; no span or event carries a key value.

mod common;
#[path = "../../tablekit-azure/tests/common/otel.rs"]
mod otel;

use bytes::Bytes;
use opentelemetry::trace::SpanKind;
use opentelemetry_sdk::trace::SpanData;
use tablekit_core::{Entity, IfMatch, Properties};

/// The names of the spans whose parent is `parent`.
fn children(spans: &[SpanData], parent: &SpanData) -> Vec<String> {
    let id = parent.span_context.span_id();
    let mut names: Vec<String> = spans
        .iter()
        .filter(|s| s.parent_span_id == id)
        .map(|s| s.name.to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn each_operation_is_one_step_span_over_its_requests_without_key_values() {
    let capture = otel::capture();
    let account = common::account();
    let store = common::store(&account, "spans").await;
    let (pk, rk) = ("Dept-5ecret-3f1", "Row-5ecret-8a2");
    store
        .upsert(
            &Entity::try_new(pk, rk, Properties::new()).unwrap(),
            Bytes::from_static(b"a payload"),
        )
        .await
        .unwrap();
    assert!(store.get::<Properties>((pk, rk)).await.unwrap().is_some());
    store.delete((pk, rk), IfMatch::Any).await.unwrap();

    let table = store.table().name().to_owned();
    let container = store.container().name().to_owned();
    let spans = capture.spans();
    let step = |name: &str| -> &SpanData {
        let name = format!("{name} {table}");
        let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "{name}: {spans:#?}");
        assert_eq!(found[0].span_kind, SpanKind::Internal);
        found[0]
    };
    assert_eq!(
        children(&spans, step("blob offload")),
        [
            format!("get {table}"),
            format!("insert {table}"),
            format!("put_blob {container}"),
        ]
    );
    let get = children(&spans, step("large get"));
    assert!(get.contains(&format!("get {table}")), "{get:?}");
    assert!(get.contains(&format!("get_blob {container}")), "{get:?}");
    let delete = children(&spans, step("large delete"));
    assert!(delete.contains(&format!("delete {table}")), "{delete:?}");
    assert!(
        delete.contains(&format!("delete_blob {container}")),
        "{delete:?}"
    );

    let everything = capture.everything();
    assert!(everything.contains(&table));
    for secret in [pk, rk] {
        let leaks: Vec<&str> = everything.lines().filter(|l| l.contains(secret)).collect();
        assert!(leaks.is_empty(), "{secret} leaked: {leaks:#?}");
    }
    common::cleanup(&store).await;
}
