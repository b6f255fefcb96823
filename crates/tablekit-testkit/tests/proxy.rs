//! FaultProxy in front of a real Azurite: requests pass through unchanged over reused
//! connections, each fault does what it promises, rules and random faults pick exactly the
//! requests they should. Where a test must see what upstream received (a dropped response,
//! bodies byte for byte), a scripted upstream from `support` stands in for Azurite.

mod support;

use std::time::{Duration, Instant};

use support::{
    CONTAINER, Client, LIST, Step, TABLES, Upstream, assert_from_azurite, blob_proxy, counts,
    pattern, table_proxy,
};
use tablekit_testkit::{Fault, FaultProxy, Matcher, Occurrences, Rule};

fn is_reset(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ConnectionReset
}

#[test]
fn keep_alive_requests_pass_through_on_one_connection() {
    let proxy = blob_proxy();
    let mut client = Client::connect(proxy.addr());
    for _ in 0..50 {
        let resp = client.get(LIST);
        assert_from_azurite(&resp);
        // Azurite frames its answers in chunks: the proxy passed that framing on.
        assert_eq!(resp.header("transfer-encoding"), Some("chunked"));
        assert!(
            resp.body_text()
                .contains("<Code>AuthorizationFailure</Code>")
        );
    }
    // A HEAD answer has no body, whatever its headers say; the connection stays usable.
    assert!(!client.request("HEAD", LIST, b"").unwrap().is_synthetic());
    // Pipelined requests are answered in order.
    let one = format!("GET {LIST} HTTP/1.1\r\nHost: x\r\n\r\n");
    client.send(one.repeat(3).as_bytes());
    for _ in 0..3 {
        assert_from_azurite(&client.read(false).unwrap());
    }
    assert_eq!(counts(&proxy), [1, 1, 54, 54, 54]);
    assert_eq!(proxy.stats().faults_injected.total(), 0);
    proxy.reset_stats();
    assert_eq!(proxy.stats().requests_seen, 0);
}

#[test]
fn reset_fails_the_connection_before_the_request_reaches_upstream() {
    let proxy = blob_proxy();
    proxy.fail_nth(1, Fault::Reset);
    let mut client = Client::connect(proxy.addr());
    let err = client.request("PUT", CONTAINER, &[b'x'; 1000]).unwrap_err();
    assert!(is_reset(&err), "an abortive close, got {err:?}");
    assert_eq!(proxy.stats().faults_injected.reset, 1);
    // No request forwarded, and not even a connection opened: upstream cannot have seen it.
    assert_eq!(counts(&proxy), [1, 0, 1, 0, 0]);
    assert_from_azurite(&Client::connect(proxy.addr()).get(LIST));
    assert_eq!(counts(&proxy), [2, 1, 2, 1, 1]);
}

#[test]
fn status_faults_answer_in_the_table_error_format_without_contacting_upstream() {
    let proxy = table_proxy();
    for status in [503, 500, 400] {
        proxy.fail_nth(1, Fault::Status(status));
    }
    let mut client = Client::connect(proxy.addr());
    let busy = client.get(TABLES);
    assert_eq!((busy.status(), busy.is_synthetic()), (503, true));
    assert_eq!(busy.header("x-ms-error-code"), Some("ServerBusy"));
    assert!(
        busy.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(
        busy.header("content-length"),
        Some(busy.body.len().to_string().as_str())
    );
    let body = busy.body_text();
    assert!(
        body.starts_with(
            r#"{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":""#
        ) && body.ends_with("}}}"),
        "{body}"
    );
    // The request body is consumed, so the next request on the connection is read correctly.
    let timeout = client
        .request("POST", TABLES, br#"{"TableName":"t1"}"#)
        .unwrap();
    assert_eq!(timeout.status(), 500);
    assert_eq!(timeout.header("x-ms-error-code"), Some("OperationTimedOut"));
    let head = client.request("HEAD", TABLES, b"").unwrap();
    assert_eq!((head.status(), head.body.len()), (400, 0));
    assert_eq!(head.header("x-ms-error-code"), Some("InvalidInput"));
    assert_eq!(proxy.stats().faults_injected.status, 3);
    assert_eq!(counts(&proxy), [1, 0, 3, 0, 0]);
    assert_from_azurite(&client.get(TABLES));
    assert_eq!(counts(&proxy), [1, 1, 4, 1, 1]);
}

#[test]
fn delay_holds_the_request_then_forwards_it() {
    let proxy = table_proxy();
    let delay = Duration::from_millis(500);
    proxy.add_rule(Rule::new(
        Matcher::any().with_path_contains("/Tables"),
        Occurrences::Nth(1),
        Fault::Delay(delay),
    ));
    let mut client = Client::connect(proxy.addr());
    let started = Instant::now();
    assert_from_azurite(&client.get(TABLES));
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
    assert_eq!(proxy.stats().faults_injected.delay, 1);
    assert_eq!(counts(&proxy), [1, 1, 1, 1, 1]);
}

#[test]
fn a_delay_outlasting_upstreams_idle_timeout_still_delivers_the_request() {
    // Upstream drops each connection 200 ms after answering, like a short keep-alive timeout.
    let upstream = Upstream::start(|_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()),
            Step::Sleep(Duration::from_millis(200)),
            Step::Close,
        ]
    });
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    proxy.fail_nth(2, Fault::Delay(Duration::from_millis(600)));
    let mut client = Client::connect(proxy.addr());
    assert_eq!(client.get("/1").body_text(), "ok");
    // Sent at once, so it is on this connection before upstream closes the idle one.
    assert_eq!(client.get("/2").body_text(), "ok");
    assert_eq!(upstream.count(), 2);
    assert_eq!(counts(&proxy), [1, 2, 2, 2, 2]);
}

