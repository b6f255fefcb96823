//! Sending one logical request: admission by the throughput budgets, attempts with retries,
//! error mapping, metrics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use azure_core::headers::Headers;
use azure_core::{Context, Pipeline, Request};
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use tablekit_core::{Error, RequestIds, ResourceKind, Result, Target, ThrottleScope};
use tracing::Instrument as _;

use crate::account::Account;
use crate::governor::Charge;
use crate::metrics::RequestKind;
use crate::telemetry::RequestTelemetry;

/// What the transport saw of one attempt that the error mapping loses: the server's retry
/// hint, when the attempt went on the wire, and whether it was refused for its deadline. Put
/// into the request's context by [`attempt`].
#[derive(Debug, Default)]
pub(crate) struct ResponseNotes {
    retry_after: Mutex<Option<Duration>>,
    sent_at: Mutex<Option<Instant>>,
    refused: AtomicBool,
    /// The service's id of the request (`x-ms-request-id`), when it answered.
    request_id: Mutex<Option<String>>,
    /// The message of a throttling answer's body (the SDK's error does not read the Table
    /// service's JSON errors): it tells an account over its target from a partition.
    message: Mutex<Option<String>>,
}

/// The header carrying the client's id of a request.
const CLIENT_REQUEST_ID: &str = "x-ms-client-request-id";

/// The latest instant an attempt may be put on the wire: later, it could land after a
/// deadline. In the request's context; the transport checks it last, just before sending.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendBy(pub(crate) Instant);

/// The value behind `mutex`, also after a panic elsewhere poisoned it: the notes are plain
/// values, whole after any write.
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ResponseNotes {
    /// Reads the retry hint of a response: `x-ms-retry-after-ms` (milliseconds, the Cosmos DB
    /// Table API's), else `Retry-After` in whole seconds.
    pub(crate) fn record(&self, header: impl Fn(&str) -> Option<String>) {
        let hint = header("x-ms-retry-after-ms")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .or_else(|| {
                header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs)
            });
        if let Some(hint) = hint {
            *locked(&self.retry_after) = Some(hint);
        }
    }

    /// Keeps the message of a throttling answer's body.
    pub(crate) fn record_message(&self, message: Option<String>) {
        *locked(&self.message) = message;
    }

    fn message(&self) -> Option<String> {
        locked(&self.message).clone()
    }

    fn retry_after(&self) -> Option<Duration> {
        *locked(&self.retry_after)
    }

    /// The attempt goes on the wire now.
    pub(crate) fn sent(&self) {
        *locked(&self.sent_at) = Some(Instant::now());
    }

    fn sent_at(&self) -> Option<Instant> {
        *locked(&self.sent_at)
    }

    /// The attempt was not sent: it could have landed after its deadline.
    pub(crate) fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// The service answered with this request id.
    pub(crate) fn answered_as(&self, request_id: Option<String>) {
        *locked(&self.request_id) = request_id;
    }

    fn request_id(&self) -> Option<String> {
        locked(&self.request_id).clone()
    }
}

/// The default charge of a request: one entity in its entity's partition for an operation on
/// one entity, one against the account for table management, nothing for queues and blobs
/// (their services have targets of their own). Transactions and queries state theirs.
fn default_charge(service: ServiceType, kind: RequestKind, target: &Target) -> Charge {
    if !matches!(service, ServiceType::Table) {
        return Charge::free();
    }
    match (&target.keys, kind) {
        (Some(keys), _) => Charge::partition(&target.table, keys.pk(), 1),
        (None, RequestKind::Query) => Charge::query(&target.table, None),
        (None, _) => Charge::account(1),
    }
}

/// A successful response, fully read.
#[derive(Debug)]
pub(crate) struct Collected {
    pub(crate) status: u16,
    pub(crate) headers: Headers,
    pub(crate) body: Bytes,
    /// The request's ids: errors found in the body (a transaction's) carry them.
    pub(crate) ids: RequestIds,
}

impl Collected {
    pub(crate) fn header(&self, name: &'static str) -> Option<&str> {
        self.headers
            .get_optional_str(&azure_core::headers::HeaderName::from_static(name))
    }
}

