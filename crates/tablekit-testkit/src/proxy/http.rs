//! Just enough HTTP/1.1 to find where each message ends: heads are read whole (bounded) and
//! parsed for their framing; `body` streams what follows.

use std::io::{Error, ErrorKind, Result};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Largest request or response head (or chunked trailer section) accepted; Azure's own limit
/// is far lower.
pub(crate) const MAX_HEAD: u64 = 64 * 1024;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    None,
    Length(u64),
    Chunked,
    /// Only responses: the body runs until upstream closes the connection.
    UntilClose,
}

/// A parsed request head; `raw` is forwarded unchanged.
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) raw: Vec<u8>,
    pub(crate) method: String,
    target: String,
    pub(crate) body: Body,
    pub(crate) expect_continue: bool,
    /// The client will not send another request on this connection.
    pub(crate) close: bool,
    /// Header fields, names in lower case.
    pub(crate) headers: Vec<(String, String)>,
}

impl RequestHead {
    pub(crate) fn parse(raw: Vec<u8>) -> Result<Self> {
        let fields = Fields::parse(&raw)?;
        let mut parts = fields.start_line.split(' ').filter(|p| !p.is_empty());
        let (Some(method), Some(target), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("malformed request line"));
        };
        let body = match fields.transfer_encoding_chunked() {
            Some(true) => Body::Chunked,
            // A request body must be self-delimiting; anything else cannot be forwarded safely.
            Some(false) => return Err(invalid("unsupported request transfer-encoding")),
            None => fields.content_length()?.map_or(Body::None, Body::Length),
        };
        let close = fields.closes(version);
        let expect_continue = fields
            .values("expect")
            .any(|v| v.eq_ignore_ascii_case("100-continue"));
        let headers = fields.headers.clone();
        Ok(Self {
            method: method.to_owned(),
            target: target.to_owned(),
            body,
            expect_continue,
            close,
            headers,
            raw,
        })
    }

    pub(crate) fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// The path and query of the target (absolute-form targets lose their scheme and authority).
    pub(crate) fn path_and_query(&self) -> (&str, &str) {
        let mut target = self.target.as_str();
        if let Some(i) = target.find("://") {
            let rest = &target[i + 3..];
            target = rest.find('/').map_or("/", |j| &rest[j..]);
        }
        target.split_once('?').unwrap_or((target, ""))
    }
}

/// A parsed response head; `raw` is forwarded unchanged.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) raw: Vec<u8>,
    pub(crate) status: u16,
    pub(crate) body: Body,
    /// Upstream will close the connection after this response.
    pub(crate) close: bool,
    /// Header fields, names in lower case.
    headers: Vec<(String, String)>,
}

impl ResponseHead {
    pub(crate) fn parse(raw: Vec<u8>, request: &RequestHead) -> Result<Self> {
        let fields = Fields::parse(&raw)?;
        let mut parts = fields.start_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|s| (100..=999).contains(s))
            .ok_or_else(|| invalid("malformed status line"))?;
        let body = if request.is_head() || status < 200 || status == 204 || status == 304 {
            Body::None
        } else {
            match fields.transfer_encoding_chunked() {
                Some(true) => Body::Chunked,
                Some(false) => Body::UntilClose,
                None => fields
                    .content_length()?
                    .map_or(Body::UntilClose, Body::Length),
            }
        };
        let close = fields.closes(version) || body == Body::UntilClose || status == 101;
        Ok(Self {
            raw,
            status,
            body,
            close,
            headers: fields.headers,
        })
    }

    /// The first value of header `name` (lower case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A 1xx response other than 101: the final response still follows.
    pub(crate) fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

/// The start line and header fields of a head, as text (bytes that are not UTF-8 only matter in
/// the raw copy that is forwarded).
struct Fields {
    start_line: String,
    headers: Vec<(String, String)>,
}

impl Fields {
    fn parse(raw: &[u8]) -> Result<Self> {
        let text = String::from_utf8_lossy(raw);
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let start_line = lines.next().unwrap_or_default().to_owned();
        let mut headers = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| invalid("malformed header line"))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        Ok(Self {
            start_line,
            headers,
        })
    }

    /// Comma-separated values of every header called `name` (lower case).
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }

    /// `None` without the header; `Some(true)` when `chunked` is the final coding.
    fn transfer_encoding_chunked(&self) -> Option<bool> {
        self.values("transfer-encoding")
            .last()
            .map(|last| last.eq_ignore_ascii_case("chunked"))
    }

    fn content_length(&self) -> Result<Option<u64>> {
        let mut found = None;
        for value in self.values("content-length") {
            let n: u64 = value
                .parse()
                .map_err(|_| invalid("malformed content-length"))?;
            // Repeated lengths must agree, or the message boundary is ambiguous.
            if found.is_some_and(|f| f != n) {
                return Err(invalid("conflicting content-length headers"));
            }
            found = Some(n);
        }
        Ok(found)
    }

    fn closes(&self, version: &str) -> bool {
        let has = |token: &str| {
            self.values("connection")
                .any(|v| v.eq_ignore_ascii_case(token))
        };
        has("close") || (version.eq_ignore_ascii_case("HTTP/1.0") && !has("keep-alive"))
    }
}

