//! A failure injected at each step of a large-entity write (through fault proxies in front
//! of Azurite's table and blob endpoints) leaves the old or the new value readable — never a
//! reference to a missing blob — and after a sweep no unreferenced blob remains. A put and a
//! delete held apart by a delayed request end as last writer wins.

mod common;

use bytes::Bytes;
use tablekit_core::{Entity, IfMatch, Properties};
use tablekit_large::{LargeEntities, SweepOptions};
use tablekit_testkit::{Fault, FaultProxy, Matcher, Occurrences, Rule};

/// Which value a read must return after the failed or disturbed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Old,
    New,
}

struct Case {
    step: &'static str,
    /// The proxy (table or blob) and the rules to install on it.
    on_blob: bool,
    rules: Vec<Rule>,
    put_succeeds: bool,
    readable: Outcome,
}

fn rule(method: &str, occurrences: Occurrences, fault: Fault) -> Rule {
    Rule::new(Matcher::any().with_method(method), occurrences, fault)
}

fn cases() -> Vec<Case> {
    use Occurrences::{All, FromNth, Nth};
    vec![
        Case {
            step: "entity read fails",
            on_blob: false,
            rules: vec![rule("GET", All, Fault::Status(503))],
            put_succeeds: false,
            readable: Outcome::Old,
        },
        Case {
            step: "upload refused",
            on_blob: true,
            rules: vec![rule("PUT", All, Fault::Status(400))],
            put_succeeds: false,
            readable: Outcome::Old,
        },
        Case {
            step: "upload applied, its response lost",
            on_blob: true,
            rules: vec![rule("PUT", Nth(1), Fault::DropResponse)],
            put_succeeds: true,
            readable: Outcome::New,
        },
        Case {
            step: "entity write refused",
            on_blob: false,
            rules: vec![rule("PUT", All, Fault::Status(400))],
            put_succeeds: false,
            readable: Outcome::Old,
        },
        Case {
            step: "entity write never arrives",
            on_blob: false,
            rules: vec![rule("PUT", All, Fault::Reset)],
            put_succeeds: false,
            readable: Outcome::Old,
        },
        Case {
            step: "entity write applied, its response lost, then retried",
            on_blob: false,
            rules: vec![rule("PUT", Nth(1), Fault::DropResponse)],
            put_succeeds: true,
            readable: Outcome::New,
        },
        Case {
            step: "entity write applied, every response lost",
            on_blob: false,
            rules: vec![
                rule("PUT", Nth(1), Fault::DropResponse),
                rule("PUT", FromNth(1), Fault::Reset),
            ],
            put_succeeds: false,
            readable: Outcome::New,
        },
        Case {
            step: "old blob delete fails",
            on_blob: true,
            rules: vec![rule("DELETE", All, Fault::Status(500))],
            put_succeeds: true,
            readable: Outcome::New,
        },
    ]
}

/// The entity of the tests that write one entity.
const KEYS: (&str, &str) = ("Sales", "000001");

/// An entity at `keys` with no properties besides its payload.
fn bare(keys: (&str, &str)) -> Entity<Properties> {
    Entity::try_new(keys.0, keys.1, Properties::new()).unwrap()
}

