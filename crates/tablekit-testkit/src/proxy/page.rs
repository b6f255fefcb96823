//! Query pages as Azure may cut them: shorter than the service's 1,000 entities, or empty,
//! with a continuation that points at the next entity. Azurite never does this; Azure does at
//! partition-range boundaries and after about five seconds of work.

use base64::Engine as _;
use serde_json::Value;

/// An entity query's answer, parsed.
pub(crate) struct QueryPage {
    document: serde_json::Map<String, Value>,
    entities: Vec<Value>,
}

impl QueryPage {
    /// The page in `body` (the JSON answer of an entity query), or `None` when it is not one.
    pub(crate) fn parse(body: &[u8]) -> Option<Self> {
        let Value::Object(mut document) = serde_json::from_slice(body).ok()? else {
            return None;
        };
        let Some(Value::Array(entities)) = document.remove("value") else {
            return None;
        };
        Some(Self { document, entities })
    }

    pub(crate) fn len(&self) -> usize {
        self.entities.len()
    }

    /// The page cut after its first `keep` entities: the body of the shorter page and the
    /// continuation (PartitionKey, RowKey) of the first entity left out, as Azurite encodes
    /// them (base64 of the UTF-8 key). `None` when nothing would be cut, or the entity left
    /// out does not carry its keys (a projection without them).
    pub(crate) fn split(mut self, keep: usize) -> Option<(Vec<u8>, [String; 2])> {
        if keep >= self.entities.len() {
            return None;
        }
        let next = &self.entities[keep];
        let key = |name: &str| next.get(name).and_then(Value::as_str).map(encode_key);
        let continuation = [key("PartitionKey")?, key("RowKey")?];
        self.entities.truncate(keep);
        self.document
            .insert("value".into(), Value::Array(self.entities));
        let body = serde_json::to_vec(&Value::Object(self.document)).ok()?;
        Some((body, continuation))
    }
}

/// A continuation header value for `key`, in Azurite's encoding.
fn encode_key(key: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(key.as_bytes())
}

/// `head` (a response head, as received) with its body framing and continuation headers
/// replaced: `Content-Length: body_len` and the given continuation.
pub(crate) fn rewrite_head(head: &[u8], body_len: usize, continuation: &[String; 2]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len() + 128);
    for line in text.split("\r\n") {
        let name = line
            .split_once(':')
            .map(|(n, _)| n.trim().to_ascii_lowercase());
        let dropped = name.as_deref().is_some_and(|n| {
            n == "content-length" || n == "transfer-encoding" || n.starts_with("x-ms-continuation-")
        });
        if line.is_empty() || dropped {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("Content-Length: {body_len}\r\n"));
    out.push_str(&format!(
        "x-ms-continuation-NextPartitionKey: {}\r\n",
        continuation[0]
    ));
    out.push_str(&format!(
        "x-ms-continuation-NextRowKey: {}\r\n",
        continuation[1]
    ));
    out.push_str("\r\n");
    out.into_bytes()
}

/// `head` with `Content-Length: body_len` in place of its body framing: for a page re-sent
/// whole after it was read de-chunked.
pub(crate) fn reframe_head(head: &[u8], body_len: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len() + 32);
    for line in text.split("\r\n") {
        let name = line
            .split_once(':')
            .map(|(n, _)| n.trim().to_ascii_lowercase());
        if line.is_empty()
            || name
                .as_deref()
                .is_some_and(|n| n == "content-length" || n == "transfer-encoding")
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("Content-Length: {body_len}\r\n\r\n"));
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"{"odata.metadata":"m","value":[{"PartitionKey":"p","RowKey":"a","N":1},{"PartitionKey":"p","RowKey":"b'é","N":2},{"PartitionKey":"q","RowKey":"c","N":3}]}"#;

    #[test]
    fn a_page_is_cut_with_a_continuation_at_the_first_entity_left_out() {
        let page = QueryPage::parse(PAGE.as_bytes()).unwrap();
        assert_eq!(page.len(), 3);
        let (body, next) = page.split(1).unwrap();
        let cut: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(cut["value"].as_array().unwrap().len(), 1);
        assert_eq!(cut["odata.metadata"], "m");
        assert_eq!(next, [encode_key("p"), encode_key("b'é")]);
        let (body, next) = QueryPage::parse(PAGE.as_bytes()).unwrap().split(0).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap()["value"],
            Value::Array(vec![])
        );
        assert_eq!(next[1], encode_key("a"));
        assert!(
            QueryPage::parse(PAGE.as_bytes())
                .unwrap()
                .split(3)
                .is_none()
        );
        assert!(QueryPage::parse(b"{\"x\":1}").is_none());
    }

    #[test]
    fn heads_get_the_new_length_and_continuation() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nx-ms-continuation-NextPartitionKey: old\r\nContent-Type: application/json\r\n\r\n";
        let out = String::from_utf8(rewrite_head(head, 42, &["P".into(), "R".into()])).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Length: 42\r\n") && !out.contains("chunked"));
        assert!(!out.contains("old") && out.contains("NextRowKey: R\r\n"));
        assert!(out.ends_with("\r\n\r\n"));
        let out = String::from_utf8(reframe_head(head, 7)).unwrap();
        assert!(out.contains("Content-Length: 7\r\n") && out.contains("NextPartitionKey: old"));
    }
}
