//! Request metrics per account: what tests use to prove request counts, and what operators
//! watch (throttling, conflicts, bytes).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::governor::{Charge, Governor, Refusal, ThroughputPolicy};

/// Partitions listed in [`MetricsSnapshot::hottest_partitions`].
const HOTTEST: usize = 5;

macro_rules! kinds {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        /// The kind of one HTTP request, as counted by [`Metrics`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum RequestKind {
            $(#[doc = $doc] $variant,)*
        }

        impl RequestKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [RequestKind] = &[$(RequestKind::$variant,)*];

            /// A stable, dotted name (`table.get`, `queue.put`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $(RequestKind::$variant => $name,)*
                }
            }
        }
    };
}

kinds! {
    TableCreate => "table.create", "Create a table.";
    TableDelete => "table.delete", "Delete a table.";
    TableList => "table.list", "List tables.";
    Get => "entity.get", "Read one entity.";
    Insert => "entity.insert", "Insert one entity.";
    Replace => "entity.replace", "Replace one entity.";
    Merge => "entity.merge", "Merge into one entity.";
    UpsertReplace => "entity.upsert_replace", "Insert or replace one entity.";
    UpsertMerge => "entity.upsert_merge", "Insert or merge one entity.";
    Delete => "entity.delete", "Delete one entity.";
    Query => "entity.query", "One page of a query.";
    Transaction => "entity.transaction", "One entity group transaction.";
    QueueCreate => "queue.create", "Create a queue.";
    QueueDelete => "queue.delete", "Delete a queue.";
    QueuePut => "queue.put", "Put a message.";
    QueueGet => "queue.get", "Get (dequeue) messages.";
    QueuePeek => "queue.peek", "Peek at messages.";
    QueueUpdate => "queue.update", "Update a message (visibility, text).";
    QueueDeleteMessage => "queue.delete_message", "Delete a message.";
    QueueMetadata => "queue.metadata", "Read queue metadata (approximate count).";
    ContainerCreate => "blob.container_create", "Create a blob container.";
    ContainerDelete => "blob.container_delete", "Delete a blob container.";
    BlobPut => "blob.put", "Upload a blob.";
    BlobGet => "blob.get", "Download a blob.";
    BlobProperties => "blob.properties", "Read a blob's properties and metadata.";
    BlobDelete => "blob.delete", "Delete a blob.";
    BlobList => "blob.list", "List blobs (one page).";
    BlobAppend => "blob.append", "Append a block to an append blob.";
    BlobMetadata => "blob.set_metadata", "Set a blob's metadata.";
    Other => "other", "Anything else.";
}

impl RequestKind {
    /// Whether requests of this kind only read: a late attempt of one changes nothing. (A
    /// dequeue changes a message's visibility and dequeue count, so it is not one.)
    pub fn is_read(self) -> bool {
        matches!(
            self,
            RequestKind::TableList
                | RequestKind::Get
                | RequestKind::Query
                | RequestKind::QueuePeek
                | RequestKind::QueueMetadata
                | RequestKind::BlobGet
                | RequestKind::BlobProperties
                | RequestKind::BlobList
        )
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Default)]
struct Counters {
    by_kind: Vec<AtomicU64>,
    entities_read: AtomicU64,
    entities_written: AtomicU64,
    retries: AtomicU64,
    conflicts_409: AtomicU64,
    conflicts_412: AtomicU64,
    conflict_retries: AtomicU64,
    throttled: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    throttled_responses: AtomicU64,
    entities_metered: AtomicU64,
    budget_cuts: AtomicU64,
    budget_waits: AtomicU64,
    budget_wait_nanos: AtomicU64,
    retry_delay_nanos: AtomicU64,
    retry_hint_nanos: AtomicU64,
    request_charge_milli: AtomicU64,
}

