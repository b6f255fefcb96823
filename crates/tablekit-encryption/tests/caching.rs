//! Key-store calls: one content key reused across a bulk load (`DataKeyReuse`) and a cache
//! of unwrapped content keys for reads (`KeyCache`), each within its bounds, counted on a key
//! that counts its calls.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{Counting, TABLE, aes, assert_failure, field, keys, metadata_fields};
use tablekit_azure::BulkOptions;
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, Keys};
use tablekit_encryption::{
    DataKeyReuse, EncryptionPolicy, KeyCache, KeyEncryptionKey, MAX_DATA_KEY_USES,
    METADATA_PROPERTY,
};
use tablekit_testkit::fixtures;

const HOUR: Duration = Duration::from_secs(3600);

fn employee(i: usize) -> Properties {
    Properties::new()
        .with("Email", format!("e{i}@contoso.example"))
        .with("Age", 30 + i as i32 % 40)
}

fn builder(kek: Arc<dyn KeyEncryptionKey>) -> tablekit_encryption::EncryptionPolicyBuilder {
    EncryptionPolicy::builder(kek).properties(["Email"])
}

#[tokio::test]
async fn a_key_cache_unwraps_a_wrapped_key_once_per_max_uses_reads() {
    let kek = Counting::new(aes("hr-2026", 1));
    let stored = builder(kek.clone())
        .build()
        .unwrap()
        .encrypt(&keys(), employee(1))
        .await
        .unwrap();
    let uncached = builder(kek.clone()).build().unwrap();
    for _ in 0..10 {
        uncached
            .decrypt(TABLE, &keys(), stored.clone())
            .await
            .unwrap();
    }
    assert_eq!(kek.unwraps(), 10, "one unwrap per read without a cache");

    let cache = KeyCache::new(HOUR, 3);
    let cached = builder(kek.clone())
        .cache_content_keys(cache.clone())
        .build()
        .unwrap();
    for _ in 0..10 {
        assert_eq!(
            cached
                .decrypt(TABLE, &keys(), stored.clone())
                .await
                .unwrap(),
            employee(1)
        );
    }
    assert_eq!(kek.unwraps() - 10, 4, "10 reads, 3 per unwrap");
    assert_eq!(cache.len(), 1);
}

#[tokio::test]
async fn a_cached_key_expires_after_max_age_and_a_bad_wrapped_key_is_not_cached() {
    let kek = Counting::new(aes("hr-2026", 1));
    let stored = builder(kek.clone())
        .build()
        .unwrap()
        .encrypt(&keys(), employee(1))
        .await
        .unwrap();
    let cache = KeyCache::new(Duration::from_millis(200), 1_000);
    let policy = builder(kek.clone())
        .cache_content_keys(cache.clone())
        .build()
        .unwrap();
    policy
        .decrypt(TABLE, &keys(), stored.clone())
        .await
        .unwrap();
    policy
        .decrypt(TABLE, &keys(), stored.clone())
        .await
        .unwrap();
    assert_eq!(kek.unwraps(), 1);
    tokio::time::sleep(Duration::from_millis(250)).await;
    policy
        .decrypt(TABLE, &keys(), stored.clone())
        .await
        .unwrap();
    assert_eq!(kek.unwraps(), 2, "expired after max_age");

    // An altered wrapped key fails each time and takes no room.
    let mut altered = stored.clone();
    let mut fields = metadata_fields(&stored);
    let mut wrapped = BASE64.decode(&fields[field::WRAPPED]).unwrap();
    wrapped[5] ^= 1;
    fields[field::WRAPPED] = BASE64.encode(wrapped);
    altered.insert(METADATA_PROPERTY, fields.join(";"));
    for _ in 0..2 {
        let error = policy
            .decrypt(TABLE, &keys(), altered.clone())
            .await
            .unwrap_err();
        assert_failure(error, &keys(), METADATA_PROPERTY, "does not unwrap");
    }
    assert_eq!(kek.unwraps(), 4);
    assert_eq!(cache.len(), 1, "only the good key is cached");
}

