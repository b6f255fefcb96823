//! Shared test setup: accounts on the test storage (fresh metrics per call) and unique tables.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tablekit_azure::{Account, ConflictRetry, RetryPolicy, Settings, Table};
use tablekit_testkit::{TestStorage, unique_table_name};

/// Fast transient retries (the 2/4/10/30 s default only slows tests down).
pub fn settings() -> Settings {
    Settings {
        retry: RetryPolicy::exponential(4, Duration::from_millis(20), Duration::from_millis(200)),
        ..Settings::default()
    }
}

/// A new account handle on the shared test storage, with its own metrics.
pub fn account_with(settings: Settings) -> Account {
    let storage = TestStorage::shared().expect("test storage");
    Account::from_connection_string(storage.connection_string())
        .expect("connection string")
        .with_http_client(client())
        .expect("client")
        .with_settings(settings)
        .expect("settings")
}

/// An HTTP client for this test alone. The process-wide default client pools connections
/// whose driver tasks belong to the runtime that opened them; each `#[tokio::test]` has its
/// own runtime, and a connection reused after its runtime ended fails (`DispatchGone`) or
/// loses a response after the service applied the request — which would show up as extra
/// requests in the counts these tests prove.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .use_rustls_tls()
        .build()
        .expect("http client")
}

/// See [`account_with`], with [`settings`].
pub fn account() -> Account {
    account_with(settings())
}

/// An account for heavy contention: many conflict retries with short backoff.
pub fn contended_account() -> Account {
    account_with(Settings {
        conflict_retry: ConflictRetry {
            max_attempts: 10_000,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(40),
        },
        ..settings()
    })
}

/// A created table with a unique name.
pub async fn table(prefix: &str) -> Table {
    let table = account()
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    table
}

/// The same table through another account handle.
pub fn reopen(table: &Table, account: &Account) -> Table {
    account.table(table.name()).expect("table name")
}

/// An account whose table traffic passes through a fault proxy in front of the test
/// emulator (started here if the shared storage is not a local emulator), and the proxy.
pub fn proxied(settings: Settings) -> (Account, tablekit_testkit::FaultProxy) {
    use std::sync::OnceLock;
    static OWN: OnceLock<tablekit_testkit::Azurite> = OnceLock::new();
    let storage = TestStorage::shared().expect("test storage");
    let endpoints = match storage.emulator() {
        Some(azurite) => azurite.endpoints().clone(),
        None => OWN
            .get_or_init(|| tablekit_testkit::Azurite::start().expect("azurite"))
            .endpoints()
            .clone(),
    };
    let authority = endpoints
        .table
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("endpoint authority");
    let proxy =
        tablekit_testkit::FaultProxy::start(authority.parse().expect("loopback")).expect("proxy");
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={};QueueEndpoint={};BlobEndpoint={}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY,
        proxy.endpoint_for(&endpoints.table),
        endpoints.queue,
        endpoints.blob,
    );
    let account = Account::from_connection_string(&cs)
        .expect("connection string")
        .with_http_client(client())
        .expect("client")
        .with_settings(settings)
        .expect("settings");
    (account, proxy)
}
