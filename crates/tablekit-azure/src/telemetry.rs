//! Spans and metrics of requests, shaped by the OpenTelemetry database client and Azure SDK
//! conventions.
//!
//! Every logical request — one call to the service with its retries, such as one `get`, one
//! transaction or one page of a query — runs in one `tracing` span that
//! `tracing-opentelemetry` turns into a CLIENT span named `{operation} {table}`. Metrics go
//! through the OpenTelemetry metrics API with the `otel` feature. See [`Telemetry`] for what
//! is recorded, and the book's "Observing tablekit" recipe for the attribute table.

use std::time::{Duration, Instant};

use azure_storage::clients::ServiceType;
use tablekit_core::{Error, RequestIds, ResourceKind, Target};
use tracing::field::Empty;

use crate::account::Account;
use crate::governor::Charge;
use crate::metrics::RequestKind;
use crate::settings::TableService;

/// What request spans record beyond the attributes every span has.
///
/// By default no span, event or metric carries a PartitionKey or RowKey value, a filter or a
/// blob name: keys are often personal data (e-mail addresses, user ids). Turning on
/// [`Telemetry::record_keys`] adds `tablekit.partition_key` and `tablekit.row_key` to the
/// spans of single-entity operations (the partition key alone to transactions and
/// single-partition queries), and the filter to the warning an expensive query logs.
///
/// # Spans
/// One span per logical request (its retries included), target `tablekit`, level INFO, with
/// the fields `tracing-opentelemetry` maps: `otel.name` = `{operation} {collection}`,
/// `otel.kind` = `client`, `otel.status_code` = `error` when it failed. Attributes:
///
/// | attribute | value |
/// |---|---|
/// | `db.system.name` | `azure.table_storage` on Azure Table storage and Azurite, `azure.cosmosdb` on the Cosmos DB Table API (table requests only) |
/// | `db.operation.name` | see [`operation_name`] |
/// | `db.collection.name` | the table, queue or container |
/// | `db.operation.batch.size` | operations in a transaction |
/// | `server.address`, `server.port` | the service endpoint's host and port |
/// | `azure.resource_provider.namespace` | `Microsoft.Tables` for tables, `Microsoft.Storage` for queues and blobs |
/// | `http.response.status_code` | the last attempt's status, when it got one |
/// | `http.request.resend_count` | retries, when there were any |
/// | `db.response.status_code` | the status of the operation that failed a transaction (the request itself answers 202) |
/// | `azure.service.request.id` | `x-ms-request-id` of the last answer |
/// | `azure.client.request.id` | `x-ms-client-request-id`, the same on every attempt |
/// | `tablekit.query.shape` | a query's [`QueryShape`](tablekit_core::QueryShape): `Point`, `Range`, `PartitionScan`, `TableScan` |
/// | `error.type` | the [`ErrorKind`](tablekit_core::ErrorKind) of a failure, e.g. `Throttled` |
///
/// Events inside the span: `retry` (INFO; the failed attempt's number, status, error type and
/// the delay) and `governor wait` (DEBUG; time the throughput budgets held the attempt).
///
/// Pattern operations open INTERNAL spans around their requests (`index job`, `index repair`,
/// `blob offload`, `worker attempt`, `update_with`), so each step's requests nest under it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Telemetry {
    /// Record PartitionKey and RowKey values in spans and events. Default `false`.
    pub record_keys: bool,
}

impl Telemetry {
    /// These settings with [`Telemetry::record_keys`] set to `record`.
    #[must_use]
    pub fn with_record_keys(mut self, record: bool) -> Self {
        self.record_keys = record;
        self
    }
}

/// The `db.system.name` of Azure Table storage (and Azurite): the conventions have no value
/// of their own for it.
pub const DB_SYSTEM_TABLE_STORAGE: &str = "azure.table_storage";
/// The `db.system.name` of the Cosmos DB Table API, as the conventions name Cosmos DB.
pub const DB_SYSTEM_COSMOS: &str = "azure.cosmosdb";

/// The `db.operation.name` of a request kind: tablekit's method names, which follow the
/// Table REST verbs (`get`, `insert`, `replace`, `merge`, `upsert_replace`, `upsert_merge`,
/// `delete`, `query`, `transaction`, `create_table`, `delete_table`, `list_tables`), and for
/// queues and blobs the service's operations (`put_message`, `get_messages`, `put_blob`, …).
pub fn operation_name(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::TableCreate => "create_table",
        RequestKind::TableDelete => "delete_table",
        RequestKind::TableList => "list_tables",
        RequestKind::Get => "get",
        RequestKind::Insert => "insert",
        RequestKind::Replace => "replace",
        RequestKind::Merge => "merge",
        RequestKind::UpsertReplace => "upsert_replace",
        RequestKind::UpsertMerge => "upsert_merge",
        RequestKind::Delete => "delete",
        RequestKind::Query => "query",
        RequestKind::Transaction => "transaction",
        RequestKind::QueueCreate => "create_queue",
        RequestKind::QueueDelete => "delete_queue",
        RequestKind::QueuePut => "put_message",
        RequestKind::QueueGet => "get_messages",
        RequestKind::QueuePeek => "peek_messages",
        RequestKind::QueueUpdate => "update_message",
        RequestKind::QueueDeleteMessage => "delete_message",
        RequestKind::QueueMetadata => "get_queue_metadata",
        RequestKind::ContainerCreate => "create_container",
        RequestKind::ContainerDelete => "delete_container",
        RequestKind::BlobPut => "put_blob",
        RequestKind::BlobGet => "get_blob",
        RequestKind::BlobProperties => "get_blob_properties",
        RequestKind::BlobDelete => "delete_blob",
        RequestKind::BlobList => "list_blobs",
        RequestKind::BlobAppend => "append_block",
        RequestKind::BlobMetadata => "set_blob_metadata",
        RequestKind::Other => "other",
    }
}