/// Live counters of one account, shared by all its handles (cheap to clone), and the account's
/// rate meter and throughput budgets (see [`ThroughputPolicy`]).
///
/// With the `otel` feature, requests are also recorded through the OpenTelemetry metrics API,
/// on instruments of the meter `tablekit` taken from the global meter provider when the
/// account is built (install the provider first):
///
/// | instrument | kind, unit | what |
/// |---|---|---|
/// | `db.client.operation.duration` | histogram, `s` | one logical request, its retries and budget waits included |
/// | `tablekit.client.requests` | counter, `{request}` | attempts sent |
/// | `tablekit.client.throttled_responses` | counter, `{response}` | 429, 503 and 500 `OperationTimedOut` answers |
/// | `tablekit.client.retries` | counter, `{retry}` | retries of transient failures |
/// | `tablekit.client.governor.waits` | counter, `{wait}` | attempts the throughput budgets held back |
///
/// Each carries `db.operation.name`, `db.collection.name`, `server.address`, `server.port`,
/// `azure.resource_provider.namespace` and, for tables, `db.system.name`; failures add
/// `error.type` (and `http.response.status_code` when answered). This snapshot API stays.
#[derive(Clone)]
pub struct Metrics {
    counters: Arc<Counters>,
    governor: Arc<Governor>,
    #[cfg(feature = "otel")]
    instruments: Arc<Instruments>,
}

/// The OpenTelemetry instruments of an account's requests.
#[cfg(feature = "otel")]
pub(crate) struct Instruments {
    pub(crate) duration: opentelemetry::metrics::Histogram<f64>,
    pub(crate) requests: opentelemetry::metrics::Counter<u64>,
    pub(crate) throttled: opentelemetry::metrics::Counter<u64>,
    pub(crate) retries: opentelemetry::metrics::Counter<u64>,
    pub(crate) governor_waits: opentelemetry::metrics::Counter<u64>,
}

#[cfg(feature = "otel")]
impl Instruments {
    /// The instruments of the global meter provider's meter `tablekit`.
    fn global() -> Self {
        let scope = opentelemetry::InstrumentationScope::builder("tablekit")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let meter = opentelemetry::global::meter_with_scope(scope);
        Self {
            duration: meter
                .f64_histogram("db.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of database client operations.")
                // The conventions' advice for this histogram.
                .with_boundaries(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0])
                .build(),
            requests: meter
                .u64_counter("tablekit.client.requests")
                .with_unit("{request}")
                .with_description("HTTP request attempts sent.")
                .build(),
            throttled: meter
                .u64_counter("tablekit.client.throttled_responses")
                .with_unit("{response}")
                .with_description("Throttling answers (429, 503, 500 OperationTimedOut).")
                .build(),
            retries: meter
                .u64_counter("tablekit.client.retries")
                .with_unit("{retry}")
                .with_description("Retries of transient failures.")
                .build(),
            governor_waits: meter
                .u64_counter("tablekit.client.governor.waits")
                .with_unit("{wait}")
                .with_description("Attempts held back by the throughput budgets.")
                .build(),
        }
    }
}

