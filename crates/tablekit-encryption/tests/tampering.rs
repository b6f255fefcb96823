//! Stored entities that were altered, moved, stripped of their metadata or written under
//! another key: each read is a decryption failure naming the entity and the property — never
//! a wrong plaintext. And the refusals: merges, filters on encrypted properties, secrets in
//! `Debug` output.

mod common;

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{SECRET, TABLE, aes, assert_failure, employee, field, format_v1, keys, policy, rsa};
use serde_json::Value;
use tablekit_core::filter::Filter;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, OperationKind};
use tablekit_encryption::{
    AesKeyWrap, BoxFuture, ContentKey, EncryptionPolicy, KeyEncryptionKey, KeyResolver, KeyRing,
    METADATA_PROPERTY,
};

async fn stored() -> Properties {
    policy(aes("k1", 1))
        .encrypt(&keys(), employee())
        .await
        .unwrap()
}

async fn read(stored: Properties) -> tablekit_core::Result<Properties> {
    policy(aes("k1", 1)).decrypt(TABLE, &keys(), stored).await
}

fn flip(bytes: &mut [u8], at: usize) {
    bytes[at] ^= 0x01;
}

/// Edits the fields of version 3 metadata ([`common::field`]).
fn edit_metadata(stored: &mut Properties, edit: impl FnOnce(&mut Vec<String>)) {
    let mut fields = common::metadata_fields(stored);
    edit(&mut fields);
    stored.insert(METADATA_PROPERTY, fields.join(";"));
}

/// Flips a bit of the base64 field `index` at byte `at`.
fn flip_field(fields: &mut [String], index: usize, at: usize) {
    let mut bytes = BASE64.decode(&fields[index]).unwrap();
    flip(&mut bytes, at);
    fields[index] = BASE64.encode(bytes);
}

fn binary(stored: &Properties, name: &str) -> Vec<u8> {
    stored.get(name).unwrap().as_bytes().unwrap().to_vec()
}

#[tokio::test]
async fn a_flipped_byte_anywhere_in_a_ciphertext_fails_authentication() {
    let original = stored().await;
    let len = binary(&original, "Email").len();
    for at in [0, 12, len / 2, len - 17, len - 1] {
        let mut bytes = binary(&original, "Email");
        flip(&mut bytes, at);
        let mut stored = original.clone();
        stored.insert("Email", bytes);
        let error = read(stored).await.unwrap_err();
        assert_failure(error, &keys(), "Email", "authentication failed");
    }
    for short in [27, 16, 15, 0] {
        let mut truncated = original.clone();
        truncated.insert("Email", vec![0u8; short]);
        assert_failure(
            read(truncated).await.unwrap_err(),
            &keys(),
            "Email",
            "authentication",
        );
    }
}

/// A change made to the metadata's fields.
type Edit = dyn Fn(&mut Vec<String>);

