//! Span capture for the telemetry tests: every `tracing` span and event goes to
//! tracing-opentelemetry, whose tracer exports to the OpenTelemetry SDK's in-memory span
//! exporter, and, as text, to a recorder of every field (spans, later records and events, at
//! every level), so a test can search all of it.

// Shared with tablekit-large's span test, which uses part of it.
#![allow(unreachable_pub, dead_code)]
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Key, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};

pub struct Capture {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    text: Arc<Mutex<Vec<String>>>,
}

/// The process-wide capture, installed as the global subscriber on first use: call it before
/// anything that traces.
pub fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let text = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tablekit-tests")))
            .with(Recorder(text.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        Capture {
            exporter,
            _provider: provider,
            text,
        }
    })
}

impl Capture {
    /// Every finished span.
    pub fn spans(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().expect("finished spans")
    }

    /// The finished spans whose `db.collection.name` is `collection`.
    pub fn spans_of(&self, collection: &str) -> Vec<SpanData> {
        self.spans()
            .into_iter()
            .filter(|s| attr(s, "db.collection.name").as_deref() == Some(collection))
            .collect()
    }

    /// Everything exported and recorded, as text: span names, attributes, event names and
    /// event attributes, and every field of every span and event.
    pub fn everything(&self) -> String {
        let mut all = String::new();
        for s in self.spans() {
            let _ = writeln!(all, "span {}", s.name);
            for kv in &s.attributes {
                let _ = writeln!(all, "  {} = {}", kv.key, kv.value);
            }
            for e in s.events.iter() {
                let _ = writeln!(all, "  event {}", e.name);
                for kv in &e.attributes {
                    let _ = writeln!(all, "    {} = {}", kv.key, kv.value);
                }
            }
            let _ = writeln!(all, "  status {:?}", s.status);
        }
        for line in self.text.lock().unwrap().iter() {
            all.push_str(line);
            all.push('\n');
        }
        all
    }
}

/// An attribute of a span, as text.
pub fn attr(span: &SpanData, key: &str) -> Option<String> {
    let key = Key::from(key.to_owned());
    span.attributes
        .iter()
        .rev()
        .find(|kv| kv.key == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

struct Recorder(Arc<Mutex<Vec<String>>>);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        let mut line = format!("new span {}:", attrs.metadata().name());
        attrs.record(&mut Text(&mut line));
        self.0.lock().unwrap().push(line);
    }

    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: Context<'_, S>,
    ) {
        let mut line = String::from("record:");
        values.record(&mut Text(&mut line));
        self.0.lock().unwrap().push(line);
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut line = format!("event {}:", event.metadata().target());
        event.record(&mut Text(&mut line));
        self.0.lock().unwrap().push(line);
    }
}
