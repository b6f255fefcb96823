//! What format 3 binds, one field at a time, each through one mechanism on its own: the
//! associated data of a ciphertext (read as a projection that leaves a listed property out,
//! so that the item MAC is not checked) or the item MAC (an entity that only signs, so that
//! no ciphertext is there to fail first). Each test fails when the binding it names is taken
//! out of the format.

mod common;

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{TABLE, aes, assert_failure, field, metadata_fields};
use tablekit_core::Keys;
use tablekit_core::{EdmValue, Properties};
use tablekit_encryption::{
    EncryptionPolicy, KeyEncryptionKey, KeyRing, METADATA_PROPERTY, WrappedKey,
};

fn keys() -> Keys {
    Keys::new("Sales", "000223").unwrap()
}

fn entity() -> Properties {
    Properties::new()
        .with("Email", "jun@contoso.example")
        .with("Notes", "naïve 東京")
        .with("Age", 47i64)
        .with("FirstName", "Jun")
        .with("Nickname", "J")
}

/// Encrypts Email and Notes, signs Age and FirstName; Nickname is plain.
fn policy() -> EncryptionPolicy {
    builder().build().unwrap()
}

fn builder() -> tablekit_encryption::EncryptionPolicyBuilder {
    EncryptionPolicy::builder(aes("k1", 1))
        .properties(["Email", "Notes"])
        .sign_only(["Age", "FirstName"])
}

/// Signs Age and FirstName, encrypts nothing: only the item MAC protects it.
fn signing_only() -> EncryptionPolicy {
    EncryptionPolicy::builder(aes("k1", 1))
        .sign_only(["Age", "FirstName"])
        .build()
        .unwrap()
}

/// What a projection of Email returns: the item MAC cannot be checked without Notes and the
/// signed properties, so only Email's own associated data protects it.
fn projection_of_email(stored: &Properties) -> Properties {
    [
        ("Email", stored.get("Email")),
        (METADATA_PROPERTY, stored.get(METADATA_PROPERTY)),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.unwrap().clone()))
    .collect()
}

fn edit(stored: &mut Properties, edit: impl FnOnce(&mut Vec<String>)) {
    let mut fields = metadata_fields(stored);
    edit(&mut fields);
    stored.insert(METADATA_PROPERTY, fields.join(";"));
}

#[tokio::test]
async fn the_partition_key_and_the_row_key_bind_each_ciphertext() {
    let stored = policy().encrypt(&keys(), entity()).await.unwrap();
    let projection = projection_of_email(&stored);
    // The projection itself reads back.
    let read = policy()
        .decrypt_projection(TABLE, &keys(), projection.clone())
        .await
        .unwrap();
    assert_eq!(read.get_str("Email").unwrap(), Some("jun@contoso.example"));
    for other in [
        Keys::new("Legal", "000223").unwrap(),
        Keys::new("Sales", "000224").unwrap(),
    ] {
        let error = policy()
            .decrypt_projection(TABLE, &other, projection.clone())
            .await
            .unwrap_err();
        assert_failure(error, &other, "Email", "authentication failed");
    }
}

#[tokio::test]
async fn the_partition_key_and_the_row_key_bind_the_item() {
    let stored = signing_only().encrypt(&keys(), entity()).await.unwrap();
    assert_eq!(
        signing_only()
            .decrypt(TABLE, &keys(), stored.clone())
            .await
            .unwrap(),
        entity()
    );
    for other in [
        Keys::new("Legal", "000223").unwrap(),
        Keys::new("Sales", "000224").unwrap(),
    ] {
        let error = signing_only()
            .decrypt(TABLE, &other, stored.clone())
            .await
            .unwrap_err();
        assert_failure(error, &other, METADATA_PROPERTY, "authentication failed");
    }
}

#[tokio::test]
async fn the_logical_table_name_binds_each_ciphertext_and_the_item() {
    let tenant = |name: &str| builder().bind_table(name).build().unwrap();
    let stored = tenant("tenant-a").encrypt(&keys(), entity()).await.unwrap();
    let error = tenant("tenant-b")
        .decrypt_projection(TABLE, &keys(), projection_of_email(&stored))
        .await
        .unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");

    let signer = |name: &str| {
        EncryptionPolicy::builder(aes("k1", 1))
            .sign_only(["Age", "FirstName"])
            .bind_table(name)
            .build()
            .unwrap()
    };
    let stored = signer("tenant-a").encrypt(&keys(), entity()).await.unwrap();
    let error = signer("tenant-b")
        .decrypt(TABLE, &keys(), stored)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
}

#[tokio::test]
async fn a_property_name_binds_its_ciphertext_and_the_item() {
    // Email renamed Mail, in the entity and in the list: same position, another name.
    let stored = policy().encrypt(&keys(), entity()).await.unwrap();
    let mut renamed = projection_of_email(&stored);
    let email = renamed.remove("Email").unwrap();
    renamed.insert("Mail", email);
    edit(&mut renamed, |f| {
        f[field::ENTRIES] = f[field::ENTRIES].replace("e:Email", "e:Mail")
    });
    let error = policy()
        .decrypt_projection(TABLE, &keys(), renamed)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), "Mail", "authentication failed");

    let mut stored = signing_only().encrypt(&keys(), entity()).await.unwrap();
    let age = stored.remove("Age").unwrap();
    stored.insert("Years", age);
    edit(&mut stored, |f| {
        f[field::ENTRIES] = f[field::ENTRIES].replace("s:Age", "s:Years")
    });
    let error = signing_only()
        .decrypt(TABLE, &keys(), stored)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
}

