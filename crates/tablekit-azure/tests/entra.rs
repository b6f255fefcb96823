//! Accounts that authenticate with Microsoft Entra ID bearer tokens, against Azurite over
//! HTTPS with `--oauth basic`: every service and path works, refused tokens become typed
//! errors without retries, tokens are cached, refreshed before expiry and never shown.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::future::join_all;
use tablekit_azure::identity::{
    AccessToken, CredentialError, CredentialErrorKind, TokenCredential,
};
use tablekit_azure::{
    Account, AccountSas, RequestKind, SasServices, SendOptions, TablePermissions, TableSas,
    TokenScope, UploadOptions,
};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Keys, Properties, ResourceKind};
use tablekit_testkit::fixtures::{oauth_key_account, token_account, token_account_builder};
use tablekit_testkit::{
    Claims, MintingCredential, unique_container_name, unique_queue_name, unique_table_name,
};

const STORAGE: &str = "https://storage.azure.com/.default";

fn minting(claims: Claims) -> Arc<MintingCredential> {
    Arc::new(MintingCredential::new(claims))
}

#[tokio::test]
async fn tables_queues_and_blobs_work_with_one_storage_token() {
    let credential = minting(Claims::valid());
    let account = token_account(credential.clone());
    assert!(account.uses_token() && !account.has_key());

    // Tables: create, CRUD, a query, a transaction, an ETag loop, the table list.
    let table = account.table(&unique_table_name("entra")).unwrap();
    table.create().await.unwrap();
    let keys = Keys::new("Sales", "000223").unwrap();
    let etag = table
        .insert(&Entity::new(
            keys.clone(),
            Properties::new().with("Age", 34),
        ))
        .await
        .unwrap();
    table
        .merge(
            &Entity::new(
                keys.clone(),
                Properties::new().with("Email", "j@contoso.com"),
            ),
            IfMatch::ETag(etag),
        )
        .await
        .unwrap();
    let stored = table.get::<Properties>(&keys).await.unwrap().unwrap();
    assert_eq!(
        stored.value.get("Email").and_then(|v| v.as_str()),
        Some("j@contoso.com")
    );
    let plan = BatchPlan::atomic((1..=3).map(|i| {
        Operation::insert(
            &Entity::try_new("Sales", format!("{i:06}"), Properties::new().with("Age", i)).unwrap(),
        )
        .unwrap()
    }))
    .unwrap();
    table.submit(&plan).await.unwrap();
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
    table
        .update_with::<Properties, _>(&keys, |p| p.unwrap_or_default().with("Age", 35))
        .await
        .unwrap();
    let listed = account.list_tables(table.name()).await.unwrap();
    assert_eq!(listed, vec![table.name().to_owned()]);
    table.delete(&keys, IfMatch::Any).await.unwrap();

    // Queues: create, put, get, update, delete, count.
    let queue = account.queue(&unique_queue_name("entra")).unwrap();
    queue.create().await.unwrap();
    queue.send(b"job", SendOptions::default()).await.unwrap();
    let got = queue.receive(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got[0].payload, b"job");
    let held = queue
        .update(&got[0], Duration::from_secs(60))
        .await
        .unwrap();
    queue.delete_message(&held).await.unwrap();
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    queue.delete_queue().await.unwrap();

    // Blobs: create, put, get, list, delete.
    let container = account.container(&unique_container_name("entra")).unwrap();
    container.create().await.unwrap();
    container
        .upload("a/b.txt", &b"hello"[..], UploadOptions::default())
        .await
        .unwrap();
    let blob = container.download("a/b.txt").await.unwrap().unwrap();
    assert_eq!(&blob.data[..], b"hello");
    let listed = container.list("a/").await.unwrap();
    assert_eq!(listed.len(), 1);
    container
        .delete_blob("a/b.txt", IfMatch::Any)
        .await
        .unwrap();

    // An SDK client made from the account authenticates the same way.
    let properties = container.client().get_properties().await.unwrap();
    assert_eq!(properties.container.name, container.name());
    container.delete_container().await.unwrap();
    table.delete_table().await.unwrap();

    // One token served every request of the three services.
    assert_eq!(credential.calls(), 1);
    assert_eq!(credential.scopes(), vec![STORAGE.to_owned()]);
    let snapshot = account.metrics().snapshot();
    assert_eq!(snapshot.retries, 0, "{snapshot:?}");
    assert!(snapshot.requests() >= 20, "{snapshot:?}");
}