#[tokio::test]
async fn altered_metadata_fails_to_unwrap_or_to_authenticate() {
    let original = stored().await;
    let altered: Vec<(&str, Box<Edit>, &str)> = vec![
        (
            "wrapped key",
            Box::new(|m| flip_field(m, field::WRAPPED, 5)),
            "does not unwrap",
        ),
        (
            "MAC",
            Box::new(|m| flip_field(m, field::MAC, 10)),
            "authentication failed",
        ),
        (
            "salt",
            Box::new(|m| flip_field(m, field::SALT, 3)),
            "authentication failed",
        ),
        (
            "a name taken off the list",
            Box::new(|m| {
                m[field::ENTRIES] = m[field::ENTRIES]
                    .split(',')
                    .filter(|n| *n != "e:Email")
                    .collect::<Vec<_>>()
                    .join(",");
            }),
            "authentication failed",
        ),
        (
            "a name added to the list",
            Box::new(|m| m[field::ENTRIES].push_str(",s:FirstName")),
            "authentication failed",
        ),
        (
            "two names swapped",
            Box::new(|m| {
                let mut names: Vec<&str> = m[field::ENTRIES].split(',').collect();
                names.swap(0, 1);
                m[field::ENTRIES] = names.join(",");
            }),
            "authentication failed",
        ),
        (
            "an encrypted property listed as signed only",
            Box::new(|m| m[field::ENTRIES] = m[field::ENTRIES].replacen("e:", "s:", 1)),
            "authentication failed",
        ),
        (
            "a name listed twice",
            Box::new(|m| m[field::ENTRIES].push_str(",e:Email")),
            "listed twice",
        ),
        (
            "an extra field",
            Box::new(|m| m.push("1".into())),
            "malformed",
        ),
        (
            "a field missing",
            Box::new(|m| {
                m.pop();
            }),
            "malformed",
        ),
        (
            "a later version",
            Box::new(|m| m[field::VERSION] = "4".into()),
            "version 4",
        ),
        (
            "another algorithm suite",
            Box::new(|m| m[field::SUITE] = "A128GCM-HS256".into()),
            "algorithm suite \"A128GCM-HS256\"",
        ),
        (
            "a wrapping algorithm this key does not do",
            Box::new(|m| m[field::WRAP_ALG] = "RSA-OAEP".into()),
            "does not unwrap",
        ),
        (
            "another key id",
            Box::new(|m| m[field::KID] = "k9".into()),
            "\"k9\"",
        ),
        (
            "a table binding added",
            Box::new(|m| m[field::FLAGS] = "table".into()),
            "logical table name",
        ),
    ];
    for (what, edit, cause) in altered {
        let mut stored = original.clone();
        edit_metadata(&mut stored, edit);
        let error = read(stored).await.expect_err(what);
        // Each ciphertext is opened before the item MAC is checked, so an edit that changes
        // the key or nonce of a ciphertext (the salt, a position in the list) is reported
        // under the first property it no longer opens.
        let property = match what {
            "salt" => "Email",
            "a name taken off the list" | "two names swapped" => "Empty",
            _ => METADATA_PROPERTY,
        };
        assert_failure(error, &keys(), property, cause);
    }
    for junk in [
        EdmValue::from("{not json"),
        EdmValue::Int32(1),
        EdmValue::from("{}"),
        EdmValue::from(""),
        EdmValue::from("2"),
        EdmValue::from("v2;k1;A256KW;AAAA;Email;AAAA"),
    ] {
        let mut stored = original.clone();
        stored.insert(METADATA_PROPERTY, junk);
        let error = read(stored).await.unwrap_err();
        assert_failure(error, &keys(), METADATA_PROPERTY, "malformed");
    }
}

/// A change made to version 1's JSON metadata.
type EditV1 = dyn Fn(&mut Value);

#[tokio::test]
async fn altered_version_1_entities_fail_to_authenticate_or_are_refused() {
    let (keys, original, policy, _) = format_v1();
    let mut stored = original.clone();
    let mut email = binary(&stored, "Email");
    flip(&mut email, 13);
    stored.insert("Email", email);
    let error = policy.decrypt(TABLE, &keys, stored).await.unwrap_err();
    assert_failure(error, &keys, "Email", "authentication failed");

    let altered: Vec<(&str, Box<EditV1>, &str)> = vec![
        (
            "seal",
            Box::new(|m| {
                let mut s = BASE64.decode(m["seal"].as_str().unwrap()).unwrap();
                flip(&mut s, 20);
                m["seal"] = BASE64.encode(s).into();
            }),
            "authentication failed",
        ),
        (
            "a name taken off the list",
            Box::new(|m| m["props"].as_array_mut().unwrap().retain(|p| p != "Email")),
            "authentication failed",
        ),
        (
            "an unknown member",
            Box::new(|m| m["extra"] = 1.into()),
            "malformed",
        ),
        (
            "another version",
            Box::new(|m| m["v"] = 7.into()),
            "version 7",
        ),
        (
            "another algorithm",
            Box::new(|m| m["alg"] = "A128GCM".into()),
            "unsupported",
        ),
    ];
    for (what, edit, cause) in altered {
        let mut stored = original.clone();
        let mut json: Value =
            serde_json::from_str(stored.get_str(METADATA_PROPERTY).unwrap().unwrap()).unwrap();
        edit(&mut json);
        stored.insert(METADATA_PROPERTY, json.to_string());
        let error = policy.decrypt(TABLE, &keys, stored).await.expect_err(what);
        assert_failure(error, &keys, METADATA_PROPERTY, cause);
    }
}

#[tokio::test]
async fn two_swapped_ciphertexts_fail_authentication() {
    let mut stored = stored().await;
    let (email, address) = (binary(&stored, "Email"), binary(&stored, "HomeAddress"));
    stored.insert("Email", address);
    stored.insert("HomeAddress", email);
    let error = read(stored).await.unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");
}

#[tokio::test]
async fn a_ciphertext_moved_from_another_entity_fails_authentication() {
    let other_keys = Keys::new("Sales", "000224").unwrap();
    let other = policy(aes("k1", 1))
        .encrypt(&other_keys, employee())
        .await
        .unwrap();
    let mut stored = stored().await;
    stored.insert("Email", binary(&other, "Email"));
    let error = read(stored).await.unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");
}

