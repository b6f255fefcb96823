//! Shared test setup: an account on the test storage (fresh metrics per call) and unique tables.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tablekit_azure::{Account, RetryPolicy, Settings, Table};
use tablekit_testkit::{TestStorage, unique_table_name};

/// A new account handle on the shared test storage, with its own metrics and a fast retry
/// schedule (tests inject faults; the 2/4/10/30 s default would only slow them down).
pub fn account() -> Account {
    let storage = TestStorage::shared().expect("test storage");
    let account =
        Account::from_connection_string(storage.connection_string()).expect("connection string");
    account
        .with_settings(Settings {
            retry: RetryPolicy::exponential(
                4,
                Duration::from_millis(20),
                Duration::from_millis(200),
            ),
            ..Settings::default()
        })
        .expect("settings")
}

/// A created table with a unique name.
pub async fn table(prefix: &str) -> Table {
    let table = account()
        .table(&unique_table_name(prefix))
        .expect("table name");
    table.create().await.expect("create table");
    table
}

/// The same table through another account handle (fresh metrics).
pub fn reopen(table: &Table) -> Table {
    account().table(table.name()).expect("table name")
}

/// An account whose table, queue and blob traffic passes through fault proxies in front of
/// the test emulator (started here if the shared storage is not a local emulator).
pub struct Proxied {
    pub account: Account,
    pub table: tablekit_testkit::FaultProxy,
    pub queue: tablekit_testkit::FaultProxy,
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

/// See [`Proxied`]; `settings` apply to the account.
pub fn proxied(settings: Settings) -> Proxied {
    let e = emulator_endpoints();
    let start =
        |endpoint: &str| tablekit_testkit::FaultProxy::start(socket(endpoint)).expect("proxy");
    let (table, queue, blob) = (start(&e.table), start(&e.queue), start(&e.blob));
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={};QueueEndpoint={};BlobEndpoint={}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY,
        table.endpoint_for(&e.table),
        queue.endpoint_for(&e.queue),
        blob.endpoint_for(&e.blob),
    );
    let account = Account::from_connection_string(&cs)
        .expect("connection string")
        .with_settings(settings)
        .expect("settings");
    Proxied {
        account,
        table,
        queue,
        blob,
    }
}

/// Fast retries for fault tests.
pub fn fast_retries() -> Settings {
    Settings {
        retry: RetryPolicy::exponential(4, Duration::from_millis(10), Duration::from_millis(100)),
        ..Settings::default()
    }
}