/// The result of a logical request, after its retries.
pub(crate) struct Outcome<T> {
    pub(crate) result: Result<T>,
    /// Whether an earlier attempt failed without telling whether it took effect (a lost
    /// response, a timeout): then a conflict on a later attempt may be that attempt's own
    /// doing, and callers verify. Attempts the service refused outright (503, 429) never
    /// set it, so a later conflict is taken as what it is: another writer's.
    pub(crate) maybe_applied: bool,
    /// When every attempt that got no definite answer (the last one included) has landed or
    /// never will: its send instant plus [`Settings::late_landing`](crate::Settings::late_landing).
    /// `None` when every attempt got one.
    pub(crate) lands_by: Option<Instant>,
    /// The request's span, to record a failure found in the answer (a transaction's).
    pub(crate) span: tracing::Span,
}

/// Whether a failed attempt may still have taken effect. Throttling responses (503 Server
/// Busy, 429) are refusals before any work; every other transient failure — a broken
/// connection, a timeout, a 500 `OperationTimedOut`, a gateway error — leaves the outcome
/// unknown.
pub(crate) fn may_have_applied(error: &Error) -> bool {
    // No connection, nothing sent.
    if matches!(error, Error::Connection { .. }) {
        return false;
    }
    !matches!(error.status(), Some(429 | 503))
}

