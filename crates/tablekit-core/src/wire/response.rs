//! Reading the `multipart/mixed` response of an entity group transaction.
//!
//! The service answers a successful transaction with one part per operation, and a failed
//! one with a single part: the failing operation's status and an error whose message starts
//! with that operation's position (`"1:The specified entity already exists…"`). The 0.21 SDK
//! returns `Ok` for both; tablekit reads the parts and reports the failure.

/// One part of a transaction response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartResponse {
    /// The operation's HTTP status.
    pub status: u16,
    /// The new ETag, for successful writes.
    pub etag: Option<String>,
    /// The service's error code (`odata.error.code`), for failures.
    pub code: Option<String>,
    /// The service's error message, without the position prefix.
    pub message: Option<String>,
    /// The failing operation's position in the transaction, when the message names it.
    pub position: Option<usize>,
}

impl PartResponse {
    /// Whether the operation succeeded.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Parses the parts of a transaction response body (CRLF or LF line endings).
pub fn parse_response(body: &str) -> Vec<PartResponse> {
    let mut parts = Vec::new();
    let mut lines = body.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(status) = line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|s| s.parse().ok())
        else {
            continue;
        };
        let mut part = PartResponse {
            status,
            ..PartResponse::default()
        };
        for header in lines.by_ref() {
            let header = header.trim_end_matches('\r');
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("etag") {
                    part.etag = Some(value.trim().to_owned());
                }
            }
        }
        let mut payload = String::new();
        while let Some(next) = lines.peek() {
            if next.starts_with("--") {
                break;
            }
            payload.push_str(next.trim_end_matches('\r'));
            payload.push('\n');
            lines.next();
        }
        if !part.is_success() {
            read_error(payload.trim(), &mut part);
        }
        parts.push(part);
    }
    parts
}

/// The message of an error response's body: the Table service's JSON
/// (`odata.error.message.value`) or the XML of the Queue and Blob services (`<Message>`).
/// `None` for a body that has none.
pub fn error_message(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?.trim();
    let message = if text.starts_with('{') {
        let json = serde_json::from_str::<serde_json::Value>(text).ok()?;
        let error = &json["odata.error"];
        error["message"]["value"]
            .as_str()
            .or_else(|| error["message"].as_str())?
            .to_owned()
    } else {
        let (_, rest) = text.split_once("<Message>")?;
        let (message, _) = rest.split_once("</Message>")?;
        message.to_owned()
    };
    (!message.is_empty()).then_some(message)
}

fn read_error(payload: &str, part: &mut PartResponse) {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(payload) else {
        if !payload.is_empty() {
            part.message = Some(payload.to_owned());
        }
        return;
    };
    let error = &json["odata.error"];
    part.code = error["code"].as_str().map(str::to_owned);
    let message = error["message"]["value"]
        .as_str()
        .or_else(|| error["message"].as_str())
        .unwrap_or_default();
    // "2:The specified entity already exists." names the failing operation's position.
    match message.split_once(':') {
        Some((pos, rest)) if !pos.is_empty() && pos.bytes().all(|b| b.is_ascii_digit()) => {
            part.position = pos.parse().ok();
            part.message = Some(rest.trim().to_owned());
        }
        _ => part.message = Some(message.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_read_from_json_and_xml_bodies() {
        let json = br#"{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":"The server is busy.\nRequestId:1"}}}"#;
        assert_eq!(
            error_message(json).as_deref(),
            Some("The server is busy.\nRequestId:1")
        );
        let xml = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code><Message>Egress is over the account limit.</Message></Error>";
        assert_eq!(
            error_message(xml).as_deref(),
            Some("Egress is over the account limit.")
        );
        for none in [&b""[..], b"{}", b"<Error><Code>X</Code></Error>", b"\xff"] {
            assert_eq!(error_message(none), None);
        }
    }

    #[test]
    fn success_parts_carry_etags() {
        let body = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
            HTTP/1.1 204 No Content\r\nETag: W/\"a\"\r\n\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
            HTTP/1.1 201 Created\r\nETag: W/\"b\"\r\nContent-Type: application/json\r\n\r\n{}\r\n\
            --changesetresponse_2--\r\n--batchresponse_1--\r\n";
        let parts = parse_response(body);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(PartResponse::is_success));
        assert_eq!(parts[1].etag.as_deref(), Some("W/\"b\""));
    }

    #[test]
    fn a_failure_names_the_operation() {
        let body = "--batchresponse_1\nContent-Type: multipart/mixed; boundary=changesetresponse_2\n\n\
            --changesetresponse_2\nContent-Type: application/http\n\n\
            HTTP/1.1 409 Conflict\nContent-Type: application/json\n\n\
            {\"odata.error\":{\"code\":\"EntityAlreadyExists\",\"message\":{\"lang\":\"en-US\",\"value\":\"2:The specified entity already exists.\\nRequestId:x\"}}}\n\
            --changesetresponse_2--\n--batchresponse_1--\n";
        let parts = parse_response(body);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].status, 409);
        assert_eq!(parts[0].code.as_deref(), Some("EntityAlreadyExists"));
        assert_eq!(parts[0].position, Some(2));
        assert!(
            parts[0]
                .message
                .as_deref()
                .unwrap()
                .starts_with("The specified entity")
        );
    }
}
