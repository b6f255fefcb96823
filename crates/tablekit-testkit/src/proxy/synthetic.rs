//! Synthetic error responses shaped like the Table service's, for [`super::Fault::Status`] and
//! for requests a [`super::ThrottleModel`] refuses.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ThrottleMode;
use super::buckets::Refusal;

/// The statuses a synthetic response may have: a 1xx would be taken for an interim response
/// and leave the client waiting for a final one.
pub(crate) const VALID_STATUSES: std::ops::RangeInclusive<u16> = 200..=599;

/// The `x-ms-error-code` and message the service would send with `status`.
fn error_for(status: u16) -> (&'static str, &'static str) {
    match status {
        403 => (
            "AuthenticationFailed",
            "The request could not be authenticated",
        ),
        404 => ("ResourceNotFound", "The addressed resource does not exist"),
        408 | 500 => ("OperationTimedOut", "The operation did not finish in time"),
        409 => ("EntityAlreadyExists", "The entity already exists"),
        412 => (
            "UpdateConditionNotSatisfied",
            "The entity changed since its ETag was read",
        ),
        413 => ("RequestBodyTooLarge", "The request body is too large"),
        // Names neither the account nor a partition (see `throttled` for answers that do).
        503 => ("ServerBusy", "Service unavailable; retry the request later"),
        // 400 and every 4xx without a more specific code.
        400..=499 => ("InvalidInput", "A request input is not valid"),
        _ => ("InternalError", "The server failed to process the request"),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Injected Fault",
    }
}

/// Numbers synthetic responses so each carries a distinct, GUID-shaped request id, as real
/// responses do (SDKs log it).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The complete response bytes for `status`. Statuses of 400 and above carry a JSON error body
/// in the Table service's format; lower ones (and 204) carry none. `head_only` leaves the body
/// out (the answer to a HEAD request) but still announces its length.
pub(crate) fn response(status: u16, head_only: bool, close: bool) -> Vec<u8> {
    let error = (status >= 400).then(|| {
        let (code, message) = error_for(status);
        (
            code,
            format!("{message} (fault injected by the tablekit proxy)."),
        )
    });
    build(status, "status", error, &[], head_only, close)
}

/// The request units a Cosmos DB-style 429 answer reports in `x-ms-request-charge`: the
/// service charges a little for reading and refusing a request.
pub(crate) const THROTTLED_REQUEST_CHARGE: f64 = 1.25;

/// The message of a `503 ServerBusy` for an account over its target.
pub(crate) const ACCOUNT_BUSY: &str = "Operations per second is over the account limit.";
/// The message of a `503 ServerBusy` for a partition over its target.
pub(crate) const PARTITION_BUSY: &str = "The server is busy.";

/// The refusal of a throttled request. `refusal` says which bucket was short; `nth` numbers
/// the partition refusals (from 1), for the modes that alternate their answers.
///
/// - [`ThrottleMode::ServerBusy`]: `503 ServerBusy`, with a message that tells an account over
///   its target from a partition over its own, as Azure Table storage's do.
/// - [`ThrottleMode::ServerBusyOrTimedOut`]: the account as above; partitions alternately
///   `503 ServerBusy` (odd `nth`) and `500 OperationTimedOut` (even `nth`), the two answers
///   Azure Table storage gives a partition over its target.
/// - [`ThrottleMode::TooManyRequests`]: `429 TooManyRequests` with its retry hints, as the
///   Cosmos DB Table API answers either.
pub(crate) fn throttled(
    mode: ThrottleMode,
    refusal: Refusal,
    nth: u64,
    head_only: bool,
    close: bool,
) -> Vec<u8> {
    let busy = |message: &str| {
        build(
            503,
            "throttle",
            Some(("ServerBusy", message.into())),
            &[],
            head_only,
            close,
        )
    };
    match (mode, refusal) {
        (ThrottleMode::TooManyRequests { retry_after }, _) => {
            let millis = retry_after.as_millis();
            let seconds = millis.div_ceil(1000);
            build(
                429,
                "throttle",
                Some(("TooManyRequests", "The request rate is too large.".into())),
                &[
                    ("x-ms-retry-after-ms", millis.to_string()),
                    ("Retry-After", seconds.to_string()),
                    ("x-ms-request-charge", THROTTLED_REQUEST_CHARGE.to_string()),
                ],
                head_only,
                close,
            )
        }
        (_, Refusal::Account) => busy(ACCOUNT_BUSY),
        (ThrottleMode::ServerBusyOrTimedOut, Refusal::Partition) if nth % 2 == 0 => build(
            500,
            "throttle",
            Some((
                "OperationTimedOut",
                "The operation could not be completed in the time allowed.".into(),
            )),
            &[],
            head_only,
            close,
        ),
        (_, Refusal::Partition) => busy(PARTITION_BUSY),
    }
}

