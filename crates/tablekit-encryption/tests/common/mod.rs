//! Helpers shared by the encryption tests: keys, a sample entity, a key that counts its calls
//! (and can stop wrapping after some), and assertions on decryption failures.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, Target};
use tablekit_encryption::{
    AesKeyWrap, BoxFuture, ContentKey, EncryptionPolicy, KeyEncryptionKey, RsaOaepKey, UnwrapError,
    WrappedKey,
};

pub const TABLE: &str = "Employees";

/// Field numbers of version 3 metadata.
pub mod field {
    pub const VERSION: usize = 0;
    pub const KID: usize = 1;
    pub const WRAP_ALG: usize = 2;
    pub const WRAPPED: usize = 3;
    pub const ENTRIES: usize = 4;
    pub const MAC: usize = 5;
    pub const SUITE: usize = 6;
    pub const SALT: usize = 7;
    pub const FLAGS: usize = 8;
    pub const SIGNER: usize = 9;
    pub const SIGNER_ALG: usize = 10;
    pub const SIGNATURE: usize = 11;
}

/// The fields of a stored entity's version 3 metadata
/// (`3;kid;wrap_alg;wrapped;entries;mac;suite;salt;flags;signer;signer_alg;signature`).
pub fn metadata_fields(stored: &Properties) -> Vec<String> {
    stored
        .get_str(tablekit_encryption::METADATA_PROPERTY)
        .unwrap()
        .expect("metadata")
        .split(';')
        .map(str::to_owned)
        .collect()
}