impl Default for Metrics {
    /// Counters at zero, with the default [`ThroughputPolicy`]'s meter.
    fn default() -> Self {
        Self::new(ThroughputPolicy::default())
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Metrics {
    pub(crate) fn new(policy: ThroughputPolicy) -> Self {
        let counters = Counters {
            by_kind: RequestKind::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            ..Counters::default()
        };
        Self {
            counters: Arc::new(counters),
            governor: Arc::new(Governor::new(policy)),
            #[cfg(feature = "otel")]
            instruments: Arc::new(Instruments::global()),
        }
    }

    /// The OpenTelemetry instruments requests record on.
    #[cfg(feature = "otel")]
    pub(crate) fn instruments(&self) -> Option<Arc<Instruments>> {
        Some(self.instruments.clone())
    }

    pub(crate) fn governor(&self) -> &Governor {
        &self.governor
    }

    /// A copy of the current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (account_rate, hottest) = self.governor.rates(HOTTEST);
        MetricsSnapshot {
            requests_by_kind: RequestKind::ALL
                .iter()
                .zip(&c.by_kind)
                .map(|(k, v)| (*k, load(v)))
                .collect(),
            entities_read: load(&c.entities_read),
            entities_written: load(&c.entities_written),
            retries: load(&c.retries),
            conflicts_409: load(&c.conflicts_409),
            conflicts_412: load(&c.conflicts_412),
            conflict_retries: load(&c.conflict_retries),
            throttled: load(&c.throttled),
            bytes_sent: load(&c.bytes_sent),
            bytes_received: load(&c.bytes_received),
            throttled_responses: load(&c.throttled_responses),
            entities_metered: load(&c.entities_metered),
            account_rate: account_rate.round() as u64,
            hottest_partitions: hottest
                .into_iter()
                .map(|(pk, r)| (pk, r.round() as u64))
                .collect(),
            budget_cuts: load(&c.budget_cuts),
            budget_waits: load(&c.budget_waits),
            budget_wait: Duration::from_nanos(load(&c.budget_wait_nanos)),
            retry_delay: Duration::from_nanos(load(&c.retry_delay_nanos)),
            retry_after_hints: Duration::from_nanos(load(&c.retry_hint_nanos)),
            request_charge_milli: load(&c.request_charge_milli),
        }
    }

    /// Sets every counter to zero and forgets the metered rates (the budgets are kept: they
    /// follow the service, not the counters).
    pub fn reset(&self) {
        let c = &self.counters;
        for v in c.by_kind.iter().chain([
            &c.entities_read,
            &c.entities_written,
            &c.retries,
            &c.conflicts_409,
            &c.conflicts_412,
            &c.conflict_retries,
            &c.throttled,
            &c.bytes_sent,
            &c.bytes_received,
            &c.throttled_responses,
            &c.entities_metered,
            &c.budget_cuts,
            &c.budget_waits,
            &c.budget_wait_nanos,
            &c.retry_delay_nanos,
            &c.retry_hint_nanos,
            &c.request_charge_milli,
        ]) {
            v.store(0, Ordering::Relaxed);
        }
        self.governor.reset_meter();
    }

    /// Waits for `charge`'s budgets (see [`ThroughputPolicy`]) and takes it.
    /// Waits for `charge` to fit the budgets, not past `until`; `false` when it cannot by
    /// then (nothing was taken). Also returns the time spent waiting.
    pub(crate) async fn admit(
        &self,
        charge: &Charge,
        until: Option<std::time::Instant>,
    ) -> (bool, Duration) {
        let start = std::time::Instant::now();
        let waited = self.governor.admit(charge, until).await;
        let spent = waited.unwrap_or_else(|| start.elapsed());
        if !spent.is_zero() {
            add(&self.counters.budget_waits, 1);
            add(&self.counters.budget_wait_nanos, nanos(spent));
        }
        (waited.is_some(), spent)
    }

    /// The answer to a charged request sent at `sent`: counts what it served, or adapts to a
    /// refusal.
    pub(crate) fn answered(&self, charge: &Charge, throttled: Option<Refusal>, sent: Instant) {
        match throttled {
            None => self.count_served(
                charge.partition_key(),
                charge.upfront_cost().into(),
                false,
                Some(sent),
            ),
            Some(refusal) => {
                if self.governor.throttled(charge, refusal) {
                    add(&self.counters.budget_cuts, 1);
                }
            }
        }
    }

    /// Counts `n` entities served in partition `pk` (a partition name, `{table}/{pk}`); `take`:
    /// charge them to the budgets too (query results, known only once returned). Their
    /// request's send time is not known, so they do not revise a cut.
    pub(crate) fn served(&self, pk: Option<&str>, n: u64, take: bool) {
        self.count_served(pk, n, take, None);
    }

    fn count_served(&self, pk: Option<&str>, n: u64, take: bool, sent: Option<Instant>) {
        if n > 0 {
            add(&self.counters.entities_metered, n);
            self.governor.served(pk, n, take, sent);
        }
    }

    pub(crate) fn retry_delay(&self, delay: Duration, hint: Option<Duration>) {
        add(&self.counters.retry_delay_nanos, nanos(delay));
        if let Some(hint) = hint {
            add(&self.counters.retry_hint_nanos, nanos(hint));
        }
    }

    pub(crate) fn request_charge(&self, units: f64) {
        if units.is_finite() && units > 0.0 {
            add(
                &self.counters.request_charge_milli,
                (units * 1000.0).round() as u64,
            );
        }
    }

    /// The rate (entities per second) the budget of partition `pk` of `table` admits now:
    /// the target times its utilization, less any cut made by adaptation and not yet grown
    /// back (see [`ThroughputPolicy`]). Infinite when there is no budget.
    pub fn partition_budget_rate(&self, table: &str, pk: &str) -> f64 {
        self.governor
            .limit(Some(&crate::governor::partition_name(table, pk)))
    }

    /// The rate (entities per second) the account's budget admits now (see
    /// [`Metrics::partition_budget_rate`]).
    pub fn account_budget_rate(&self) -> f64 {
        self.governor.limit(None)
    }

    pub(crate) fn request(&self, kind: RequestKind, bytes_sent: usize) {
        if let Some(slot) = RequestKind::ALL.iter().position(|k| *k == kind) {
            add(&self.counters.by_kind[slot], 1);
        }
        add(&self.counters.bytes_sent, bytes_sent as u64);
    }

    pub(crate) fn received(&self, bytes: usize) {
        add(&self.counters.bytes_received, bytes as u64);
    }

    pub(crate) fn entities_read(&self, n: usize) {
        add(&self.counters.entities_read, n as u64);
    }

    pub(crate) fn entities_written(&self, n: usize) {
        add(&self.counters.entities_written, n as u64);
    }

    pub(crate) fn retry(&self) {
        add(&self.counters.retries, 1);
    }

    pub(crate) fn conflict_retry(&self) {
        add(&self.counters.conflict_retries, 1);
    }

    pub(crate) fn error(&self, error: &tablekit_core::Error) {
        match error.status() {
            Some(409) => add(&self.counters.conflicts_409, 1),
            Some(412) => add(&self.counters.conflicts_412, 1),
            _ => {}
        }
        if error.kind() == tablekit_core::ErrorKind::Throttled {
            add(&self.counters.throttled, 1);
        }
        // The answers the governor takes for throttling: 429, 503 and 500 OperationTimedOut.
        if crate::governor::throttling(error, Duration::ZERO).is_some() {
            add(&self.counters.throttled_responses, 1);
        }
    }
}

/// Counter values at one moment. Subtract two snapshots to measure an operation.
///
/// Counters are cumulative; [`account_rate`](Self::account_rate) and
/// [`hottest_partitions`](Self::hottest_partitions) are rates at the moment of the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// HTTP requests sent (every attempt counts), by kind.
    pub requests_by_kind: Vec<(RequestKind, u64)>,
    /// Entities returned by reads and queries.
    pub entities_read: u64,
    /// Entities written successfully (each operation of a transaction counts).
    pub entities_written: u64,
    /// Transient-failure retries.
    pub retries: u64,
    /// 409 Conflict responses.
    pub conflicts_409: u64,
    /// 412 Precondition Failed responses.
    pub conflicts_412: u64,
    /// Optimistic-concurrency retries made by ETag loops.
    pub conflict_retries: u64,
    /// Throttling responses (503, 500 timeouts, 429).
    pub throttled: u64,
    /// Request bytes sent (bodies).
    pub bytes_sent: u64,
    /// Response bytes received (bodies).
    pub bytes_received: u64,
    /// Refusals for throughput: 503 Server Busy, 500 Operation Timed Out and 429 Too Many
    /// Requests answers (each attempt counts).
    pub throttled_responses: u64,
    /// Entities counted by the rate meter, as the service counts them where the client can
    /// see it: each operation of a transaction, each single-entity operation, each entity a
    /// query returned (the service also counts the entities a query scanned and did not
    /// return), each table create, delete and list request as one. Refused attempts do not
    /// count.
    pub entities_metered: u64,
    /// Entities per second the account served over the meter's window, at the snapshot.
    pub account_rate: u64,
    /// The partitions with the highest rates over the meter's window, at the snapshot, named
    /// `{table}/{partition key}` (entities per second, highest first, at most five).
    pub hottest_partitions: Vec<(String, u64)>,
    /// Times adaptation cut a budget after a throttling answer.
    pub budget_cuts: u64,
    /// Requests that waited for budget before being sent.
    pub budget_waits: u64,
    /// Time requests spent waiting for budget, added up over requests.
    pub budget_wait: Duration,
    /// Time slept before retries of transient failures, added up.
    pub retry_delay: Duration,
    /// The retry hints throttling answers carried (`x-ms-retry-after-ms`, `Retry-After`),
    /// added up.
    pub retry_after_hints: Duration,
    /// Request units charged by the Cosmos DB Table API (`x-ms-request-charge`), in
    /// thousandths. See [`MetricsSnapshot::request_charge`].
    pub request_charge_milli: u64,
}

