//! Shared setup for the cross-crate scenarios.
#![allow(dead_code, unused_imports, unreachable_pub)]

use std::time::Duration;

use tablekit_azure::{Account, RetryPolicy, Settings, Table};
pub use tablekit_testkit::fixtures::{Proxied, proxied};
use tablekit_testkit::fixtures::{connection_string, emulator, table_on};

/// Retries fast and often: fault scenarios inject many failures and must converge quickly.
pub fn patient() -> Settings {
    Settings::default().with_retry(RetryPolicy::exponential(
        10,
        Duration::from_millis(5),
        Duration::from_millis(100),
    ))
}

/// An account on the loopback emulator (fault scenarios compare it with proxied accounts).
pub fn account(settings: Settings) -> Account {
    Account::from_connection_string(&connection_string(&emulator()))
        .unwrap()
        .with_settings(settings)
        .unwrap()
}

/// A created table with a unique name on `account`.
pub async fn table(account: &Account, prefix: &str) -> Table {
    table_on(account, prefix).await
}

/// The p-th percentile (0–100) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
