//! Observing tablekit: one OpenTelemetry CLIENT span per request (through tracing-opentelemetry)
//! and request metrics (the `otel` feature), exported over OTLP/HTTP to
//! `OTEL_EXPORTER_OTLP_ENDPOINT` — or, when it is unset, kept in memory and summarised.
//!
//! `cargo xtask demo` runs it against Azurite, without a collector. With one:
//! `OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 cargo run -p tablekit-examples --bin observability`.

use std::collections::BTreeMap;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tablekit::azure::SendOptions;
use tablekit::prelude::*;
use tablekit_examples::unique_name;
use tracing_subscriber::layer::SubscriberExt as _;

// ANCHOR: client
/// The OTLP exporters' HTTP client: the workspace's reqwest (the one tablekit sends with), its
/// requests run on the application's tokio runtime — the SDK exports from threads of its own.
#[derive(Debug)]
struct Http {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Http {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let mut answer = http::Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            Ok::<_, opentelemetry_http::HttpError>(answer.body(response.bytes().await?)?)
        });
        sent.await?
    }
}
// ANCHOR_END: client

/// Where telemetry goes: an OTLP collector, or memory when no endpoint is configured.
enum Sink {
    Otlp,
    Memory(InMemorySpanExporter, InMemoryMetricExporter),
}

// ANCHOR: wire
/// Installs the tracer and meter providers: spans through tracing-opentelemetry, metrics as
/// the global meter provider (before any account is built: accounts take their instruments
/// from it).
fn install() -> Result<(SdkTracerProvider, SdkMeterProvider, Sink), Box<dyn std::error::Error>> {
    let (tracer, meter, sink) = if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        let http = || Http {
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Handle::current(),
        };
        // The endpoint (and headers) come from the standard OTEL_EXPORTER_OTLP_* variables.
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(http())
            .with_protocol(Protocol::HttpBinary)
            .build()?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(http())
            .with_protocol(Protocol::HttpBinary)
            .build()?;
        (
            SdkTracerProvider::builder()
                .with_batch_exporter(spans)
                .build(),
            SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(metrics).build())
                .build(),
            Sink::Otlp,
        )
    } else {
        let (spans, metrics) = (
            InMemorySpanExporter::default(),
            InMemoryMetricExporter::default(),
        );
        (
            SdkTracerProvider::builder()
                .with_simple_exporter(spans.clone())
                .build(),
            SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(metrics.clone()).build())
                .build(),
            Sink::Memory(spans, metrics),
        )
    };
    // tablekit's spans are INFO; a level filter (e.g. tracing_subscriber's EnvFilter) goes
    // here in a real service.
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer.tracer("orders-service")));
    tracing::subscriber::set_global_default(subscriber)?;
    opentelemetry::global::set_meter_provider(meter.clone());
    Ok((tracer, meter, sink))
}
// ANCHOR_END: wire

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (tracer, meter, sink) = install()?;
    // ANCHOR: requests
    let account = Account::from_env_or_emulator()?; // after `install`: its metrics use the global meter provider
    let table = account.table(&unique_name("ObservedOrders"))?;
    table.create().await?;
    let customer = "alice@contoso.com"; // a PartitionKey that is personal data
    for n in 1..=3 {
        let order = Properties::new().with("Total", n * 10);
        table
            .insert(&Entity::try_new(customer, format!("{n:04}"), order)?)
            .await?;
    }
    table.get::<Properties>((customer, "0001")).await?;
    let again = table
        .insert(&Entity::try_new(customer, "0001", Properties::new())?)
        .await;
    assert!(again.is_err(), "an insert of an existing entity fails");
    let orders = table
        .query::<Properties>()
        .filter(Filter::partition(customer))
        .collect()
        .await?;
    let queue = account.queue(&unique_name("observed-jobs"))?;
    queue.create().await?;
    queue.send(b"ship 0001", SendOptions::default()).await?;
    queue.delete_queue().await?;
    table.delete_table().await?;
    // ANCHOR_END: requests
    println!("observability: {} orders of one customer", orders.len());

    // Export what is left before exiting.
    tracer.force_flush()?;
    meter.force_flush()?;
    let result = match &sink {
        Sink::Otlp => {
            println!("observability: spans and metrics exported over OTLP");
            Ok(())
        }
        Sink::Memory(spans, metrics) => summarise(spans, metrics, table.name(), customer),
    };
    tracer.shutdown()?;
    meter.shutdown()?;
    result
}

/// Prints the spans and the duration histogram kept in memory, and checks what the recipe
/// promises: one span per request with its attributes, and no key value in any of them.
fn summarise(
    spans: &InMemorySpanExporter,
    metrics: &InMemoryMetricExporter,
    table: &str,
    customer: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    println!("observability: OTEL_EXPORTER_OTLP_ENDPOINT is unset; kept in memory:");
    let spans = spans.get_finished_spans()?;
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for s in &spans {
        *by_name.entry(s.name.to_string()).or_default() += 1;
    }
    for (name, n) in &by_name {
        println!("    span {name:<40} x{n}");
    }
    let insert = spans
        .iter()
        .find(|s| s.name == format!("insert {table}"))
        .ok_or("no insert span")?;
    println!("    attributes of `{}`:", insert.name);
    for kv in &insert.attributes {
        if !kv.key.as_str().starts_with("code.") && !kv.key.as_str().starts_with("thread.") {
            println!("        {} = {}", kv.key, kv.value);
        }
    }
    if by_name.get(&format!("insert {table}")) != Some(&4) {
        return Err(format!("expected 4 insert spans: {by_name:?}").into());
    }
    let leaked = spans.iter().any(|s| {
        s.attributes
            .iter()
            .any(|kv| kv.value.to_string().contains(customer))
            || s.events.iter().any(|e| {
                e.attributes
                    .iter()
                    .any(|kv| kv.value.to_string().contains(customer))
            })
    });
    if leaked {
        return Err("a PartitionKey value reached a span".into());
    }
    println!("    no span carries the PartitionKey `{customer}`");
    let collected = metrics.get_finished_metrics()?;
    if let Some(resource) = collected.last() {
        for metric in resource.scope_metrics().flat_map(|s| s.metrics()) {
            if let AggregatedMetrics::F64(MetricData::Histogram(h)) = metric.data() {
                for p in h.data_points() {
                    let attribute = |key: &str| {
                        p.attributes()
                            .find(|kv| kv.key.as_str() == key)
                            .map(|kv| kv.value.to_string())
                            .unwrap_or_default()
                    };
                    println!(
                        "    {} {:<16} {:<14} count {} sum {:.3} s",
                        metric.name(),
                        attribute("db.operation.name"),
                        attribute("error.type"),
                        p.count(),
                        p.sum()
                    );
                }
            }
        }
    }
    Ok(())
}
