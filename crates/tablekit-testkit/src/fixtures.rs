//! Fixtures for tests of code built on `tablekit-azure` (feature `azure`): accounts on the test
//! storage, created tables and containers with unique names, accounts whose traffic passes
//! through fault proxies, accounts that authenticate with bearer tokens on an HTTPS emulator,
//! and request-count assertions.
//!
//! Every function here panics with a message naming what failed: fixtures run inside tests,
//! where a panic is the failure report.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tablekit_azure::identity::TokenCredential;
use tablekit_azure::{
    Account, AccountBuilder, Container, MetricsSnapshot, RequestKind, RetryPolicy, Settings, Table,
};

use crate::{
    ACCOUNT, ACCOUNT_KEY, Azurite, Endpoints, FaultProxy, TestStorage, unique_container_name,
    unique_table_name,
};

/// Settings with a fast transient-retry schedule — 4 retries from 10 ms up to 100 ms — and
/// a 1 s request timeout.
///
/// Tests inject faults and meet the emulator's occasional connection reset; the default
/// 2/4/10/30 s schedule would only slow them down. The short timeout keeps every bound that
/// follows from it short: a request lands within 2 s of being sent
/// ([`Settings::late_landing`]), so a queue worker may hold its messages for as little as
/// 3 s, and a write settles within about 12 s.
pub fn fast_retries() -> Settings {
    Settings::default()
        .with_retry(RetryPolicy::exponential(
            4,
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .with_request_timeout(Duration::from_secs(1))
}

/// A new account handle on [`TestStorage::shared`] with [`fast_retries`]. Each call has its
/// own metrics and its own connection pool, so request counts never mix between tests.
///
/// # Panics
/// If the test storage cannot be started or its connection string is refused.
pub fn account() -> Account {
    account_with(fast_retries())
}

/// Like [`account`], with `settings`.
///
/// # Panics
/// If the test storage cannot be started, or its connection string or `settings` are refused.
pub fn account_with(settings: Settings) -> Account {
    let storage = TestStorage::shared().expect("test storage");
    Account::from_connection_string(storage.connection_string())
        .expect("connection string of the test storage")
        .with_settings(settings)
        .expect("settings")
}

/// A created table with a unique name starting with `prefix`, on a new [`account`].
///
/// # Panics
/// If the name is invalid or the table cannot be created.
pub async fn table(prefix: &str) -> Table {
    table_on(&account(), prefix).await
}

/// A created table with a unique name starting with `prefix`, on `account`.
///
/// # Panics
/// If the name is invalid or the table cannot be created.
pub async fn table_on(account: &Account, prefix: &str) -> Table {
    let table = account
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    table
}

/// The same table through a new [`account`] handle, whose metrics start at zero.
///
/// # Panics
/// See [`account`].
pub fn reopen(table: &Table) -> Table {
    account().table(table.name()).expect("table name")
}

/// A created blob container with a unique name starting with `prefix`, on a new [`account`].
///
/// # Panics
/// If the name is invalid or the container cannot be created.
pub async fn container(prefix: &str) -> Container {
    container_on(&account(), prefix).await
}

/// A created blob container with a unique name starting with `prefix`, on `account`.
///
/// # Panics
/// If the name is invalid or the container cannot be created.
pub async fn container_on(account: &Account, prefix: &str) -> Container {
    let container = account
        .container(&unique_container_name(prefix))
        .expect("container name");
    container.create().await.expect("create container");
    container
}

/// The endpoints of an emulator on loopback: the shared test emulator, or, when the test
/// storage is a real account or a remote emulator, one started for this process. Fault
/// proxies need a loopback upstream.
///
/// # Panics
/// If no emulator can be started.
pub fn emulator() -> Endpoints {
    static OWN: OnceLock<Azurite> = OnceLock::new();
    match TestStorage::shared().expect("test storage").emulator() {
        Some(azurite) => azurite.endpoints().clone(),
        None => OWN
            .get_or_init(|| Azurite::start().expect("azurite"))
            .endpoints()
            .clone(),
    }
}

/// A process-wide emulator that serves HTTPS and accepts bearer tokens
/// ([`AzuriteBuilder::with_oauth`](crate::AzuriteBuilder::with_oauth)), started on first use.
/// Token tests always run here, even when the test storage is a real account: the tokens of
/// a [`MintingCredential`](crate::MintingCredential) are not signed.
///
/// # Panics
/// If it cannot be started.
pub fn oauth_emulator() -> &'static Azurite {
    static OAUTH: OnceLock<Azurite> = OnceLock::new();
    OAUTH.get_or_init(|| {
        Azurite::builder()
            .with_oauth()
            .start()
            .expect("azurite with oauth")
    })
}

/// A builder for the account of [`oauth_emulator`] authenticated by `credential`, trusting the
/// emulator's certificate authority, with [`fast_retries`]: choose a token scope or a refresh
/// margin, then build.
///
/// # Panics
/// If the emulator cannot be started.
pub fn token_account_builder(credential: Arc<dyn TokenCredential>) -> AccountBuilder {
    let azurite = oauth_emulator();
    let e = azurite.endpoints();
    let endpoint = |url: &str| url.parse().expect("emulator endpoint");
    Account::builder(ACCOUNT)
        .with_endpoints(tablekit_azure::Endpoints::new(
            endpoint(&e.blob),
            endpoint(&e.queue),
            endpoint(&e.table),
        ))
        .with_token_credential(credential)
        .with_root_certificate(azurite.ca_certificate_pem().expect("oauth emulator"))
        .with_settings(fast_retries())
}

/// An account on [`oauth_emulator`] authenticated by `credential` (see
/// [`token_account_builder`]), with metrics of its own.
///
/// # Panics
/// If the emulator cannot be started.
pub fn token_account(credential: Arc<dyn TokenCredential>) -> Account {
    token_account_builder(credential)
        .build()
        .expect("token account")
}

/// An account on [`oauth_emulator`] with the well-known key over HTTPS: to set up and check
/// what token accounts do.
///
/// # Panics
/// If the emulator cannot be started.
pub fn oauth_key_account() -> Account {
    let azurite = oauth_emulator();
    AccountBuilder::from_connection_string(&azurite.connection_string())
        .expect("connection string")
        .with_root_certificate(azurite.ca_certificate_pem().expect("oauth emulator"))
        .with_settings(fast_retries())
        .build()
        .expect("key account")
}

/// A connection string for the emulator's account at `endpoints`.
pub fn connection_string(endpoints: &Endpoints) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};TableEndpoint={};QueueEndpoint={};BlobEndpoint={}",
        endpoints.table, endpoints.queue, endpoints.blob
    )
}

