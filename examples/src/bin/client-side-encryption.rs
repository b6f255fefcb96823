//! Client-side encryption: a table that encrypts chosen properties on every write and decrypts
//! them on every read, the stored form as the service holds it, and a key rotation.

use std::sync::Arc;

use tablekit::core::EdmValue;
use tablekit::encryption::EncryptionPolicy;
use tablekit::encryption::{AesKeyWrap, KeyRing, METADATA_PROPERTY};
use tablekit::prelude::*;

// ANCHOR: type
/// An employee whose e-mail and home address the service never sees in the clear. Only
/// strings can be encrypted, and never a key field: keys are sent as they are.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    #[table(encrypt)]
    email: String,
    #[table(encrypt)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    home_address: Option<String>,
}
// ANCHOR_END: type

fn employee(id: u32, first: &str, email: &str, home: Option<&str>) -> Employee {
    Employee {
        department: "Sales".into(),
        id,
        first_name: first.into(),
        last_name: "Cao".into(),
        email: email.into(),
        home_address: home.map(str::to_owned),
    }
}

/// Prints an entity as the service stores it: ciphertexts as their length.
fn print_stored(stored: &Stored<Properties>) {
    println!("  stored at {}:", stored.keys);
    for (name, value) in stored.value.iter() {
        match value {
            EdmValue::Binary(bytes) => println!("    {name:<20} Edm.Binary, {} bytes", bytes.len()),
            EdmValue::String(text) if name == METADATA_PROPERTY => {
                println!("    {name:<20} {}…", &text[..text.len().min(72)]);
            }
            other => println!("    {name:<20} {other:?}"),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let table = account.table(&tablekit_examples::unique_name("Encrypted"))?;
    table.create().await?;

    // ANCHOR: policy
    // The key-encryption key wraps each entity's content key; its id is stored with the
    // entity. A local AES key here — in production, load it from your secret store, or put a
    // key store behind the `KeyEncryptionKey` trait.
    let key_2026 = [0x26u8; 32];
    let kek = Arc::new(AesKeyWrap::new("employees-2026", &key_2026)?);
    let policy = EncryptionPolicy::for_type::<Employee>(kek)?; // Email, HomeAddress
    // The same table through the policy: every write encrypts, every read decrypts.
    let employees = policy.table(&table).typed::<Employee>();
    // ANCHOR_END: policy

    // ANCHOR: write
    let jun = employee(223, "Jun", "jun@contoso.example", Some("1 Harbour Rd"));
    let before = account.metrics().snapshot();
    employees.insert(&jun).await?; // 1 request
    employees
        .insert(&employee(224, "Mei", "mei@contoso.example", None))
        .await?;
    let read = employees.get(&jun).await?.expect("inserted"); // 1 request, decrypted
    assert_eq!(read.value, jun);
    // ANCHOR_END: write
    tablekit_examples::report(
        "2 inserts and a read, encrypted and decrypted",
        &account.metrics().snapshot().since(&before),
    );

    // ANCHOR: stored
    // A handle without the policy reads what the service holds.
    let stored = table.get::<Properties>(&jun).await?.expect("inserted");
    print_stored(&stored);
    assert!(matches!(
        stored.value.get("Email"),
        Some(EdmValue::Binary(_))
    ));
    // ANCHOR_END: stored

    // ANCHOR: query
    // Filter on plain properties; each entity is decrypted.
    let caos = employees
        .query()
        .filter(Filter::partition("Sales").and(Employee::LAST_NAME.eq("Cao")))
        .collect()
        .await?;
    let emails: Vec<&str> = caos.iter().map(|e| e.value.email.as_str()).collect();
    println!("  the Caos in Sales: {emails:?}");
    assert_eq!(emails, ["jun@contoso.example", "mei@contoso.example"]);

    // A comparison with an encrypted property could never match: refused, nothing sent.
    let before = account.metrics().snapshot();
    let refused = employees
        .query()
        .filter(Employee::EMAIL.eq("jun@contoso.example"))
        .collect()
        .await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(account.metrics().snapshot().since(&before).requests(), 0);
    // Merges are refused too: read, change, replace.
    assert!(employees.upsert_merge(&jun).await.is_err());
    // ANCHOR_END: query

    // ANCHOR: rotate
    // Rotation: writes use the new key; the ring still finds the old one by the id stored
    // in every entity written before.
    let kek_2027 = Arc::new(AesKeyWrap::new("employees-2027", &[0x27u8; 32])?);
    let old = Arc::new(AesKeyWrap::new("employees-2026", &key_2026)?);
    let rotated = EncryptionPolicy::builder(kek_2027)
        .properties_of::<Employee>()
        .resolver(Arc::new(KeyRing::new().with(old)))
        .build()?;
    let employees = rotated.table(&table).typed::<Employee>();
    let current = employees.get(&jun).await?.expect("inserted"); // written under 2026
    let moved = Employee {
        home_address: Some("2 Harbour Rd".into()),
        ..current.value.clone()
    };
    employees.replace(&moved, current.if_match()).await?; // re-encrypted under 2027
    // ANCHOR_END: rotate
    let metadata = table
        .get::<Properties>(&jun)
        .await?
        .expect("replaced")
        .value;
    let kid = metadata
        .get_str(METADATA_PROPERTY)
        .ok()
        .flatten()
        .unwrap_or_default();
    println!(
        "  after the replace, the entity names key employees-2027: {}",
        kid.contains("employees-2027")
    );
    // The metadata's second field is the key id (`2;kid;wrap_alg;wrapped;names;seal`).
    assert_eq!(kid.split(';').nth(1), Some("employees-2027"));
    assert_eq!(employees.get(&jun).await?.expect("replaced").value, moved);

    table.delete_table().await?;
    Ok(())
}