#[tokio::test]
async fn a_whole_entity_moved_to_other_keys_fails_authentication() {
    let stored = stored().await;
    let moved = Keys::new("Sales", "000224").unwrap();
    let error = policy(aes("k1", 1))
        .decrypt(TABLE, &moved, stored)
        .await
        .unwrap_err();
    // The first encrypted property's ciphertext, bound to the keys, no longer opens.
    assert_failure(error, &moved, "Email", "authentication failed");
}

#[tokio::test]
async fn a_property_the_policy_encrypts_stored_without_encryption_is_refused() {
    // The metadata removed: the ciphertexts are left without their key.
    let mut stripped = stored().await;
    stripped.remove(METADATA_PROPERTY);
    let error = read(stripped).await.unwrap_err();
    assert_failure(error, &keys(), "Email", "stored without encryption");

    // Written in plaintext, by a writer without the policy.
    let error = read(employee()).await.unwrap_err();
    assert_failure(error, &keys(), "Email", "stored without encryption");

    // A selected property added in plaintext next to valid metadata.
    let mut stored = stored().await;
    let plain = EncryptionPolicy::builder(aes("k1", 1))
        .properties(["Email", "FirstName"])
        .build()
        .unwrap();
    stored.insert("FirstName", "Jun");
    let error = plain.decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), "FirstName", "stored without encryption");
}

#[tokio::test]
async fn a_listed_property_removed_from_the_stored_entity_fails_a_full_read() {
    let original = stored().await;
    for name in SECRET {
        let mut removed = original.clone();
        removed.remove(name);
        let error = read(removed).await.expect_err(name);
        assert_failure(error, &keys(), name, "absent from the entity");
    }
    // Entities of the earlier formats list their properties too.
    for version in [1, 2] {
        let (keys, mut stored, policy, _) = common::format_fixture(version);
        stored.remove("Empty");
        let error = policy.decrypt(TABLE, &keys, stored).await.unwrap_err();
        assert_failure(error, &keys, "Empty", "absent from the entity");
    }
}

#[tokio::test]
async fn a_projection_without_some_encrypted_properties_decrypts_the_rest() {
    let mut stored = stored().await;
    for name in ["HomeAddress", "Notes", "Age"] {
        stored.remove(name);
    }
    let read = policy(aes("k1", 1))
        .decrypt_projection(TABLE, &keys(), stored)
        .await
        .unwrap();
    assert_eq!(
        read.get_str("Email").unwrap(),
        Some("jun.cao@contoso.example")
    );
    assert!(!read.contains("Notes"));
    // Each value present is still authenticated on its own.
    let mut moved = stored_with_email_from(Keys::new("Sales", "000224").unwrap()).await;
    moved.remove("Notes");
    let error = policy(aes("k1", 1))
        .decrypt_projection(TABLE, &keys(), moved)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");
}

/// The stored entity with its `Email` ciphertext taken from the same employee stored under
/// `other` keys.
async fn stored_with_email_from(other: Keys) -> Properties {
    let theirs = policy(aes("k1", 1))
        .encrypt(&other, employee())
        .await
        .unwrap();
    let mut stored = stored().await;
    stored.insert("Email", binary(&theirs, "Email"));
    stored
}

/// A resolver that hands out one key whatever id is asked for.
struct Always(Arc<dyn KeyEncryptionKey>);

impl KeyResolver for Always {
    fn resolve<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, tablekit_core::Result<Option<Arc<dyn KeyEncryptionKey>>>> {
        let key = Arc::clone(&self.0);
        Box::pin(async move { Ok(Some(key)) })
    }
}

#[tokio::test]
async fn a_key_with_another_id_or_other_material_is_refused() {
    let stored = stored().await;
    let reader = |resolver: Arc<dyn KeyResolver>| {
        EncryptionPolicy::builder(aes("k2", 2))
            .properties(SECRET)
            .resolver(resolver)
            .allow_key_ids(["k1"])
            .build()
            .unwrap()
    };
    let wrong_id = reader(Arc::new(Always(aes("k3", 1))));
    let error = wrong_id
        .decrypt(TABLE, &keys(), stored.clone())
        .await
        .unwrap_err();
    assert_failure(
        error,
        &keys(),
        METADATA_PROPERTY,
        "resolver returned key \"k3\"",
    );

    let same_id_other_bytes = reader(Arc::new(KeyRing::new().with(aes("k1", 9))));
    let error = same_id_other_bytes
        .decrypt(TABLE, &keys(), stored.clone())
        .await
        .unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "integrity check failed");

    let rsa_under_the_id = reader(Arc::new(KeyRing::new().with(rsa("k1", "pkcs8"))));
    let error = rsa_under_the_id
        .decrypt(TABLE, &keys(), stored)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "wrapped with \"A256KW\"");
}

