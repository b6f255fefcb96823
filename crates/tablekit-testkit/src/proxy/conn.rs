//! One client connection: its requests in order, each forwarded over one upstream connection
//! or answered with a fault.

use std::io::{ErrorKind, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::body::copy_body;
use super::capture::{Spill, payload, read_request_body};
use super::cost::{self, Class, Cost};
use super::http::{Body, RequestHead, ResponseHead, read_head};
use super::intercept::{Answer, Intercept, RequestInfo, next_id, server_timeout};
use super::multipart;
use super::page::{QueryPage, reframe_head, rewrite_head};
use super::plan::Plan;
use super::scan;
use super::stats::Counters;
use super::{Fault, Throttle, synthetic};

/// Large enough that multi-megabyte bodies move in few system calls.
const BUFFER: usize = 64 * 1024;
/// How long a closing connection keeps reading what the client still sends, so the close does
/// not turn into a reset that destroys the response the client has not read yet.
const LINGER: Duration = Duration::from_secs(2);

/// State shared by the control handle and every connection task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) upstream: SocketAddr,
    pub(crate) plan: Mutex<Plan>,
    pub(crate) throttle: Mutex<Option<Throttle>>,
    pub(crate) intercept: Mutex<Option<(String, Arc<dyn Intercept>)>>,
    pub(crate) counters: Counters,
}

