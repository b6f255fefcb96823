//! The codec hook against Azurite: a handle with a codec passes every write, read, filter and
//! projection through it and sends exactly the requests a handle without one sends; a handle
//! without a codec sends the bodies it always sent, byte for byte; lost responses and refused
//! inserts are settled by comparing what the caller wrote with what is stored, decoded.
//!
//! The codec here stores the property `Secret` reversed, with a random `Salt` beside it: like
//! encryption, it writes different bytes for the same entity every time.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tablekit_azure::{Account, BulkOptions, EntityCodec, MetricsSnapshot, RequestKind, Table};
use tablekit_core::batch::{BatchPlan, Operation, OperationKind};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys, Properties, Result, Target};
use tablekit_testkit::{Fault, unique_table_name};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Stores `Secret` reversed next to a random `Salt`; refuses merges and filters on `Secret`.
#[derive(Debug, Default)]
struct Reversing {
    encoded: AtomicUsize,
    decoded: AtomicUsize,
}

fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

impl EntityCodec for Reversing {
    fn encode<'a>(
        &'a self,
        _table: &'a str,
        _keys: &'a Keys,
        mut properties: Properties,
        kind: OperationKind,
    ) -> BoxFuture<'a, Result<Properties>> {
        Box::pin(async move {
            if matches!(kind, OperationKind::Merge | OperationKind::UpsertMerge) {
                return Err(Error::invalid_argument("operation", "merges are refused"));
            }
            self.encoded.fetch_add(1, Ordering::SeqCst);
            if let Some(secret) = properties.get_str("Secret").unwrap().map(reversed) {
                properties.insert("Secret", secret);
            }
            properties.insert("Salt", uuid::Uuid::new_v4().to_string());
            Ok(properties)
        })
    }

    fn decode<'a>(
        &'a self,
        table: &'a str,
        keys: &'a Keys,
        mut properties: Properties,
    ) -> BoxFuture<'a, Result<Properties>> {
        Box::pin(async move {
            self.decoded.fetch_add(1, Ordering::SeqCst);
            if properties.remove("Salt").is_none() {
                return Err(Error::Corrupt {
                    target: Target::entity(table, keys.clone()),
                    reason: "no salt".into(),
                });
            }
            if let Some(secret) = properties.get_str("Secret").unwrap().map(reversed) {
                properties.insert("Secret", secret);
            }
            Ok(properties)
        })
    }

    fn check_filter(&self, filter: &Filter) -> Result<()> {
        if filter.render()?.contains("Secret") {
            return Err(Error::InvalidFilter {
                reason: "Secret is encoded".into(),
            });
        }
        Ok(())
    }

    fn projection(&self, selected: &[String]) -> Result<Vec<String>> {
        let mut requested = selected.to_vec();
        requested.push("Salt".into());
        Ok(requested)
    }
}

fn row(pk: &str, rk: &str, secret: &str, n: i64) -> Entity<Properties> {
    Entity::try_new(
        pk,
        rk,
        Properties::new().with("Secret", secret).with("N", n),
    )
    .unwrap()
}

/// The requests of each kind, for comparing two runs.
fn by_kind(s: &MetricsSnapshot) -> Vec<(RequestKind, u64)> {
    [
        RequestKind::Insert,
        RequestKind::Replace,
        RequestKind::UpsertReplace,
        RequestKind::Get,
        RequestKind::Query,
        RequestKind::Transaction,
        RequestKind::Delete,
    ]
    .into_iter()
    .map(|k| (k, s.requests_of(k)))
    .collect()
}