/// Response bytes with a request id, the `x-tablekit-fault` marker (`kind`), the error's code
/// header and JSON body when there is an error, and `extra` headers.
fn build(
    status: u16,
    kind: &str,
    error: Option<(&str, String)>,
    extra: &[(&str, String)],
    head_only: bool,
    close: bool,
) -> Vec<u8> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nx-ms-request-id: 00000000-0000-4000-8000-{id:012x}\r\nx-tablekit-fault: {kind}\r\n",
        reason(status)
    );
    let body = match error {
        Some((code, message)) => {
            head.push_str(&format!(
                "x-ms-error-code: {code}\r\nContent-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n"
            ));
            // Codes and messages are ours and contain nothing JSON needs escaped.
            format!(
                r#"{{"odata.error":{{"code":"{code}","message":{{"lang":"en-US","value":"{message}"}}}}}}"#
            )
        }
        None => String::new(),
    };
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if status != 204 {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    if !head_only {
        bytes.extend_from_slice(body.as_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(bytes: &[u8]) -> (String, String) {
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        // Keep the last header's line ending so every header reads `name: value\r\n`.
        (format!("{head}\r\n"), body.to_owned())
    }

    #[test]
    fn error_responses_carry_code_json_body_and_exact_length() {
        let (head, body) = split(&response(503, false, false));
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("x-ms-error-code: ServerBusy\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(!head.contains("Connection: close"));
        assert!(
            body.starts_with(
                r#"{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":""#
            ) && body.ends_with(r#"."}}}"#),
            "{body}"
        );
        let (head, body) = split(&response(500, true, true));
        assert!(
            head.contains("x-ms-error-code: OperationTimedOut")
                && head.contains("Connection: close")
        );
        assert!(body.is_empty(), "a HEAD answer has no body");
        let (head, _) = split(&response(400, false, false));
        assert!(head.contains("x-ms-error-code: InvalidInput"));
        let (head, body) = split(&response(204, false, false));
        assert!(
            !head.contains("Content-Length")
                && !head.contains("x-ms-error-code")
                && body.is_empty()
        );
    }

    #[test]
    fn throttled_answers_are_server_busy_or_too_many_requests_with_retry_hints() {
        let (head, body) = split(&throttled(
            ThrottleMode::ServerBusy,
            Refusal::Partition,
            1,
            false,
            false,
        ));
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("x-ms-error-code: ServerBusy\r\n"));
        assert!(head.contains("x-tablekit-fault: throttle\r\n"));
        assert!(!head.contains("Retry-After") && !head.contains("retry-after"));
        assert_eq!(
            body,
            r#"{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":"The server is busy."}}}"#
        );
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
        let mode = ThrottleMode::TooManyRequests {
            retry_after: std::time::Duration::from_millis(1_200),
        };
        let (head, body) = split(&throttled(mode, Refusal::Account, 1, false, true));
        assert!(
            head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{head}"
        );
        assert!(head.contains("x-ms-error-code: TooManyRequests\r\n"));
        assert!(head.contains("x-ms-retry-after-ms: 1200\r\n"));
        assert!(
            head.contains("Retry-After: 2\r\n"),
            "seconds, rounded up: {head}"
        );
        assert!(head.contains("Connection: close\r\n"));
        assert!(head.contains("x-ms-request-charge: 1.25\r\n"), "{head}");
        assert!(body.contains(r#""code":"TooManyRequests""#));
    }

    #[test]
    fn account_and_partition_refusals_are_told_apart_and_partitions_also_time_out() {
        let answer = |mode, refusal, nth| {
            let (head, body) = split(&throttled(mode, refusal, nth, false, false));
            let status: u16 = head[9..12].parse().unwrap();
            (status, head, body)
        };
        let (status, head, account) = answer(ThrottleMode::ServerBusy, Refusal::Account, 1);
        assert_eq!(status, 503);
        assert!(head.contains("x-ms-error-code: ServerBusy\r\n"), "{head}");
        assert!(account.contains(ACCOUNT_BUSY), "{account}");
        let (status, _, partition) = answer(ThrottleMode::ServerBusy, Refusal::Partition, 2);
        assert_eq!(status, 503, "ServerBusy mode never times out");
        assert!(partition.contains(PARTITION_BUSY) && !partition.contains(ACCOUNT_BUSY));
        let mixed = ThrottleMode::ServerBusyOrTimedOut;
        let (status, _, _) = answer(mixed, Refusal::Partition, 1);
        assert_eq!(status, 503);
        let (status, head, body) = answer(mixed, Refusal::Partition, 2);
        assert_eq!(status, 500);
        assert!(head.starts_with("HTTP/1.1 500 Internal Server Error\r\n"));
        assert!(
            head.contains("x-ms-error-code: OperationTimedOut\r\n"),
            "{head}"
        );
        assert!(head.contains("x-tablekit-fault: throttle\r\n"));
        assert!(body.contains(r#""code":"OperationTimedOut""#), "{body}");
        let (status, _, body) = answer(mixed, Refusal::Account, 2);
        assert_eq!(
            (status, body.contains(ACCOUNT_BUSY)),
            (503, true),
            "an account over its target is always ServerBusy"
        );
    }
}
