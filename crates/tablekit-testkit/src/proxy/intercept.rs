//! Interceptors: code that sees every request a proxy receives, decides its fault (and may
//! hold it while it does), and hears how it ended. The fault-schedule explorer is one.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Fault;

/// A request as a proxy received it, handed to an [`Intercept`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestInfo {
    /// Unique among every request any proxy of this process received.
    pub id: u64,
    /// The label the interceptor was installed with ([`FaultProxy::set_intercept`](super::FaultProxy::set_intercept)),
    /// typically the service the proxy fronts: `"table"`, `"queue"`, `"blob"`.
    pub service: String,
    /// The request method (`"GET"`, `"POST"`, …).
    pub method: String,
    /// The request path, without the query.
    pub path: String,
    /// The query string, exactly as sent (without the `?`).
    pub query: String,
    /// Header fields, names in lower case.
    pub(crate) headers: Vec<(String, String)>,
}

impl RequestInfo {
    /// Whether this is a query of a table's entities (`GET …/Table()` or `GET …/Table`
    /// with a filter): the requests whose answers [`Fault::SplitPage`] splits.
    pub fn is_entity_query(&self) -> bool {
        self.method.eq_ignore_ascii_case("GET")
            && self.service == "table"
            && !self.path.ends_with("/Tables")
            && !self.path.contains("Tables(")
            && (self.path.ends_with("()") || !self.path.ends_with(')'))
    }

    /// The value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A short description: `table GET /devstoreaccount1/T()`.
    pub fn describe(&self) -> String {
        format!("{} {} {}", self.service, self.method, self.path)
    }
}

/// How a request the proxy received ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Answer {
    /// The status of the final response the client received, or `None` when it received
    /// none (the connection was reset, the response dropped, the request held until the
    /// client gave up).
    pub status: Option<u16>,
    /// Whether the request reached upstream (the service may have applied it).
    pub forwarded: bool,
    /// For an entity query answered by upstream: how many entities the page upstream sent
    /// held (before any [`Fault::SplitPage`]).
    pub entities: Option<usize>,
}

/// The future an [`Intercept`] returns for a request: the proxy awaits it, on its own runtime,
/// before it does anything with the request.
pub type Decision = Pin<Box<dyn Future<Output = Option<Fault>> + Send>>;

/// Sees every request of the proxies it is installed in, before any rule, random fault or
/// throttle model does.
pub trait Intercept: Send + Sync + 'static {
    /// Decides the fault for `request` (`None`: the proxy's own rules decide). The proxy
    /// awaits the returned future before it forwards or answers anything, so an interceptor
    /// can hold a request while something else happens.
    fn request(&self, request: &RequestInfo) -> Decision;

    /// Called once for every request [`Intercept::request`] saw, when the proxy is done with
    /// it: answered, reset, or abandoned by the client.
    fn finished(&self, request: &RequestInfo, answer: Answer);
}

impl fmt::Debug for dyn Intercept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dyn Intercept")
    }
}

/// The next request id: unique across the proxies of this process.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The server timeout a request carries: its `timeout` query parameter, in whole seconds, as
/// the storage services read it.
pub(crate) fn server_timeout(query: &str) -> Option<std::time::Duration> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "timeout")
        .and_then(|(_, value)| value.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map(std::time::Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, path: &str) -> RequestInfo {
        RequestInfo {
            id: 1,
            service: "table".into(),
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
        }
    }

    #[test]
    fn entity_queries_are_told_from_point_reads_and_table_lists() {
        assert!(info("GET", "/acct/Employees()").is_entity_query());
        assert!(info("GET", "/acct/Employees").is_entity_query());
        assert!(!info("GET", "/acct/Employees(PartitionKey='a',RowKey='b')").is_entity_query());
        assert!(!info("GET", "/acct/Tables").is_entity_query());
        assert!(!info("POST", "/acct/Employees()").is_entity_query());
        let mut queue = info("GET", "/acct/jobs/messages");
        queue.service = "queue".into();
        assert!(!queue.is_entity_query());
    }

    #[test]
    fn the_server_timeout_is_read_in_whole_seconds() {
        assert_eq!(
            server_timeout("timeout=3&comp=list"),
            Some(std::time::Duration::from_secs(3))
        );
        assert_eq!(
            server_timeout("a=1&timeout=1"),
            Some(std::time::Duration::from_secs(1))
        );
        assert_eq!(server_timeout("timeout=0"), None);
        assert_eq!(server_timeout("timeout=x"), None);
        assert_eq!(server_timeout("mytimeout=5"), None);
    }
}