impl Shared {
    pub(crate) fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        // A panic elsewhere cannot leave the plan half-updated; keep serving.
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn throttle(&self) -> std::sync::MutexGuard<'_, Option<Throttle>> {
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn intercept(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<(String, Arc<dyn Intercept>)>> {
        self.intercept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// What happens to a final response on its way to the client.
enum Relay {
    /// Streamed through.
    Stream,
    /// Held back (up to a limit) and charged to `throttle` as a query's page, then sent.
    ChargeQuery {
        throttle: Throttle,
        /// The table queried, whose partitions the entities are charged in.
        table: String,
        pinned: Option<String>,
        /// The key conditions bounding the entities the query scans, when it may scan more
        /// than it returns (see [`cost::scan_bounds`]).
        scan: Option<String>,
    },
    /// An entity query's page, held back (up to a limit), counted for the interceptor, and
    /// cut after `split` entities when that is set.
    Page { split: Option<u32> },
}

/// How a connection continues after one exchange.
enum Next {
    KeepAlive,
    /// Close gracefully (the client was told, or upstream closed).
    Close,
    /// Close abortively: the fault is that the connection fails.
    Abort,
}

/// Serves one accepted client connection until it closes. I/O errors end the connection and
/// drop upstream with it, which is what the client would see from a failing server.
pub(crate) async fn serve(shared: Arc<Shared>, client: TcpStream) {
    // Small writes (chunk-size lines) must not wait for Nagle's algorithm.
    let _ = client.set_nodelay(true);
    let mut conn = Connection {
        shared,
        client: BufReader::with_capacity(BUFFER, client),
        upstream: None,
        answer: Answer::default(),
    };
    match conn.run().await {
        Ok(Next::KeepAlive | Next::Close) | Err(_) => conn.close_gracefully().await,
        Ok(Next::Abort) => {
            // Zero linger makes the close send a reset instead of a FIN.
            let _ = conn.client.get_ref().set_zero_linger();
        }
    }
}

struct Connection {
    shared: Arc<Shared>,
    client: BufReader<TcpStream>,
    upstream: Option<BufReader<TcpStream>>,
    /// What the current request came to, for its interceptor.
    answer: Answer,
}

impl Connection {
    async fn run(&mut self) -> Result<Next> {
        loop {
            if !self.wait_for_request().await? {
                return Ok(Next::Close);
            }
            let Some(raw) = read_head(&mut self.client).await? else {
                return Ok(Next::Close);
            };
            let request = RequestHead::parse(raw)?;
            Counters::bump(&self.shared.counters.requests_seen);
            let (path, query) = request.path_and_query();
            let intercept = self.shared.intercept().clone();
            let info = intercept.as_ref().map(|(service, _)| RequestInfo {
                id: next_id(),
                service: service.clone(),
                method: request.method.clone(),
                path: path.to_owned(),
                query: query.to_owned(),
                headers: request.headers.clone(),
            });
            let decided = match (&intercept, &info) {
                (Some((_, intercept)), Some(info)) => intercept.request(info).await,
                _ => None,
            };
            let fault = decided.or_else(|| self.shared.plan().decide(&request.method, path, query));
            if let Some(fault) = fault {
                self.shared.counters.fault(fault);
            }
            self.answer = Answer::default();
            let query_page = info.as_ref().is_some_and(RequestInfo::is_entity_query);
            let next = self.handle(&request, fault, query_page).await;
            if let (Some((_, intercept)), Some(info)) = (&intercept, &info) {
                let mut answer = self.answer;
                if !matches!(next, Ok(Next::KeepAlive | Next::Close)) {
                    // Reset, dropped or failed: the client received no answer.
                    answer.status = None;
                }
                intercept.finished(info, answer);
            }
            let next = next?;
            if !matches!(next, Next::KeepAlive) {
                return Ok(next);
            }
        }
    }

    /// Serves one request with its fault.
    async fn handle(
        &mut self,
        request: &RequestHead,
        fault: Option<Fault>,
        query_page: bool,
    ) -> Result<Next> {
        let page = |split| {
            if query_page {
                Relay::Page { split }
            } else {
                Relay::Stream
            }
        };
        Ok(match fault {
            Some(Fault::Reset) => Next::Abort,
            Some(Fault::Hang) => {
                self.hang().await;
                Next::Close
            }
            Some(Fault::Status(status)) => {
                let bytes = synthetic::response(status, request.is_head(), answer_closes(request));
                self.answer.status = Some(status);
                self.answer(request, bytes, false).await?
            }
            Some(Fault::Delay(delay)) => {
                // A request carrying a server timeout reaches the service at most that long
                // after it was sent (the client gives up by then) and is finished within
                // it: one held longer is applied at that bound, the latest it could be —
                // less a moment for the way here.
                let (_, query) = request.path_and_query();
                let hold = server_timeout(query).map_or(delay, |limit| {
                    delay.min((limit * 2).saturating_sub(Duration::from_millis(50)))
                });
                self.delay(hold).await;
                self.exchange(request, None, page(None), false).await?
            }
            Some(Fault::DropResponse) => {
                self.exchange(request, None, page(None), true).await?;
                self.answer.status = None;
                Next::Abort
            }
            Some(Fault::SplitPage { keep }) => {
                self.exchange(request, None, page(Some(keep)), false)
                    .await?
            }
            // Faults are decided first: a faulted request is never charged to the model.
            None => {
                let throttle = self.shared.throttle().clone();
                match throttle {
                    Some(throttle) => self.throttled(request, throttle).await?,
                    None => self.exchange(request, None, page(None), false).await?,
                }
            }
        })
    }

    /// Holds a request that is never forwarded until the client closes the connection,
    /// discarding whatever it still sends.
    async fn hang(&mut self) {
        let mut buf = [0u8; 4096];
        while matches!(self.client.read(&mut buf).await, Ok(n) if n > 0) {}
    }

    /// Waits until the client sends the next request (`true`) or the connection should end
    /// (`false`): the client closed, or upstream closed its idle connection. Passing the
    /// latter on lets the client's pool discard the connection as it would without the proxy.
    async fn wait_for_request(&mut self) -> Result<bool> {
        let Some(upstream) = self.upstream.as_mut() else {
            return Ok(!self.client.fill_buf().await?.is_empty());
        };
        tokio::select! {
            biased;
            got = self.client.fill_buf() => Ok(!got?.is_empty()),
            _ = upstream.fill_buf() => Ok(false),
        }
    }

    /// Holds the current request for `delay`. Upstream may time out its idle connection
    /// meanwhile (Azurite does after 5 s); the request is then forwarded on a fresh connection,
    /// because a delay promises to deliver it, not to fail it.
    async fn delay(&mut self, delay: Duration) {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        if let Some(upstream) = self.upstream.as_mut() {
            let upstream_closed = tokio::select! {
                () = &mut sleep => false,
                _ = upstream.fill_buf() => true,
            };
            if !upstream_closed {
                return;
            }
            self.upstream = None;
        }
        sleep.await;
    }

    /// Answers with synthetic response `bytes` (made with [`answer_closes`]) instead of
    /// forwarding; `body_read` when the request body was already read.
    async fn answer(
        &mut self,
        request: &RequestHead,
        bytes: Vec<u8>,
        body_read: bool,
    ) -> Result<Next> {
        if !request.expect_continue && !body_read {
            copy_body(&mut self.client, &mut tokio::io::sink(), request.body).await?;
        }
        self.client.get_mut().write_all(&bytes).await?;
        Ok(if answer_closes(request) {
            Next::Close
        } else {
            Next::KeepAlive
        })
    }

    /// Puts a request no fault selected through the throttle model: refused with the model's
    /// answer when a bucket it draws on is short, forwarded (and charged) otherwise.
    async fn throttled(&mut self, request: &RequestHead, throttle: Throttle) -> Result<Next> {
        let (path, query) = request.path_and_query();
        let class = cost::classify(&request.method, path, query);
        // Inserts and transactions name their partitions in the body, so it is read first. A
        // client waiting for `100 Continue` has not sent it: the proxy tells it to go on (the
        // service would, before counting the operations), and answers for upstream's own
        // `100 Continue` once it forwards the request (see `exchange`).
        let needs_body = matches!(class, Class::Insert | Class::Batch);
        if needs_body && request.expect_continue && request.body != Body::None {
            self.client
                .get_mut()
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await?;
        }
        let body = if needs_body {
            read_request_body(&mut self.client, request.body).await?
        } else {
            None
        };
        // Partitions are a table's PartitionKeys: every cost is put in the table addressed.
        let table = cost::table_of(path);
        let decision = match &class {
            Class::Fixed(cost) => throttle.admit(&cost.clone().in_table(&table)),
            Class::Insert | Class::Batch => {
                let cost = match &body {
                    Some(raw) => {
                        let payload = payload(raw, request.body);
                        if class == Class::Batch {
                            let table = multipart::batch_table(&payload).unwrap_or_default();
                            multipart::batch_cost(&payload).in_table(&table)
                        } else {
                            cost::insert_cost(&payload).in_table(&table)
                        }
                    }
                    None => Cost::account(1),
                };
                throttle.admit(&cost)
            }
            Class::Query { pinned } => throttle.admit_query(
                pinned
                    .as_deref()
                    .map(|pk| cost::partition_name(&table, pk))
                    .as_deref(),
            ),
        };
        if let Err(refusal) = decision {
            Counters::bump(&self.shared.counters.throttled);
            let bytes = throttle.answer(refusal, request.is_head(), answer_closes(request));
            return self.answer(request, bytes, body.is_some()).await;
        }
        let relay = match class {
            Class::Query { pinned } => Relay::ChargeQuery {
                throttle,
                table,
                pinned,
                scan: cost::scan_bounds(request.path_and_query().1),
            },
            _ => Relay::Stream,
        };
        self.exchange(request, body.as_deref(), relay, false).await
    }

    /// Forwards one request and its response. `body` is the request body (as framed) when it
    /// was already read from the client. With `drop_response` the response is read completely
    /// but none of it reaches the client.
    async fn exchange(
        &mut self,
        request: &RequestHead,
        body: Option<&[u8]>,
        relay: Relay,
        drop_response: bool,
    ) -> Result<Next> {
        let Self {
            shared,
            client,
            upstream,
            answer,
        } = self;
        // One upstream connection per client connection, opened on first use, so connection
        // reuse by the client is reuse upstream too.
        let upstream = match upstream.take() {
            Some(open) => upstream.insert(open),
            None => {
                let stream = TcpStream::connect(shared.upstream).await?;
                let _ = stream.set_nodelay(true);
                Counters::bump(&shared.counters.upstream_connections);
                upstream.insert(BufReader::with_capacity(BUFFER, stream))
            }
        };
        upstream.get_mut().write_all(&request.raw).await?;
        // A body already read from a client that asked for `100 Continue` was read after the
        // proxy's own: upstream's is not the client's to see.
        let continued = request.expect_continue && body.is_some();
        if request.expect_continue && request.body != Body::None && !continued {
            // Upstream may answer 100 Continue, or a final status without wanting the body,
            // before the client sends anything; whichever side moves first decides.
            loop {
                let upstream_first = tokio::select! {
                    biased;
                    got = upstream.fill_buf() => { got?; true }
                    got = client.fill_buf() => { got?; false }
                };
                if !upstream_first {
                    break;
                }
                let raw = read_head(upstream).await?.ok_or(ErrorKind::UnexpectedEof)?;
                let response = ResponseHead::parse(raw, request)?;
                if !response.is_interim() {
                    // The client may or may not send its body now: the connection cannot be
                    // reused either way.
                    if !drop_response {
                        Counters::bump(&shared.counters.responses_relayed);
                        client.get_mut().write_all(&response.raw).await?;
                        copy_body(upstream, client.get_mut(), response.body).await?;
                    } else {
                        copy_body(upstream, &mut tokio::io::sink(), response.body).await?;
                    }
                    return Ok(Next::Close);
                }
                if !drop_response {
                    client.get_mut().write_all(&response.raw).await?;
                }
                if response.status == 100 {
                    break;
                }
            }
        }
        match body {
            Some(raw) => upstream.get_mut().write_all(raw).await?,
            None => copy_body(client, upstream.get_mut(), request.body).await?,
        }
        Counters::bump(&shared.counters.requests_forwarded);
        answer.forwarded = true;
        loop {
            let raw = read_head(upstream).await?.ok_or(ErrorKind::UnexpectedEof)?;
            let response = ResponseHead::parse(raw, request)?;
            if !response.is_interim() {
                answer.status = Some(response.status);
            }
            if drop_response {
                match (&relay, response.status) {
                    (Relay::Page { .. }, 200) => {
                        // Counted although the client never sees it: the service did the work.
                        match read_request_body(upstream, response.body).await? {
                            Some(raw) => {
                                answer.entities = QueryPage::parse(&payload(&raw, response.body))
                                    .map(|page| page.len());
                            }
                            None => {
                                copy_body(upstream, &mut tokio::io::sink(), response.body).await?;
                            }
                        }
                    }
                    _ => copy_body(upstream, &mut tokio::io::sink(), response.body).await?,
                }
            } else if let (
                false,
                Relay::ChargeQuery {
                    throttle,
                    table,
                    pinned,
                    scan,
                },
            ) = (response.is_interim(), &relay)
            {
                let mut spill = Spill::new(client.get_mut(), &response.raw);
                copy_body(upstream, &mut spill, response.body).await?;
                spill.flush().await?;
                // Charged before the client sees the page, so stats read after it count it.
                let cost = match spill.held_body() {
                    Some(raw) => {
                        let body = payload(raw, response.body);
                        let returned = cost::query_cost(response.status, &body, pinned.as_deref());
                        let continued = response
                            .header("x-ms-continuation-nextpartitionkey")
                            .is_some();
                        // A page that stops early covered the range through its last entity.
                        let through = if continued {
                            cost::last_keys(&body).map(Some)
                        } else {
                            Some(None)
                        };
                        match (scan, through, response.status) {
                            (Some(bounds), Some(through), 200) => {
                                // A scan that cannot be counted is charged what it returned.
                                match scan::scanned(shared.upstream, request, bounds, through).await
                                {
                                    Ok(scanned) => cost::with_scanned(
                                        returned,
                                        &cost::entity_count(&body),
                                        &scanned,
                                    ),
                                    Err(_) => returned,
                                }
                            }
                            _ => returned,
                        }
                        .in_table(table)
                    }
                    // Too large to hold: it has reached the client already, uncounted.
                    None => Cost::account(1),
                };
                throttle.charge(&cost);
                Counters::bump(&shared.counters.responses_relayed);
                spill.release().await?;
            } else if let (Relay::Page { split }, false, 200) =
                (&relay, response.is_interim(), response.status)
            {
                Counters::bump(&shared.counters.responses_relayed);
                match read_request_body(upstream, response.body).await? {
                    Some(raw) => {
                        let body = payload(&raw, response.body);
                        let page = QueryPage::parse(&body);
                        answer.entities = page.as_ref().map(QueryPage::len);
                        let cut = page.zip(*split).and_then(|(page, keep)| {
                            page.split(usize::try_from(keep).unwrap_or(usize::MAX))
                        });
                        let out = client.get_mut();
                        match cut {
                            Some((shorter, next)) => {
                                out.write_all(&rewrite_head(&response.raw, shorter.len(), &next))
                                    .await?;
                                out.write_all(&shorter).await?;
                            }
                            None if response.body == Body::Chunked => {
                                out.write_all(&reframe_head(&response.raw, body.len()))
                                    .await?;
                                out.write_all(&body).await?;
                            }
                            None => {
                                out.write_all(&response.raw).await?;
                                out.write_all(&raw).await?;
                            }
                        }
                    }
                    // Too large to hold: it streams through, uncounted.
                    None => {
                        client.get_mut().write_all(&response.raw).await?;
                        copy_body(upstream, client.get_mut(), response.body).await?;
                    }
                }
            } else if continued && response.status == 100 {
                // The client had its `100 Continue` from the proxy.
            } else {
                if !response.is_interim() {
                    // Counted before the client can see it, so a test reading the stats
                    // after its response arrived never misses it.
                    Counters::bump(&shared.counters.responses_relayed);
                }
                client.get_mut().write_all(&response.raw).await?;
                copy_body(upstream, client.get_mut(), response.body).await?;
            }
            if response.is_interim() {
                continue;
            }
            return Ok(if response.close || request.close {
                Next::Close
            } else {
                Next::KeepAlive
            });
        }
    }

    /// Closes the client side with a FIN, then reads and discards what the client still sends
    /// for a little while: closing a socket with unread input makes the kernel send a reset,
    /// which can destroy a response the client has not read yet.
    async fn close_gracefully(&mut self) {
        self.upstream = None;
        let stream = self.client.get_mut();
        if stream.shutdown().await.is_err() {
            return;
        }
        let drain = async {
            let mut buf = [0u8; 4096];
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        };
        let _ = tokio::time::timeout(LINGER, drain).await;
    }
}

/// Whether a synthetic answer to `request` closes the connection: when the client asked to, or
/// sent `Expect: 100-continue` and may be holding its body back; answering without reading it
/// is allowed only if the connection then closes (RFC 9110 §10.1.1).
fn answer_closes(request: &RequestHead) -> bool {
    request.close || request.expect_continue
}
