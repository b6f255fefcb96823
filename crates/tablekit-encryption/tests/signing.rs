//! Authenticity that does not depend on the key-encryption key being secret: a holder of an
//! RSA key-encryption key's public half wraps content keys as well as its owner, so without a
//! signing key it writes entities the policy accepts; with one, it does not.

mod common;

use std::sync::Arc;

use common::{Counting, TABLE, assert_failure, field, keys, metadata_fields, rsa_pem};
use rsa::pkcs8::DecodePrivateKey;
use rsa::traits::PublicKeyParts as _;
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};
use tablekit_core::Error;
use tablekit_core::Properties;
use tablekit_encryption::{
    BoxFuture, ContentKey, Ed25519SigningKey, EncryptionPolicy, HmacSigningKey, KeyEncryptionKey,
    METADATA_PROPERTY, RsaOaepKey, SigningKey, UnwrapError, WrappedKey,
};

/// What a holder of the public half can do: wrap under the key's id, never unwrap.
struct PublicHalf {
    id: String,
    key: RsaPublicKey,
}

impl KeyEncryptionKey for PublicHalf {
    fn id(&self) -> &str {
        &self.id
    }
    fn algorithm(&self) -> &str {
        RsaOaepKey::ALGORITHM
    }
    fn wrap<'a>(&'a self, key: &'a ContentKey) -> BoxFuture<'a, tablekit_core::Result<WrappedKey>> {
        let wrapped = self
            .key
            .encrypt(
                &mut aes_gcm::aead::OsRng,
                Oaep::new::<sha1::Sha1>(),
                key.expose(),
            )
            .expect("RSA-OAEP encrypts 32 bytes");
        Box::pin(async move { Ok(WrappedKey::new(RsaOaepKey::ALGORITHM, wrapped)) })
    }
    fn unwrap<'a>(&'a self, _: &'a WrappedKey) -> BoxFuture<'a, Result<ContentKey, UnwrapError>> {
        Box::pin(async { Err(UnwrapError::rejected("a public key unwraps nothing")) })
    }
}

fn public_half(id: &str) -> Arc<PublicHalf> {
    let private = RsaPrivateKey::from_pkcs8_pem(&rsa_pem("pkcs8")).unwrap();
    assert_eq!(private.size(), 256);
    Arc::new(PublicHalf {
        id: id.into(),
        key: private.to_public_key(),
    })
}

fn ed25519(id: &str, seed: u8) -> Arc<Ed25519SigningKey> {
    Arc::new(Ed25519SigningKey::from_seed(id, &[seed; 32]).unwrap())
}

fn employee() -> Properties {
    Properties::new()
        .with("Email", "jun@contoso.example")
        .with("Salary", 90_000i64)
}

#[tokio::test]
async fn a_holder_of_an_rsa_public_key_alone_cannot_write_an_entity_a_signing_policy_accepts() {
    let signer = ed25519("hr-signing", 1);
    let owner = EncryptionPolicy::builder(common::rsa("hr-2026", "pkcs8"))
        .properties(["Email"])
        .signing_key(signer.clone())
        .build()
        .unwrap();
    // What the public key alone lets anyone write: accepted by a policy without a signing
    // key, because the item MAC's key comes from a content key the writer chose.
    let forger = EncryptionPolicy::builder(public_half("hr-2026"))
        .properties(["Email"])
        .build()
        .unwrap();
    let forged = forger
        .encrypt(
            &keys(),
            Properties::new()
                .with("Email", "attacker@evil.example")
                .with("Salary", 1_000_000i64),
        )
        .await
        .unwrap();
    let without_signatures = EncryptionPolicy::builder(common::rsa("hr-2026", "pkcs8"))
        .properties(["Email"])
        .build()
        .unwrap();
    assert!(
        without_signatures
            .decrypt(TABLE, &keys(), forged.clone())
            .await
            .is_ok(),
        "the MAC alone does not stop a holder of the public key"
    );
    let error = owner.decrypt(TABLE, &keys(), forged).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "not signed");

    // The owner's own entities read back.
    let stored = owner.encrypt(&keys(), employee()).await.unwrap();
    assert_eq!(
        owner.decrypt(TABLE, &keys(), stored).await.unwrap(),
        employee()
    );
}

#[tokio::test]
async fn readers_verify_with_the_public_key_and_cannot_write() {
    let kek = common::aes("hr-2026", 3);
    let signer = ed25519("hr-signing", 2);
    let writer = EncryptionPolicy::builder(kek.clone())
        .properties(["Email"])
        .signing_key(signer.clone())
        .build()
        .unwrap();
    let public =
        Arc::new(Ed25519SigningKey::verifying("hr-signing", &signer.public_key()).unwrap());
    let reader = EncryptionPolicy::builder(kek)
        .properties(["Email"])
        .trust_signer(public)
        .build()
        .unwrap();
    let stored = writer.encrypt(&keys(), employee()).await.unwrap();
    let fields = metadata_fields(&stored);
    assert_eq!(fields[field::SIGNER], "hr-signing");
    assert_eq!(fields[field::SIGNER_ALG], "EdDSA");
    assert_eq!(fields[field::SIGNATURE].len(), 88, "64 bytes in base64");
    assert_eq!(
        reader.decrypt(TABLE, &keys(), stored).await.unwrap(),
        employee()
    );
    let error = reader.encrypt(&keys(), employee()).await.unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
}

