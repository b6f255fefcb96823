//! Shared test setup: the testkit's fixtures (accounts with fresh metrics, unique tables,
//! request-count assertions), table prefixes and instants from text.
#![allow(dead_code, unused_imports, unreachable_pub)]

use chrono::{DateTime, Utc};
pub use tablekit_testkit::fixtures::{account, assert_requests, table};
use tablekit_testkit::unique_table_name;

/// A unique prefix for a set of period tables (ends with a letter, as required).
pub fn prefix(base: &str) -> String {
    format!("{}T", unique_table_name(base))
}

/// An instant from RFC 3339 text.
pub fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .to_utc()
}
