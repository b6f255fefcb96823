#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use tablekit_core as core;

/// The error every tablekit operation returns, and its result type (also at
/// `tablekit::core`); the prelude has `Error` but not `Result`, which would shadow `std`'s.
pub use tablekit_core::{Error, ErrorKind, Result};

// The repository README's quickstart compiles as a doctest of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct RepositoryReadme;

/// `#[derive(TableEntity)]`: keys from fields, PascalCase property names, property constants.
/// The trait of the same name is [`core::TableEntity`].
#[cfg(feature = "derive")]
pub use tablekit_derive::TableEntity;

#[cfg(feature = "azure")]
#[doc(inline)]
pub use tablekit_azure as azure;

#[cfg(feature = "encryption")]
#[doc(inline)]
pub use tablekit_encryption as encryption;

#[cfg(feature = "eventual")]
#[doc(inline)]
pub use tablekit_eventual as eventual;

#[cfg(feature = "index")]
#[doc(inline)]
pub use tablekit_index as index;

#[cfg(feature = "large")]
#[doc(inline)]
pub use tablekit_large as large;

#[cfg(feature = "logtail")]
#[doc(inline)]
pub use tablekit_logtail as logtail;

#[cfg(feature = "retention")]
#[doc(inline)]
pub use tablekit_retention as retention;

#[cfg(feature = "series")]
#[doc(inline)]
pub use tablekit_series as series;

#[cfg(feature = "testkit")]
#[doc(inline)]
pub use tablekit_testkit as testkit;

/// The names of the core path — account, tables, keys, entities, filters, conditions, errors:
/// `use tablekit::prelude::*;`.
///
/// 21 names, no more: the prelude is what a service using tablekit names in most modules.
/// Patterns are used by their module path (`tablekit::index::IntraPartitionIndex`,
/// `tablekit::logtail::LogTail`, …), and the rest of the core by its crate
/// (`tablekit::core::batch::BatchPlan`, `tablekit::core::keys::CompoundKey`,
/// `tablekit::azure::Settings`, `tablekit::azure::ShardedAccount`), so that a glob import
/// stays small enough to know by heart and a name's module says which pattern it belongs to.
/// `Result` stays out: a glob import of it would shadow `std`'s in every module that uses the
/// prelude; it is `tablekit::Result`.
pub mod prelude {
    pub use tablekit_core::filter::{Filter, Property};
    pub use tablekit_core::{
        AsEntity, ETag, Entity, Error, ErrorKind, IfMatch, IntoKeys, Keys, Properties, Stored,
        TableEntity,
    };
    /// The derive; `TableEntity` names both it and the trait.
    #[cfg(feature = "derive")]
    pub use tablekit_derive::TableEntity;

    #[cfg(feature = "azure")]
    pub use tablekit_azure::{
        Account, BulkOptions, ContinuationToken, Page, Query, Table, TypedTable, WriteMode,
    };
}