fn payload(case: usize, new: bool) -> Bytes {
    let seed = (case * 2 + usize::from(new)) as u8;
    (0..200_000u32)
        .map(|i| (i as u8).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

async fn check(store: &LargeEntities, keys: (&str, &str), expected: &Bytes, step: &str) {
    let read = common::read_raw(store, keys)
        .await
        .unwrap_or_else(|e| panic!("{step}: read failed: {e}"))
        .unwrap_or_else(|| panic!("{step}: entity missing"));
    assert_eq!(&read.payload, expected, "{step}: wrong value readable");
    let report = store.sweep(SweepOptions::immediate()).await.unwrap();
    let left = common::blob_names(store).await;
    assert_eq!(
        left,
        [read.reference.unwrap().name],
        "{step}: after the sweep ({report:?}) only the referenced blob remains"
    );
}

#[tokio::test]
async fn a_failure_at_each_step_of_a_write_leaves_the_old_or_the_new_value() {
    let proxied = common::proxied();
    let store = common::store(&proxied.account, "largefaults").await;
    for (i, case) in cases().into_iter().enumerate() {
        // Each case writes its own entity, starting from a stored value with a blob.
        let rk = format!("{i:06}");
        let keys = ("Sales", rk.as_str());
        let (old, new) = (payload(i, false), payload(i, true));
        store.upsert(&bare(keys), old.clone()).await.unwrap();
        let proxy: &FaultProxy = if case.on_blob {
            &proxied.blob
        } else {
            &proxied.table
        };
        for rule in case.rules {
            proxy.add_rule(rule);
        }
        let result = store.upsert(&bare(keys), new.clone()).await;
        proxy.clear();
        assert_eq!(
            result.is_ok(),
            case.put_succeeds,
            "{}: put returned {result:?}",
            case.step
        );
        let expected = match case.readable {
            Outcome::Old => &old,
            Outcome::New => &new,
        };
        check(&store, keys, expected, case.step).await;
        // Leave only this case's blob for the next sweep's assertion.
        store.delete(keys, IfMatch::Any).await.unwrap();
    }
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_failure_while_creating_leaves_no_entity_or_a_complete_one() {
    let proxied = common::proxied();
    let store = common::store(&proxied.account, "largecreate").await;
    // The insert never arrives: no entity, and the uploaded blob is swept.
    proxied
        .table
        .add_rule(rule("POST", Occurrences::All, Fault::Reset));
    assert!(store.upsert(&bare(KEYS), payload(0, true)).await.is_err());
    proxied.table.clear();
    assert!(common::read_raw(&store, KEYS).await.unwrap().is_none());
    store.sweep(SweepOptions::immediate()).await.unwrap();
    assert!(common::blob_names(&store).await.is_empty());
    // The insert is applied but its response lost: the retry's 409 is recognised as ours.
    proxied
        .table
        .add_rule(rule("POST", Occurrences::Nth(1), Fault::DropResponse));
    store.upsert(&bare(KEYS), payload(1, true)).await.unwrap();
    proxied.table.clear();
    check(&store, KEYS, &payload(1, true), "insert response lost").await;
    common::cleanup(&store).await;
}

/// Proxies for the races below: a request held 3 s by the proxy is neither given up by the
/// client nor cut by the server timeout it carries (both 5 s), so it is answered once, late.
fn patient() -> common::Proxied {
    tablekit_testkit::fixtures::proxied(
        common::fast_retries().with_request_timeout(std::time::Duration::from_secs(5)),
    )
}

#[tokio::test]
async fn a_put_racing_a_delete_ends_with_its_own_value_and_one_blob() {
    let proxied = patient();
    let store = common::store(&proxied.account, "largerace").await;
    // The deleting process has its own account, straight to the emulator.
    let direct = common::account();
    let deleter = LargeEntities::builder(
        direct.table(store.table().name()).unwrap(),
        direct.container(store.container().name()).unwrap(),
    )
    .build()
    .unwrap();
    store.upsert(&bare(KEYS), payload(0, false)).await.unwrap();

    // The put reads the entity, then its upload is held while the delete runs from start to
    // end; the put's write comes after the delete.
    proxied.blob.add_rule(rule(
        "PUT",
        Occurrences::Nth(1),
        Fault::Delay(std::time::Duration::from_secs(3)),
    ));
    let metrics = proxied.account.metrics().clone();
    metrics.reset();
    let new = payload(0, true);
    let put = tokio::spawn({
        let (store, new) = (store.clone(), new.clone());
        async move { store.upsert(&bare(KEYS), new).await }
    });
    while proxied.blob.stats().faults_injected.delay == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let forwarded = proxied.blob.stats().requests_forwarded;
    deleter
        .delete(KEYS, IfMatch::Any)
        .await
        .expect("the delete found the entity");
    assert_eq!(
        proxied.blob.stats().requests_forwarded,
        forwarded,
        "the delete finished while the put's upload was still held"
    );
    let written = put.await.unwrap();
    proxied.blob.clear();

    // Last writer wins: the put, which wrote after the delete, is what is stored.
    let written = written.expect("the put wins over the delete it raced");
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        7,
        "read, upload, replace (404), read, delete the unused blob, upload, insert: {spent:?}"
    );
    check(&store, KEYS, &new, "put racing a delete").await;
    assert_eq!(
        store
            .get_entity::<Properties>(KEYS)
            .await
            .unwrap()
            .unwrap()
            .1,
        written.reference
    );
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_delete_racing_a_put_deletes_the_put_value_and_both_blobs() {
    let proxied = patient();
    let deleter = common::store(&proxied.account, "largerace2").await;
    // The writing process has its own account, straight to the emulator.
    let direct = common::account();
    let writer = LargeEntities::builder(
        direct.table(deleter.table().name()).unwrap(),
        direct.container(deleter.container().name()).unwrap(),
    )
    .build()
    .unwrap();
    writer.upsert(&bare(KEYS), payload(0, false)).await.unwrap();

    // The delete reads the entity, then its conditional delete is held while a put runs
    // from start to end; the delete's write comes after the put.
    proxied.table.add_rule(rule(
        "DELETE",
        Occurrences::Nth(1),
        Fault::Delay(std::time::Duration::from_secs(3)),
    ));
    let metrics = proxied.account.metrics().clone();
    metrics.reset();
    let delete = tokio::spawn({
        let deleter = deleter.clone();
        async move { deleter.delete(KEYS, IfMatch::Any).await }
    });
    while proxied.table.stats().faults_injected.delay == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let forwarded = proxied.table.stats().requests_forwarded;
    writer.upsert(&bare(KEYS), payload(0, true)).await.unwrap();
    assert_eq!(
        proxied.table.stats().requests_forwarded,
        forwarded,
        "the put finished while the delete was still held"
    );
    delete.await.unwrap().expect("the delete found the entity");
    proxied.table.clear();

    // Last writer wins: the delete, which wrote after the put, is what is stored.
    let spent = metrics.snapshot();
    assert_eq!(
        spent.requests(),
        5,
        "read, delete (412), read, delete, delete the put's blob: {spent:?}"
    );
    assert!(common::read_raw(&deleter, KEYS).await.unwrap().is_none());
    assert!(
        common::blob_names(&deleter).await.is_empty(),
        "the put deleted the blob it replaced, the delete the put's"
    );
    common::cleanup(&deleter).await;
}

/// A replace whose upload is held while a process of its own upserts the entity (or, when
/// `deleting`, deletes it): the replace's entity write comes after. Returns the replace's result, the requests
/// it sent, the store, the upserted payload and the proxies the store's account goes through.
async fn replace_racing_an_upsert(
    prefix: &str,
    condition: impl FnOnce(tablekit_core::ETag) -> IfMatch,
    deleting: bool,
) -> (
    tablekit_core::Result<tablekit_large::LargeWritten>,
    tablekit_azure::MetricsSnapshot,
    LargeEntities,
    Bytes,
    common::Proxied,
) {
    let proxied = patient();
    let store = common::store(&proxied.account, prefix).await;
    let direct = common::account();
    let writer = LargeEntities::builder(
        direct.table(store.table().name()).unwrap(),
        direct.container(store.container().name()).unwrap(),
    )
    .build()
    .unwrap();
    let read = writer.upsert(&bare(KEYS), payload(0, false)).await.unwrap();

    proxied.blob.add_rule(rule(
        "PUT",
        Occurrences::Nth(1),
        Fault::Delay(std::time::Duration::from_secs(3)),
    ));
    let metrics = proxied.account.metrics().clone();
    metrics.reset();
    let replace = tokio::spawn({
        let store = store.clone();
        let if_match = condition(read.etag);
        async move { store.replace(&bare(KEYS), payload(1, true), if_match).await }
    });
    while proxied.blob.stats().faults_injected.delay == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let forwarded = proxied.blob.stats().requests_forwarded;
    let upserted = payload(2, true);
    if deleting {
        writer.delete(KEYS, IfMatch::Any).await.unwrap();
    } else {
        writer.upsert(&bare(KEYS), upserted.clone()).await.unwrap();
    }
    assert_eq!(
        proxied.blob.stats().requests_forwarded,
        forwarded,
        "the other writer finished while the replace's upload was still held"
    );
    let result = replace.await.unwrap();
    proxied.blob.clear();
    (result, metrics.snapshot(), store, upserted, proxied)
}

#[tokio::test]
async fn a_replace_on_an_etag_changed_before_its_write_fails_and_leaves_no_blob() {
    let (result, spent, store, upserted, _proxied) =
        replace_racing_an_upsert("largereplrace", IfMatch::ETag, false).await;
    let err = result.expect_err("the ETag read no longer matches when the replace writes");
    assert_eq!(
        err.kind(),
        tablekit_core::ErrorKind::PreconditionFailed,
        "{err}"
    );
    assert_eq!(
        spent.requests(),
        5,
        "read, upload, replace (412), read, delete the unused blob: {spent:?}"
    );
    // The upsert's value stands, and its blob is the only one: the replace's was deleted.
    let read = common::read_raw(&store, KEYS).await.unwrap().unwrap();
    assert_eq!(read.payload, upserted);
    assert_eq!(
        common::blob_names(&store).await,
        [read.reference.unwrap().name]
    );
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_replace_on_any_version_changed_before_its_write_starts_again_and_wins() {
    let (result, spent, store, _, _proxied) =
        replace_racing_an_upsert("largereplany", |_| IfMatch::Any, false).await;
    let written = result.expect("the entity exists: the replace writes over the upsert");
    assert_eq!(
        spent.requests(),
        8,
        "read, upload, replace (412), read, delete the unused blob, upload, replace, delete the upsert's blob: {spent:?}"
    );
    check(&store, KEYS, &payload(1, true), "replace racing an upsert").await;
    assert_eq!(
        common::read_raw(&store, KEYS)
            .await
            .unwrap()
            .unwrap()
            .reference,
        written.reference
    );
    common::cleanup(&store).await;
}

#[tokio::test]
async fn a_replace_whose_entity_is_deleted_before_its_write_is_not_found_and_leaves_no_blob() {
    for (prefix, any) in [("largerepldel", false), ("largerepldelany", true)] {
        let condition = |etag| {
            if any {
                IfMatch::Any
            } else {
                IfMatch::ETag(etag)
            }
        };
        let (result, spent, store, _, _proxied) =
            replace_racing_an_upsert(prefix, condition, true).await;
        let err = result.expect_err("the entity is gone when the replace writes");
        assert_eq!(
            err.kind(),
            tablekit_core::ErrorKind::NotFound,
            "any {any}: {err}"
        );
        assert_eq!(
            spent.requests(),
            5,
            "any {any}: read, upload, replace (404), read, delete the unused blob: {spent:?}"
        );
        assert!(common::read_raw(&store, KEYS).await.unwrap().is_none());
        assert!(
            common::blob_names(&store).await.is_empty(),
            "any {any}: the delete took the old blob, the replace its own"
        );
        common::cleanup(&store).await;
    }
}