#[tokio::test]
async fn a_ciphertexts_position_in_the_list_binds_it() {
    let stored = policy().encrypt(&keys(), entity()).await.unwrap();
    assert_eq!(
        metadata_fields(&stored)[field::ENTRIES],
        "s:Age,e:Email,s:FirstName,e:Notes"
    );
    let mut moved = projection_of_email(&stored);
    edit(&mut moved, |f| {
        f[field::ENTRIES] = "e:Email,s:Age,s:FirstName,e:Notes".into()
    });
    let error = policy()
        .decrypt_projection(TABLE, &keys(), moved)
        .await
        .unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");
}

#[tokio::test]
async fn the_property_list_binds_the_item() {
    let stored = signing_only().encrypt(&keys(), entity()).await.unwrap();
    // A signed property taken off the list and out of the entity.
    let mut fewer = stored.clone();
    fewer.remove("FirstName");
    edit(&mut fewer, |f| f[field::ENTRIES] = "s:Age".into());
    // A plain property put on the list, as if it had been signed.
    let mut more = stored.clone();
    edit(&mut more, |f| f[field::ENTRIES].push_str(",s:Nickname"));
    for (what, altered) in [("fewer", fewer), ("more", more)] {
        let error = signing_only()
            .decrypt(TABLE, &keys(), altered)
            .await
            .expect_err(what);
        assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
    }
}

#[tokio::test]
async fn the_key_id_binds_the_item() {
    // Two ids for one key's material: the entity unwraps under either, the MAC tells them
    // apart.
    let stored = signing_only().encrypt(&keys(), entity()).await.unwrap();
    let reader = EncryptionPolicy::builder(aes("k1", 1))
        .sign_only(["Age", "FirstName"])
        .resolver(Arc::new(KeyRing::new().with(aes("k1-alias", 1))))
        .build()
        .unwrap();
    assert!(reader.decrypt(TABLE, &keys(), stored.clone()).await.is_ok());
    let mut aliased = stored;
    edit(&mut aliased, |f| f[field::KID] = "k1-alias".into());
    let error = reader.decrypt(TABLE, &keys(), aliased).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
}

#[tokio::test]
async fn the_wrapped_key_binds_the_item() {
    // RSA-OAEP wraps at random: the same content key wrapped again is other bytes that
    // unwrap to it.
    let rsa = common::rsa("rsa-1", "pkcs8");
    let policy = EncryptionPolicy::builder(rsa.clone())
        .sign_only(["Age", "FirstName"])
        .build()
        .unwrap();
    let mut stored = policy.encrypt(&keys(), entity()).await.unwrap();
    let fields = metadata_fields(&stored);
    let wrapped = WrappedKey::new("RSA-OAEP", BASE64.decode(&fields[field::WRAPPED]).unwrap());
    let content_key = rsa.unwrap(&wrapped).await.unwrap();
    let again = rsa.wrap(&content_key).await.unwrap();
    assert_ne!(again.bytes(), wrapped.bytes());
    edit(&mut stored, |f| {
        f[field::WRAPPED] = BASE64.encode(again.bytes())
    });
    let error = policy.decrypt(TABLE, &keys(), stored).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
}

#[tokio::test]
async fn a_signed_value_binds_the_item() {
    let stored = signing_only().encrypt(&keys(), entity()).await.unwrap();
    for (name, value) in [
        ("Age", EdmValue::Int64(48)),
        ("Age", EdmValue::Int32(47)),
        ("FirstName", EdmValue::from("Mei")),
        // Same bytes, another type: the EDM type is covered too.
        ("FirstName", EdmValue::Binary(b"Jun".to_vec())),
    ] {
        let mut changed = stored.clone();
        changed.insert(name, value);
        let error = signing_only()
            .decrypt(TABLE, &keys(), changed)
            .await
            .expect_err(name);
        assert_failure(error, &keys(), METADATA_PROPERTY, "authentication failed");
    }
}

#[tokio::test]
async fn the_salt_the_ciphertext_and_its_tag_each_fail_authentication() {
    let stored = policy().encrypt(&keys(), entity()).await.unwrap();
    let mut salted = stored.clone();
    edit(&mut salted, |f| {
        let mut salt = BASE64.decode(&f[field::SALT]).unwrap();
        salt[0] ^= 1;
        f[field::SALT] = BASE64.encode(salt);
    });
    let error = policy().decrypt(TABLE, &keys(), salted).await.unwrap_err();
    assert_failure(error, &keys(), "Email", "authentication failed");
    let email = stored.get("Email").unwrap().as_bytes().unwrap().to_vec();
    // A byte of the ciphertext, then a byte of the 16-byte tag after it.
    for at in [0, email.len() - 1] {
        let mut bytes = email.clone();
        bytes[at] ^= 1;
        let mut altered = stored.clone();
        altered.insert("Email", bytes);
        let error = policy().decrypt(TABLE, &keys(), altered).await.unwrap_err();
        assert_failure(error, &keys(), "Email", "authentication failed");
    }
}
