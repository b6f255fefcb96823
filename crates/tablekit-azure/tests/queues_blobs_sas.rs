//! Queues, blob containers and SAS tokens against Azurite.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use tablekit_azure::{
    Account, AccountSas, BlobCondition, MessageTtl, SasProtocol, SasServices, SasToken,
    SendOptions, TablePermissions, TableSas, UploadOptions,
};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, ErrorKind, IfMatch, Keys, Properties};
use tablekit_testkit::{unique_container_name, unique_queue_name};

#[tokio::test]
async fn unacknowledged_messages_reappear_with_a_higher_dequeue_count() {
    let account = common::account();
    let queue = account.queue(&unique_queue_name("jobs")).unwrap();
    queue.create().await.unwrap();
    queue.create().await.unwrap(); // idempotent
    let payload: Vec<u8> = (0..=255).collect();
    queue.send(&payload, SendOptions::default()).await.unwrap();
    let first = queue.receive(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        (first[0].payload.clone(), first[0].dequeue_count),
        (payload.clone(), 1)
    );
    assert!(
        queue
            .receive(1, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty(),
        "invisible while held"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let again = queue.receive(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        (again[0].id.clone(), again[0].dequeue_count),
        (first[0].id.clone(), 2)
    );
    // The old receipt is dead; the new one can extend and then delete.
    assert_eq!(
        queue.delete_message(&first[0]).await.unwrap_err().kind(),
        ErrorKind::PreconditionFailed
    );
    let extended = queue
        .update(&again[0], Duration::from_secs(60))
        .await
        .unwrap();
    assert!(extended.next_visible > again[0].next_visible);
    queue.delete_message(&extended).await.unwrap();
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    queue.delete_queue().await.unwrap();
}

#[tokio::test]
async fn delayed_messages_stay_hidden_and_oversized_ones_are_refused() {
    let account = common::account();
    let queue = account.queue(&unique_queue_name("delay")).unwrap();
    queue.create().await.unwrap();
    queue
        .send(
            b"later",
            SendOptions::default()
                .with_visibility_delay(Duration::from_secs(2))
                .with_ttl(MessageTtl::ServiceDefault),
        )
        .await
        .unwrap();
    assert!(
        queue
            .receive(1, Duration::from_secs(5))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(queue.peek(1).await.unwrap().len(), 0);
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    assert_eq!(queue.peek(1).await.unwrap(), [b"later".to_vec()]);
    let before = account.metrics().snapshot().requests();
    let err = queue
        .send(&vec![0u8; 49_153], SendOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LimitExceeded);
    assert_eq!(
        account.metrics().snapshot().requests(),
        before,
        "refused before any request"
    );
    queue.delete_queue().await.unwrap();
}

#[tokio::test]
async fn a_message_ttl_is_sent_as_chosen_and_a_delay_past_it_is_refused() {
    use chrono::Datelike as _;
    let account = common::account();
    let queue = account.queue(&unique_queue_name("ttl")).unwrap();
    queue.create().await.unwrap();
    let put = |ttl| {
        let queue = queue.clone();
        async move {
            queue
                .send(b"job", SendOptions::default().with_ttl(ttl))
                .await
                .unwrap();
            let message = queue
                .receive(1, Duration::from_secs(30))
                .await
                .unwrap()
                .remove(0);
            queue.delete_message(&message).await.unwrap();
            message
        }
    };
    // Kept until deleted: the service reports the end of year 9999.
    let never = put(MessageTtl::Never).await;
    assert_eq!(never.expires.year(), 9999, "{:?}", never.expires);
    let hour = put(MessageTtl::After(Duration::from_secs(3600))).await;
    assert_eq!((hour.expires - hour.inserted).num_seconds(), 3600);
    let default = put(MessageTtl::ServiceDefault).await;
    assert_eq!(
        (default.expires - default.inserted).num_days(),
        7,
        "the service's default"
    );

    // Refused before any request: a TTL under a second, and a message that would expire
    // before it becomes visible.
    let before = account.metrics().snapshot().requests();
    let refused = [
        SendOptions::default().with_ttl(MessageTtl::After(Duration::from_millis(500))),
        SendOptions::default()
            .with_visibility_delay(Duration::from_secs(20))
            .with_ttl(MessageTtl::After(Duration::from_secs(10))),
        SendOptions::default()
            .with_visibility_delay(Duration::from_secs(10))
            .with_ttl(MessageTtl::After(Duration::from_secs(10))),
    ];
    for options in refused {
        let e = queue.send(b"job", options.clone()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{options:?}: {e}");
    }
    assert_eq!(
        account.metrics().snapshot().requests(),
        before,
        "refused before any request"
    );
    queue.delete_queue().await.unwrap();
}

#[tokio::test]
async fn blobs_round_trip_with_metadata_conditions_and_prefix_listing() {
    let account = common::account();
    let container = account.container(&unique_container_name("blobs")).unwrap();
    assert!(container.create_if_not_exists().await.unwrap());
    assert!(!container.create_if_not_exists().await.unwrap());
    let meta = BTreeMap::from([("first".to_owned(), "2014-07-31T18:00:00Z".to_owned())]);
    let data = vec![7u8; 300_000];
    let tag = container
        .upload(
            "queue/2014/07/31/1800/000001.log",
            data.clone(),
            UploadOptions::default().with_metadata(meta.clone()),
        )
        .await
        .unwrap();
    container
        .upload(
            "queue/2014/07/31/1900/000001.log",
            b"later".to_vec(),
            UploadOptions::default(),
        )
        .await
        .unwrap();
    let got = container
        .download("queue/2014/07/31/1800/000001.log")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            got.data.to_vec(),
            got.info.metadata.clone(),
            got.info.etag.clone()
        ),
        (data, meta.clone(), tag.clone())
    );
    // Claim 49: a prefix lists the hour's files only.
    let listed = container.list("queue/2014/07/31/1800").await.unwrap();
    assert_eq!(
        listed.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        ["queue/2014/07/31/1800/000001.log"]
    );
    assert_eq!(listed[0].metadata, meta);
    // Conditions: create-only refuses an existing blob; a stale ETag refuses an overwrite.
    let exists = container
        .upload(
            "queue/2014/07/31/1900/000001.log",
            b"x".to_vec(),
            UploadOptions::default().with_condition(BlobCondition::IfNotExists),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            exists.kind(),
            ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed
        ),
        "{exists}"
    );
    container
        .upload(
            "queue/2014/07/31/1800/000001.log",
            b"v2".to_vec(),
            UploadOptions::default(),
        )
        .await
        .unwrap();
    let stale = container
        .upload(
            "queue/2014/07/31/1800/000001.log",
            b"v3".to_vec(),
            UploadOptions::default().with_condition(BlobCondition::IfMatch(tag.clone())),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::PreconditionFailed);
    // Metadata and deletes take the same IfMatch as entity writes: a stale ETag is refused,
    // the current one (or Any) is not.
    let name = "queue/2014/07/31/1800/000001.log";
    let stale_tag = IfMatch::ETag(tag.clone());
    let refused = container
        .set_metadata(name, &meta, stale_tag.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PreconditionFailed);
    let current = container.properties(name).await.unwrap().unwrap().etag;
    let retagged = container
        .set_metadata(name, &BTreeMap::new(), IfMatch::ETag(current))
        .await
        .unwrap();
    let refused = container.delete_blob(name, stale_tag).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PreconditionFailed);
    let info = container.properties(name).await.unwrap().unwrap();
    assert_eq!((info.etag, info.metadata.len()), (retagged, 0));
    assert!(
        container
            .delete_blob_if_exists("queue/2014/07/31/1800/000001.log")
            .await
            .unwrap()
    );
    assert!(
        !container
            .delete_blob_if_exists("queue/2014/07/31/1800/000001.log")
            .await
            .unwrap()
    );
    assert!(container.download("nope").await.unwrap().is_none());
    assert!(
        container
            .properties("queue/2014/07/31/1900/000001.log")
            .await
            .unwrap()
            .is_some()
    );
    container.delete_container().await.unwrap();
    let err = container
        .download("queue/2014/07/31/1900/000001.log")
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::NotFound,
        "a missing container is an error, not an absent blob"
    );
}

