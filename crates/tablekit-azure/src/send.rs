//! Sending one logical request: attempts with retries, error mapping, metrics.

use azure_core::headers::Headers;
use azure_core::{Context, Pipeline, Request};
use azure_storage::clients::ServiceType;
use bytes::Bytes;
use tablekit_core::{Error, ResourceKind, Result, Target};

use crate::account::Account;
use crate::metrics::RequestKind;

/// A successful response, fully read.
#[derive(Debug)]
pub(crate) struct Collected {
    pub(crate) headers: Headers,
    pub(crate) body: Bytes,
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
}

/// Whether a failed attempt may still have taken effect. Throttling responses (503 Server
/// Busy, 429) are refusals before any work; every other transient failure — a broken
/// connection, a timeout, a 500 `OperationTimedOut`, a gateway error — leaves the outcome
/// unknown.
pub(crate) fn may_have_applied(error: &Error) -> bool {
    !matches!(error.status(), Some(429 | 503))
}

impl<T> Outcome<T> {
    /// The result of a request whose purpose is a state ("the table exists", "the message is
    /// gone"): when an earlier attempt may have taken effect and the retry finds that state
    /// already there, that attempt reached it and only its response was lost.
    pub(crate) fn done_if_retried(self, already_done: impl FnOnce(&Error) -> bool) -> Result<()> {
        match self.result {
            Ok(_) => Ok(()),
            Err(e) if self.maybe_applied && already_done(&e) => Ok(()),
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
        K::Io => Error::transport("the request did not complete", error),
        K::Credential => Error::InvalidConfig {
            part: "credentials".into(),
            reason: error.to_string(),
        },
        _ => Error::transport("the request failed", error),
    }
}

impl Account {
    /// Sends the request `build` makes (a new one per attempt, so dates and signatures are
    /// fresh), retrying transient failures per the account's [`crate::RetryPolicy`].
    pub(crate) async fn send(
        &self,
        service: ServiceType,
        kind: RequestKind,
        target: &Target,
        build: impl Fn() -> Result<Request>,
    ) -> Outcome<Collected> {
        let pipeline = self.pipeline(service);
        let mut attempts = 0;
        let mut maybe_applied = false;
        loop {
            attempts += 1;
            let result = match build() {
                Ok(mut request) => attempt(pipeline, service, kind, target, &mut request).await,
                Err(e) => {
                    return Outcome {
                        result: Err(e),
                        maybe_applied,
                    };
                }
            };
            match result {
                Ok(collected) => {
                    return Outcome {
                        result: Ok(collected),
                        maybe_applied,
                    };
                }
                Err(error) => {
                    self.metrics().error(&error);
                    match self.settings().retry.delay(attempts, &error) {
                        Some(delay) => {
                            tracing::debug!(target: "tablekit", %kind, attempts, ?delay, error = %error, "retrying");
                            self.metrics().retry();
                            maybe_applied |= may_have_applied(&error);
                            tokio::time::sleep(delay).await;
                        }
                        None => {
                            return Outcome {
                                result: Err(error),
                                maybe_applied,
                            };
                        }
                    }
                }
            }
        }
    }
}

async fn attempt(
    pipeline: &Pipeline,
    service: ServiceType,
    kind: RequestKind,
    target: &Target,
    request: &mut Request,
) -> Result<Collected> {
    let mut ctx = Context::new();
    ctx.insert(service);
    ctx.insert(kind);
    let response = pipeline
        .send(&ctx, request)
        .await
        .map_err(|e| map_error(e, target))?;
    let (_, headers, body) = response.deconstruct();
    let body = body.collect().await.map_err(|e| map_error(e, target))?;
    Ok(Collected { headers, body })
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