#[tokio::test]
async fn a_reused_data_key_serves_max_uses_entities_each_with_keys_of_its_own() {
    let kek = Counting::new(aes("hr-2026", 1));
    let writer = builder(kek.clone())
        .reuse_data_keys(DataKeyReuse::new(HOUR, 400))
        .build()
        .unwrap();
    // Written concurrently: writers wait for one wrap rather than make their own.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1_000 {
        let writer = writer.clone();
        tasks.spawn(async move {
            let keys = Keys::new("Sales", format!("{i:04}")).unwrap();
            (
                keys.clone(),
                writer.encrypt(&keys, employee(i)).await.unwrap(),
            )
        });
    }
    let written: Vec<(Keys, Properties)> = tasks.join_all().await;
    assert_eq!(kek.wraps(), 3, "1,000 entities, 400 per content key");

    let fields: Vec<Vec<String>> = written.iter().map(|(_, s)| metadata_fields(s)).collect();
    let wrapped: BTreeSet<&str> = fields.iter().map(|f| f[field::WRAPPED].as_str()).collect();
    let salts: BTreeSet<&str> = fields.iter().map(|f| f[field::SALT].as_str()).collect();
    assert_eq!(wrapped.len(), 3);
    assert_eq!(salts.len(), 1_000, "every entity derives keys of its own");

    // A reader with a cache unwraps each shared key once; every entity decrypts.
    let reader_kek = Counting::new(aes("hr-2026", 1));
    let reader = builder(reader_kek.clone())
        .cache_content_keys(KeyCache::new(HOUR, 1_000))
        .build()
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (keys, stored)) in written.into_iter().enumerate() {
        let reader = reader.clone();
        tasks.spawn(async move {
            let read = reader.decrypt(TABLE, &keys, stored).await.unwrap();
            assert_eq!(read, employee(i));
        });
    }
    tasks.join_all().await;
    assert_eq!(reader_kek.unwraps(), 3);
}

#[tokio::test]
async fn a_reused_data_key_is_replaced_after_max_age_and_the_bounds_are_checked() {
    let kek = Counting::new(aes("hr-2026", 1));
    let writer = builder(kek.clone())
        .reuse_data_keys(DataKeyReuse::new(Duration::from_millis(200), 1_000))
        .build()
        .unwrap();
    writer.encrypt(&keys(), employee(1)).await.unwrap();
    writer.encrypt(&keys(), employee(2)).await.unwrap();
    assert_eq!(kek.wraps(), 1);
    tokio::time::sleep(Duration::from_millis(250)).await;
    writer.encrypt(&keys(), employee(3)).await.unwrap();
    assert_eq!(kek.wraps(), 2, "replaced after max_age");

    for bad in [
        builder(aes("k", 1)).reuse_data_keys(DataKeyReuse::new(HOUR, 0)),
        builder(aes("k", 1)).reuse_data_keys(DataKeyReuse::new(HOUR, MAX_DATA_KEY_USES + 1)),
        builder(aes("k", 1)).reuse_data_keys(DataKeyReuse::new(Duration::ZERO, 10)),
        builder(aes("k", 1)).cache_content_keys(KeyCache::new(HOUR, 0)),
        builder(aes("k", 1)).cache_content_keys(KeyCache::new(HOUR, 5).with_capacity(0)),
    ] {
        let error = bad.build().unwrap_err();
        assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
    }
}

/// Writes 1,000 entities with a bulk write and reads them back with a query, through
/// encrypting tables on Azurite; returns the (wraps, unwraps) of the writer's and the
/// reader's keys.
async fn load_and_read(table_prefix: &str, reuse: bool, cache: bool) -> (usize, usize) {
    let raw = fixtures::table_on(&fixtures::account(), table_prefix).await;
    let writer_kek = Counting::new(aes("load-2026", 4));
    let mut writer = builder(writer_kek.clone());
    if reuse {
        writer = writer.reuse_data_keys(DataKeyReuse::new(HOUR, 1_000));
    }
    let operations: Vec<Operation> = (0..1_000)
        .map(|i| {
            let keys = Keys::new("Load", format!("{i:04}")).unwrap();
            Operation::insert(&Entity::new(keys, employee(i))).unwrap()
        })
        .collect();
    let report = writer
        .build()
        .unwrap()
        .table(&raw)
        .bulk_write(operations, BulkOptions::default())
        .await
        .unwrap();
    assert!(report.is_complete(), "{report:?}");

    let reader_kek = Counting::new(aes("load-2026", 4));
    let mut reader = builder(reader_kek.clone());
    if cache {
        reader = reader.cache_content_keys(KeyCache::new(HOUR, 10_000));
    }
    let read = reader
        .build()
        .unwrap()
        .table(&raw)
        .query::<Properties>()
        .filter(Filter::partition("Load"))
        .collect()
        .await
        .unwrap();
    assert_eq!(read.len(), 1_000);
    for (i, stored) in read.iter().enumerate() {
        assert_eq!(stored.value, employee(i));
    }
    (writer_kek.wraps(), reader_kek.unwraps())
}

#[tokio::test]
async fn key_store_calls_per_1000_entities_through_azurite() {
    assert_eq!(
        load_and_read("enckeysplain", false, false).await,
        (1_000, 1_000)
    );
    assert_eq!(
        load_and_read("enckeyscache", false, true).await,
        (1_000, 1_000)
    );
    assert_eq!(load_and_read("enckeysreuse", true, true).await, (1, 1));
}
