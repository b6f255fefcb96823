//! Shared test setup: accounts on the test storage, unique tables and containers, and an
//! account whose traffic passes through fault-injecting proxies.
#![allow(dead_code, unused_imports, unreachable_pub)]

use tablekit_azure::{Account, Container, Table};
use tablekit_core::{IntoKeys, Properties, Result};
use tablekit_large::{Large, LargeEntities};
pub use tablekit_testkit::fixtures::{Proxied, account, fast_retries};
use tablekit_testkit::fixtures::{container_on, table_on};

/// A created table and container with unique names on `account`.
pub async fn resources(account: &Account, prefix: &str) -> (Table, Container) {
    (
        table_on(account, prefix).await,
        container_on(account, &prefix.to_lowercase()).await,
    )
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
    store
        .container()
        .delete_container()
        .await
        .expect("delete container");
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

/// An account whose table, queue and blob traffic passes through fault proxies.
pub fn proxied() -> Proxied {
    tablekit_testkit::fixtures::proxied(fast_retries())
}

/// The entity at `keys` with its verified payload, its properties as stored.
pub async fn read_raw(
    store: &LargeEntities,
    keys: impl IntoKeys,
) -> Result<Option<Large<Properties>>> {
    store.get(keys).await
}