/// The error of `f`, with the requests and retries it took.
async fn refused<T: std::fmt::Debug>(
    account: &Account,
    f: impl std::future::Future<Output = tablekit_core::Result<T>>,
) -> (Error, u64, u64) {
    let before = account.metrics().snapshot();
    let err = f.await.unwrap_err();
    let spent = account.metrics().snapshot().since(&before);
    (err, spent.requests(), spent.retries)
}

#[tokio::test]
async fn expired_tokens_and_wrong_audiences_are_refused_once_with_typed_errors() {
    // The resources exist: only the token is wrong.
    let setup = oauth_key_account();
    let table = setup.table(&unique_table_name("refused")).unwrap();
    table.create().await.unwrap();
    let queue = setup.queue(&unique_queue_name("refused")).unwrap();
    queue.create().await.unwrap();
    let container = setup.container(&unique_container_name("refused")).unwrap();
    container.create().await.unwrap();

    let cases: [(&str, Arc<MintingCredential>, TokenScope); 4] = [
        ("expired", minting(Claims::expired()), TokenScope::Storage),
        (
            "another audience",
            minting(Claims::valid().with_audience("https://vault.azure.net")),
            TokenScope::Storage,
        ),
        // A token for the scope asked, but the scope is Cosmos DB's, not Azure Storage's.
        (
            "cosmos scope",
            minting(Claims::valid()),
            TokenScope::CosmosTable,
        ),
        (
            "another issuer",
            minting(Claims::valid().with_issuer("https://accounts.example.com/")),
            TokenScope::Storage,
        ),
    ];
    for (label, credential, scope) in cases {
        let account = token_account_builder(credential.clone())
            .with_token_scope(scope)
            .build()
            .unwrap();
        let keys = Keys::new("p", "r").unwrap();
        let t = account.table(table.name()).unwrap();
        let q = account.queue(queue.name()).unwrap();
        let c = account.container(container.name()).unwrap();
        let results = [
            (
                refused(
                    &account,
                    t.insert(&Entity::new(keys.clone(), Properties::new())),
                )
                .await,
                ResourceKind::Table,
                table.name().to_owned(),
            ),
            (
                refused(&account, q.send(b"x", SendOptions::default())).await,
                ResourceKind::Queue,
                queue.name().to_owned(),
            ),
            (
                refused(&account, c.upload("b", &b"x"[..], UploadOptions::default())).await,
                ResourceKind::Blob,
                format!("{}/b", container.name()),
            ),
        ];
        for ((err, requests, retries), kind, name) in results {
            assert_eq!(err.kind(), ErrorKind::Unauthorized, "{label}: {err}");
            assert!(!err.is_retryable());
            match &err {
                Error::Unauthorized { target, status, .. } => {
                    assert_eq!((target.kind, target.table.as_str()), (kind, name.as_str()));
                    assert_eq!(*status, 403, "Azurite answers 403 AuthenticationFailed");
                }
                other => panic!("{label}: {other:?}"),
            }
            assert_eq!(
                (requests, retries),
                (1, 0),
                "{label}: refused once, never retried"
            );
        }
        // Each refused token was forgotten: every request asked for a new one.
        assert_eq!(credential.calls(), 3, "{label}");
    }
    let rows = table
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap();
    assert!(rows.is_empty(), "nothing was written");
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    table.delete_table().await.unwrap();
    queue.delete_queue().await.unwrap();
    container.delete_container().await.unwrap();
}

#[tokio::test]
async fn account_scoped_tokens_are_asked_per_service() {
    let credential = minting(Claims::valid());
    let account = token_account_builder(credential.clone())
        .with_token_scope(TokenScope::Account)
        .build()
        .unwrap();
    let table = account.table(&unique_table_name("scoped")).unwrap();
    table.create().await.unwrap();
    let queue = account.queue(&unique_queue_name("scoped")).unwrap();
    queue.create().await.unwrap();
    let container = account.container(&unique_container_name("scoped")).unwrap();
    container.create().await.unwrap();
    table.delete_table().await.unwrap();
    queue.delete_queue().await.unwrap();
    container.delete_container().await.unwrap();
    let service = |s: &str| format!("https://devstoreaccount1.{s}.core.windows.net/.default");
    assert_eq!(
        credential.scopes(),
        vec![service("table"), service("queue"), service("blob")]
    );
}

