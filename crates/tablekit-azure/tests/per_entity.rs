//! Reads that survive a bad entity, against Azurite: a partition holds a few entities, stored
//! through the untyped API, that do not decode into the typed struct. A plain query fails at
//! the first, naming its table and keys; `per_entity()` returns the good ones and a typed
//! error with the keys for each bad one, and sends exactly the requests a plain query of the
//! same partition sends (counted at the wire by the testkit's proxy). Through a codec, an
//! entity the codec finds corrupt is set aside the same way; a codec failure that is not the
//! entity's own ends the read.

mod common;

use std::sync::Arc;

use futures::TryStreamExt as _;
use futures::future::BoxFuture;
use serde::Deserialize;
use tablekit_azure::{EntityCodec, EntityError, Table};
use tablekit_core::batch::OperationKind;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, Keys, Properties, Result, Target};
use tablekit_testkit::{FaultProxy, unique_table_name};

#[derive(Debug, PartialEq, Deserialize)]
struct Order {
    #[serde(rename = "Total")]
    total: i64,
}

/// Rows `00`–`09` of partition `p`, `Total` = the row number, but `03` (a string), `05`
/// (no `Total`) and `07` (a Boolean).
const BAD: [&str; 3] = ["03", "05", "07"];

async fn fill(table: &Table) {
    for i in 0..10_i64 {
        let rk = format!("{i:02}");
        let props = match rk.as_str() {
            "03" => Properties::new().with("Total", "n/a"),
            "05" => Properties::new().with("Note", "no total"),
            "07" => Properties::new().with("Total", true),
            _ => Properties::new().with("Total", i),
        };
        table
            .insert(&Entity::try_new("p", rk, props).unwrap())
            .await
            .unwrap();
    }
}

/// Requests the proxy saw while `f` ran.
async fn wire<T>(proxy: &FaultProxy, f: impl std::future::Future<Output = T>) -> (T, u64) {
    proxy.reset_stats();
    let out = f.await;
    (out, proxy.stats().requests_seen)
}

fn rks<'a>(keys: impl Iterator<Item = &'a Keys>) -> Vec<String> {
    keys.map(|k| k.rk().to_owned()).collect()
}

