//! Which failed answers the governor takes for throttling: the service refusing a request for
//! its rate rather than for what it asked.

use std::time::Duration;

use tablekit_core::{Error, ThrottleScope};

/// A throttling answer as the governor reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The wait the service asked for, capped.
    pub(crate) hint: Option<Duration>,
    /// Which target the answer says was exceeded.
    pub(crate) scope: ThrottleScope,
}

/// The governor's reading of a failed attempt: `Some` when the answer is a throttling answer
/// (with the wait the service asked for, capped at `max_hint`, and the target it names),
/// `None` otherwise.
///
/// Throttling answers are `429 TooManyRequests` (the Cosmos DB Table API), `503 ServerBusy`
/// and `500 OperationTimedOut` (Azure Table storage answers a partition or an account over its
/// scalability targets with either). Other 500s are failures of the service, not of the rate.
pub(crate) fn throttling(error: &Error, max_hint: Duration) -> Option<Refusal> {
    let Error::Throttled {
        status,
        code,
        scope,
        retry_after,
        ..
    } = error
    else {
        return None;
    };
    let throttling = match status {
        429 | 503 => true,
        500 => code.as_deref() == Some("OperationTimedOut"),
        _ => false,
    };
    throttling.then(|| Refusal {
        hint: retry_after.map(|hint| hint.min(max_hint)),
        scope: *scope,
    })
}

#[cfg(test)]
mod tests {
    use tablekit_core::Target;
    use tablekit_core::wire::error_from_response;

    use super::*;

    /// The error tablekit makes of an answer with `status` and `code`.
    fn answer(status: u16, code: &str, retry_after: Option<Duration>) -> Error {
        error_from_response(
            status,
            Some(code.to_owned()),
            String::new(),
            Target::table("t"),
            retry_after,
        )
    }

    #[test]
    fn server_busy_too_many_requests_and_operation_timed_out_are_throttling_answers() {
        let max = Duration::from_secs(2);
        let hint = Some(Duration::from_millis(300));
        assert_eq!(
            throttling(&answer(429, "TooManyRequests", hint), max).map(|r| r.hint),
            Some(hint)
        );
        assert_eq!(
            throttling(&answer(503, "ServerBusy", None), max).map(|r| r.hint),
            Some(None)
        );
        assert_eq!(
            throttling(&answer(500, "OperationTimedOut", None), max).map(|r| r.hint),
            Some(None),
            "Azure Table storage throttles with 500 OperationTimedOut too"
        );
        assert_eq!(
            throttling(
                &answer(429, "TooManyRequests", Some(Duration::from_secs(60))),
                max
            )
            .map(|r| r.hint),
            Some(Some(max)),
            "the hint is capped"
        );
    }

    #[test]
    fn other_failures_are_not_throttling_answers() {
        let max = Duration::from_secs(2);
        for (status, code) in [
            (500, "InternalError"),
            (404, "ResourceNotFound"),
            (409, "EntityAlreadyExists"),
            (502, "BadGateway"),
        ] {
            assert_eq!(
                throttling(&answer(status, code, None), max),
                None,
                "{status} {code}"
            );
        }
    }
}
