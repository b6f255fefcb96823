//! Shared test setup: the testkit's fixtures (accounts with fresh metrics, unique tables and
//! containers, request-count assertions) and instants from text.
#![allow(dead_code, unused_imports, unreachable_pub)]

use chrono::{DateTime, Utc};
pub use tablekit_testkit::fixtures::{account, assert_requests, container, container_on, table};

/// An instant from RFC 3339 text.
pub fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .to_utc()
}
