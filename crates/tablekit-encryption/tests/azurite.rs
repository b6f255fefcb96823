//! Encrypted entities through Azurite: the stored form survives the service, a point read and
//! a partition query decrypt, values at the 64 KiB limit round trip, and encrypting and
//! decrypting add no request to the table operations around them — the functions underneath
//! an encrypting table, used on their own.

use std::error::Error as StdError;
use std::sync::Arc;

use tablekit_azure::RequestKind;
use tablekit_core::filter::Filter;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Entity, ErrorKind, Keys, OperationKind};
use tablekit_encryption::{AesKeyWrap, EncryptionPolicy, KeyRing, METADATA_PROPERTY, OVERHEAD};
use tablekit_testkit::fixtures::{self, assert_requests, measured};

type TestResult = Result<(), Box<dyn StdError>>;

fn employee(email: &str) -> Properties {
    Properties::new()
        .with("FirstName", "Jun")
        .with("LastName", "Cao")
        .with("Email", email)
        .with("HomeAddress", "Zoë Ångström, 東京都港区 1-2-3 🏠")
        .with("Age", 38)
}

#[tokio::test]
async fn encrypted_entities_round_trip_through_azurite_with_no_extra_request() -> TestResult {
    let account = fixtures::account();
    let table = fixtures::table_on(&account, "encrypted").await;
    let key_bytes = [0x42u8; 32];

    // One key-encryption key wraps each entity's content key; its id is stored with the
    // entity so that reads find the right key after a rotation.
    let kek = Arc::new(AesKeyWrap::new("employees-2026", &key_bytes)?);
    let policy = EncryptionPolicy::builder(kek)
        .properties(["Email", "HomeAddress"])
        .build()?;

    let keys = Keys::new("Sales", "000223")?;
    let plain = employee("jun.cao@contoso.example");
    let (encrypted, encrypt_cost) = measured(&account, async {
        // Encrypt, then write with insert or replace: never merge.
        policy.refuse_merge(OperationKind::Insert)?;
        let stored = policy.encrypt(&keys, plain.clone()).await?;
        Ok::<_, tablekit_core::Error>(stored)
    })
    .await;
    let encrypted = encrypted?;
    assert_requests(&encrypt_cost, None, 0);

    let (inserted, insert_cost) = measured(&account, async {
        table.insert(&Entity::new(keys.clone(), encrypted)).await?;
        Ok::<_, tablekit_core::Error>(())
    })
    .await;
    inserted?;
    assert_requests(&insert_cost, Some(RequestKind::Insert), 1);
    assert_requests(&insert_cost, None, 1);

    // What the service holds: ciphertexts as Edm.Binary, the metadata as a string.
    let raw = table.get::<Properties>(&keys).await?.expect("stored").value;
    assert!(matches!(raw.get("Email"), Some(EdmValue::Binary(b)) if b.len() == 23 + OVERHEAD));
    assert!(raw.get_str(METADATA_PROPERTY).unwrap().is_some());
    assert_eq!(raw.get_str("FirstName").unwrap(), Some("Jun"));

    let (read, read_cost) = measured(&account, async {
        let stored = table.get::<Properties>(&keys).await?.expect("stored");
        let employee = policy.decrypt(table.name(), &keys, stored.value).await?;
        Ok::<_, tablekit_core::Error>(employee)
    })
    .await;
    assert_eq!(read?, plain);
    assert_requests(&read_cost, Some(RequestKind::Get), 1);
    assert_requests(&read_cost, None, 1);
    Ok(())
}

#[tokio::test]
async fn a_partition_query_decrypts_and_a_filter_on_an_encrypted_property_is_refused() -> TestResult
{
    let account = fixtures::account();
    let table = fixtures::table_on(&account, "encquery").await;
    let (old_key, new_key) = ([1u8; 32], [2u8; 32]);
    let old = EncryptionPolicy::builder(Arc::new(AesKeyWrap::new("employees-2025", &old_key)?))
        .properties(["Email", "HomeAddress"])
        .build()?;
    for i in 0..3 {
        let keys = Keys::new("Sales", format!("00022{i}"))?;
        let stored = old
            .encrypt(&keys, employee(&format!("e{i}@contoso.example")))
            .await?;
        table.insert(&Entity::new(keys, stored)).await?;
    }

    // Writes use the new key; the ring still finds the old one for entities written before.
    let old_kek = Arc::new(AesKeyWrap::new("employees-2025", &old_key)?);
    let policy = EncryptionPolicy::builder(Arc::new(AesKeyWrap::new("employees-2026", &new_key)?))
        .properties(["Email", "HomeAddress"])
        .resolver(Arc::new(KeyRing::new().with(old_kek)))
        .build()?;
    let keys = Keys::new("Sales", "000229")?;
    let stored = policy
        .encrypt(&keys, employee("new@contoso.example"))
        .await?;
    table.insert(&Entity::new(keys, stored)).await?;

    // Filter on plain properties only; an encrypted one could never match.
    let refused = policy.check_filter(&Filter::eq("Email", "e1@contoso.example"));
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::InvalidInput);
    let filter = Filter::partition("Sales").and(Filter::eq("LastName", "Cao"));
    policy.check_filter(&filter)?;
    let mut emails = Vec::new();
    for stored in table.query::<Properties>().filter(filter).collect().await? {
        let employee = policy
            .decrypt(table.name(), &stored.keys, stored.value)
            .await?;
        emails.extend(employee.get_str("Email").unwrap().map(str::to_owned));
    }
    emails.sort();
    assert_eq!(
        emails,
        [
            "e0@contoso.example",
            "e1@contoso.example",
            "e2@contoso.example",
            "new@contoso.example"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn values_at_the_64_kib_limit_survive_the_service() -> TestResult {
    let account = fixtures::account();
    let table = fixtures::table_on(&account, "enclimit").await;
    let policy = EncryptionPolicy::builder(Arc::new(AesKeyWrap::new("k", &[7; 32])?))
        .select_with(|_, _, name| name.starts_with("Secret"))
        .build()?;
    // 15 values at the limit: 64 KiB each once encrypted, the entity just under 1 MiB.
    let plain: Properties = (0..15)
        .map(|i| {
            let text = format!("{i:02}{}", "ü".repeat((64 * 1024 - OVERHEAD - 2) / 2));
            (format!("Secret{i:02}"), EdmValue::String(text))
        })
        .collect();
    let keys = Keys::new("Big", "1")?;
    let stored = policy.encrypt(&keys, plain.clone()).await?;
    assert!(stored.iter().all(|(name, value)| name == METADATA_PROPERTY
        || value.as_bytes().is_some_and(|b| b.len() == 64 * 1024)));
    table.insert(&Entity::new(keys.clone(), stored)).await?;
    let read = table.get::<Properties>(&keys).await?.expect("stored").value;
    let read = policy.decrypt(table.name(), &keys, read).await?;
    assert!(read == plain, "the values read back differ");
    Ok(())
}