impl MetricsSnapshot {
    /// Requests of one kind.
    pub fn requests_of(&self, kind: RequestKind) -> u64 {
        self.requests_by_kind
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }

    /// Request units charged by the Cosmos DB Table API.
    pub fn request_charge(&self) -> f64 {
        self.request_charge_milli as f64 / 1000.0
    }

    /// All requests.
    pub fn requests(&self) -> u64 {
        self.requests_by_kind.iter().map(|(_, n)| n).sum()
    }

    /// The counts accumulated since `earlier` (rates are this snapshot's).
    pub fn since(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        MetricsSnapshot {
            requests_by_kind: self
                .requests_by_kind
                .iter()
                .map(|(k, n)| (*k, n.saturating_sub(earlier.requests_of(*k))))
                .collect(),
            entities_read: self.entities_read.saturating_sub(earlier.entities_read),
            entities_written: self
                .entities_written
                .saturating_sub(earlier.entities_written),
            retries: self.retries.saturating_sub(earlier.retries),
            conflicts_409: self.conflicts_409.saturating_sub(earlier.conflicts_409),
            conflicts_412: self.conflicts_412.saturating_sub(earlier.conflicts_412),
            conflict_retries: self
                .conflict_retries
                .saturating_sub(earlier.conflict_retries),
            throttled: self.throttled.saturating_sub(earlier.throttled),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            throttled_responses: self
                .throttled_responses
                .saturating_sub(earlier.throttled_responses),
            entities_metered: self
                .entities_metered
                .saturating_sub(earlier.entities_metered),
            account_rate: self.account_rate,
            hottest_partitions: self.hottest_partitions.clone(),
            budget_cuts: self.budget_cuts.saturating_sub(earlier.budget_cuts),
            budget_waits: self.budget_waits.saturating_sub(earlier.budget_waits),
            budget_wait: self.budget_wait.saturating_sub(earlier.budget_wait),
            retry_delay: self.retry_delay.saturating_sub(earlier.retry_delay),
            retry_after_hints: self
                .retry_after_hints
                .saturating_sub(earlier.retry_after_hints),
            request_charge_milli: self
                .request_charge_milli
                .saturating_sub(earlier.request_charge_milli),
        }
    }
}

#[cfg(test)]
mod tests {
    use tablekit_core::Target;
    use tablekit_core::wire::error_from_response;

    use super::*;

    #[test]
    fn every_answer_the_governor_takes_for_throttling_is_counted_as_one() {
        let metrics = Metrics::new(ThroughputPolicy::unlimited());
        for (status, code) in [
            (429, "TooManyRequests"),
            (503, "ServerBusy"),
            (500, "OperationTimedOut"),
            // Not throttling: a failure of the service, and a refusal of the request.
            (500, "InternalError"),
            (409, "EntityAlreadyExists"),
        ] {
            let error = error_from_response(
                status,
                Some(code.into()),
                String::new(),
                Target::table("t"),
                None,
            );
            metrics.error(&error);
        }
        assert_eq!(metrics.snapshot().throttled_responses, 3);
    }
}
