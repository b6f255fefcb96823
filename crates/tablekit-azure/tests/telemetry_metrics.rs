//! The OpenTelemetry metrics of requests (feature `otel`), read from the OpenTelemetry SDK's
//! in-memory metric exporter after requests to Azurite: the operation duration histogram and
//! the request, throttling, retry and governor-wait counters, with their attributes.
//!
//! One test in this binary: the global meter provider is the process's, and the counts are
//! exact.
#![cfg(feature = "otel")]

mod common;

use std::time::Duration;

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use tablekit_azure::{SendOptions, ThroughputPolicy, UploadOptions};
use tablekit_core::{Entity, ErrorKind, Properties};
use tablekit_testkit::{Fault, unique_container_name, unique_queue_name, unique_table_name};

/// One data point: its attributes (as text) and its value (a histogram's count).
type Point = (Vec<(String, String)>, u64);

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.as_str().to_owned(),
        other => other.to_string(),
    }
}

fn points(attributes: impl Iterator<Item = KeyValue>, value: u64) -> Point {
    let mut a: Vec<_> = attributes
        .map(|kv| (kv.key.as_str().to_owned(), text(&kv.value)))
        .collect();
    a.sort();
    (a, value)
}

fn metric<'a>(all: &'a [ResourceMetrics], name: &str) -> &'a Metric {
    all.last()
        .expect("a collection")
        .scope_metrics()
        .filter(|s| s.scope().name() == "tablekit")
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// The data points of a u64 counter or an f64 histogram (its counts).
fn data(metric: &Metric) -> Vec<Point> {
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
            .data_points()
            .map(|p| points(p.attributes().cloned(), p.value()))
            .collect(),
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| points(p.attributes().cloned(), p.count()))
            .collect(),
        other => panic!("unexpected data: {other:?}"),
    }
}

/// The value of the one data point of `metric` whose attributes include all of `with`
/// (0 when none has them).
#[track_caller]
fn value(metric: &Metric, with: &[(&str, &str)]) -> u64 {
    let matching: Vec<Point> = data(metric)
        .into_iter()
        .filter(|(attrs, _)| {
            with.iter()
                .all(|(k, v)| attrs.iter().any(|(ak, av)| ak == k && av == v))
        })
        .collect();
    assert!(matching.len() <= 1, "{}: {matching:?}", metric.name());
    matching.first().map_or(0, |(_, v)| *v)
}