/// The same sequence of operations on `table`: single writes, reads, a query, a projection,
/// an ETag loop, a transaction and a bulk write. Returns the values read back.
async fn workload(table: &Table) -> Vec<Properties> {
    let mut read = Vec::new();
    table.insert(&row("p", "a", "alpha", 1)).await.unwrap();
    let a = table.get::<Properties>(("p", "a")).await.unwrap().unwrap();
    read.push(a.value.clone());
    table
        .replace(&row("p", "a", "alpha2", 2), a.if_match())
        .await
        .unwrap();
    table
        .upsert_replace(&row("p", "b", "beta", 3))
        .await
        .unwrap();
    table
        .update_with(("p", "b"), |old: Option<Properties>| {
            let mut p = old.unwrap();
            let n = p.get_i64("N").unwrap().unwrap();
            p.insert("N", n + 1);
            p
        })
        .await
        .unwrap();
    let plan = BatchPlan::atomic([
        Operation::insert(&row("p", "c", "gamma", 5)).unwrap(),
        Operation::upsert_replace(&row("p", "d", "delta", 6)).unwrap(),
        Operation::delete(("p", "a"), IfMatch::Any).unwrap(),
    ])
    .unwrap();
    table.submit(&plan).await.unwrap();
    let bulk = (0..150)
        .map(|i| Operation::insert(&row("q", &format!("{i:03}"), &format!("s{i}"), i)).unwrap())
        .collect();
    let report = table
        .bulk_write(bulk, BulkOptions::default())
        .await
        .unwrap();
    assert!(report.is_complete(), "{report:?}");
    for stored in table
        .query::<Properties>()
        .filter(Filter::partition("p"))
        .collect()
        .await
        .unwrap()
    {
        read.push(stored.value);
    }
    let projected = table
        .query::<Properties>()
        .filter(Filter::partition("q").and(Filter::le("RowKey", "001")))
        .select(["Secret"])
        .collect()
        .await
        .unwrap();
    read.extend(projected.into_iter().map(|s| s.value));
    read
}

#[tokio::test]
async fn a_codec_sees_every_write_and_read_and_adds_no_request() {
    let plain = common::table("codecplain").await;
    let codec = Arc::new(Reversing::default());
    let coded = common::table("codeccoded").await.with_codec(codec.clone());
    assert!(plain.codec().is_none() && coded.codec().is_some());

    plain.account().metrics().reset();
    let expected = workload(&plain).await;
    let plain_requests = plain.account().metrics().snapshot();
    coded.account().metrics().reset();
    let read = workload(&coded).await;
    let coded_requests = coded.account().metrics().snapshot();

    // What the caller reads through the codec is what it wrote, exactly as without one.
    assert_eq!(read, expected);
    assert_eq!(
        read.last().unwrap(),
        &Properties::new().with("Secret", "s1"),
        "a projection decodes the selected property"
    );
    assert_eq!(by_kind(&coded_requests), by_kind(&plain_requests));
    assert_eq!(coded_requests.requests(), plain_requests.requests());
    // insert, replace, upsert, update_with's replace, 2 of the transaction (its delete sends
    // no properties), 150 of the bulk write.
    assert_eq!(codec.encoded.load(Ordering::SeqCst), 156);
    assert!(codec.decoded.load(Ordering::SeqCst) >= 1 + 1 + 3 + 2);

    // The service holds what the codec stored; a handle without it reads that.
    let stored = coded
        .without_codec()
        .get::<Properties>(("p", "c"))
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(stored.get_str("Secret").unwrap(), Some("ammag"));
    assert!(stored.get_str("Salt").unwrap().is_some());
    let typed = coded.typed::<Properties>();
    assert_eq!(
        typed.get(("p", "c")).await.unwrap().unwrap().value,
        Properties::new().with("Secret", "gamma").with("N", 5i64)
    );
}

#[tokio::test]
async fn what_a_codec_refuses_sends_no_request() {
    let table = common::table("codecrefuse")
        .await
        .with_codec(Arc::new(Reversing::default()));
    let metrics = table.account().metrics().clone();
    metrics.reset();
    let entity = row("p", "a", "alpha", 1);
    let merge = table.merge(&entity, IfMatch::Any).await.unwrap_err();
    let upsert_merge = table.upsert_merge(&entity).await.unwrap_err();
    let in_plan = table
        .submit(
            &BatchPlan::atomic([
                Operation::insert(&row("p", "b", "beta", 2)).unwrap(),
                Operation::upsert_merge(&entity).unwrap(),
            ])
            .unwrap(),
        )
        .await
        .unwrap_err();
    let in_bulk = table
        .bulk_write(
            vec![
                Operation::insert(&row("p", "b", "beta", 2)).unwrap(),
                Operation::merge(&entity, IfMatch::Any).unwrap(),
            ],
            BulkOptions::default(),
        )
        .await
        .unwrap_err();
    for error in [merge, upsert_merge, in_plan, in_bulk] {
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error:?}");
    }
    let filtered = table
        .query::<Properties>()
        .filter(Filter::partition("p").and(Filter::eq("Secret", "alpha")))
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(filtered, Error::InvalidFilter { .. }),
        "{filtered:?}"
    );
    assert_eq!(metrics.snapshot().requests(), 0, "{:?}", metrics.snapshot());
    let all = table.without_codec().query::<Properties>().collect().await;
    assert!(all.unwrap().is_empty(), "nothing was written");
}