/// The collection a request addresses: its table, queue or container (never a blob name, a
/// key or a listing's prefix).
fn collection(kind: RequestKind, target: &Target) -> Option<&str> {
    match kind {
        RequestKind::TableList | RequestKind::Other => None,
        _ => target.table.split('/').next().filter(|c| !c.is_empty()),
    }
}

/// The `error.type` of a failure: its [`ErrorKind`](tablekit_core::ErrorKind), a short stable
/// name.
pub(crate) fn error_type(error: &Error) -> String {
    format!("{:?}", error.kind())
}

/// Whether a failed request is a failure of the operation: a missing entity or blob is the
/// answer `get` gives (`None`), not an error.
fn is_failure(kind: RequestKind, error: &Error) -> bool {
    let Error::NotFound { target } = error else {
        return true;
    };
    match kind {
        RequestKind::Get => target.keys.is_none(),
        // `Container::download` and `properties` answer `None` for a missing blob.
        RequestKind::BlobGet | RequestKind::BlobProperties => target.kind != ResourceKind::Blob,
        _ => true,
    }
}

/// The telemetry of one logical request: its span and, with the `otel` feature, the
/// attributes its metrics carry.
pub(crate) struct RequestTelemetry {
    span: tracing::Span,
    kind: RequestKind,
    started: Instant,
    #[cfg(feature = "otel")]
    attributes: Vec<opentelemetry::KeyValue>,
    #[cfg(feature = "otel")]
    instruments: Option<std::sync::Arc<crate::metrics::Instruments>>,
}

impl RequestTelemetry {
    /// Opens the span of a request of `kind` to `target`, charged `charge`.
    pub(crate) fn start(
        account: &Account,
        service: ServiceType,
        kind: RequestKind,
        target: &Target,
        charge: &Charge,
    ) -> Self {
        let settings = account.settings();
        let endpoint = match service {
            ServiceType::Table => &account.endpoints().table,
            ServiceType::Queue => &account.endpoints().queue,
            _ => &account.endpoints().blob,
        };
        let (system, namespace) = match service {
            ServiceType::Table => (
                Some(match settings.table_service {
                    TableService::Cosmos => DB_SYSTEM_COSMOS,
                    _ => DB_SYSTEM_TABLE_STORAGE,
                }),
                "Microsoft.Tables",
            ),
            _ => (None, "Microsoft.Storage"),
        };
        let operation = operation_name(kind);
        let collection = collection(kind, target);
        let name = match collection {
            Some(c) => format!("{operation} {c}"),
            None => operation.to_owned(),
        };
        let host = endpoint.host_str().unwrap_or_default();
        let port = endpoint.port_or_known_default();
        let span = tracing::info_span!(
            target: "tablekit",
            "tablekit.request",
            otel.name = %name,
            otel.kind = "client",
            otel.status_code = Empty,
            db.system.name = system,
            db.operation.name = operation,
            db.collection.name = collection,
            db.operation.batch.size = Empty,
            server.address = host,
            server.port = port.map(i64::from),
            azure.resource_provider.namespace = namespace,
            http.response.status_code = Empty,
            http.request.resend_count = Empty,
            db.response.status_code = Empty,
            azure.service.request.id = Empty,
            azure.client.request.id = Empty,
            error.type = Empty,
            tablekit.query.shape = Empty,
            tablekit.partition_key = Empty,
            tablekit.row_key = Empty,
        );
        if kind == RequestKind::Transaction {
            span.record("db.operation.batch.size", i64::from(charge.upfront_cost()));
        }
        if settings.telemetry.record_keys {
            match &target.keys {
                Some(keys) => {
                    span.record("tablekit.partition_key", keys.pk());
                    span.record("tablekit.row_key", keys.rk());
                }
                None => {
                    let pk = charge.partition_key().and_then(|p| {
                        p.strip_prefix(target.table.as_str())
                            .and_then(|p| p.strip_prefix('/'))
                    });
                    if let Some(pk) = pk {
                        span.record("tablekit.partition_key", pk);
                    }
                }
            }
        }
        #[cfg(feature = "otel")]
        let attributes = {
            use opentelemetry::KeyValue;
            let mut a = vec![
                KeyValue::new("db.operation.name", operation),
                KeyValue::new("azure.resource_provider.namespace", namespace),
                KeyValue::new("server.address", host.to_owned()),
            ];
            if let Some(system) = system {
                a.push(KeyValue::new("db.system.name", system));
            }
            if let Some(c) = collection {
                a.push(KeyValue::new("db.collection.name", c.to_owned()));
            }
            if let Some(port) = port {
                a.push(KeyValue::new("server.port", i64::from(port)));
            }
            a
        };
        Self {
            span,
            kind,
            started: Instant::now(),
            #[cfg(feature = "otel")]
            attributes,
            #[cfg(feature = "otel")]
            instruments: account.metrics().instruments(),
        }
    }