#[test]
fn drop_response_delivers_the_request_then_closes_without_an_answer() {
    // Upstream sends its answer in two parts: the client must not see the close before the
    // proxy has read the second one.
    let gap = Duration::from_millis(400);
    let upstream = Upstream::start(move |_| {
        vec![
            Step::Write(b"HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\nfirst".to_vec()),
            Step::Sleep(gap),
            Step::Write(b"-last".to_vec()),
        ]
    });
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    proxy.fail_nth(1, Fault::DropResponse);
    let mut client = Client::connect(proxy.addr());
    let body = pattern(200_000, 1);
    let started = Instant::now();
    let err = client.request("PUT", "/t1", &body).unwrap_err();
    assert!(started.elapsed() >= gap, "closed too early: {err}");
    assert_eq!(upstream.count(), 1, "the request reached upstream");
    assert!(upstream.received.lock().unwrap()[0].body == body);
    assert_eq!(proxy.stats().faults_injected.drop_response, 1);
    assert_eq!(counts(&proxy), [1, 1, 1, 1, 0]);
    let next = Client::connect(proxy.addr()).request("PUT", "/x", b"a");
    assert_eq!(next.unwrap().body_text(), "first-last");

    // Against Azurite too: forwarded, answered upstream, nothing relayed.
    let proxy = blob_proxy();
    proxy.fail_nth(1, Fault::DropResponse);
    let mut client = Client::connect(proxy.addr());
    assert!(client.request("PUT", CONTAINER, b"").is_err());
    assert_eq!(counts(&proxy), [1, 1, 1, 1, 0]);
}

#[test]
fn fail_nth_counts_requests_over_all_connections() {
    let proxy = blob_proxy();
    proxy.fail_nth(4, Fault::Status(503));
    let mut kept = Client::connect(proxy.addr());
    let seen: Vec<(u16, bool)> = (1..=7)
        .map(|i| {
            let resp = if i % 2 == 0 {
                kept.get(LIST)
            } else {
                Client::connect(proxy.addr()).get(LIST)
            };
            (resp.status(), resp.is_synthetic())
        })
        .collect();
    let mut want = vec![(403, false); 7];
    want[3] = (503, true);
    assert_eq!(seen, want);
    assert_eq!(proxy.stats().connections_accepted, 5);
}

