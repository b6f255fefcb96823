//! The legacy format (AES-256-CBC of the former .NET, Java and Python clients) without Python:
//! entities the legacy Python client wrote, kept in `tests/fixtures/legacy-*.json`, and
//! entities made here the way an attacker with write access to the table would make them.
//!
//! Reading the legacy format is off unless a policy asks for it; when it is on, every failure
//! reads as one error (no padding oracle); and a content key wrapped for tablekit's own format
//! opens nothing in the legacy mode.

mod common;

use std::sync::Arc;

use aes::Aes256;
use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockDecrypt, BlockEncryptMut, KeyInit, KeyIvInit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{TABLE, aes as aes_kek};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys};
use tablekit_encryption::{
    AesKeyWrap, EncryptionPolicy, KeyEncryptionKey, KeyRing, LEGACY_METADATA_1, LEGACY_METADATA_2,
    METADATA_PROPERTY, WrappedKey,
};

/// The key the legacy client wrapped the fixtures' content keys with.
const LEGACY_KID: &str = "legacy-aes";
const LEGACY_KEY: [u8; 32] = [0x5c; 32];

/// A legacy fixture (`legacy-aes` or `legacy-java`): its keys, the stored properties, and what
/// they decrypt to.
fn legacy_fixture(name: &str) -> (Keys, Properties, Properties) {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let json = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let stored = tablekit_core::edm::parse_entity::<Properties>(&json, Some("*")).unwrap();
    let email = if name == "legacy-java" {
        "java@contoso.example"
    } else {
        "jun@contoso.example"
    };
    let plain = Properties::new()
        .with("Age", 38i64)
        .with("Email", email)
        .with("FirstName", "Jun")
        .with("Notes", "naïve 東京 «quoted»");
    (stored.keys, stored.value, plain)
}

fn legacy_kek() -> Arc<AesKeyWrap> {
    Arc::new(AesKeyWrap::new(LEGACY_KID, &LEGACY_KEY).unwrap())
}

/// A policy that does not read the legacy format.
fn without_legacy() -> EncryptionPolicy {
    EncryptionPolicy::builder(legacy_kek())
        .properties(["Email", "Notes"])
        .build()
        .unwrap()
}

/// A policy that reads the legacy format under the fixtures' key.
fn with_legacy() -> EncryptionPolicy {
    EncryptionPolicy::builder(aes_kek("tablekit-2026", 9))
        .properties(["Email", "Notes"])
        .resolver(Arc::new(KeyRing::new().with(legacy_kek())))
        .read_legacy_format([LEGACY_KID])
        .build()
        .unwrap()
}

#[tokio::test]
async fn legacy_entities_are_refused_unless_the_policy_opts_in() {
    for name in ["legacy-aes", "legacy-java"] {
        let (keys, stored, plain) = legacy_fixture(name);
        let error = without_legacy()
            .decrypt(TABLE, &keys, stored.clone())
            .await
            .expect_err("the legacy format is off by default");
        common::assert_failure(error, &keys, LEGACY_METADATA_1, "legacy AES-CBC format");
        assert_eq!(
            with_legacy()
                .decrypt(TABLE, &keys, stored.clone())
                .await
                .unwrap(),
            plain,
            "{name}"
        );
        // Only under the key ids the policy names.
        let other_ids = EncryptionPolicy::builder(legacy_kek())
            .properties(["Email", "Notes"])
            .read_legacy_format(["some-other-key"])
            .build()
            .unwrap();
        let error = other_ids.decrypt(TABLE, &keys, stored).await.unwrap_err();
        common::assert_failure(error, &keys, LEGACY_METADATA_1, "does not decrypt");
    }
    let error = EncryptionPolicy::builder(legacy_kek())
        .properties(["Email"])
        .read_legacy_format(Vec::<String>::new())
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
}

/// The JSON of a legacy entity's first metadata property.
fn legacy_json(stored: &Properties) -> Value {
    serde_json::from_str(stored.get_str(LEGACY_METADATA_1).unwrap().unwrap()).unwrap()
}

/// The content key of a legacy entity, unwrapped with the test's copy of its key.
async fn legacy_content_key(stored: &Properties) -> [u8; 32] {
    let json = legacy_json(stored);
    let wrapped = BASE64
        .decode(json["WrappedContentKey"]["EncryptedKey"].as_str().unwrap())
        .unwrap();
    let key = legacy_kek()
        .unwrap(&WrappedKey::new("A256KW", wrapped))
        .await
        .unwrap();
    *key.expose()
}