#[tokio::test]
async fn a_listing_carries_the_service_time_no_earlier_than_the_blobs_it_lists() {
    let account = common::account();
    let container = account.container(&unique_container_name("dated")).unwrap();
    container.create().await.unwrap();
    for name in ["a/1", "a/2", "b/1"] {
        container
            .upload(name, b"x".to_vec(), UploadOptions::default())
            .await
            .unwrap();
    }
    let metrics = account.metrics().clone();
    metrics.reset();
    let (blobs, service_time) = container.list_with_service_time("a/").await.unwrap();
    assert_eq!(metrics.snapshot().requests(), 1);
    assert_eq!(
        blobs.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        ["a/1", "a/2"]
    );
    let service_time = service_time.expect("the listing response has a Date");
    for blob in &blobs {
        let written = blob.last_modified.expect("Last-Modified");
        assert!(
            written <= service_time,
            "{}: written {written}, listed {service_time}",
            blob.name
        );
    }
    container.delete_container().await.unwrap();
}

fn sas_account(base: &Account, token: &SasToken) -> Account {
    Account::from_sas(base.name(), base.endpoints().clone(), &token.to_query()).unwrap()
}

#[tokio::test]
async fn a_partition_scoped_read_only_table_sas_is_accepted_altered_or_expired_ones_are_not() {
    let table = common::table("sas").await;
    let account = table.account().clone();
    table
        .insert(&Entity::try_new("Sales", "000223", Properties::new().with("V", 1)).unwrap())
        .await
        .unwrap();
    let expiry = Utc::now() + chrono::Duration::minutes(10);
    let sas = TableSas::new(table.name(), TablePermissions::READ, expiry)
        .with_partition_range("Sales", "Sales")
        .with_protocol(SasProtocol::HttpsAndHttp);
    let token = sas.sign(&account).unwrap();
    let reader = sas_account(&account, &token).table(table.name()).unwrap();
    let rows = reader
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "the token is accepted for reads");
    let denied = reader
        .insert(&Entity::try_new("Sales", "999", Properties::new()).unwrap())
        .await
        .unwrap_err();
    // The token is valid; it lacks the permission.
    assert_eq!(denied.kind(), ErrorKind::Forbidden, "read-only: {denied}");

    // Any signed field altered: the signature no longer matches.
    let tampered = token.to_query().replace("spk=Sales", "spk=Marketing");
    assert_ne!(tampered, token.to_query());
    let tampered =
        Account::from_sas(account.name(), account.endpoints().clone(), &tampered).unwrap();
    let err = tampered
        .table(table.name())
        .unwrap()
        .get::<Properties>(&Keys::new("Sales", "000223").unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.status()),
        (ErrorKind::Unauthorized, Some(403)),
        "{err}"
    );

    let expired = TableSas::new(
        table.name(),
        TablePermissions::READ,
        Utc::now() - chrono::Duration::minutes(1),
    )
    .with_protocol(SasProtocol::HttpsAndHttp)
    .sign(&account)
    .unwrap();
    let err = sas_account(&account, &expired)
        .table(table.name())
        .unwrap()
        .query::<Properties>()
        .page()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn an_account_sas_reaches_queues_and_blobs() {
    let account = common::account();
    let queue = account.queue(&unique_queue_name("sas")).unwrap();
    queue.create().await.unwrap();
    let token = AccountSas::new(
        SasServices::default()
            .with_blob(true)
            .with_queue(true)
            .with_table(false),
        "raup",
        "o",
        Utc::now() + chrono::Duration::minutes(5),
    )
    .with_protocol(SasProtocol::HttpsAndHttp)
    .sign(&account)
    .unwrap();
    let client = sas_account(&account, &token);
    client
        .queue(queue.name())
        .unwrap()
        .send(b"hi", SendOptions::default())
        .await
        .unwrap();
    assert_eq!(queue.peek(1).await.unwrap(), [b"hi".to_vec()]);
    queue.delete_queue().await.unwrap();
}

