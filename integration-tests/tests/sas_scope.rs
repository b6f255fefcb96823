//! Scenario 7: a read-only table SAS scoped to a partition range reads that range, cannot
//! write, and any altered signed field (range, permissions, expiry, table) or an expired token
//! is refused. Azurite verifies the signature but does not enforce the range itself (Azure
//! does), so the altered-range case is what proves the range is signed.

mod common;

use chrono::{Duration, Utc};
use tablekit_azure::{Account, SasProtocol, TablePermissions, TableSas};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, ErrorKind, Keys, Properties};

fn with_token(base: &Account, query: &str) -> Account {
    Account::from_sas(base.name(), base.endpoints().clone(), query).unwrap()
}

#[tokio::test]
async fn a_scoped_read_only_token_cannot_write_and_cannot_be_altered() {
    let account = common::account(common::patient());
    let table = common::table(&account, "sasscope").await;
    let other = common::table(&account, "sasother").await;
    for pk in ["Marketing", "Sales", "Support"] {
        table
            .insert(&Entity::try_new(pk, "1", Properties::new().with("V", 1)).unwrap())
            .await
            .unwrap();
    }
    let expiry = Utc::now() + Duration::minutes(10);
    let sas = TableSas::new(table.name(), TablePermissions::READ, expiry)
        .with_partition_range("Sales", "Sales")
        .with_protocol(SasProtocol::HttpsAndHttp);
    let token = sas.sign(&account).unwrap().to_query();
    let reader = with_token(&account, &token).table(table.name()).unwrap();
    assert_eq!(
        reader
            .query::<Properties>()
            .filter(Filter::partition("Sales"))
            .collect()
            .await
            .unwrap()
            .len(),
        1
    );

    // No write of any kind.
    let keys = Keys::new("Sales", "2").unwrap();
    let write = Entity::new(keys.clone(), Properties::new());
    for err in [
        reader.insert(&write).await.unwrap_err(),
        reader.upsert_merge(&write).await.unwrap_err(),
        reader
            .delete_if_exists(&Keys::new("Sales", "1").unwrap())
            .await
            .unwrap_err(),
    ] {
        // The token is valid; it lacks the permission.
        assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    }

    // Every signed field altered: refused with 403.
    let altered = [
        ("spk=Sales", "spk=Marketing"),
        ("epk=Sales", "epk=Support"),
        ("sp=r", "sp=raud"),
        ("se=", "se=2099"),
    ];
    for (from, to) in altered {
        let tampered = token.replacen(from, to, 1);
        assert_ne!(tampered, token, "{from}");
        let err = with_token(&account, &tampered)
            .table(table.name())
            .unwrap()
            .get::<Properties>(&Keys::new("Sales", "1").unwrap())
            .await
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.status()),
            (ErrorKind::Unauthorized, Some(403)),
            "{from} → {to}: {err}"
        );
    }
    // The same token used on another table (the table name is signed).
    let elsewhere = with_token(&account, &token).table(other.name()).unwrap();
    assert_eq!(
        elsewhere
            .query::<Properties>()
            .page()
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Unauthorized
    );
    // Expired.
    let expired = TableSas::new(
        table.name(),
        TablePermissions::READ,
        Utc::now() - Duration::seconds(1),
    )
    .with_protocol(SasProtocol::HttpsAndHttp)
    .sign(&account)
    .unwrap();
    let err = with_token(&account, &expired.to_query())
        .table(table.name())
        .unwrap()
        .query::<Properties>()
        .page()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    println!("scenario 7: 3 writes, 4 altered fields, another table and an expired token refused");
    table.delete_table().await.unwrap();
    other.delete_table().await.unwrap();
}