fn attribute<'a>(point: &'a Point, key: &str) -> Option<&'a str> {
    point
        .0
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn requests_record_duration_and_counters_with_their_attributes() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    // Before any account: instruments come from the global provider when an account is built.
    opentelemetry::global::set_meter_provider(provider.clone());

    // A partition budget of 20 entities a second and a burst of 50 ms: a run of writes to one
    // partition waits for it.
    let settings = common::fast_retries().with_throughput(
        ThroughputPolicy::default()
            .with_targets(20.0, 20_000.0)
            .with_utilization(1.0)
            .with_burst(Duration::from_millis(50)),
    );
    let p = common::proxied(settings);
    let account = &p.account;
    let name = unique_table_name("Metrics");
    let table = account.table(&name).unwrap();
    table.create().await.unwrap();
    for i in 0..5 {
        table
            .insert(&Entity::try_new("p", format!("{i}"), Properties::new()).unwrap())
            .await
            .unwrap();
    }
    p.table.fail_nth(1, Fault::Status(503));
    table
        .insert(&Entity::try_new("p", "retried", Properties::new()).unwrap())
        .await
        .unwrap();
    let duplicate = table
        .insert(&Entity::try_new("p", "0", Properties::new()).unwrap())
        .await
        .unwrap_err();
    assert_eq!(duplicate.kind(), ErrorKind::AlreadyExists);
    assert!(table.get::<Properties>(("p", "0")).await.unwrap().is_some());

    let queue = account.queue(&unique_queue_name("metrics")).unwrap();
    queue.create().await.unwrap();
    queue.send(b"m", SendOptions::default()).await.unwrap();
    let container = account
        .container(&unique_container_name("metrics"))
        .unwrap();
    container.create().await.unwrap();
    container
        .upload("b", b"data".to_vec(), UploadOptions::default())
        .await
        .unwrap();

    provider.force_flush().unwrap();
    let all = exporter.get_finished_metrics().unwrap();
    let snapshot = account.metrics().snapshot();

    let endpoint = &account.endpoints().table;
    let host = endpoint.host_str().unwrap();
    let port = endpoint.port_or_known_default().unwrap().to_string();
    let insert = [
        ("db.operation.name", "insert"),
        ("db.collection.name", name.as_str()),
    ];

    // The duration of each logical request: 6 successful inserts (one after a retry), one
    // that failed, one get; in seconds, with the database-client attributes.
    let duration = metric(&all, "db.client.operation.duration");
    assert_eq!(duration.unit(), "s");
    let ok: Vec<Point> = data(duration)
        .into_iter()
        .filter(|p| {
            attribute(p, "db.operation.name") == Some("insert")
                && attribute(p, "db.collection.name") == Some(&name)
                && attribute(p, "error.type").is_none()
        })
        .collect();
    assert_eq!(ok.len(), 1, "{ok:?}");
    assert_eq!(ok[0].1, 6);
    for (key, expected) in [
        ("db.system.name", "azure.table_storage"),
        ("azure.resource_provider.namespace", "Microsoft.Tables"),
        ("server.address", host),
        ("server.port", port.as_str()),
    ] {
        assert_eq!(attribute(&ok[0], key), Some(expected), "{key}: {ok:?}");
    }
    assert_eq!(
        value(
            duration,
            &[
                insert[0],
                insert[1],
                ("error.type", "AlreadyExists"),
                ("http.response.status_code", "409")
            ]
        ),
        1
    );
    assert_eq!(
        value(
            duration,
            &[("db.operation.name", "get"), ("db.collection.name", &name)]
        ),
        1
    );

    // Attempts: 5 + 2 (the retried insert) + 1 (the duplicate). The snapshot agrees.
    let requests = metric(&all, "tablekit.client.requests");
    assert_eq!(requests.unit(), "{request}");
    assert_eq!(value(requests, &insert), 8);
    assert_eq!(snapshot.requests_of(tablekit_azure::RequestKind::Insert), 8);
    let throttled = metric(&all, "tablekit.client.throttled_responses");
    assert_eq!(
        value(
            throttled,
            &[insert[0], insert[1], ("http.response.status_code", "503")]
        ),
        1
    );
    let retries = metric(&all, "tablekit.client.retries");
    assert_eq!(
        value(
            retries,
            &[insert[0], insert[1], ("error.type", "Throttled")]
        ),
        1
    );
    assert_eq!(snapshot.retries, 1);
    // Seven inserts into one partition at 20 a second: the budget held some of them.
    let waits = metric(&all, "tablekit.client.governor.waits");
    let waited = value(waits, &insert);
    assert!(waited >= 1, "{:?}", data(waits));
    assert!(snapshot.budget_waits >= waited, "{snapshot:?}");

    // Queues and blobs: the Storage namespace, no database system.
    for (operation, collection) in [
        ("put_message", queue.name()),
        ("put_blob", container.name()),
    ] {
        let point = data(duration)
            .into_iter()
            .find(|p| {
                attribute(p, "db.operation.name") == Some(operation)
                    && attribute(p, "db.collection.name") == Some(collection)
            })
            .unwrap_or_else(|| panic!("{operation}"));
        assert_eq!(point.1, 1);
        assert_eq!(
            attribute(&point, "azure.resource_provider.namespace"),
            Some("Microsoft.Storage")
        );
        assert_eq!(attribute(&point, "db.system.name"), None);
    }

    queue.delete_queue().await.unwrap();
    container.delete_container().await.unwrap();
    table.delete_table().await.unwrap();
}