#[test]
fn rules_match_method_path_and_query_and_count_what_they_see() {
    let proxy = blob_proxy();
    let rule =
        |matcher, occurrences, status| Rule::new(matcher, occurrences, Fault::Status(status));
    proxy.add_rule(rule(
        Matcher::any().with_method("put"),
        Occurrences::Range(2, 3),
        500,
    ));
    proxy.add_rule(rule(
        Matcher::any().with_query_contains("comp=list"),
        Occurrences::FromNth(3),
        503,
    ));
    proxy.add_rule(rule(
        Matcher::any().with_path_contains("/Tables"),
        Occurrences::Nth(1),
        400,
    ));
    let list_put = "/devstoreaccount1/proxytest?comp=list";
    let steps: [(&str, &str, Option<u16>); 10] = [
        ("PUT", CONTAINER, None),                                 // PUT #1
        ("PUT", CONTAINER, Some(500)),                            // PUT #2
        ("GET", LIST, None),                                      // list #1
        ("PUT", list_put, Some(500)), // PUT #3; the list rule never sees it
        ("GET", LIST, None),          // list #2
        ("GET", LIST, Some(503)),     // list #3
        ("GET", TABLES, Some(400)),   // Tables #1
        ("GET", TABLES, None),        // Tables #2 (Azurite's own 400)
        ("PUT", list_put, Some(503)), // PUT #4 passes the PUT rule; list #4
        ("GET", "/devstoreaccount1/Tables?comp=list", Some(503)), // list #5
    ];
    let mut client = Client::connect(proxy.addr());
    for (i, (method, target, fault)) in steps.into_iter().enumerate() {
        let resp = client.request(method, target, b"").unwrap();
        let got = resp.is_synthetic().then(|| resp.status());
        assert_eq!(
            got,
            fault,
            "step {} {method} {target}: {}",
            i + 1,
            resp.head
        );
    }
    proxy.clear();
    assert_from_azurite(&client.get(LIST));
    assert_eq!(proxy.stats().faults_injected.status, 6);
}

/// The request numbers random mode faults in `n` requests, with the status each got.
fn random_run(proxy: &FaultProxy, seed: u64, n: usize) -> Vec<(usize, u16)> {
    proxy.clear();
    proxy.set_random(0.1, vec![Fault::Status(503), Fault::Status(500)], seed);
    let mut client = Client::connect(proxy.addr());
    (1..=n)
        .filter_map(|i| {
            let resp = client.get(TABLES);
            resp.is_synthetic().then(|| (i, resp.status()))
        })
        .collect()
}

#[test]
fn random_faults_replay_for_a_seed_at_about_the_requested_rate() {
    let proxy = table_proxy();
    let first = random_run(&proxy, 2024, 2000);
    let second = random_run(&proxy, 2024, 2000);
    assert_eq!(first, second, "same seed, same requests faulted");
    // 10 % of 2,000 is 200 with a standard deviation near 13.
    assert!(
        (150..=250).contains(&first.len()),
        "{} faulted",
        first.len()
    );
    assert!(first.iter().any(|&(_, s)| s == 503) && first.iter().any(|&(_, s)| s == 500));
    let other = random_run(&proxy, 2025, 300);
    let prefix: Vec<_> = first.iter().copied().filter(|&(i, _)| i <= 300).collect();
    assert_ne!(other, prefix, "another seed, other requests");
    let stats = proxy.stats();
    let faulted = (first.len() * 2 + other.len()) as u64;
    assert_eq!(stats.faults_injected.status, faulted);
    assert_eq!(stats.requests_forwarded, 4300 - faulted);
}

#[test]
fn chunked_and_large_bodies_cross_unchanged_both_ways() {
    let upstream = Upstream::echo();
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    let mut client = Client::connect(proxy.addr());
    let big = pattern(6 << 20, 7);
    let resp = client.request("PUT", "/big", &big).unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.body == big, "6 MiB response body changed");
    assert!(
        upstream.received.lock().unwrap()[0].body == big,
        "request changed"
    );

    // Uneven chunks, a chunk extension and a trailer must all arrive as sent.
    let data = pattern((6 << 20) + 12_345, 9);
    let mut wire =
        b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let body_start = wire.len();
    let mut rest = data.as_slice();
    for size in [1usize, 4096, 65_537, 300_000, 1 << 20].into_iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        let ext = if size == 1 { ";note=first" } else { "" };
        wire.extend_from_slice(format!("{:x}{ext}\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(b"\r\n");
        rest = tail;
    }
    wire.extend_from_slice(b"0\r\nx-checksum: 42\r\n\r\n");
    client.send(&wire);
    let resp = client.read(false).unwrap();
    assert_eq!(resp.header("transfer-encoding"), Some("chunked"));
    assert!(
        resp.raw_body == wire[body_start..],
        "chunked framing changed"
    );
    assert!(resp.body == data);
    assert!(upstream.received.lock().unwrap()[1].raw_body == wire[body_start..]);
    assert_eq!(counts(&proxy), [1, 1, 2, 2, 2]);
}

