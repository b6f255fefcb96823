//! Shared setup for the cross-crate scenarios.
#![allow(dead_code, unreachable_pub)]

use std::sync::OnceLock;
use std::time::Duration;

use tablekit_azure::{Account, RetryPolicy, Settings, Table};
use tablekit_testkit::{Azurite, Endpoints, FaultProxy, TestStorage, unique_table_name};

/// The emulator the scenarios use: the shared one, or one of our own when the shared storage
/// is a real account (fault injection needs loopback).
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

pub fn connection_string(e: &Endpoints) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint={};QueueEndpoint={};BlobEndpoint={}",
        tablekit_testkit::ACCOUNT,
        tablekit_testkit::ACCOUNT_KEY,
        e.table,
        e.queue,
        e.blob
    )
}

/// Retries fast and often: fault scenarios inject many failures and must converge quickly.
pub fn patient() -> Settings {
    Settings {
        retry: RetryPolicy::exponential(10, Duration::from_millis(5), Duration::from_millis(100)),
        ..Settings::default()
    }
}

pub fn account(settings: Settings) -> Account {
    Account::from_connection_string(&connection_string(&emulator()))
        .unwrap()
        .with_settings(settings)
        .unwrap()
}

pub async fn table(account: &Account, prefix: &str) -> Table {
    let table = account.table(&unique_table_name(prefix)).unwrap();
    table.create().await.unwrap();
    table
}

fn socket(endpoint: &str) -> std::net::SocketAddr {
    endpoint
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .parse()
        .unwrap()
}

/// Fault proxies in front of each service, and an account that uses them.
pub struct Proxied {
    pub account: Account,
    pub table: FaultProxy,
    pub queue: FaultProxy,
    pub blob: FaultProxy,
}

pub fn proxied(settings: Settings) -> Proxied {
    let e = emulator();
    let start = |endpoint: &str| FaultProxy::start(socket(endpoint)).unwrap();
    let (table, queue, blob) = (start(&e.table), start(&e.queue), start(&e.blob));
    let through = Endpoints {
        table: table.endpoint_for(&e.table),
        queue: queue.endpoint_for(&e.queue),
        blob: blob.endpoint_for(&e.blob),
    };
    let account = Account::from_connection_string(&connection_string(&through))
        .unwrap()
        .with_settings(settings)
        .unwrap();
    Proxied {
        account,
        table,
        queue,
        blob,
    }
}

/// The p-th percentile (0–100) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
