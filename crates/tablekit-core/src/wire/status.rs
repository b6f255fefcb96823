//! Error responses of the service, mapped to [`Error`] variants.

use std::time::Duration;

use crate::error::{Error, RequestIds, Target, ThrottleScope};

fn throttled(
    status: u16,
    code: Option<String>,
    message: String,
    retry_after: Option<Duration>,
) -> Error {
    Error::Throttled {
        status,
        scope: ThrottleScope::of_answer(status, code.as_deref(), &message),
        code,
        message,
        retry_after,
        ids: RequestIds::default(),
    }
}

/// Maps an error response of the service to the matching [`Error`] variant.
///
/// `code` is the service's error code (`x-ms-error-code` or the body's `odata.error.code`).
pub fn error_from_response(
    status: u16,
    code: Option<String>,
    message: String,
    target: Target,
    retry_after: Option<Duration>,
) -> Error {
    let code_is = |c: &str| code.as_deref() == Some(c);
    match status {
        404 => Error::NotFound { target },
        409 if code_is("EntityAlreadyExists")
            || code_is("TableAlreadyExists")
            || code_is("QueueAlreadyExists")
            || code_is("ContainerAlreadyExists")
            || code_is("BlobAlreadyExists") =>
        {
            Error::AlreadyExists { target }
        }
        409 if code.is_none() => Error::AlreadyExists { target },
        412 => Error::PreconditionFailed { target },
        // A stale queue-message receipt: another consumer dequeued the message since.
        400 if code_is("PopReceiptMismatch") => Error::PreconditionFailed { target },
        401 => Error::Unauthorized {
            target,
            status,
            code,
            message,
            ids: RequestIds::default(),
        },
        // Azure answers 403 `AuthenticationFailed` for a bad signature or an expired SAS,
        // and Azurite also for a refused bearer token: those are credential failures, not
        // missing permissions. Azurite reports a bad table-SAS signature as
        // `AuthorizationFailure`, with the message of an authentication failure.
        403 if code_is("AuthenticationFailed")
            || code_is("InvalidAuthenticationInfo")
            || code_is("KeyBasedAuthenticationNotPermitted")
            || message.starts_with("Server failed to authenticate the request") =>
        {
            Error::Unauthorized {
                target,
                status,
                code,
                message,
                ids: RequestIds::default(),
            }
        }
        403 => Error::Forbidden {
            target,
            status,
            code,
            message,
            ids: RequestIds::default(),
        },
        429 | 503 => throttled(status, code, message, retry_after),
        500 if code_is("OperationTimedOut") || code_is("InternalError") => {
            throttled(status, code, message, retry_after)
        }
        _ => Error::Service {
            target,
            status,
            code,
            message,
            ids: RequestIds::default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::keys::Keys;

    fn keys() -> Keys {
        Keys::new("Sales", "000223").unwrap()
    }

    #[test]
    fn statuses_map_to_variants_and_retryability() {
        let t = || Target::entity("Employees", keys());
        let e = error_from_response(
            404,
            Some("ResourceNotFound".into()),
            String::new(),
            t(),
            None,
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(!e.is_retryable());
        let e = error_from_response(
            409,
            Some("EntityAlreadyExists".into()),
            String::new(),
            t(),
            None,
        );
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        let e = error_from_response(409, Some("TableBeingDeleted".into()), "x".into(), t(), None);
        assert_eq!(
            e.kind(),
            ErrorKind::Service,
            "a table being deleted is not `exists`"
        );
        let e = error_from_response(412, None, String::new(), t(), None);
        assert_eq!(e.kind(), ErrorKind::PreconditionFailed);
        assert!(!e.is_retryable());
        for status in [429, 503] {
            let e =
                error_from_response(status, Some("ServerBusy".into()), String::new(), t(), None);
            assert_eq!(e.kind(), ErrorKind::Throttled);
            assert!(e.is_retryable());
        }
        let e = error_from_response(
            500,
            Some("OperationTimedOut".into()),
            String::new(),
            t(),
            None,
        );
        assert!(e.is_retryable());
        let e = error_from_response(400, Some("InvalidInput".into()), "bad".into(), t(), None);
        assert!(!e.is_retryable());
        let e = error_from_response(
            403,
            Some("AuthenticationFailed".into()),
            "no".into(),
            t(),
            None,
        );
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        let e = error_from_response(504, None, "gw".into(), t(), None);
        assert!(e.is_retryable());
    }

    #[test]
    fn a_throttling_answer_names_the_target_its_message_names() {
        let scope = |status: u16, code: &str, message: &str| match error_from_response(
            status,
            Some(code.into()),
            message.into(),
            Target::entity("Employees", keys()),
            None,
        ) {
            Error::Throttled { scope, .. } => scope,
            other => panic!("not throttled: {other}"),
        };
        // Azure's messages carry the request id and time on the lines after the text.
        for account in [
            "Operations per second is over the account limit.",
            "Ingress is over the account limit.\nRequestId:0f3c\nTime:2026-11-27T10:00:00Z",
            "Egress is over the account limit.",
        ] {
            assert_eq!(
                scope(503, "ServerBusy", account),
                ThrottleScope::Account,
                "{account}"
            );
        }
        assert_eq!(
            scope(503, "ServerBusy", "The server is busy.\nRequestId:0f3c"),
            ThrottleScope::Partition
        );
        for (status, code, message) in [
            (503, "ServerBusy", ""),
            (
                500,
                "OperationTimedOut",
                "Operation could not be completed within the specified time.",
            ),
            (429, "TooManyRequests", "The request rate is too large."),
            // Only a ServerBusy answer's message is read.
            (
                503,
                "ServiceUnavailable",
                "Operations per second is over the account limit.",
            ),
        ] {
            assert_eq!(
                scope(status, code, message),
                ThrottleScope::Unspecified,
                "{status} {code} {message}"
            );
        }
        let shown = error_from_response(
            503,
            Some("ServerBusy".into()),
            "The server is busy.".into(),
            Target::table("T"),
            None,
        )
        .to_string();
        assert_eq!(
            shown,
            "throttled by the service (HTTP 503, ServerBusy): The server is busy."
        );
    }
}