    /// The request's span: its attempts run in it.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The throughput budgets held an attempt for `waited`.
    pub(crate) fn governor_waited(&self, waited: Duration) {
        if waited.is_zero() {
            return;
        }
        self.span.in_scope(|| {
            tracing::debug!(
                target: "tablekit",
                waited_ms = waited.as_secs_f64() * 1000.0,
                "governor wait"
            );
        });
        #[cfg(feature = "otel")]
        if let Some(i) = &self.instruments {
            i.governor_waits.add(1, &self.attributes);
        }
    }

    /// An attempt went on the wire; `status` is its answer's, when it got one.
    pub(crate) fn attempt_sent(&self, status: Option<u16>) {
        #[cfg(feature = "otel")]
        if let Some(i) = &self.instruments {
            i.requests.add(1, &self.attributes);
            if let Some(status @ (429 | 503)) = status {
                let mut a = self.attributes.clone();
                a.push(opentelemetry::KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                ));
                i.throttled.add(1, &a);
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = status;
    }

    /// Attempt `attempt` failed with `error`; the next one follows after `delay`.
    pub(crate) fn retrying(&self, attempt: u32, error: &Error, delay: Duration) {
        let ids = error.request_ids();
        self.span.in_scope(|| {
            tracing::info!(
                target: "tablekit",
                attempt = i64::from(attempt),
                http.response.status_code = error.status().map(i64::from),
                error.type = %error_type(error),
                azure.service.request.id = ids.and_then(RequestIds::service),
                delay_ms = delay.as_secs_f64() * 1000.0,
                "retry"
            );
        });
        #[cfg(feature = "otel")]
        if let Some(i) = &self.instruments {
            let mut a = self.attributes.clone();
            a.push(opentelemetry::KeyValue::new(
                "error.type",
                error_type(error),
            ));
            i.retries.add(1, &a);
        }
    }

    /// The request ended after `attempts` attempts, answered (`ids` its request ids) or
    /// failed.
    pub(crate) fn finish(
        &self,
        attempts: u32,
        status: Option<u16>,
        ids: Option<&RequestIds>,
        error: Option<&Error>,
    ) {
        let span = &self.span;
        if let Some(status) = status {
            span.record("http.response.status_code", i64::from(status));
        }
        if attempts > 1 {
            span.record("http.request.resend_count", i64::from(attempts - 1));
        }
        if let Some(ids) = ids {
            if let Some(id) = ids.service() {
                span.record("azure.service.request.id", id);
            }
            if let Some(id) = ids.client() {
                span.record("azure.client.request.id", id);
            }
        }
        let failure = error.filter(|e| is_failure(self.kind, e));
        if let Some(error) = failure {
            self.failed(error);
        }
        #[cfg(feature = "otel")]
        if let Some(i) = &self.instruments {
            let seconds = self.started.elapsed().as_secs_f64();
            match failure {
                Some(error) => {
                    let mut a = self.attributes.clone();
                    a.push(opentelemetry::KeyValue::new(
                        "error.type",
                        error_type(error),
                    ));
                    if let Some(status) = error.status() {
                        a.push(opentelemetry::KeyValue::new(
                            "http.response.status_code",
                            i64::from(status),
                        ));
                    }
                    i.duration.record(seconds, &a);
                }
                None => i.duration.record(seconds, &self.attributes),
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = self.started;
    }

    /// Marks the request failed with `error`: also for failures found after the answer (an
    /// operation of a transaction the service refused).
    pub(crate) fn failed(&self, error: &Error) {
        record_failure(&self.span, error);
    }
}

/// Records `error` as the failure of the request span `span`.
pub(crate) fn record_failure(span: &tracing::Span, error: &Error) {
    span.record("error.type", error_type(error));
    span.record("otel.status_code", "error");
}

/// An INTERNAL span around one step of a pattern operation — `index job`, `index repair`,
/// `blob offload`, `worker attempt`, `update_with` — named `{step} {collection}`, target
/// `tablekit`, level INFO. The step's requests nest under it. It carries no key values.
pub fn step_span(step: &'static str, collection: &str) -> tracing::Span {
    tracing::info_span!(
        target: "tablekit",
        "tablekit.step",
        otel.name = %format_args!("{step} {collection}"),
        otel.kind = "internal",
        tablekit.step = step,
        db.collection.name = collection,
    )
}
