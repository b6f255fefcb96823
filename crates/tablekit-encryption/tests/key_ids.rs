//! What reaches the resolver and the key-encryption key from a stored entity: only key ids
//! the policy allows, and only wrapped keys of the algorithm the key itself uses.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{Counting, TABLE, aes, assert_failure, employee, field, keys, metadata_fields};
use tablekit_core::Error;
use tablekit_encryption::{
    BoxFuture, EncryptionPolicy, KeyEncryptionKey, KeyResolver, KeyRing, METADATA_PROPERTY,
};

/// A resolver over a ring that counts the lookups it is asked for.
struct CountingResolver {
    ring: KeyRing,
    lookups: AtomicUsize,
}

impl KeyResolver for CountingResolver {
    fn resolve<'a>(
        &'a self,
        key_id: &'a str,
    ) -> BoxFuture<'a, tablekit_core::Result<Option<Arc<dyn KeyEncryptionKey>>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.ring.resolve(key_id)
    }
}

#[tokio::test]
async fn a_key_id_the_policy_does_not_allow_never_reaches_the_resolver() {
    let old = Counting::new(aes("orders-2025", 1));
    let resolver = Arc::new(CountingResolver {
        ring: KeyRing::new().with(old.clone()),
        lookups: AtomicUsize::new(0),
    });
    // A resolver over a key store cannot list its keys: the policy names those it may ask for.
    let policy = EncryptionPolicy::builder(aes("orders-2026", 2))
        .properties(common::SECRET)
        .resolver(resolver.clone())
        .allow_key_ids(["orders-2025"])
        .build()
        .unwrap();
    // An allowed id is looked up.
    let before = common::policy(old.clone())
        .encrypt(&keys(), employee())
        .await
        .unwrap();
    assert_eq!(
        policy.decrypt(TABLE, &keys(), before).await.unwrap(),
        employee()
    );
    assert_eq!(resolver.lookups.swap(0, Ordering::SeqCst), 1);
    let mut stored = policy.encrypt(&keys(), employee()).await.unwrap();
    let mut fields = metadata_fields(&stored);
    fields[field::KID] = "https://attacker.example/keys/probe".into();
    stored.insert(METADATA_PROPERTY, fields.join(";"));
    let error = policy.decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "does not allow key id");
    assert_eq!(
        resolver.lookups.load(Ordering::SeqCst),
        0,
        "the resolver was asked"
    );

    // Nor does a key id that is not text.
    let mut stored = policy.encrypt(&keys(), employee()).await.unwrap();
    let mut fields = metadata_fields(&stored);
    fields[field::KID] = "orders%0A2025".into();
    stored.insert(METADATA_PROPERTY, fields.join(";"));
    let error = policy.decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "malformed");
    assert_eq!(resolver.lookups.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn which_key_ids_a_policy_allows() {
    let resolver = || {
        Arc::new(CountingResolver {
            ring: KeyRing::new().with(aes("https://vault.example/keys/orders/v1", 1)),
            lookups: AtomicUsize::new(0),
        })
    };
    // A resolver that cannot list its keys, and no id allowed: refused when built.
    let error = EncryptionPolicy::builder(aes("orders-2026", 2))
        .properties(["Email"])
        .resolver(resolver())
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
    let error = EncryptionPolicy::builder(aes("orders-2026", 2))
        .properties(["Email"])
        .allow_key_id_prefix("")
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");

    // A prefix allows each version of a key.
    let versioned = common::policy(aes("https://vault.example/keys/orders/v1", 1))
        .encrypt(&keys(), employee())
        .await
        .unwrap();
    let by_prefix = EncryptionPolicy::builder(aes("orders-2026", 2))
        .properties(common::SECRET)
        .resolver(resolver())
        .allow_key_id_prefix("https://vault.example/keys/orders/")
        .build()
        .unwrap();
    assert_eq!(
        by_prefix
            .decrypt(TABLE, &keys(), versioned.clone())
            .await
            .unwrap(),
        employee()
    );
    // A key ring lists its ids: they are allowed without being named.
    let ring = EncryptionPolicy::builder(aes("orders-2026", 2))
        .properties(common::SECRET)
        .resolver(Arc::new(
            KeyRing::new().with(aes("https://vault.example/keys/orders/v1", 1)),
        ))
        .build()
        .unwrap();
    assert_eq!(
        ring.decrypt(TABLE, &keys(), versioned).await.unwrap(),
        employee()
    );
}

#[tokio::test]
async fn a_wrapped_key_of_another_algorithm_never_reaches_the_key() {
    let kek = Counting::new(aes("orders-2026", 2));
    let policy = common::policy(kek.clone());
    let mut stored = policy.encrypt(&keys(), employee()).await.unwrap();
    let mut fields = metadata_fields(&stored);
    fields[field::WRAP_ALG] = "RSA1_5".into();
    stored.insert(METADATA_PROPERTY, fields.join(";"));
    let error = policy.decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "wrapped with \"RSA1_5\"");
    assert_eq!(kek.unwraps(), 0, "the key was called");

    // Nor does a wrapped key longer than any key wraps to.
    let mut stored = policy.encrypt(&keys(), employee()).await.unwrap();
    let mut fields = metadata_fields(&stored);
    fields[field::WRAPPED] = BASE64.encode(vec![7u8; 5000]);
    stored.insert(METADATA_PROPERTY, fields.join(";"));
    let error = policy.decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "malformed");
    assert_eq!(kek.unwraps(), 0, "the key was called");
}