#[test]
fn debug_and_display_never_show_secrets() {
    let account = common::account();
    let key = tablekit_testkit::ACCOUNT_KEY;
    for text in [
        format!("{account:?}"),
        format!("{account}"),
        format!("{:?}", account.table("abc").unwrap()),
    ] {
        assert!(!text.contains(key) && !text.contains(&key[..20]), "{text}");
    }
    let token = TableSas::new("abc", TablePermissions::READ, Utc::now())
        .sign(&account)
        .unwrap();
    let sig = token.get("sig").unwrap().to_owned();
    let sas = Account::from_sas(
        account.name(),
        account.endpoints().clone(),
        &token.to_query(),
    )
    .unwrap();
    for text in [format!("{sas:?}"), format!("{sas}"), format!("{token:?}")] {
        assert!(!text.contains(&sig), "{text}");
    }
}

/// A blob listing is lazy and pages like a table listing: one request per page of at most
/// the page size, resumable from a page's token, and a listing of a missing container fails
/// at its first page, not when it is built.
#[tokio::test]
async fn a_blob_listing_pages_and_resumes_from_a_token() {
    use futures::TryStreamExt;

    let account = common::account();
    let container = account.container(&unique_container_name("paged")).unwrap();
    let listing = container.list("");
    assert_eq!(
        listing.page().await.unwrap_err().kind(),
        ErrorKind::NotFound,
        "the container does not exist yet"
    );
    container.create().await.unwrap();
    let names = ["a/1", "a/2", "a/3", "a/4", "a/5", "b/1"];
    for name in names {
        container
            .upload(name, b"x".to_vec(), UploadOptions::default())
            .await
            .unwrap();
    }
    let metrics = account.metrics().clone();
    metrics.reset();
    let first = container
        .list("a/")
        .with_page_size(2)
        .unwrap()
        .page()
        .await
        .unwrap();
    let rest: Vec<_> = container
        .list("a/")
        .with_page_size(2)
        .unwrap()
        .resume(first.continuation.clone().expect("more pages"))
        .stream()
        .try_collect()
        .await
        .unwrap();
    let listed: Vec<&str> = first
        .items
        .iter()
        .chain(&rest)
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(listed, names[..5]);
    assert_eq!(
        metrics
            .snapshot()
            .requests_of(tablekit_azure::RequestKind::BlobList),
        3,
        "pages of two: 2 + 2 + 1"
    );
    // Awaiting the listing reads every page.
    assert_eq!(container.list("").await.unwrap().len(), names.len());
    container.delete_container().await.unwrap();
}