#[tokio::test]
async fn a_bad_entity_fails_a_plain_query_and_is_set_aside_by_a_per_entity_one() {
    let p = common::proxied(common::fast_retries());
    let table = p.account.table(&unique_table_name("perentity")).unwrap();
    table.create().await.unwrap();
    fill(&table).await;
    let query = || {
        table
            .query::<Order>()
            .filter(Filter::partition("p"))
            .with_page_size(4)
    };

    // Fail-fast, the default: the first bad entity is the error, with its table and keys.
    let (err, _) = wire(&p.table, query().with_read_ahead(false).collect()).await;
    match err.unwrap_err() {
        Error::Decode {
            target, property, ..
        } => {
            assert_eq!(
                target,
                Target::entity(table.name(), Keys::new("p", "03").unwrap())
            );
            assert_eq!(property, "Total");
        }
        other => panic!("{other:?}"),
    }

    // The same partition read untyped: three pages of 4, 4 and 2.
    let (all, plain_requests) = wire(&p.table, async {
        table
            .query::<Properties>()
            .filter(Filter::partition("p"))
            .with_page_size(4)
            .collect()
            .await
            .unwrap()
    })
    .await;
    assert_eq!((all.len(), plain_requests), (10, 3));

    // Per entity: the seven good ones as `Order`s and the three bad ones as typed errors, in
    // key order, with exactly the plain query's requests.
    let before = p.account.metrics().snapshot();
    let (items, requests) = wire(&p.table, async {
        query()
            .per_entity()
            .stream()
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(requests, plain_requests, "no request of its own");
    let spent = p.account.metrics().snapshot().since(&before);
    assert_eq!(
        (spent.requests(), spent.entities_read),
        (3, 10),
        "{spent:?}"
    );
    let order: Vec<(String, bool)> = items
        .iter()
        .map(|item| match item {
            Ok(good) => (good.keys.rk().to_owned(), true),
            Err(bad) => (bad.keys.rk().to_owned(), false),
        })
        .collect();
    let expected: Vec<(String, bool)> = (0..10)
        .map(|i| {
            let rk = format!("{i:02}");
            let good = !BAD.contains(&rk.as_str());
            (rk, good)
        })
        .collect();
    assert_eq!(order, expected);
    for item in &items {
        match item {
            Ok(good) => assert_eq!(good.value.total, good.keys.rk().parse::<i64>().unwrap()),
            Err(bad) => {
                assert_eq!(bad.error.kind(), ErrorKind::Decode, "{bad}");
                match &bad.error {
                    Error::Decode { target, .. } => {
                        assert_eq!(target.table, table.name());
                        assert_eq!(target.keys.as_deref(), Some(&bad.keys));
                    }
                    other => panic!("{other:?}"),
                }
                // What was stored, as it was, and the version a repair would target.
                let stored = all.iter().find(|s| s.keys == bad.keys).unwrap();
                assert_eq!(bad.properties, stored.value);
                assert_eq!(bad.etag, stored.etag);
                assert!(bad.timestamp.is_some());
                assert!(bad.to_string().contains(table.name()), "{bad}");
            }
        }
    }

    // `collect` keeps them apart; `?` turns a bad entity into its error.
    let (good, bad) = query().per_entity().collect().await.unwrap();
    assert_eq!(
        rks(good.iter().map(|s| &s.keys)),
        ["00", "01", "02", "04", "06", "08", "09"]
    );
    assert_eq!(rks(bad.iter().map(|e| &e.keys)), BAD);
    let first: Error = bad.into_iter().next().map(Error::from).unwrap();
    assert_eq!(first.kind(), ErrorKind::Decode);

    // Pages: the same pages and continuation tokens as the plain query.
    let pages: Vec<_> = query().per_entity().pages().try_collect().await.unwrap();
    let sizes: Vec<(usize, usize)> = pages
        .iter()
        .map(|page| (page.items.len(), page.errors().count()))
        .collect();
    assert_eq!(sizes, [(4, 1), (4, 2), (2, 0)]);
    let token = pages[0].continuation.clone().unwrap();
    let (rest, requests) = wire(&p.table, query().resume(token).per_entity().page()).await;
    let rest = rest.unwrap();
    assert_eq!(requests, 1);
    assert_eq!(rks(rest.errors().map(|e| &e.keys)), ["05", "07"]);

    // `top` counts bad entities too: the first five entities, one of them bad.
    let (good, bad) = query().top(5).per_entity().collect().await.unwrap();
    assert_eq!(
        (good.len(), rks(bad.iter().map(|e| &e.keys))),
        (4, vec!["03".to_owned()])
    );
    table.delete_table().await.unwrap();
}

/// Entities whose stored values do not read as their own EDM types — another client wrote an
/// `Edm.Int64` that is not a number, an `Edm.DateTime` that is not a time — fail a plain
/// untyped query and are set aside by a per-entity one, with the properties that do read.
#[tokio::test]
async fn a_value_that_does_not_read_as_its_own_type_is_set_aside() {
    let p = common::proxied(common::fast_retries());
    let table = p.account.table(&unique_table_name("perentityedm")).unwrap();
    table.create().await.unwrap();
    for i in 0..6_i64 {
        table
            .insert(&Entity::try_new("p", format!("{i}"), Properties::new().with("N", i)).unwrap())
            .await
            .unwrap();
    }
    tablekit_testkit::fixtures::insert_raw_entity(
        &table,
        r#"{"PartitionKey":"p","RowKey":"2b","N@odata.type":"Edm.Int64","N":"abc","S":"kept"}"#,
    )
    .await;
    tablekit_testkit::fixtures::insert_raw_entity(
        &table,
        r#"{"PartitionKey":"p","RowKey":"4b","D@odata.type":"Edm.DateTime","D":"not a time"}"#,
    )
    .await;
    let query = || {
        table
            .query::<Properties>()
            .filter(Filter::partition("p"))
            .with_page_size(3)
    };

    let (plain, plain_requests) = wire(&p.table, query().with_read_ahead(false).collect()).await;
    match plain.unwrap_err() {
        Error::Decode { property, .. } => assert_eq!(property, "N"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        plain_requests, 2,
        "it fails at the second page, which holds \"2b\""
    );

    let (pages, requests) = wire(&p.table, async {
        query()
            .per_entity()
            .pages()
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(requests, 3, "8 entities in pages of 3, nothing of its own");
    let items: Vec<_> = pages.into_iter().flat_map(|page| page.items).collect();
    let rows: Vec<(String, Option<String>)> = items
        .iter()
        .map(|item| match item {
            Ok(good) => (good.keys.rk().to_owned(), None),
            Err(bad) => match &bad.error {
                Error::Decode {
                    target, property, ..
                } => {
                    assert_eq!(target.table, table.name());
                    assert_eq!(target.keys.as_deref(), Some(&bad.keys));
                    (bad.keys.rk().to_owned(), Some(property.clone()))
                }
                other => panic!("{other:?}"),
            },
        })
        .collect();
    let expected: Vec<(String, Option<String>)> = [
        ("0", None),
        ("1", None),
        ("2", None),
        ("2b", Some("N")),
        ("3", None),
        ("4", None),
        ("4b", Some("D")),
        ("5", None),
    ]
    .into_iter()
    .map(|(rk, p)| (rk.to_owned(), p.map(str::to_owned)))
    .collect();
    assert_eq!(rows, expected);
    let bad = items.iter().find_map(|i| i.as_ref().err()).unwrap();
    assert_eq!(bad.properties.get_str("S").unwrap(), Some("kept"));
    assert!(
        !bad.properties.contains("N"),
        "the unreadable value is left out"
    );
    assert!(bad.timestamp.is_some());

    // Read as a type, an entity is set aside only if the type needs what does not read: a
    // plain query into a type without `D` reads "4b" too.
    #[derive(Debug, Deserialize)]
    struct Counted {
        #[serde(rename = "N")]
        n: Option<i64>,
    }
    let (good, bad) = table
        .query::<Counted>()
        .filter(Filter::partition("p"))
        .per_entity()
        .collect()
        .await
        .unwrap();
    assert_eq!(rks(bad.iter().map(|e| &e.keys)), ["2b"]);
    let read: Vec<(String, Option<i64>)> = good
        .iter()
        .map(|s| (s.keys.rk().to_owned(), s.value.n))
        .collect();
    assert_eq!(
        read[4..],
        [
            ("4".to_owned(), Some(4)),
            ("4b".to_owned(), None),
            ("5".to_owned(), Some(5))
        ]
    );
    let plain = table
        .query::<Counted>()
        .filter(Filter::partition("p").and(Filter::ge("RowKey", "3")))
        .collect()
        .await
        .unwrap();
    assert_eq!(
        plain.len(),
        4,
        "a plain query into the same type reads \"4b\""
    );
    table.delete_table().await.unwrap();
}

/// Marks entities with `Seal`: `broken` is corrupt (the entity's own failure), `offline` is
/// a key service that cannot be reached (not the entity's).
#[derive(Debug)]
struct Sealed;

impl EntityCodec for Sealed {
    fn encode<'a>(
        &'a self,
        _table: &'a str,
        _keys: &'a Keys,
        properties: Properties,
        _kind: OperationKind,
    ) -> BoxFuture<'a, Result<Properties>> {
        Box::pin(async move { Ok(properties) })
    }

    fn decode<'a>(
        &'a self,
        table: &'a str,
        keys: &'a Keys,
        mut properties: Properties,
    ) -> BoxFuture<'a, Result<Properties>> {
        Box::pin(async move {
            match properties.remove("Seal").as_ref().and_then(|v| v.as_str()) {
                Some("broken") => Err(Error::corrupt(
                    Target::entity(table, keys.clone()),
                    "the seal does not verify",
                )),
                Some("offline") => Err(Error::transport(
                    "the key service did not answer",
                    std::io::Error::other("offline"),
                )),
                _ => Ok(properties),
            }
        })
    }
}

#[tokio::test]
async fn through_a_codec_a_corrupt_entity_is_set_aside_and_a_codec_outage_ends_the_read() {
    let table = common::table("perentitycodec").await;
    for (rk, seal) in [("a", "ok"), ("b", "broken"), ("c", "ok")] {
        let props = Properties::new().with("Total", 1_i64).with("Seal", seal);
        table
            .insert(&Entity::try_new("p", rk, props).unwrap())
            .await
            .unwrap();
    }
    let sealed = table.with_codec(Arc::new(Sealed));
    let query = || sealed.query::<Order>().filter(Filter::partition("p"));

    let err = query().collect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");

    let (good, bad) = query().per_entity().collect().await.unwrap();
    assert_eq!(rks(good.iter().map(|s| &s.keys)), ["a", "c"]);
    let [bad]: [EntityError; 1] = bad.try_into().unwrap();
    assert_eq!(bad.keys, Keys::new("p", "b").unwrap());
    assert_eq!(bad.error.kind(), ErrorKind::Corrupt);
    assert_eq!(
        bad.properties.get_str("Seal").unwrap(),
        Some("broken"),
        "as stored, before the codec"
    );

    // A failure that is not the entity's own is the read's error, not a skipped entity.
    table
        .insert(
            &Entity::try_new(
                "p",
                "d",
                Properties::new()
                    .with("Total", 1_i64)
                    .with("Seal", "offline"),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let err = query().per_entity().collect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    table.delete_table().await.unwrap();
}