#[tokio::test]
async fn lost_responses_through_a_codec_are_settled_by_what_the_caller_wrote() {
    let p = common::proxied(common::fast_retries());
    let raw = p.account.table(&unique_table_name("codeclost")).unwrap();
    raw.create().await.unwrap();
    let table = raw.with_codec(Arc::new(Reversing::default()));

    // The retry's 409 is the first attempt's insert: the entity read back, decoded, is the
    // one written.
    let entity = row("p", "a", "alpha", 1);
    p.table.fail_nth(1, Fault::DropResponse);
    let etag = table.insert(&entity).await.expect("the insert landed");
    let stored = table.get::<Properties>(("p", "a")).await.unwrap().unwrap();
    assert_eq!((stored.etag, stored.value), (etag, entity.value.clone()));

    // The same for a transaction.
    let plan = BatchPlan::atomic(
        (0..5).map(|i| Operation::insert(&row("t", &i.to_string(), &format!("s{i}"), i)).unwrap()),
    )
    .unwrap();
    p.table.fail_nth(1, Fault::DropResponse);
    let done = table.submit(&plan).await.expect("the transaction landed");
    assert_eq!(done[0].indices, [0, 1, 2, 3, 4]);

    // Inserts sent again, re-encoded (other bytes), count as written when the stored entities
    // decode to the ones sent; another entity under the keys is refused.
    let again: Vec<Operation> = (0..5)
        .map(|i| {
            let secret = if i == 4 { "other" } else { &*format!("s{i}") };
            Operation::insert(&row("t", &i.to_string(), secret, i)).unwrap()
        })
        .collect();
    let report = table
        .bulk_write(again, BulkOptions::default().with_accept_identical(true))
        .await
        .unwrap();
    assert_eq!(report.written(), 4, "{report:?}");
    assert_eq!(
        report
            .failures()
            .map(|(i, e)| (i, e.kind()))
            .collect::<Vec<_>>(),
        [(4, ErrorKind::AlreadyExists)]
    );
}

/// A TCP relay in front of `upstream` that records every byte clients send.
async fn recording_relay(upstream: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&recorded);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let sink = Arc::clone(&sink);
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let to_server = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match client_read.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                sink.lock().unwrap().extend_from_slice(&buf[..n]);
                                if server_write.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = server_write.shutdown().await;
                };
                let to_client = async {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    let _ = client_write.shutdown().await;
                };
                tokio::join!(to_server, to_client);
            });
        }
    });
    (addr, recorded)
}

/// The body of the first recorded request whose request line ends with `target`.
fn body_of(recorded: &[u8], target: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(recorded);
    let found = text.find(target).expect("the request was recorded");
    let at = text[..found].rfind("POST /").expect("an insert");
    let head_end = at + text[at..].find("\r\n\r\n").expect("a complete head") + 4;
    let length: usize = text[at..head_end]
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())
                .flatten()
        })
        .expect("a content-length");
    recorded[head_end..head_end + length].to_vec()
}

#[tokio::test]
async fn without_a_codec_an_insert_sends_the_body_it_always_sent() {
    let upstream = tablekit_testkit::fixtures::emulator();
    let authority = |url: &str| {
        url.split("://")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    };
    let (relay, recorded) = recording_relay(authority(&upstream.table).parse().unwrap()).await;
    let through = upstream.clone().with_table(
        upstream
            .table
            .replace(&authority(&upstream.table), &relay.to_string()),
    );
    let account =
        Account::from_connection_string(&tablekit_testkit::fixtures::connection_string(&through))
            .unwrap();
    let plain = account.table(&unique_table_name("codecbytes")).unwrap();
    plain.create().await.unwrap();

    let entity = row("p", "a", "Zoë's secret", 7);
    plain.insert(&entity).await.unwrap();
    // Every request carries the server timeout: the default request timeout, 30 s.
    let target = format!("/{}?timeout=30 HTTP/1.1", plain.name());
    let sent = body_of(&recorded.lock().unwrap(), &target);
    // The body the writer makes for this entity, which is what an insert sent before codecs.
    assert_eq!(sent, Operation::insert(&entity).unwrap().body().unwrap());

    // Through a codec the same insert sends other bytes.
    recorded.lock().unwrap().clear();
    let coded = plain.with_codec(Arc::new(Reversing::default()));
    coded
        .insert(&row("p", "b", "Zoë's secret", 7))
        .await
        .unwrap();
    let sent = body_of(&recorded.lock().unwrap(), &target);
    let text = String::from_utf8(sent).unwrap();
    assert!(
        text.contains("terces s'ëoZ") && text.contains("\"Salt\""),
        "{text}"
    );
}
