//! A loopback HTTP/1.1 proxy that injects faults between a client and an upstream server.

mod body;
mod buckets;
mod capture;
mod conn;
mod cost;
mod http;
mod intercept;
mod multipart;
mod page;
mod plan;
mod scan;
mod stats;
mod synthetic;
mod throttle;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub use intercept::{Answer, Decision, Intercept, RequestInfo};
pub use plan::{Fault, Matcher, Occurrences, Rule};
pub use stats::{FaultCounts, ProxyStats};
pub use throttle::{Throttle, ThrottleMode, ThrottleModel, ThrottleStats};

use conn::Shared;
use plan::Plan;
use stats::Counters;

/// A fault-injecting HTTP/1.1 proxy on a free loopback port, forwarding to one upstream address
/// (typically an Azurite service port).
///
/// Requests pass through byte for byte, over one upstream connection per client connection,
/// until rules ([`FaultProxy::add_rule`], [`FaultProxy::fail_nth`]) or random faults
/// ([`FaultProxy::set_random`]) select one: then it is reset, delayed, answered with a
/// synthetic error, or forwarded with its response dropped (see [`Fault`]). A throttle model
/// ([`FaultProxy::set_throttle`]) refuses what exceeds the service's scalability targets.
/// Counters ([`FaultProxy::stats`]) prove what reached upstream.
///
/// The proxy runs on its own thread with its own tokio runtime, so it serves plain `#[test]`s
/// and tests on any runtime alike, even one that blocks. Dropping it stops it and closes every
/// connection through it.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use tablekit_testkit::{Azurite, Fault, FaultProxy};
///
/// let azurite = Azurite::start()?;
/// let table_port = azurite.ports()[2];
/// let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], table_port)))?;
/// let endpoint = proxy.endpoint_for(&azurite.endpoints().table);
/// proxy.fail_nth(2, Fault::Status(503)); // the second request gets ServerBusy
/// // … point the client under test at `endpoint`, then:
/// assert_eq!(proxy.stats().faults_injected.status, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1` (a free port) that forwards to `upstream`. Upstream is
    /// contacted only when a request is forwarded.
    ///
    /// # Errors
    /// The I/O error of binding the port, building the runtime, or spawning its thread.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared {
            upstream,
            plan: Mutex::new(Plan::default()),
            throttle: Mutex::new(None),
            intercept: Mutex::new(None),
            counters: Counters::default(),
        });
        let (shutdown, stop) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn({
                let shared = shared.clone();
                // Dropping the runtime when the accept loop ends cancels every connection task,
                // which closes their sockets.
                move || runtime.block_on(accept_loop(listener, shared, stop))
            })?;
        Ok(Self {
            addr,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address requests are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// `upstream_endpoint` with its port replaced by the proxy's; scheme, host, path and query
    /// are kept. `"http://127.0.0.1:49154/devstoreaccount1"` becomes
    /// `"http://127.0.0.1:<proxy port>/devstoreaccount1"`.
    pub fn endpoint_for(&self, upstream_endpoint: &str) -> String {
        with_port(upstream_endpoint, self.port())
    }

    /// Injects `fault` into the `n`-th request (1-based, counted over all connections) that no
    /// earlier rule faults. Shorthand for a [`Rule`] matching everything with
    /// [`Occurrences::Nth`]`(n)`, so several calls count as rules do: after `fail_nth(1, …)`
    /// and `fail_nth(1, …)` the first two requests are faulted.
    ///
    /// # Panics
    /// For a [`Fault::Status`] outside 200–599.
    pub fn fail_nth(&self, n: u64, fault: Fault) {
        self.add_rule(Rule::new(Matcher::any(), Occurrences::Nth(n), fault));
    }

    /// Adds a rule after the existing ones. See [`Rule`] for how rules count requests and
    /// which one wins.
    ///
    /// # Panics
    /// For a [`Fault::Status`] outside 200–599.
    pub fn add_rule(&self, rule: Rule) {
        check_fault(rule.fault);
        self.shared.plan().add_rule(rule);
    }

    /// Faults each request that no rule faults with probability `rate` (clamped to 0–1), with
    /// a fault picked from `faults`. Decisions depend only on `seed` and the request's number
    /// since this call (1-based, over all connections, counting requests rules fault too), so
    /// the same seed and request sequence fault the same requests. Replaces earlier random
    /// settings; an empty `faults` turns random faults off.
    ///
    /// # Panics
    /// For a [`Fault::Status`] outside 200–599.
    pub fn set_random(&self, rate: f64, faults: Vec<Fault>, seed: u64) {
        faults.iter().copied().for_each(check_fault);
        self.shared.plan().set_random(rate, faults, seed);
    }

    /// Removes every rule and the random faults: requests pass through again.
    pub fn clear(&self) {
        self.shared.plan().clear();
    }

    /// Simulates the Table service's scalability targets from now on: each request that no
    /// rule or random fault selects is charged to token buckets per partition and per account,
    /// and refused — `503 ServerBusy`, or `429` with retry hints in
    /// [`ThrottleMode::TooManyRequests`] — without being forwarded when a bucket it draws on
    /// is short. Refused requests consume nothing, in their partition or the account.
    ///
    /// Pass a [`ThrottleModel`] for new, full buckets, or a [`Throttle`] another proxy returned
    /// to share its buckets: a proxy fronts one service, so the table, queue and blob proxies
    /// of one account share an account-wide budget only through one `Throttle`. Replaces the
    /// proxy's earlier model; returns the buckets now in force.
    ///
    /// A request costs, in entities:
    /// - an operation on one entity (`…/T(PartitionKey='p',RowKey='r')`: read, update, merge,
    ///   delete): 1 in partition `p`;
    /// - an insert (`POST …/T`): 1 in the partition its JSON body names;
    /// - a transaction (`POST …/$batch`): 1 per operation, in the partition its request line
    ///   (or, for an insert, its entity) names;
    /// - a query (`GET …/T()`): admitted while its partition (if the filter names exactly one)
    ///   and the account hold a token; then charged, when the response arrives, each entity
    ///   returned in its KiB units and each other entity it scanned 1, in each entity's
    ///   partition — the buckets may go into debt, which refuses later requests. A filter that
    ///   tests properties other than the keys scans its key range from where the page starts
    ///   through its last entity (or the range's end): the proxy asks upstream for those keys,
    ///   with the query's own credentials. A page without entities costs 1;
    /// - anything else (tables, queues, blobs): 1 against the account.
    ///
    /// A bucket admits a cost when it holds that many tokens — or, for a cost larger than the
    /// bucket's depth, when it is full, going into debt: the service serves a 100-operation
    /// transaction even when it exceeds a second's budget, and counts it.
    ///
    /// Insert and transaction bodies are read before the decision (up to 16 MiB; a larger
    /// declared length is forwarded unread and charged 1 to the account, a larger chunked
    /// body fails the connection); a request sent with `Expect: 100-continue` is told
    /// `100 Continue` by the proxy, so its body is read and charged too. Query responses are held until charged (up to 16 MiB; a larger one
    /// streams through and is charged 1 to the account). Everything else streams as before.
    ///
    /// # Panics
    /// If `model`'s rates are not positive or its burst is zero (see [`Throttle::new`]).
    pub fn set_throttle(&self, model: impl Into<Throttle>) -> Throttle {
        let throttle = model.into();
        *self.shared.throttle() = Some(throttle.clone());
        throttle
    }

    /// Hands every request from now on to `intercept` first, labelled `service` (see
    /// [`RequestInfo::service`]): it decides the request's fault before any rule, random
    /// fault or throttle model, may hold the request while it decides, and hears how the
    /// request ended ([`Intercept::finished`]). One interceptor installed in several proxies
    /// (the table, queue and blob proxies of one account) sees their requests in the order
    /// they arrive. Replaces an earlier interceptor.
    ///
    /// While an interceptor is installed, the answers to entity queries are held until they
    /// are complete (up to 16 MiB) so that their entities can be counted
    /// ([`Answer::entities`]) and [`Fault::SplitPage`] can cut them.
    pub fn set_intercept(&self, service: impl Into<String>, intercept: Arc<dyn Intercept>) {
        *self.shared.intercept() = Some((service.into(), intercept));
    }

    /// Removes the interceptor: requests meet the proxy's own rules again.
    pub fn clear_intercept(&self) {
        *self.shared.intercept() = None;
    }

    /// Stops throttling: requests pass (or meet their faults) as before. The buckets live on
    /// in other proxies sharing them.
    pub fn clear_throttle(&self) {
        *self.shared.throttle() = None;
    }

    /// The buckets in force, if any.
    pub fn throttle(&self) -> Option<Throttle> {
        self.shared.throttle().clone()
    }

    /// The admissions and refusals of the buckets in force ([`Throttle::stats`]; shared
    /// buckets count every proxy's requests), or `None` without a model.
    pub fn throttle_stats(&self) -> Option<ThrottleStats> {
        self.throttle().map(|t| t.stats())
    }

    /// The counters since start or the last [`FaultProxy::reset_stats`].
    pub fn stats(&self) -> ProxyStats {
        self.shared.counters.snapshot()
    }

    /// Sets every counter back to zero (rules keep their own counts; a throttle model's are
    /// reset with [`Throttle::reset_stats`]).
    pub fn reset_stats(&self) {
        self.shared.counters.reset();
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn check_fault(fault: Fault) {
    if let Fault::Status(status) = fault {
        assert!(
            synthetic::VALID_STATUSES.contains(&status),
            "Fault::Status({status}): use a final status (200-599)"
        );
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    Counters::bump(&shared.counters.connections_accepted);
                    tokio::spawn(conn::serve(shared.clone(), client));
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Replaces (or adds) the port of a URL's authority.
fn with_port(url: &str, port: u16) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host_port) = match authority.rfind('@') {
        Some(i) => authority.split_at(i + 1),
        None => ("", authority),
    };
    let host = match host_port.find(']') {
        Some(i) if host_port.starts_with('[') => &host_port[..=i],
        _ => host_port.split(':').next().unwrap_or_default(),
    };
    let host = if host.is_empty() { "127.0.0.1" } else { host };
    format!("{scheme}{userinfo}{host}:{port}{tail}")
}

#[cfg(test)]
mod tests {
    use super::with_port;

    #[test]
    fn endpoints_get_the_proxy_port_and_keep_the_rest() {
        let cases = [
            (
                "http://127.0.0.1:49154/devstoreaccount1",
                "http://127.0.0.1:7/devstoreaccount1",
            ),
            ("http://localhost/a?b=c:d", "http://localhost:7/a?b=c:d"),
            ("https://u:p@[::1]:10002", "https://u:p@[::1]:7"),
            ("127.0.0.1:10002/x", "127.0.0.1:7/x"),
        ];
        for (input, want) in cases {
            assert_eq!(with_port(input, 7), want, "{input}");
        }
    }
}