/// An entity written by format version `version` (`1`: the first release's writer; `2`: the
/// second's) with the key `fixture-kek` (AES key wrap, 32 bytes of 7), as the service stores
/// it; its policy; and what it decrypts to. Kept in `tests/fixtures/format-v{version}.json`.
pub fn format_fixture(version: u32) -> (Keys, Properties, EncryptionPolicy, Properties) {
    let path = format!(
        "{}/tests/fixtures/format-v{version}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let json = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let stored = tablekit_core::edm::parse_entity::<Properties>(&json, Some("*")).unwrap();
    let policy = EncryptionPolicy::builder(aes("fixture-kek", 7))
        .properties(["Email", "Notes", "Empty"])
        .build()
        .unwrap();
    let plain = Properties::new()
        .with("Age", 47i64)
        .with("Email", "jun@contoso.example")
        .with("Empty", "")
        .with("FirstName", "Jun")
        .with("Notes", "naïve 東京 «quoted» \"x\"");
    (stored.keys, stored.value, policy, plain)
}

/// The known-answer vectors of format 3, as the service stores them, with the policies that
/// read them (the unit test `format_3_is_produced_byte_for_byte_from_a_fixed_content_key_and_salt`
/// produces the same bytes from a fixed content key and salt): `format-v3.json` (encrypted
/// and sign-only properties) and `format-v3-signed.json` (also bound to the logical table
/// `fixture-table` and signed by the Ed25519 key `fixture-signer`, seed 32 bytes of 8).
pub fn format_v3_fixtures() -> Vec<(&'static str, Keys, Properties, EncryptionPolicy)> {
    let read = |file: &str| {
        let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
        let json = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        tablekit_core::edm::parse_entity::<Properties>(&json, Some("*")).unwrap()
    };
    let builder = || {
        EncryptionPolicy::builder(aes("fixture-kek", 7))
            .properties(["Email", "Notes", "Empty"])
            .sign_only(["Age"])
    };
    let signer = tablekit_encryption::Ed25519SigningKey::from_seed("fixture-signer", &[8; 32]);
    let basic = read("format-v3.json");
    let signed = read("format-v3-signed.json");
    vec![
        (
            "format-v3.json",
            basic.keys,
            basic.value,
            builder().build().unwrap(),
        ),
        (
            "format-v3-signed.json",
            signed.keys,
            signed.value,
            builder()
                .bind_table("fixture-table")
                .signing_key(Arc::new(signer.unwrap()))
                .build()
                .unwrap(),
        ),
    ]
}

/// [`format_fixture`] of version 1.
pub fn format_v1() -> (Keys, Properties, EncryptionPolicy, Properties) {
    format_fixture(1)
}

/// The properties the sample policy encrypts.
pub const SECRET: [&str; 5] = ["Email", "HomeAddress", "Notes", "Empty", "Nickname"];

pub fn keys() -> Keys {
    Keys::new("Sales", "000223").unwrap()
}

pub fn aes(id: &str, byte: u8) -> Arc<AesKeyWrap> {
    Arc::new(AesKeyWrap::new(id, &[byte; 32]).unwrap())
}

pub fn rsa_pem(form: &str) -> String {
    let path = format!(
        "{}/tests/keys/rsa-2048.{form}.pem",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn rsa(id: &str, form: &str) -> Arc<RsaOaepKey> {
    Arc::new(RsaOaepKey::from_pem(id, &rsa_pem(form)).unwrap())
}

pub fn policy(kek: Arc<dyn KeyEncryptionKey>) -> EncryptionPolicy {
    EncryptionPolicy::builder(kek)
        .properties(SECRET)
        .build()
        .unwrap()
}

/// An employee with encrypted strings (ASCII, non-ASCII, empty, long) and plain values of
/// every other type.
pub fn employee() -> Properties {
    Properties::new()
        .with("FirstName", "Jun")
        .with("Email", "jun.cao@contoso.example")
        .with("HomeAddress", "Zoë Ångström, 東京都港区 1-2-3 🏠")
        .with("Notes", "x".repeat(20_000) + "end")
        .with("Empty", "")
        .with("Nickname", "'quoted' \"double\" \\ \u{2028}")
        .with("Age", 38i32)
        .with("Salary", 9_007_199_254_740_993i64)
        .with("Rating", 4.5f64)
        .with("Active", true)
        .with(
            "Hired",
            tablekit_core::edm::parse_datetime("2014-07-31T18:00:00.1234567Z").unwrap(),
        )
        .with("Id", uuid_like())
        .with("Photo", vec![0u8, 1, 2, 254, 255])
}

fn uuid_like() -> EdmValue {
    EdmValue::Guid("6f1a2b3c-4d5e-4f60-8172-839405a6b7c8".parse().unwrap())
}

/// Wraps a key and counts its calls; optionally a key store that becomes unreachable after
/// some wraps.
pub struct Counting {
    pub inner: Arc<dyn KeyEncryptionKey>,
    pub wraps: AtomicUsize,
    pub unwraps: AtomicUsize,
    /// Wraps that succeed; every later one fails with a transport error ("key store").
    pub good_wraps: Option<usize>,
}

impl Counting {
    pub fn new(inner: Arc<dyn KeyEncryptionKey>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            wraps: AtomicUsize::new(0),
            unwraps: AtomicUsize::new(0),
            good_wraps: None,
        })
    }

    /// A key that wraps `good` content keys, then is unavailable.
    pub fn failing_after(inner: Arc<dyn KeyEncryptionKey>, good: usize) -> Arc<Self> {
        Arc::new(Self {
            inner,
            wraps: AtomicUsize::new(0),
            unwraps: AtomicUsize::new(0),
            good_wraps: Some(good),
        })
    }

    pub fn wraps(&self) -> usize {
        self.wraps.load(Ordering::SeqCst)
    }

    pub fn unwraps(&self) -> usize {
        self.unwraps.load(Ordering::SeqCst)
    }
}

impl KeyEncryptionKey for Counting {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn algorithm(&self) -> &str {
        self.inner.algorithm()
    }
    fn wrap<'a>(&'a self, key: &'a ContentKey) -> BoxFuture<'a, tablekit_core::Result<WrappedKey>> {
        let before = self.wraps.fetch_add(1, Ordering::SeqCst);
        if self.good_wraps.is_some_and(|good| before >= good) {
            return Box::pin(async {
                Err(Error::transport(
                    "the key store is unreachable",
                    std::io::Error::other("key store"),
                ))
            });
        }
        self.inner.wrap(key)
    }
    fn unwrap<'a>(
        &'a self,
        wrapped: &'a WrappedKey,
    ) -> BoxFuture<'a, Result<ContentKey, UnwrapError>> {
        self.unwraps.fetch_add(1, Ordering::SeqCst);
        self.inner.unwrap(wrapped)
    }
}

/// Asserts that `error` is a decryption failure of `property` of the entity `keys` in
/// `TABLE`, whose reason contains `cause`.
#[track_caller]
pub fn assert_failure(error: Error, keys: &Keys, property: &str, cause: &str) {
    let entity = Target::entity(TABLE, keys.clone());
    match &error {
        Error::Corrupt { target, reason } => {
            assert_eq!(target, &entity, "{error}");
            assert!(reason.contains("decryption"), "{error}");
            assert!(
                reason.contains(&format!("`{property}`")),
                "{error} should name {property}"
            );
            assert!(reason.contains(cause), "{error} should say {cause:?}");
        }
        other => panic!("expected a decryption failure, got {other:?}"),
    }
}