/// The IV of property `name`: SHA-256(entity IV ‖ RowKey ‖ PartitionKey ‖ name), or
/// PartitionKey before RowKey in Java's first release.
fn property_iv(entity_iv: &[u8], keys: &Keys, name: &str, java: bool) -> [u8; 16] {
    let (first, second) = if java {
        (keys.pk(), keys.rk())
    } else {
        (keys.rk(), keys.pk())
    };
    let digest = Sha256::new()
        .chain_update(entity_iv)
        .chain_update(first)
        .chain_update(second)
        .chain_update(name)
        .finalize();
    digest[..16].try_into().unwrap()
}

/// AES-256-CBC with PKCS#7 padding, as the legacy clients encrypt.
fn cbc_encrypt(key: &[u8; 32], iv: &[u8; 16], plaintext: &[u8]) -> Vec<u8> {
    let mut buffer = plaintext.to_vec();
    buffer.resize(plaintext.len() + 16, 0);
    let len = cbc::Encryptor::<Aes256>::new(key.into(), iv.into())
        .encrypt_padded_mut::<aes::cipher::block_padding::Pkcs7>(&mut buffer, plaintext.len())
        .unwrap()
        .len();
    buffer.truncate(len);
    buffer
}

#[tokio::test]
async fn every_legacy_failure_reads_as_one_error() {
    let (keys, original, _) = legacy_fixture("legacy-aes");
    let content_key = legacy_content_key(&original).await;
    let entity_iv = BASE64
        .decode(
            legacy_json(&original)["ContentEncryptionIV"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    let reencrypted = |name: &str, plaintext: &[u8]| {
        let mut stored = original.clone();
        let iv = property_iv(&entity_iv, &keys, name, false);
        stored.insert(name, cbc_encrypt(&content_key, &iv, plaintext));
        stored
    };
    let edit_json = |edit: &dyn Fn(&mut Value)| {
        let mut stored = original.clone();
        let mut json = legacy_json(&stored);
        edit(&mut json);
        stored.insert(LEGACY_METADATA_1, json.to_string());
        stored
    };
    let mut bad_padding = original.clone();
    let mut email = bad_padding
        .get("Email")
        .unwrap()
        .as_bytes()
        .unwrap()
        .to_vec();
    email[15] ^= 1;
    bad_padding.insert("Email", email.clone());
    let mut truncated = original.clone();
    truncated.insert("Email", email[..20].to_vec());

    let cases: Vec<(&str, Properties)> = vec![
        ("bad padding", bad_padding),
        ("not UTF-8", reencrypted("Email", &[0xff, 0xfe, 0x80])),
        (
            "a list that is not JSON",
            reencrypted(LEGACY_METADATA_2, b"[Email"),
        ),
        (
            "a list without a value it holds",
            reencrypted(LEGACY_METADATA_2, br#"["Notes"]"#),
        ),
        ("a ciphertext cut", truncated),
        (
            "another key id",
            edit_json(&|j| j["WrappedContentKey"]["KeyId"] = "other".into()),
        ),
        (
            "another protocol",
            edit_json(&|j| j["EncryptionAgent"]["Protocol"] = "2.0".into()),
        ),
        (
            "a wrapped key altered",
            edit_json(&|j| {
                let key = &mut j["WrappedContentKey"]["EncryptedKey"];
                let mut bytes = BASE64.decode(key.as_str().unwrap()).unwrap();
                bytes[3] ^= 1;
                *key = BASE64.encode(bytes).into();
            }),
        ),
    ];
    let policy = with_legacy();
    let mut texts = Vec::new();
    for (what, stored) in cases {
        let error = policy.decrypt(TABLE, &keys, stored).await.expect_err(what);
        texts.push((what, error.to_string()));
        common::assert_failure(error, &keys, LEGACY_METADATA_1, "does not decrypt");
    }
    for (what, text) in &texts {
        assert_eq!(
            text, &texts[0].1,
            "{what} must read as the same error as {}",
            texts[0].0
        );
    }
}

/// The wrapped key and the listed names of tablekit's own metadata, as an attacker reads them.
fn own_metadata(stored: &Properties) -> (Vec<u8>, Vec<String>) {
    let text = stored.get_str(METADATA_PROPERTY).unwrap().unwrap();
    let fields: Vec<&str> = text.split(';').collect();
    let (wrapped, names) = match fields[0] {
        "2" => (fields[3], fields[4]),
        "3" => (fields[3], fields[4]),
        other => panic!("format {other}"),
    };
    let names = names
        .split(',')
        .map(|n| {
            n.trim_start_matches("e:")
                .trim_start_matches("s:")
                .to_owned()
        })
        .collect();
    (BASE64.decode(wrapped).unwrap(), names)
}

fn xor(a: &[u8], b: &[u8]) -> [u8; 16] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// The legacy-format ciphertext of two blocks that decrypts, under the content key `aes` and
/// the IV `iv`, to 16 bytes the attacker does not choose followed by `target(variant)`, from
/// the known pairs (input, output) of the block cipher under that key: the second block is
/// an output whose input is known, the first that input XOR the target. The first block
/// decrypts to bytes the attacker cannot choose, so variants are tried until they are UTF-8 —
/// the attacker learns the block cipher's inverse through the padding oracle; the test
/// computes it with the key.
fn planted(
    aes: &Aes256,
    pairs: &[([u8; 16], [u8; 16])],
    iv: &[u8; 16],
    target: impl Fn(usize) -> Vec<u8>,
) -> Vec<u8> {
    for variant in 0..1000 {
        let target = target(variant);
        for (input, output) in pairs {
            let first = xor(input, &target);
            let mut block = GenericArray::clone_from_slice(&first);
            aes.decrypt_block(&mut block);
            if std::str::from_utf8(&xor(&block, iv)).is_ok() {
                return [first.as_slice(), output.as_slice()].concat();
            }
        }
    }
    panic!("no variant decrypts to UTF-8");
}

#[tokio::test]
async fn a_content_key_wrapped_for_the_current_format_plants_nothing_through_the_legacy_reader() {
    let kek = aes_kek("k1", 1);
    // The worst case: the policy reads the legacy format under the key it writes with.
    let policy = EncryptionPolicy::builder(kek.clone())
        .properties(["Email", "Notes"])
        .read_legacy_format(["k1"])
        .build()
        .unwrap();
    let keys = Keys::new("Sales", "000223").unwrap();
    // A value the attacker knows, stored encrypted by the current writer.
    let known = "x".repeat(16 * 400);
    let stored = policy
        .encrypt(
            &keys,
            Properties::new()
                .with("FirstName", "Jun")
                .with("Email", "jun@contoso.example")
                .with("Notes", known.as_str()),
        )
        .await
        .unwrap();
    let (wrapped, names) = own_metadata(&stored);
    let index = names.iter().position(|n| n == "Notes").unwrap();
    let ciphertext = stored.get("Notes").unwrap().as_bytes().unwrap();
    // AES-GCM's keystream blocks, had the content key itself encrypted the listed property
    // `index` under the nonce numbered `index + 1` (format 2): pairs of a counter block and
    // its encryption under the content key.
    let pairs: Vec<([u8; 16], [u8; 16])> = (0..known.len() / 16)
        .map(|j| {
            let mut input = [0u8; 16];
            input[4..12].copy_from_slice(&(index as u64 + 1).to_be_bytes());
            input[12..].copy_from_slice(&(j as u32 + 2).to_be_bytes());
            let at = 16 * j;
            (input, xor(&ciphertext[at..], &known.as_bytes()[at..]))
        })
        .collect();
    let content_key = kek
        .unwrap(&WrappedKey::new("A256KW", wrapped.clone()))
        .await
        .unwrap();
    let aes = Aes256::new(content_key.expose().into());

    // Java's first-release variant (no KeyWrappingMetadata): the name list is `[a, b]`, so
    // bytes the attacker does not choose before `, Email, …]` still list `Email`.
    let entity_iv = [0x11u8; 16];
    let list = planted(
        &aes,
        &pairs,
        &property_iv(&entity_iv, &keys, LEGACY_METADATA_2, true),
        |v| [format!(", Email, {v:03}]").as_bytes(), &[3u8; 3]].concat(),
    );
    let email = planted(
        &aes,
        &pairs,
        &property_iv(&entity_iv, &keys, "Email", true),
        |v| [format!("PLANTED:{v:06}").as_bytes(), &[2u8; 2]].concat(),
    );
    let metadata = json!({
        "WrappedContentKey": {"KeyId": "k1", "EncryptedKey": BASE64.encode(&wrapped), "Algorithm": "A256KW"},
        "EncryptionAgent": {"Protocol": "1.0", "EncryptionAlgorithm": "AES_CBC_256"},
        "ContentEncryptionIV": BASE64.encode(entity_iv),
    });
    let forged = Properties::new()
        .with("FirstName", "Jun")
        .with("Email", EdmValue::Binary(email))
        .with(LEGACY_METADATA_1, metadata.to_string())
        .with(LEGACY_METADATA_2, EdmValue::Binary(list));

    match policy.decrypt(TABLE, &keys, forged).await {
        Ok(read) => panic!(
            "the legacy reader decrypted a planted value: Email = {:?}",
            read.get_str("Email").unwrap()
        ),
        Err(error) => common::assert_failure(error, &keys, LEGACY_METADATA_1, "does not decrypt"),
    }
}
