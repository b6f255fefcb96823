//! tablekit's own format, without a service: round trips of every kind of value, the stored
//! form, the service limits after encryption, selection, key rotation and the local keys.

mod common;

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{
    Counting, SECRET, TABLE, aes, assert_failure, employee, field, format_v1, keys,
    metadata_fields, policy, rsa, rsa_pem,
};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, ErrorKind, Keys, Limit};
use tablekit_encryption::{
    AesKeyWrap, ContentKey, EncryptionPolicy, KeyEncryptionKey, KeyRing, METADATA_PROPERTY,
    OVERHEAD, RsaOaepKey,
};

#[tokio::test]
async fn many_properties_round_trip_and_only_the_selected_strings_are_encrypted() {
    let policy = policy(aes("k1", 1));
    let plain = employee();
    let stored = policy.encrypt(&keys(), plain.clone()).await.unwrap();

    assert_eq!(stored.len(), plain.len() + 1, "one metadata property");
    for (name, value) in plain.iter() {
        let kept = stored.get(name).unwrap();
        if SECRET.contains(&name) {
            let text = value.as_str().unwrap();
            let bytes = kept
                .as_bytes()
                .unwrap_or_else(|| panic!("{name} not Binary"));
            assert_eq!(bytes.len(), text.len() + OVERHEAD, "{name}");
            if text.len() >= 8 {
                assert!(
                    !bytes.windows(8).any(|w| text.as_bytes().starts_with(w)),
                    "{name}: plaintext visible"
                );
            }
        } else {
            assert_eq!(kept, value, "{name} must stay plain");
        }
    }
    let fields = metadata_fields(&stored);
    assert_eq!(fields.len(), 12, "{fields:?}");
    assert_eq!(fields[..3], ["3", "k1", "A256KW"]);
    assert_eq!(fields[field::SUITE], "A256GCM-HS256");
    let wrapped = BASE64.decode(&fields[field::WRAPPED]).unwrap();
    assert_eq!(wrapped.len(), 40, "an AES-wrapped 256-bit key");
    assert_eq!(BASE64.decode(&fields[field::SALT]).unwrap().len(), 16);
    assert_eq!(
        BASE64.decode(&fields[field::MAC]).unwrap().len(),
        32,
        "the item MAC"
    );
    assert_eq!(fields[field::SIGNER..=field::SIGNER_ALG], ["", ""]);
    assert_eq!(fields[field::SIGNATURE], "");
    let mut listed: Vec<&str> = fields[field::ENTRIES]
        .split(',')
        .map(|e| e.strip_prefix("e:").expect("encrypted"))
        .collect();
    listed.sort_unstable();
    let mut expected = SECRET.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected);

    let read = policy.decrypt(TABLE, &keys(), stored).await.unwrap();
    assert_eq!(read, plain);
}