#[tokio::test]
async fn a_signature_belongs_to_its_item_and_to_a_trusted_key() {
    let kek = common::aes("hr-2026", 3);
    let policy = |signer: Arc<dyn SigningKey>| {
        EncryptionPolicy::builder(kek.clone())
            .properties(["Email"])
            .signing_key(signer)
            .build()
            .unwrap()
    };
    let hmac: Arc<dyn SigningKey> = Arc::new(HmacSigningKey::new("hr-hmac", &[4; 32]).unwrap());
    for signer in [ed25519("hr-signing", 2) as Arc<dyn SigningKey>, hmac] {
        let owner = policy(signer.clone());
        let signed = owner.encrypt(&keys(), employee()).await.unwrap();
        assert_eq!(
            owner.decrypt(TABLE, &keys(), signed.clone()).await.unwrap(),
            employee()
        );

        // A holder of the key-encryption key without the signing key: its own item, with the
        // owner's signature fields copied in.
        let mut other = EncryptionPolicy::builder(kek.clone())
            .properties(["Email"])
            .build()
            .unwrap()
            .encrypt(&keys(), employee().with("Email", "attacker@evil.example"))
            .await
            .unwrap();
        let theirs = metadata_fields(&signed);
        let mut fields = metadata_fields(&other);
        for i in [field::SIGNER, field::SIGNER_ALG, field::SIGNATURE] {
            fields[i] = theirs[i].clone();
        }
        other.insert(METADATA_PROPERTY, fields.join(";"));
        let error = owner.decrypt(TABLE, &keys(), other).await.unwrap_err();
        assert_failure(error, &keys(), METADATA_PROPERTY, "does not verify");

        // Signed by a key the policy does not trust, or with another algorithm named.
        let stranger = policy(ed25519("hr-signing-other", 9))
            .encrypt(&keys(), employee())
            .await
            .unwrap();
        let error = owner.decrypt(TABLE, &keys(), stranger).await.unwrap_err();
        assert_failure(error, &keys(), METADATA_PROPERTY, "does not trust");
        let mut renamed = signed.clone();
        let mut fields = metadata_fields(&signed);
        fields[field::SIGNER_ALG] = "RS256".into();
        renamed.insert(METADATA_PROPERTY, fields.join(";"));
        let error = owner.decrypt(TABLE, &keys(), renamed).await.unwrap_err();
        assert_failure(error, &keys(), METADATA_PROPERTY, "\"RS256\"");
    }
}

#[tokio::test]
async fn a_policy_that_requires_signatures_refuses_unsigned_and_older_entities_before_the_key() {
    let kek = Counting::new(common::aes("fixture-kek", 7));
    let policy = EncryptionPolicy::builder(kek.clone())
        .properties(["Email", "Notes", "Empty"])
        .signing_key(ed25519("hr-signing", 2))
        .build()
        .unwrap();
    let unsigned = EncryptionPolicy::builder(common::aes("fixture-kek", 7))
        .properties(["Email"])
        .build()
        .unwrap()
        .encrypt(&keys(), employee())
        .await
        .unwrap();
    let error = policy.decrypt(TABLE, &keys(), unsigned).await.unwrap_err();
    assert_failure(error, &keys(), METADATA_PROPERTY, "not signed");
    for version in [1, 2] {
        let (keys, stored, _, _) = common::format_fixture(version);
        let error = policy.decrypt(TABLE, &keys, stored).await.unwrap_err();
        assert_failure(
            error,
            &keys,
            METADATA_PROPERTY,
            &format!("format version {version} has no signature"),
        );
    }
    assert_eq!(
        kek.unwraps(),
        0,
        "refused before the key-encryption key is called"
    );

    // Rotation: a signing key rotated out is still trusted for reads.
    let old = ed25519("hr-signing-2025", 5);
    let before = EncryptionPolicy::builder(common::aes("k", 1))
        .properties(["Email"])
        .signing_key(old.clone())
        .build()
        .unwrap()
        .encrypt(&keys(), employee())
        .await
        .unwrap();
    let rotated = EncryptionPolicy::builder(common::aes("k", 1))
        .properties(["Email"])
        .signing_key(ed25519("hr-signing-2026", 6))
        .trust_signer(old)
        .build()
        .unwrap();
    assert_eq!(
        rotated.decrypt(TABLE, &keys(), before).await.unwrap(),
        employee()
    );

    // Signatures and the (unauthenticated) legacy format do not go together.
    let error = EncryptionPolicy::builder(common::aes("k", 1))
        .properties(["Email"])
        .signing_key(ed25519("s", 1))
        .read_legacy_format(["legacy"])
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig { .. }), "{error:?}");
}

#[test]
fn signing_keys_show_no_secret() {
    let hmac = HmacSigningKey::new("hr-hmac", &[0xA7; 32]).unwrap();
    let ed = Ed25519SigningKey::from_seed("hr-ed", &[0xA7; 32]).unwrap();
    for shown in [format!("{hmac:?}"), format!("{ed:?}")] {
        assert!(
            !shown.contains("167") && !shown.to_lowercase().contains("a7a7"),
            "{shown}"
        );
        assert!(shown.contains("hr-"), "{shown}");
    }
    assert!(HmacSigningKey::new("k", &[0; 31]).is_err());
    assert!(Ed25519SigningKey::from_seed("", &[0; 32]).is_err());
}
