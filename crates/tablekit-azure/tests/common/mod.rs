//! Shared test setup: the testkit's fixtures (accounts with fresh metrics, unique tables,
//! fault-proxied accounts).
#![allow(unused_imports, unreachable_pub)]

pub use tablekit_testkit::fixtures::{
    Proxied, account, account_with, fast_retries, proxied, reopen, table,
};
