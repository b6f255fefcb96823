//! Interceptors and the faults the explorer needs: a scripted upstream stands in for the
//! service so each test sees exactly what reached it.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Client, Step, Upstream};
use tablekit_testkit::{Answer, Decision, Fault, FaultProxy, Intercept, RequestInfo};

/// Decides by the request's number, holds the third until told, records every answer.
struct Script {
    faults: Vec<Option<Fault>>,
    seen: Mutex<Vec<RequestInfo>>,
    answers: Mutex<Vec<(u64, Answer)>>,
    gate: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

impl Intercept for Script {
    fn request(&self, request: &RequestInfo) -> Decision {
        let mut seen = self.seen.lock().unwrap();
        seen.push(request.clone());
        let n = seen.len();
        let fault = self.faults.get(n - 1).copied().flatten();
        let gate = if n == 3 {
            self.gate.lock().unwrap().take()
        } else {
            None
        };
        Box::pin(async move {
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            fault
        })
    }

    fn finished(&self, request: &RequestInfo, answer: Answer) {
        self.answers.lock().unwrap().push((request.id, answer));
    }
}

fn ok_upstream() -> Upstream {
    Upstream::start(|_| vec![Step::Write(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())])
}

#[test]
fn an_interceptor_decides_before_the_rules_holds_requests_and_hears_how_each_ended() {
    let upstream = ok_upstream();
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    // A rule that would fault everything: the interceptor's `None` leaves it to the rule,
    // its decisions win.
    proxy.fail_nth(4, Fault::Status(500));
    let (open, gate) = tokio::sync::oneshot::channel();
    let script = Arc::new(Script {
        faults: vec![None, Some(Fault::Status(503)), None, None],
        seen: Mutex::new(Vec::new()),
        answers: Mutex::new(Vec::new()),
        gate: Mutex::new(Some(gate)),
    });
    proxy.set_intercept("table", script.clone());
    let mut client = Client::connect(proxy.addr());
    assert_eq!(
        client
            .request("PUT", "/a/T(PartitionKey='p',RowKey='r')?timeout=1", b"x")
            .unwrap()
            .status(),
        204
    );
    assert_eq!(client.get("/a/T()").status(), 503);
    // The third is held until the interceptor lets it go.
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        open.send(()).unwrap();
    });
    let started = Instant::now();
    assert_eq!(client.get("/a/T()").status(), 204);
    assert!(started.elapsed() >= Duration::from_millis(300));
    opener.join().unwrap();
    // The interceptor said nothing for the fourth, so the proxy's own rules decided: the
    // rule counts only the requests it saw.
    assert_eq!(client.get("/a/T()").status(), 204);
    assert_eq!(upstream.count(), 3, "the 503 never reached upstream");

    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].service, "table");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("PUT", "/a/T(PartitionKey='p',RowKey='r')")
    );
    assert_eq!(seen[0].query, "timeout=1");
    assert!(seen[1].is_entity_query() && !seen[0].is_entity_query());
    let answers = script.answers.lock().unwrap().clone();
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, a)| *a)
            .unwrap()
    };
    assert_eq!(by_id(seen[0].id).status, Some(204));
    assert!(by_id(seen[0].id).forwarded);
    assert_eq!(by_id(seen[1].id).status, Some(503));
    assert!(!by_id(seen[1].id).forwarded);
    proxy.clear_intercept();
    assert_eq!(
        client.get("/a/T()").status(),
        500,
        "the rule's fourth request, now"
    );
}

