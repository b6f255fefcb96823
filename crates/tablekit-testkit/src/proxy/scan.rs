//! What a filtered query scanned, for the throttle model: the service charges a query every
//! entity it reads to answer it, and a filter on other properties than the keys reads entities
//! it does not return. The proxy asks upstream for the keys of the entities in the range the
//! page covered — from where the query started to its last entity (or the end of the range when
//! it has no continuation) — with the query's own credentials: the Table service's signatures
//! do not cover the query string.

use std::io::{ErrorKind, Result};
use std::net::SocketAddr;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::capture::{payload, read_request_body};
use super::cost::{self, Cost};
use super::http::{RequestHead, ResponseHead, invalid, read_head};

/// Continuation pages followed at most: a scan longer than this is charged what it read so far.
const MAX_PAGES: usize = 100;

/// The entities, one each by partition, in the range a query page covered: the query's own
/// continuation (if any) through `through` (the keys of its last entity, or the end of the range
/// when `None`), within the key conditions `bounds` (see [`cost::scan_bounds`]).
pub(crate) async fn scanned(
    upstream: SocketAddr,
    request: &RequestHead,
    bounds: &str,
    through: Option<(String, String)>,
) -> Result<Cost> {
    let (path, query) = request.path_and_query();
    let mut filter: Vec<String> = Vec::new();
    if !bounds.is_empty() {
        filter.push(bounds.to_owned());
    }
    if let Some((pk, rk)) = &through {
        filter.push(cost::through(pk, rk));
    }
    // The query's continuation and signature stay; its own options are replaced.
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter(|pair| !cost::is_query_option(pair.split('=').next().unwrap_or_default()))
        .collect();
    let mut continuation: Option<[String; 2]> = None;
    let mut connection = None;
    let mut total = Cost::default();
    for _ in 0..MAX_PAGES {
        let mut params: Vec<String> = kept
            .iter()
            .filter(|pair| {
                // A later page continues from upstream's token, not the query's.
                let name = pair.split('=').next().unwrap_or_default();
                continuation.is_none() || !is_continuation(name)
            })
            .map(|p| (*p).to_owned())
            .collect();
        if let Some([pk, rk]) = &continuation {
            params.push(format!("NextPartitionKey={}", encode(pk)));
            if !rk.is_empty() {
                params.push(format!("NextRowKey={}", encode(rk)));
            }
        }
        if !filter.is_empty() {
            params.push(format!("$filter={}", encode(&filter.join(" and "))));
        }
        params.push("$select=PartitionKey,RowKey".to_owned());
        let mut head = format!("GET {path}?{} HTTP/1.1\r\n", params.join("&"));
        for (name, value) in &request.headers {
            if !matches!(
                name.as_str(),
                "content-length" | "transfer-encoding" | "expect" | "connection"
            ) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        head.push_str("\r\n");
        let probe = RequestHead::parse(head.into_bytes())?;
        let stream = match connection.take() {
            Some(open) => open,
            None => {
                let stream = TcpStream::connect(upstream).await?;
                let _ = stream.set_nodelay(true);
                BufReader::new(stream)
            }
        };
        let mut stream = stream;
        stream.get_mut().write_all(&probe.raw).await?;
        let response = loop {
            let raw = read_head(&mut stream)
                .await?
                .ok_or(ErrorKind::UnexpectedEof)?;
            let response = ResponseHead::parse(raw, &probe)?;
            if !response.is_interim() {
                break response;
            }
        };
        let body = read_request_body(&mut stream, response.body)
            .await?
            .ok_or_else(|| invalid("scan page too large"))?;
        if response.status != 200 {
            return Err(invalid("scan refused upstream"));
        }
        total = total.plus(&cost::entity_count(&payload(&body, response.body)));
        let next = response
            .header("x-ms-continuation-nextpartitionkey")
            .map(str::to_owned);
        let Some(next_pk) = next else {
            return Ok(total);
        };
        let next_rk = response
            .header("x-ms-continuation-nextrowkey")
            .unwrap_or_default()
            .to_owned();
        continuation = Some([next_pk, next_rk]);
        if !response.close {
            connection = Some(stream);
        }
    }
    Ok(total)
}

fn is_continuation(name: &str) -> bool {
    name.eq_ignore_ascii_case("NextPartitionKey") || name.eq_ignore_ascii_case("NextRowKey")
}

/// Percent-encodes a query string value (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
