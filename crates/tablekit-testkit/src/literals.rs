//! The values tests build are `#[non_exhaustive]`: a field can be added in a minor release,
//! so code outside the crate builds them with their constructors and setters. These checks
//! fail when a struct literal compiles again.
//!
//! ```compile_fail,E0639
//! use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};
//! let _ = Rule { matcher: Matcher::any(), occurrences: Occurrences::All, fault: Fault::Reset };
//! ```
//!
//! ```compile_fail,E0639
//! use tablekit_testkit::Matcher;
//! let _ = Matcher { method: None, path_contains: None, query_contains: None };
//! ```
//!
//! ```compile_fail,E0639
//! use std::time::Duration;
//! use tablekit_testkit::{ThrottleMode, ThrottleModel};
//! let _ = ThrottleModel {
//!     per_partition: 1.0,
//!     per_account: 1.0,
//!     burst: Duration::from_secs(1),
//!     mode: ThrottleMode::ServerBusy,
//! };
//! ```
//!
//! ```compile_fail,E0639
//! use tablekit_testkit::Endpoints;
//! let _ = Endpoints { blob: String::new(), queue: String::new(), table: String::new() };
//! ```
//!
//! The constructors build the same values:
//!
//! ```
//! use tablekit_testkit::{Endpoints, Fault, Matcher, Occurrences, Rule, ThrottleModel};
//! let rule = Rule::new(Matcher::any(), Occurrences::All, Fault::Reset);
//! assert_eq!(rule.occurrences, Occurrences::All);
//! let model = ThrottleModel::default().with_per_partition(1.0);
//! assert_eq!(model.per_partition, 1.0);
//! let endpoints = Endpoints::new("b", "q", "t");
//! assert_eq!(endpoints.table, "t");
//! ```