#[test]
fn a_hung_request_is_never_forwarded_and_ends_when_the_client_gives_up() {
    let upstream = ok_upstream();
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    proxy.fail_nth(1, Fault::Hang);
    let mut client = Client::connect(proxy.addr());
    client.send(b"DELETE /a/T(PartitionKey='p',RowKey='r') HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(upstream.count(), 0);
    assert_eq!(proxy.stats().faults_injected.hang, 1);
    drop(client);
    // The connection ends with the client; the next one is served.
    assert_eq!(Client::connect(proxy.addr()).get("/a/T()").status(), 204);
    assert_eq!(upstream.count(), 1);
}

#[test]
fn a_delay_holds_a_request_at_most_twice_its_server_timeout() {
    let upstream = ok_upstream();
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    proxy.fail_nth(1, Fault::Delay(Duration::from_secs(30)));
    proxy.fail_nth(1, Fault::Delay(Duration::from_millis(300)));
    let mut client = Client::connect(proxy.addr());
    let started = Instant::now();
    assert_eq!(
        client
            .request("POST", "/a/$batch?timeout=1", b"x")
            .unwrap()
            .status(),
        204
    );
    let held = started.elapsed();
    // At most twice the server timeout, less a moment: the latest a request carrying it can
    // be applied (it may reach the service until the client gives up, then take as long).
    assert!(
        (Duration::from_millis(1_900)..Duration::from_secs(5)).contains(&held),
        "{held:?}"
    );
    // Without a timeout the whole delay is served.
    let started = Instant::now();
    assert_eq!(
        client.request("POST", "/a/$batch", b"x").unwrap().status(),
        204
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// An entity query's page of `n` entities, chunked as Azurite frames it.
fn page(n: usize) -> Vec<u8> {
    let entities: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"PartitionKey":"p","RowKey":"r{i}","Value":{i}}}"#))
        .collect();
    let body = format!(
        r#"{{"odata.metadata":"m","value":[{}]}}"#,
        entities.join(",")
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nx-ms-continuation-NextPartitionKey: b2xk\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    )
    .into_bytes()
}

fn entities(message: &support::Message) -> Vec<serde_json::Value> {
    let page: serde_json::Value = serde_json::from_slice(&message.body).unwrap();
    page["value"].as_array().unwrap().clone()
}

#[test]
fn a_split_page_keeps_the_first_entities_and_continues_at_the_next() {
    let upstream = Upstream::start(|_| vec![Step::Write(page(4))]);
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    let answers = Arc::new(Script {
        faults: vec![
            Some(Fault::SplitPage { keep: 1 }),
            Some(Fault::SplitPage { keep: 0 }),
            Some(Fault::SplitPage { keep: 4 }),
            None,
        ],
        seen: Mutex::new(Vec::new()),
        answers: Mutex::new(Vec::new()),
        gate: Mutex::new(None),
    });
    proxy.set_intercept("table", answers.clone());
    let mut client = Client::connect(proxy.addr());

    let cut = client.get("/a/T()?$filter=x");
    assert_eq!(entities(&cut).len(), 1);
    assert_eq!(entities(&cut)[0]["RowKey"], "r0");
    // Azurite's encoding: base64 of the key.
    assert_eq!(
        cut.header("x-ms-continuation-NextPartitionKey"),
        Some("cA==")
    );
    assert_eq!(cut.header("x-ms-continuation-NextRowKey"), Some("cjE="));
    assert_eq!(
        cut.header("content-length"),
        Some(cut.body.len().to_string().as_str())
    );

    let empty = client.get("/a/T()");
    assert!(entities(&empty).is_empty());
    assert_eq!(empty.header("x-ms-continuation-NextRowKey"), Some("cjA="));

    // A page no longer than `keep` passes whole, with its own continuation.
    let whole = client.get("/a/T()");
    assert_eq!(entities(&whole).len(), 4);
    assert_eq!(
        whole.header("x-ms-continuation-NextPartitionKey"),
        Some("b2xk")
    );
    assert_eq!(client.get("/a/T()").status(), 200);

    // The proxy hears how a request ended just after the client got its answer.
    for _ in 0..100 {
        if answers.answers.lock().unwrap().len() == 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let counted: Vec<Option<usize>> = answers
        .answers
        .lock()
        .unwrap()
        .iter()
        .map(|(_, a)| a.entities)
        .collect();
    assert_eq!(
        counted,
        [Some(4); 4],
        "the entities upstream sent, before any cut"
    );
    assert_eq!(proxy.stats().faults_injected.split_page, 3);
}