/// An account whose table, queue and blob traffic passes through a [`FaultProxy`] each, in
/// front of [`emulator`]. Faults are added through the proxies; the proxies stop when this is
/// dropped.
pub struct Proxied {
    /// The account; every request it sends goes through one of the proxies.
    pub account: Account,
    /// The proxy in front of the table service.
    pub table: FaultProxy,
    /// The proxy in front of the queue service.
    pub queue: FaultProxy,
    /// The proxy in front of the blob service.
    pub blob: FaultProxy,
    /// The endpoints through the proxies.
    endpoints: Endpoints,
}

impl Proxied {
    /// Another account through the same proxies, with connections, metrics and budgets of
    /// its own: what a second process (or the same one restarted) would have.
    ///
    /// # Panics
    /// If `settings` are refused.
    pub fn account_again(&self, settings: Settings) -> Account {
        Account::from_connection_string(&connection_string(&self.endpoints))
            .expect("connection string")
            .with_settings(settings)
            .expect("settings")
    }
}

/// An account on [`emulator`] itself, not proxied, with `settings`: the direct view of what
/// a [`proxied`] account reads and writes.
///
/// # Panics
/// If no emulator can be started or `settings` are refused.
pub fn emulator_account(settings: Settings) -> Account {
    Account::from_connection_string(&connection_string(&emulator()))
        .expect("connection string")
        .with_settings(settings)
        .expect("settings")
}