#[test]
fn merge_and_upsert_merge_are_refused() {
    let policy = policy(aes("k1", 1));
    for kind in [OperationKind::Merge, OperationKind::UpsertMerge] {
        let error = policy.refuse_merge(kind).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
        assert!(error.to_string().contains("replace"), "{error}");
    }
    for kind in [
        OperationKind::Insert,
        OperationKind::Replace,
        OperationKind::UpsertReplace,
        OperationKind::Delete,
    ] {
        assert!(policy.refuse_merge(kind).is_ok(), "{kind:?}");
    }
}

#[test]
fn filters_on_encrypted_properties_are_refused() {
    let policy = policy(aes("k1", 1));
    let refused = [
        Filter::eq("Email", "jun@contoso.example"),
        Filter::partition("Sales").and(Filter::ne("Notes", "")),
        Filter::eq("Age", 3).or(Filter::eq("HomeAddress", "x").not()),
        Filter::raw("PartitionKey eq 'Sales' and Email eq 'a'"),
        Filter::raw("substringof('x', Email)"),
    ];
    for filter in refused {
        let error = policy.check_filter(&filter).unwrap_err();
        assert!(
            matches!(error, Error::InvalidFilter { .. }),
            "{filter:?}: {error:?}"
        );
    }
    let allowed = [
        Filter::partition("Sales").and(Filter::ge("Age", 30)),
        Filter::eq("FirstName", "Email"),
        Filter::raw("substringof('Email', FirstName)"),
    ];
    for filter in allowed {
        assert!(policy.check_filter(&filter).is_ok(), "{filter:?}");
    }
}

#[tokio::test]
async fn debug_output_and_errors_never_show_keys_or_plaintexts() {
    const KEY: [u8; 32] = [0xA7; 32];
    let aes = Arc::new(AesKeyWrap::new("k1", &KEY).unwrap());
    let rsa = rsa("rsa-1", "pkcs8");
    let content = ContentKey::from_bytes(&KEY).unwrap();
    let wrapped = aes.wrap(&content).await.unwrap();
    let policy = EncryptionPolicy::builder(aes.clone())
        .properties(["Email"])
        .resolver(Arc::new(KeyRing::new().with(rsa.clone())))
        .build()
        .unwrap();
    let secret = "jun.cao@contoso.example";
    let stored = policy
        .encrypt(&keys(), Properties::new().with("Email", secret))
        .await
        .unwrap();
    let mut tampered = stored.clone();
    let mut bytes = binary(&stored, "Email");
    flip(&mut bytes, 15);
    tampered.insert("Email", bytes);
    let failure = policy.decrypt(TABLE, &keys(), tampered).await.unwrap_err();
    let over_limit = policy
        .encrypt(
            &keys(),
            Properties::new().with("Email", secret.repeat(3000)),
        )
        .await
        .unwrap_err();

    let shown = [
        format!("{content:?}"),
        format!("{aes:?}"),
        format!("{rsa:?}"),
        format!("{wrapped:?}"),
        format!("{policy:?}"),
        format!("{:?}", KeyRing::new().with(aes.clone()).with(rsa.clone())),
        format!("{failure:?} {failure}"),
        format!("{over_limit:?} {over_limit}"),
    ];
    let key_forms = [
        format!("{:?}", &KEY[..4]),
        "a7a7a7a7".to_owned(),
        "A7A7A7A7".to_owned(),
        "167, 167".to_owned(),
        BASE64.encode(&KEY[..6]),
    ];
    let pem = common::rsa_pem("pkcs8");
    for text in &shown {
        for form in &key_forms {
            assert!(
                !text.contains(form.as_str()),
                "{text} shows the key as {form}"
            );
        }
        for line in pem.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!text.contains(&line[..16]), "{text} shows the PEM");
        }
        assert!(!text.contains("contoso"), "{text} shows the plaintext");
        let longest_number = text
            .split(|c: char| !c.is_ascii_hexdigit())
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest_number < 20, "{text} shows a long number");
    }
    assert!(shown[0].contains("redacted"));
    assert!(shown[2].contains("rsa-1") && shown[2].contains("2048"));
}