#[test]
fn expect_100_continue_passes_through() {
    let proxy = blob_proxy();
    let mut client = Client::connect(proxy.addr());
    client.send(
        format!("PUT {CONTAINER} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            .as_bytes(),
    );
    // Azurite's 100 Continue arrives before any of the body was sent.
    assert_eq!(client.read(false).unwrap().status(), 100);
    client.send(b"hello");
    assert_from_azurite(&client.read(false).unwrap());
    assert_from_azurite(&client.get(LIST));
}

#[test]
fn a_transaction_sent_with_expect_100_continue_is_charged_its_operations() {
    // Upstream answers 100 Continue and then 202 once it has the whole request, as the service
    // does for a transaction.
    let upstream = Upstream::start(|_| {
        vec![Step::Write(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        )]
    });
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    let throttle = proxy.set_throttle(
        tablekit_testkit::ThrottleModel::default()
            .with_per_partition(1.0)
            .with_per_account(f64::INFINITY)
            .with_burst(Duration::from_secs(50)),
    );
    let operation = |rk: usize| {
        format!(
            "--changeset_1\r\nContent-Type: application/http\r\n\r\n\
             POST http://h/acct/T HTTP/1.1\r\nContent-Type: application/json\r\n\r\n\
             {{\"PartitionKey\":\"a\",\"RowKey\":\"{rk}\"}}\r\n"
        )
    };
    let body = format!(
        "--batch_1\r\nContent-Type: multipart/mixed; boundary=changeset_1\r\n\r\n{}{}{}\
         --changeset_1--\r\n--batch_1--\r\n",
        operation(1),
        operation(2),
        operation(3)
    );
    let mut client = Client::connect(proxy.addr());
    client.send(
        format!(
            "POST /acct/$batch HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\
             Expect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    // A client that stops waiting for 100 Continue sends its body anyway.
    client.send(body.as_bytes());
    assert_eq!(client.read(false).unwrap().status(), 100);
    assert_eq!(
        client.read(false).unwrap().status(),
        202,
        "one 100 Continue reaches the client, then the answer"
    );
    let stats = throttle.stats();
    assert_eq!(
        (stats.admitted_in("a"), stats.admitted_entities),
        (3, 3),
        "charged its three operations, not one against the account"
    );
    assert_eq!(upstream.count(), 1);
    assert_eq!(
        upstream.received.lock().unwrap()[0].raw_body,
        body.as_bytes(),
        "the body reached upstream unchanged"
    );
}

#[test]
fn upstream_failures_close_the_client_connection() {
    // An upstream that closes after answering without announcing it, as an idle keep-alive
    // connection does when its server times it out.
    let upstream = Upstream::start(|_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()),
            Step::Sleep(Duration::from_millis(100)),
            Step::Close,
        ]
    });
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    let mut client = Client::connect(proxy.addr());
    assert_eq!(client.get("/a").body_text(), "ok");
    assert!(client.closed_without_data());

    // A body delimited by the end of the connection arrives whole, then the client is closed.
    let upstream = Upstream::start(|_| {
        vec![
            Step::Write(b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec()),
            Step::Close,
        ]
    });
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    let mut client = Client::connect(proxy.addr());
    assert_eq!(client.get("/a").body_text(), "until close");
    assert!(client.closed_without_data());

    // Nothing listening upstream: the client connection closes without a response.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = FaultProxy::start(dead.local_addr().unwrap()).unwrap();
    drop(dead);
    let mut client = Client::connect(proxy.addr());
    assert!(client.request("GET", "/", b"").is_err());
}

#[tokio::test(flavor = "current_thread")]
async fn serves_a_blocked_runtime_and_stops_when_dropped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let proxy = blob_proxy();
    let addr = proxy.addr();
    let mut open = tokio::net::TcpStream::connect(addr).await.unwrap();
    open.write_all(format!("GET {LIST} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut first = [0u8; 12];
    open.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 403");
    // This runtime's only thread now blocks; the proxy keeps serving on its own thread.
    let status = std::thread::spawn(move || Client::connect(addr).get(LIST).status())
        .join()
        .unwrap();
    assert_eq!(status, 403);
    drop(proxy);
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the open connection was closed");
    assert!(std::net::TcpStream::connect(addr).is_err(), "port released");
}