/// See [`Proxied`]; `settings` apply to the account.
///
/// # Panics
/// If no emulator or proxy can be started, or `settings` are refused.
pub fn proxied(settings: Settings) -> Proxied {
    let upstream = emulator();
    let start = |endpoint: &str| FaultProxy::start(socket(endpoint)).expect("fault proxy");
    let (table, queue, blob) = (
        start(&upstream.table),
        start(&upstream.queue),
        start(&upstream.blob),
    );
    let through = Endpoints {
        table: table.endpoint_for(&upstream.table),
        queue: queue.endpoint_for(&upstream.queue),
        blob: blob.endpoint_for(&upstream.blob),
    };
    let account = Account::from_connection_string(&connection_string(&through))
        .expect("connection string")
        .with_settings(settings)
        .expect("settings");
    Proxied {
        account,
        table,
        queue,
        blob,
        endpoints: through,
    }
}

fn socket(endpoint: &str) -> SocketAddr {
    endpoint
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|authority| authority.parse().ok())
        .unwrap_or_else(|| panic!("{endpoint}: not a loopback endpoint"))
}

/// Runs `f` and returns its output with the requests `account` sent meanwhile.
pub async fn measured<F: Future>(account: &Account, f: F) -> (F::Output, MetricsSnapshot) {
    let before = account.metrics().snapshot();
    let out = f.await;
    (out, account.metrics().snapshot().since(&before))
}

/// Asserts that `snapshot` counts `expected` requests (of `kind`, or of every kind).
///
/// Every attempt is a request, so a transient failure that was retried adds one, and a
/// retried write whose first response was lost is verified with one read. Only the extra
/// requests the retry counter explains are allowed: none without retries, at most two per
/// retry.
///
/// # Panics
/// If the count is outside that range.
#[track_caller]
pub fn assert_requests(snapshot: &MetricsSnapshot, kind: Option<RequestKind>, expected: u64) {
    let sent = kind.map_or(snapshot.requests(), |k| snapshot.requests_of(k));
    assert!(
        expected <= sent && sent <= expected + 2 * snapshot.retries,
        "{kind:?}: {sent} requests, expected {expected} (+{} retries): {snapshot:?}",
        snapshot.retries
    );
}

/// Inserts an entity given as its raw JSON body (`{"PartitionKey":…,"RowKey":…,…}`) into
/// `table`, bypassing every client-side check and encoding: for entities another client
/// could have written that tablekit would refuse to write, such as an `Edm.Int64` whose value
/// is not a number (the emulator stores what it is sent).
///
/// One request, not retried: a table SAS signed with `table`'s account key, sent to the
/// account's table endpoint over plain HTTP (the emulator's, or a proxy in front of it).
///
/// # Panics
/// If the account has no key, the endpoint is not plain HTTP, or the insert is refused.
pub async fn insert_raw_entity(table: &Table, json: &str) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let expiry = chrono::Utc::now() + chrono::Duration::minutes(10);
    let sas =
        tablekit_azure::TableSas::new(table.name(), tablekit_azure::TablePermissions::ALL, expiry)
            .with_protocol(tablekit_azure::SasProtocol::HttpsAndHttp)
            .sign(table.account())
            .unwrap_or_else(|e| panic!("signing a table SAS: {e}"));
    let endpoint = &table.account().endpoints().table;
    assert_eq!(
        endpoint.scheme(),
        "http",
        "{endpoint}: raw inserts need plain HTTP"
    );
    let host = endpoint.host_str().expect("the table endpoint has a host");
    let port = endpoint.port_or_known_default().unwrap_or(80);
    let path = format!(
        "{}/{}?{}",
        endpoint.path().trim_end_matches('/'),
        table.name(),
        sas.to_query()
    );
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json;odata=minimalmetadata\r\nPrefer: return-no-content\r\n\
         x-ms-version: 2019-02-02\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
        json.len()
    );
    let mut stream = tokio::net::TcpStream::connect((host, port))
        .await
        .unwrap_or_else(|e| panic!("connecting to {endpoint}: {e}"));
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("sending a raw insert: {e}"));
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .unwrap_or_else(|e| panic!("reading a raw insert's response: {e}"));
    let response = String::from_utf8_lossy(&response);
    let status = response.split(' ').nth(1).unwrap_or_default();
    assert!(
        status.starts_with('2'),
        "raw insert into {} refused: {response}",
        table.name()
    );
}