pub(crate) fn invalid(what: &str) -> Error {
    Error::new(ErrorKind::InvalidData, what.to_owned())
}

/// Reads one line (ending in `\n`) of at most `limit` bytes, appending it to `out`.
/// Returns the number of bytes read; 0 means a clean end of stream.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
    limit: u64,
) -> Result<usize> {
    let n = (&mut *r).take(limit).read_until(b'\n', out).await?;
    if n > 0 && !out.ends_with(b"\n") {
        return Err(if n as u64 >= limit {
            invalid("line too long")
        } else {
            ErrorKind::UnexpectedEof.into()
        });
    }
    Ok(n)
}

/// Reads a message head through its blank line. `Ok(None)` when the stream ends cleanly
/// before a head starts.
pub(crate) async fn read_head<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let limit = MAX_HEAD.saturating_sub(before as u64);
        if limit == 0 {
            return Err(invalid("message head too large"));
        }
        if read_line(r, &mut head, limit).await? == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(ErrorKind::UnexpectedEof.into())
            };
        }
        if matches!(&head[before..], b"\r\n" | b"\n") {
            if before == 0 {
                // Stray blank lines between messages are allowed (RFC 9112 §2.2).
                head.clear();
                continue;
            }
            return Ok(Some(head));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> RequestHead {
        RequestHead::parse(text.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn request_framing_follows_the_headers() {
        let r = request("PUT /a?b=c HTTP/1.1\r\nContent-Length: 12\r\n\r\n");
        assert_eq!(r.body, Body::Length(12));
        assert_eq!(r.path_and_query(), ("/a", "b=c"));
        assert!(!r.close && !r.expect_continue);
        let r = request(
            "POST http://h:1/x HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\nContent-Length: 3\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.body, Body::Chunked);
        assert_eq!(r.path_and_query(), ("/x", ""));
        assert!(r.close && r.expect_continue);
        assert!(request("GET / HTTP/1.0\r\n\r\n").close);
        assert!(!request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").close);
        for bad in [
            "GET /\r\n\r\n",
            "PUT / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "PUT / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
        ] {
            assert!(
                RequestHead::parse(bad.as_bytes().to_vec()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn response_framing_depends_on_status_and_method() {
        let get = request("GET / HTTP/1.1\r\n\r\n");
        let head = request("HEAD / HTTP/1.1\r\n\r\n");
        let parse = |text: &str, req: &RequestHead| {
            ResponseHead::parse(text.as_bytes().to_vec(), req).unwrap()
        };
        let r = parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", &get);
        assert_eq!((r.status, r.body, r.close), (200, Body::Length(5), false));
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", &head).body,
            Body::None
        );
        assert_eq!(
            parse("HTTP/1.1 204 No Content\r\n\r\n", &get).body,
            Body::None
        );
        let r = parse("HTTP/1.1 100 Continue\r\n\r\n", &get);
        assert!(r.is_interim() && r.body == Body::None);
        let r = parse("HTTP/1.1 200 OK\r\n\r\n", &get);
        assert_eq!((r.body, r.close), (Body::UntilClose, true));
        let r = parse(
            "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n",
            &get,
        );
        assert_eq!(r.body, Body::Chunked);
    }

    #[tokio::test]
    async fn heads_are_bounded_and_truncation_is_an_error() {
        let huge = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(70_000));
        let mut reader = tokio::io::BufReader::new(huge.as_bytes());
        assert!(read_head(&mut reader).await.is_err());
        let mut reader = tokio::io::BufReader::new(&b"GET / HTTP/1.1\r\nHost: x\r\n"[..]);
        assert!(read_head(&mut reader).await.is_err());
        let mut reader = tokio::io::BufReader::new(&b"\r\nGET / HTTP/1.1\r\n\r\n"[..]);
        let head = read_head(&mut reader).await.unwrap().unwrap();
        assert_eq!(head, b"GET / HTTP/1.1\r\n\r\n");
        assert!(read_head(&mut reader).await.unwrap().is_none());
    }
}