#[tokio::test]
async fn entities_written_in_format_version_1_stay_readable() {
    let (keys, stored, policy, plain) = format_v1();
    assert!(
        stored
            .get_str(METADATA_PROPERTY)
            .unwrap()
            .unwrap()
            .starts_with(r#"{"v":1,"#)
    );
    assert_eq!(
        policy.decrypt(TABLE, &keys, stored.clone()).await.unwrap(),
        plain
    );
    // Rewritten, it is stored in the current format and reads back the same.
    let rewritten = policy.encrypt(&keys, plain.clone()).await.unwrap();
    assert_eq!(metadata_fields(&rewritten)[field::VERSION], "3");
    assert_eq!(
        policy.decrypt(TABLE, &keys, rewritten).await.unwrap(),
        plain
    );
}

#[tokio::test]
async fn entities_written_in_format_version_2_stay_readable() {
    let (keys, stored, policy, plain) = common::format_fixture(2);
    assert!(
        stored
            .get_str(METADATA_PROPERTY)
            .unwrap()
            .unwrap()
            .starts_with("2;fixture-kek;A256KW;")
    );
    assert_eq!(policy.decrypt(TABLE, &keys, stored).await.unwrap(), plain);
}

#[tokio::test]
async fn the_known_answer_vectors_of_format_3_read_back() {
    let (_, _, _, plain) = format_v1();
    for (file, keys, stored, policy) in common::format_v3_fixtures() {
        assert!(
            stored
                .get_str(METADATA_PROPERTY)
                .unwrap()
                .unwrap()
                .starts_with("3;fixture-kek;A256KW;"),
            "{file}"
        );
        assert_eq!(
            policy.decrypt(TABLE, &keys, stored).await.unwrap(),
            plain,
            "{file}"
        );
    }
}

#[tokio::test]
async fn two_writes_of_one_entity_never_store_the_same_bytes() {
    let policy = policy(aes("k1", 1));
    let a = policy.encrypt(&keys(), employee()).await.unwrap();
    let b = policy.encrypt(&keys(), employee()).await.unwrap();
    assert_ne!(
        a.get("Email"),
        b.get("Email"),
        "a fresh content key each write"
    );
    assert_ne!(a.get(METADATA_PROPERTY), b.get(METADATA_PROPERTY));
}

#[tokio::test]
async fn empty_strings_round_trip() {
    let policy = policy(aes("k1", 1));
    let plain = Properties::new().with("Empty", "").with("Email", "");
    let stored = policy.encrypt(&keys(), plain.clone()).await.unwrap();
    assert_eq!(
        stored.get("Empty").unwrap().as_bytes().unwrap().len(),
        OVERHEAD
    );
    assert_eq!(policy.decrypt(TABLE, &keys(), stored).await.unwrap(), plain);
}

#[tokio::test]
async fn an_entity_without_selected_properties_is_written_and_read_unchanged() {
    let kek = Counting::new(aes("k1", 1));
    let policy = policy(kek.clone());
    let plain = Properties::new().with("FirstName", "Jun").with("Age", 38);
    let stored = policy.encrypt(&keys(), plain.clone()).await.unwrap();
    assert_eq!(stored, plain, "no metadata when nothing is encrypted");
    assert_eq!(policy.decrypt(TABLE, &keys(), stored).await.unwrap(), plain);
    assert_eq!((kek.wraps(), kek.unwraps()), (0, 0));
}

#[tokio::test]
async fn values_up_to_64_kib_after_encryption_fit_and_one_byte_more_is_refused() {
    let kek = Counting::new(aes("k1", 1));
    let policy = policy(kek.clone());
    let max = 64 * 1024 - OVERHEAD;
    // ASCII: one UTF-8 byte per character.
    let fits = Properties::new().with("Notes", "a".repeat(max));
    let stored = policy.encrypt(&keys(), fits.clone()).await.unwrap();
    assert_eq!(
        stored.get("Notes").unwrap().as_bytes().unwrap().len(),
        64 * 1024
    );
    assert_eq!(policy.decrypt(TABLE, &keys(), stored).await.unwrap(), fits);

    // Three UTF-8 bytes per character: the limit applies to the encrypted bytes.
    let cjk = Properties::new().with("Notes", "東".repeat(max / 3));
    assert!(policy.encrypt(&keys(), cjk).await.is_ok());

    for over in [
        "a".repeat(max + 1),
        "東".repeat(max / 3) + "a",
        "東".repeat(max / 3 + 1),
    ] {
        let len = over.len();
        let error = policy
            .encrypt(&keys(), Properties::new().with("Notes", over))
            .await
            .unwrap_err();
        match error {
            Error::LimitExceeded {
                limit: Limit::PropertyBytes { property },
                actual,
            } => {
                assert_eq!(property, "Notes");
                assert_eq!(actual, len + OVERHEAD);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(kek.wraps(), 2, "the refusals come before the key is used");
}

fn big_entity(properties: usize) -> Properties {
    (0..properties)
        .map(|i| {
            (
                format!("Secret{i:02}"),
                EdmValue::from("s".repeat(64 * 1024 - OVERHEAD)),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_encrypted_entity_must_fit_1_mib() {
    let kek = Counting::new(aes("k1", 1));
    let policy = EncryptionPolicy::builder(kek.clone())
        .select_with(|_, _, name| name.starts_with("Secret"))
        .build()
        .unwrap();
    // 15 values of 64 KiB fit; 16 exceed 1 MiB with their names and the metadata.
    let stored = policy.encrypt(&keys(), big_entity(15)).await.unwrap();
    assert_eq!(stored.len(), 16);
    let error = policy.encrypt(&keys(), big_entity(16)).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::LimitExceeded {
                limit: Limit::EntityBytes,
                actual
            } if actual > 1 << 20
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_metadata_counts_towards_the_252_properties() {
    let kek = Counting::new(aes("k1", 1));
    let policy = policy(kek.clone());
    let with = |n: usize| -> Properties {
        (0..n - 1)
            .map(|i| (format!("P{i:03}"), EdmValue::Int32(1)))
            .chain([("Email".to_owned(), EdmValue::from("a@b.example"))])
            .collect()
    };
    let stored = policy.encrypt(&keys(), with(251)).await.unwrap();
    assert_eq!(stored.len(), 252);
    let error = policy.encrypt(&keys(), with(252)).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::LimitExceeded {
                limit: Limit::UserProperties,
                actual: 253
            }
        ),
        "{error:?}"
    );
    assert_eq!(kek.wraps(), 1, "refused before the key is used");
}

#[tokio::test]
async fn a_selected_property_that_is_not_a_string_is_refused_before_the_key_is_used() {
    let kek = Counting::new(aes("k1", 1));
    let policy = EncryptionPolicy::builder(kek.clone())
        .properties(["Email", "Salary"])
        .build()
        .unwrap();
    let entity = Properties::new()
        .with("Email", "jun@contoso.example")
        .with("Salary", 123_456_789i64);
    let error = policy.encrypt(&keys(), entity).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Encode);
    match &error {
        Error::Encode { property, reason } => {
            assert_eq!(property, "Salary");
            assert!(
                reason.contains("Edm.Int64") && reason.contains("Edm.String"),
                "{reason}"
            );
            assert!(!reason.contains("123456789"), "the value must not be shown");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(kek.wraps(), 0);
}

#[tokio::test]
async fn metadata_names_are_reserved() {
    let policy = policy(aes("k1", 1));
    for name in tablekit_encryption::RESERVED_PROPERTIES {
        let entity = Properties::new().with("Email", "a").with(name, "x");
        let error = policy.encrypt(&keys(), entity).await.unwrap_err();
        assert!(
            matches!(error, Error::InvalidName { .. }),
            "{name}: {error:?}"
        );
        let error = EncryptionPolicy::builder(aes("k1", 1))
            .properties([name])
            .build()
            .unwrap_err();
        assert!(
            matches!(error, Error::InvalidName { .. }),
            "{name}: {error:?}"
        );
    }
    let error = EncryptionPolicy::builder(aes("k1", 1)).build().unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
}

#[tokio::test]
async fn a_selection_function_chooses_per_entity() {
    let policy = EncryptionPolicy::builder(aes("k1", 1))
        .properties(["Email"])
        .select_with(|pk, _rk, name| pk == "Sales" && name == "Notes")
        .build()
        .unwrap();
    let entity = Properties::new().with("Email", "e").with("Notes", "n");
    let sales = keys();
    let hr = Keys::new("HR", "000001").unwrap();

    let stored = policy.encrypt(&sales, entity.clone()).await.unwrap();
    assert!(stored.get("Notes").unwrap().as_bytes().is_some());
    assert_eq!(policy.decrypt(TABLE, &sales, stored).await.unwrap(), entity);

    let stored = policy.encrypt(&hr, entity.clone()).await.unwrap();
    assert_eq!(
        stored.get_str("Notes").unwrap(),
        Some("n"),
        "not selected in HR"
    );
    assert!(stored.get("Email").unwrap().as_bytes().is_some());
    assert_eq!(policy.decrypt(TABLE, &hr, stored).await.unwrap(), entity);
}

#[tokio::test]
async fn entities_written_under_a_rotated_out_key_stay_readable_through_the_resolver() {
    let (k1, k2) = (aes("key-2025", 1), aes("key-2026", 2));
    let old = policy(k1.clone())
        .encrypt(&keys(), employee())
        .await
        .unwrap();

    let rotated = EncryptionPolicy::builder(k2.clone())
        .properties(SECRET)
        .resolver(Arc::new(KeyRing::new().with(k1)))
        .build()
        .unwrap();
    let new = rotated.encrypt(&keys(), employee()).await.unwrap();
    assert_eq!(metadata_fields(&new)[field::KID], "key-2026");
    assert_eq!(
        rotated.decrypt(TABLE, &keys(), old.clone()).await.unwrap(),
        employee()
    );
    assert_eq!(
        rotated.decrypt(TABLE, &keys(), new).await.unwrap(),
        employee()
    );

    // Without the old key, the old entity names a key nobody knows.
    let forgotten = policy(k2);
    let error = forgotten.decrypt(TABLE, &keys(), old).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "\"key-2025\"");
}

#[tokio::test]
async fn rsa_oaep_keys_from_pkcs8_and_pkcs1_pem_unwrap_each_others_keys() {
    let writer = policy(rsa("rsa-1", "pkcs8"));
    let stored = writer.encrypt(&keys(), employee()).await.unwrap();
    assert_eq!(metadata_fields(&stored)[field::WRAP_ALG], "RSA-OAEP");
    let reader = policy(rsa("rsa-1", "pkcs1"));
    assert_eq!(
        reader.decrypt(TABLE, &keys(), stored).await.unwrap(),
        employee()
    );

    let key = RsaOaepKey::from_pem("rsa-1", &rsa_pem("pkcs1")).unwrap();
    assert_eq!(key.bits(), 2048);
    let wrapped = key
        .wrap(&ContentKey::from_bytes(&[3; 32]).unwrap())
        .await
        .unwrap();
    assert_eq!(wrapped.bytes().len(), 256);
    assert_eq!(key.unwrap(&wrapped).await.unwrap().expose(), &[3; 32]);
}

#[test]
fn unusable_keys_are_refused_without_showing_key_material() {
    let short = std::fs::read_to_string(format!(
        "{}/tests/keys/rsa-1024.pkcs8.pem",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let error = RsaOaepKey::from_pem("k", &short).unwrap_err();
    assert!(error.to_string().contains("1024-bit"), "{error}");
    let pem = rsa_pem("pkcs8");
    let garbled = pem.replacen("MII", "MIX", 1);
    for bad in [garbled.as_str(), "not a key", &pem[..200]] {
        let error = RsaOaepKey::from_pem("k", bad).unwrap_err();
        assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
        let body: String = pem.lines().nth(3).unwrap().chars().take(24).collect();
        assert!(!error.to_string().contains(&body), "{error}");
    }
    assert!(RsaOaepKey::from_pem("", &pem).is_err(), "empty id");
    assert!(AesKeyWrap::new("k", &[0; 31]).is_err());
    assert!(AesKeyWrap::new("k\n", &[0; 32]).is_err());
}

#[tokio::test]
async fn aes_key_wrap_matches_the_rfc_3394_test_vector() {
    // RFC 3394 §4.6: 256 bits of key data with a 256-bit KEK.
    let kek: Vec<u8> = (0u8..32).collect();
    let data = hex("00112233445566778899AABBCCDDEEFF000102030405060708090A0B0C0D0E0F");
    let expected =
        hex("28C9F404C4B810F4CBCCB35CFB87F8263F5786E2D80ED326CBC7F0E71A99F43BFB988B9B7A02DD21");
    let key = AesKeyWrap::new("rfc", &kek).unwrap();
    let wrapped = key
        .wrap(&ContentKey::from_bytes(&data).unwrap())
        .await
        .unwrap();
    assert_eq!(wrapped.algorithm(), "A256KW");
    assert_eq!(wrapped.bytes(), expected.as_slice());
    assert_eq!(
        key.unwrap(&wrapped).await.unwrap().expose().as_slice(),
        data
    );
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn policies_and_their_futures_can_move_between_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let policy = policy(aes("k1", 1));
    send_sync(&policy);
    let keys = keys();
    send(&policy.encrypt(&keys, employee()));
    send(&policy.decrypt(TABLE, &keys, employee()));
}
