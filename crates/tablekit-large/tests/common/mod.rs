//! Shared test setup: accounts on the test storage, unique tables and containers, and an
//! account whose traffic passes through fault-injecting proxies.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tablekit_azure::{Account, Container, RetryPolicy, Settings, Table};
use tablekit_large::LargeEntities;
use tablekit_testkit::{TestStorage, unique_container_name, unique_table_name};

/// Fast transient retries: tests inject faults, and the default schedule only slows them.
pub fn settings() -> Settings {
    Settings {
        retry: RetryPolicy::exponential(4, Duration::from_millis(10), Duration::from_millis(100)),
        ..Settings::default()
    }
}

/// A new account handle on the shared test storage, with its own metrics.
pub fn account() -> Account {
    let storage = TestStorage::shared().expect("test storage");
    Account::from_connection_string(storage.connection_string())
        .expect("connection string")
        .with_http_client(client())
        .expect("client")
        .with_settings(settings())
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

/// A created table and container with unique names on `account`.
pub async fn resources(account: &Account, prefix: &str) -> (Table, Container) {
    let table = account
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    let container = account
        .container(&unique_container_name(&prefix.to_lowercase()))
        .expect("container name");
    container.create().await.expect("create container");
    (table, container)
}

/// A store with default options on fresh resources of `account`.
pub async fn store(account: &Account, prefix: &str) -> LargeEntities {
    let (table, container) = resources(account, prefix).await;
    LargeEntities::builder(table, container)
        .build()
        .expect("store")
}

/// Deletes the store's table and container.
pub async fn cleanup(store: &LargeEntities) {
    store.table().delete_table().await.expect("delete table");
    store.container().delete().await.expect("delete container");
}

/// Names of every blob under the store's prefix.
pub async fn blob_names(store: &LargeEntities) -> Vec<String> {
    store
        .container()
        .list(store.prefix())
        .await
        .expect("list")
        .into_iter()
        .map(|b| b.name)
        .collect()
}

/// An account whose table and blob traffic passes through fault proxies in front of the
/// test emulator (started here if the shared storage is not a local emulator).
pub struct Proxied {
    pub account: Account,
    pub table: tablekit_testkit::FaultProxy,
    pub blob: tablekit_testkit::FaultProxy,
}

fn emulator_endpoints() -> tablekit_testkit::Endpoints {
    use std::sync::OnceLock;
    static OWN: OnceLock<tablekit_testkit::Azurite> = OnceLock::new();
    let storage = TestStorage::shared().expect("test storage");
    match storage.emulator() {
        Some(azurite) => azurite.endpoints().clone(),
        None => OWN
            .get_or_init(|| tablekit_testkit::Azurite::start().expect("azurite"))
            .endpoints()
            .clone(),
    }
}

fn socket(endpoint: &str) -> std::net::SocketAddr {
    let authority = endpoint
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("endpoint authority");
    authority.parse().expect("loopback endpoint")
}

/// See [`Proxied`].
pub fn proxied() -> Proxied {
    let e = emulator_endpoints();
    let start =
        |endpoint: &str| tablekit_testkit::FaultProxy::start(socket(endpoint)).expect("proxy");
    let (table, blob) = (start(&e.table), start(&e.blob));
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={};QueueEndpoint={};BlobEndpoint={}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY,
        table.endpoint_for(&e.table),
        e.queue,
        blob.endpoint_for(&e.blob),
    );
    let account = Account::from_connection_string(&cs)
        .expect("connection string")
        .with_http_client(client())
        .expect("client")
        .with_settings(settings())
        .expect("settings");
    Proxied {
        account,
        table,
        blob,
    }
}