#[tokio::test]
async fn a_token_near_expiry_is_replaced_before_it_is_used() {
    let requests = |account: Account| async move {
        let table = account.table(&unique_table_name("refresh")).unwrap();
        table.create().await.unwrap();
        table
            .get::<Properties>(&Keys::new("p", "r").unwrap())
            .await
            .unwrap();
        table.delete_table().await.unwrap();
    };
    // Four minutes left is within the default five-minute margin: each request gets a new
    // token, and each is accepted.
    let short = minting(Claims::expiring_in(Duration::from_secs(240)));
    requests(token_account(short.clone())).await;
    assert_eq!(short.calls(), 3);
    // With a three-minute margin the first token serves all three.
    let lasting = minting(Claims::expiring_in(Duration::from_secs(240)));
    let account = token_account_builder(lasting.clone())
        .with_token_refresh_margin(Duration::from_secs(180))
        .build()
        .unwrap();
    requests(account).await;
    assert_eq!(lasting.calls(), 1);
}

#[tokio::test]
async fn concurrent_requests_wait_for_one_token() {
    let credential =
        Arc::new(MintingCredential::new(Claims::valid()).with_delay(Duration::from_millis(200)));
    let account = token_account(credential.clone());
    let table = oauth_key_account()
        .table(&unique_table_name("together"))
        .unwrap();
    table.create().await.unwrap();
    let handle = account.table(table.name()).unwrap();
    let reads = (0..16).map(|i| {
        let handle = handle.clone();
        async move {
            handle
                .get::<Properties>(&Keys::new("p", format!("{i}")).unwrap())
                .await
        }
    });
    for read in join_all(reads).await {
        assert!(read.unwrap().is_none());
    }
    assert_eq!(credential.calls(), 1);
    assert_eq!(
        account.metrics().snapshot().requests_of(RequestKind::Get),
        16
    );
    table.delete_table().await.unwrap();
}

/// A credential that cannot give a token (no identity on this machine, say).
#[derive(Debug)]
struct Unavailable;

#[async_trait::async_trait]
impl TokenCredential for Unavailable {
    async fn get_token(&self, _: &[&str]) -> Result<AccessToken, CredentialError> {
        Err(CredentialError::message(
            CredentialErrorKind::Credential,
            "no managed identity endpoint",
        ))
    }
    async fn clear_cache(&self) -> Result<(), CredentialError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_credential_without_a_token_fails_before_any_request() {
    let account = token_account(Arc::new(Unavailable));
    let table = account.table(&unique_table_name("notoken")).unwrap();
    let (err, requests, retries) = refused(&account, table.create()).await;
    match &err {
        Error::InvalidConfig { part, reason } => {
            assert_eq!(part, "credentials");
            assert!(reason.contains("no managed identity endpoint"), "{reason}");
            assert!(reason.contains(STORAGE), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((requests, retries), (0, 0));
}

#[tokio::test]
async fn a_token_account_signs_no_sas_and_sends_nothing() {
    let credential = minting(Claims::valid());
    let account = token_account(credential.clone());
    let expiry = Utc::now() + chrono::Duration::hours(1);
    let table = TableSas::new("Employees", TablePermissions::READ, expiry).sign(&account);
    let services = SasServices::default()
        .with_blob(true)
        .with_queue(true)
        .with_table(true);
    let any = AccountSas::new(services, "rl", "sco", expiry).sign(&account);
    for result in [table, any] {
        match result {
            Err(Error::InvalidConfig { part, reason }) => {
                assert_eq!(part, "credentials");
                assert!(reason.contains("user delegation"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(account.metrics().snapshot().requests(), 0);
    assert_eq!(credential.calls(), 0);
}

#[tokio::test]
async fn debug_display_and_errors_never_show_a_token() {
    let valid = minting(Claims::valid());
    let account = token_account(valid.clone());
    let table = account.table(&unique_table_name("shown")).unwrap();
    table.create().await.unwrap();
    let duplicate = Entity::new(Keys::new("p", "r").unwrap(), Properties::new());
    table.insert(&duplicate).await.unwrap();
    let conflict = table.insert(&duplicate).await.unwrap_err();
    table.delete_table().await.unwrap();

    let expired = minting(Claims::expired());
    let refused_account = token_account(expired.clone());
    let refused = refused_account
        .queue(&unique_queue_name("shown"))
        .unwrap()
        .create()
        .await
        .unwrap_err();

    let text = format!(
        "{account:?} {account} {refused_account:?} {refused_account} {conflict:?} {conflict} \
         {refused:?} {refused} {valid:?} {expired:?} {:?}",
        token_account_builder(valid.clone())
    );
    let tokens: Vec<String> = valid.minted().into_iter().chain(expired.minted()).collect();
    assert_eq!(tokens.len(), 2);
    for token in &tokens {
        for part in token.split('.') {
            assert!(!text.contains(part), "a token part is shown: {text}");
        }
    }
    assert!(
        text.contains("Token(https://storage.azure.com/.default)"),
        "{text}"
    );
}