impl<T> Outcome<T> {
    /// The result of a request whose purpose is a state ("the table exists", "the message is
    /// gone"): when an earlier attempt may have taken effect and the retry finds that state
    /// already there, that attempt reached it and only its response was lost.
    pub(crate) fn done_if_retried(self, already_done: impl FnOnce(&Error) -> bool) -> Result<()> {
        let done = self.maybe_applied;
        match self.result {
            Ok(_) => Ok(()),
            Err(e) if done && already_done(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Maps an SDK error to tablekit's, without leaking URLs or signatures.
pub(crate) fn map_error(error: azure_core::Error, target: &Target) -> Error {
    use azure_core::error::ErrorKind as K;
    match error.kind() {
        K::HttpResponse { status, error_code } => {
            let message = error
                .as_http_error()
                .and_then(|h| h.error_message())
                .unwrap_or_default()
                .to_owned();
            // A missing table is reported without entity keys, so callers can tell it from a
            // missing entity.
            let target = match error_code.as_deref() {
                Some("TableNotFound") => Target::table(target.table.clone()),
                Some("ContainerNotFound") => Target::resource(
                    ResourceKind::Container,
                    target
                        .table
                        .split('/')
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                ),
                _ => target.clone(),
            };
            tablekit_core::wire::error_from_response(
                u16::from(*status),
                error_code.clone(),
                message,
                target,
                None,
            )
        }
        K::Io => match error.downcast_ref::<crate::transport::ConnectionProblem>() {
            Some(problem) => Error::Connection {
                failure: problem.problem.0,
                message: problem.problem.1.clone(),
                source: Some(Box::new(error)),
            },
            None => Error::transport("the request did not complete", error),
        },
        K::Credential => Error::InvalidConfig {
            part: "credentials".into(),
            reason: error.to_string(),
        },
        _ => Error::transport("the request failed", error),
    }
}

impl Account {
    /// Sends the request `build` makes (a new one per attempt, so dates and signatures are
    /// fresh), retrying transient failures per the account's [`crate::RetryPolicy`], each
    /// attempt charged as [`default_charge`] says.
    pub(crate) async fn send(
        &self,
        service: ServiceType,
        kind: RequestKind,
        target: &Target,
        build: impl Fn() -> Result<Request>,
    ) -> Outcome<Collected> {
        let charge = default_charge(service, kind, target);
        self.send_charged(service, kind, target, &charge, build)
            .await
    }

    /// [`Account::send`] with an explicit charge: each attempt first waits for the account's
    /// throughput budgets to hold it (see [`crate::ThroughputPolicy`]); its answer is metered,
    /// or adapts the budgets when it is a throttling refusal.
    ///
    /// The request runs in one CLIENT span (see [`crate::Telemetry`]) and is recorded in the
    /// OpenTelemetry metrics with the `otel` feature.
    ///
    /// Every attempt carries the server timeout (`timeout=`), and is sent only if it lands
    /// by the request's deadline — [`Settings::write_settles_within`](crate::Settings::write_settles_within)
    /// from now — and by every [`Deadline`](crate::Deadline) scope around the caller;
    /// otherwise the request ends with [`Error::DeadlineExceeded`], that attempt unsent.
    pub(crate) async fn send_charged(
        &self,
        service: ServiceType,
        kind: RequestKind,
        target: &Target,
        charge: &Charge,
        build: impl Fn() -> Result<Request>,
    ) -> Outcome<Collected> {
        let telemetry = RequestTelemetry::start(self, service, kind, target, charge);
        let span = telemetry.span().clone();
        let (result, maybe_applied, lands_by) = self
            .send_attempts(service, kind, target, charge, build, &telemetry)
            .instrument(span.clone())
            .await;
        Outcome {
            result,
            maybe_applied,
            lands_by,
            span,
        }
    }

    /// The attempts of [`Account::send_charged`]: its result, whether an earlier attempt may
    /// have taken effect, and when unanswered attempts have landed.
    async fn send_attempts(
        &self,
        service: ServiceType,
        kind: RequestKind,
        target: &Target,
        charge: &Charge,
        build: impl Fn() -> Result<Request>,
        telemetry: &RequestTelemetry,
    ) -> (Result<Collected>, bool, Option<Instant>) {
        let pipeline = self.pipeline(service);
        let metrics = self.metrics();
        let settings = self.settings();
        let late = settings.late_landing();
        let own = Instant::now() + settings.write_settles_within();
        let server_timeout = settings.server_timeout().as_secs().to_string();
        // One id for every attempt of this request, to follow it into the service's logs.
        let client_id = uuid::Uuid::new_v4().to_string();
        let mut attempts: u32 = 0;
        let mut maybe_applied = false;
        let mut lands_by: Option<Instant> = None;
        // The ids of the last attempt that was sent.
        let mut last_ids: Option<RequestIds> = None;
        let outcome = |result: Result<Collected>,
                       maybe_applied,
                       lands_by,
                       attempts,
                       last_ids: Option<RequestIds>| {
            let ids = match &result {
                Ok(collected) => Some(&collected.ids),
                Err(e) => e.request_ids().or(last_ids.as_ref()),
            };
            let status = match &result {
                Ok(collected) => Some(collected.status),
                Err(e) => e.status(),
            };
            telemetry.finish(attempts, status, ids, result.as_ref().err());
            (result, maybe_applied, lands_by)
        };
        loop {
            attempts += 1;
            let mut request = match build() {
                Ok(request) => request,
                Err(e) => return outcome(Err(e), maybe_applied, lands_by, attempts, last_ids),
            };
            request
                .url_mut()
                .query_pairs_mut()
                .append_pair("timeout", &server_timeout);
            request.insert_header(CLIENT_REQUEST_ID, client_id.clone());
            let land_by = crate::deadline::current().map_or(own, |d| d.min(own));
            let send_by = land_by.checked_sub(late);
            let admitted = match send_by {
                Some(send_by) if Instant::now() <= send_by => {
                    let (admitted, waited) = metrics.admit(charge, Some(send_by)).await;
                    telemetry.governor_waited(waited);
                    admitted
                }
                _ => false,
            };
            // When it left, for the governor: answers to requests sent before a cut revise it.
            let sent = Instant::now();
            let result = match (admitted, send_by) {
                (true, Some(send_by)) => {
                    let send = (send_by, late);
                    attempt(
                        pipeline,
                        service,
                        kind,
                        target,
                        &mut request,
                        send,
                        &client_id,
                    )
                    .await
                }
                _ => Err(AttemptError::refused(target, late)),
            };
            let error = match result {
                Ok(collected) => {
                    telemetry.attempt_sent(Some(collected.status));
                    metrics.answered(charge, None, sent);
                    return outcome(Ok(collected), maybe_applied, lands_by, attempts, None);
                }
                Err(AttemptError::Refused(error)) => {
                    return outcome(Err(error), maybe_applied, lands_by, attempts, last_ids);
                }
                Err(AttemptError::Failed {
                    error,
                    sent_at,
                    ids,
                }) => {
                    if sent_at.is_some() {
                        telemetry.attempt_sent(error.status());
                        last_ids = Some(ids);
                    }
                    let writes = !kind.is_read();
                    if let (Some(sent_at), true, true) = (sent_at, writes, may_have_applied(&error))
                    {
                        // Without a definite answer, the attempt may land until then.
                        let until = sent_at + late;
                        crate::deadline::may_land_until(until);
                        lands_by = Some(lands_by.map_or(until, |l| l.max(until)));
                    }
                    error
                }
            };
            metrics.error(&error);
            let throttling = crate::governor::throttling(&error, settings.retry.max_retry_after);
            let hint = throttling.and_then(|refusal| refusal.hint);
            if let Some(refusal) = throttling {
                metrics.answered(charge, Some(refusal), sent);
            } else if error.status().is_some() {
                // Answered, so the service did the work of reading it.
                metrics.answered(charge, None, sent);
            }
            match settings.retry.delay(attempts, &error) {
                Some(delay) => {
                    telemetry.retrying(attempts, &error, delay);
                    metrics.retry();
                    metrics.retry_delay(delay, hint);
                    maybe_applied |= may_have_applied(&error);
                    tokio::time::sleep(delay).await;
                }
                None => return outcome(Err(error), maybe_applied, lands_by, attempts, last_ids),
            }
        }
    }
}

/// Why an attempt produced no response.
enum AttemptError {
    /// Not sent: it could have landed after its deadline.
    Refused(Error),
    /// Sent (if `sent_at` says when) and failed.
    Failed {
        error: Error,
        sent_at: Option<Instant>,
        /// The attempt's ids, for its span: not every error carries them.
        ids: RequestIds,
    },
}

impl AttemptError {
    fn refused(target: &Target, late: Duration) -> Self {
        AttemptError::Refused(Error::DeadlineExceeded {
            target: target.clone(),
            reason: format!(
                "an attempt sent now could land up to {late:?} later, past the deadline of \
                 the request or of the scope around it"
            ),
        })
    }
}

async fn attempt(
    pipeline: &Pipeline,
    service: ServiceType,
    kind: RequestKind,
    target: &Target,
    request: &mut Request,
    (send_by, late): (Instant, Duration),
    client_id: &str,
) -> std::result::Result<Collected, AttemptError> {
    let notes = std::sync::Arc::new(ResponseNotes::default());
    let mut ctx = Context::new();
    ctx.insert(service);
    ctx.insert(kind);
    ctx.insert(SendBy(send_by));
    ctx.insert(notes.clone());
    let ids = || RequestIds::new(notes.request_id(), Some(client_id.to_owned()));
    let failed = |error: Error| {
        if notes.refused.load(Ordering::Relaxed) {
            AttemptError::refused(target, late)
        } else {
            AttemptError::Failed {
                error: error.with_request_ids(ids()),
                sent_at: notes.sent_at(),
                ids: ids(),
            }
        }
    };
    let response = match pipeline.send(&ctx, request).await {
        Ok(response) => response,
        Err(e) => {
            let mut error = map_error(e, target);
            if let Error::Throttled {
                status,
                code,
                message,
                scope,
                retry_after,
                ..
            } = &mut error
            {
                if retry_after.is_none() {
                    *retry_after = notes.retry_after();
                }
                if message.is_empty() {
                    if let Some(read) = notes.message() {
                        *scope = ThrottleScope::of_answer(*status, code.as_deref(), &read);
                        *message = read;
                    }
                }
            }
            return Err(failed(error));
        }
    };
    let (status, headers, body) = response.deconstruct();
    let body = body
        .collect()
        .await
        .map_err(|e| failed(map_error(e, target)))?;
    Ok(Collected {
        status: u16::from(status),
        headers,
        body,
        ids: ids(),
    })
}

/// A request signed when sent: the storage headers every request needs (date, version,
/// length) plus `headers`.
pub(crate) fn build_request(
    method: azure_core::Method,
    url: azure_core::Url,
    headers: impl IntoIterator<Item = (azure_core::headers::HeaderName, String)>,
    body: Option<&Bytes>,
) -> Result<Request> {
    let mut h = Headers::new();
    for (name, value) in headers {
        h.insert(name, value);
    }
    azure_storage::clients::finalize_request(
        url,
        method,
        h,
        body.cloned().map(azure_core::Body::from),
    )
    .map_err(|e| Error::transport("could not build the request", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_throttling_refusals_are_known_not_to_have_applied() {
        let t = || Target::table("T");
        let status = |s: u16, code: &str| {
            tablekit_core::wire::error_from_response(s, Some(code.into()), String::new(), t(), None)
        };
        assert!(!may_have_applied(&status(503, "ServerBusy")));
        assert!(!may_have_applied(&status(429, "TooManyRequests")));
        assert!(may_have_applied(&status(500, "OperationTimedOut")));
        assert!(may_have_applied(&status(504, "GatewayTimeout")));
        assert!(may_have_applied(&status(408, "RequestTimeout")));
        assert!(may_have_applied(&Error::Transport {
            message: "connection reset".into(),
            source: None,
        }));
    }
}
