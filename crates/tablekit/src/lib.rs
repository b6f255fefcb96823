#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub use tablekit_core as core;

/// The error every tablekit operation returns, and its result type (also at
/// `tablekit::core`); the prelude leaves them out so they never shadow `std`'s `Result`.
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

/// The types a service using tablekit needs most: `use tablekit::prelude::*;`.
pub mod prelude {
    pub use tablekit_core::batch::{BatchPlan, Operation};
    pub use tablekit_core::filter::Filter;
    pub use tablekit_core::filter::Property;
    pub use tablekit_core::keys::{
        CompoundKey, KeyRange, inverted_ticks, pad_number, prefix_range,
    };
    // `Error` and `Result` stay out: a glob import of `Result` would shadow `std`'s in every
    // module that uses the prelude. They are at the crate root (`tablekit::Result`).
    pub use tablekit_core::{
        AsEntity, ETag, EdmValue, Entity, ErrorKind, IfMatch, IntoKeys, Keys, OrUnknown,
        PartitionKey, Properties, QueryShape, RowKey, Stored, TableEntity,
    };
    /// The derive; `TableEntity` names both it and the trait.
    #[cfg(feature = "derive")]
    pub use tablekit_derive::TableEntity;

    #[cfg(feature = "azure")]
    pub use tablekit_azure::{
        Account, AccountBuilder, BulkOptions, Container, ContinuationToken, MessageTtl, PutBlob,
        PutOptions, Queue, RetryPolicy, ScanAction, ScanPolicy, Settings, Table, TablePermissions,
        TableSas, TokenScope, TypedTable,
    };
    #[cfg(feature = "encryption")]
    pub use tablekit_encryption::EncryptionPolicy;
    #[cfg(feature = "eventual")]
    pub use tablekit_eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions};
    #[cfg(feature = "index")]
    pub use tablekit_index::{
        CompoundRows, CopySpec, DenormalizedCopy, EntityKind, EventualList, IndexRead, IndexSpec,
        InterPartitionIndex, IntraPartitionIndex, ListSpec, SamePartitionList, SourceWrite,
        TypedRows,
    };
    #[cfg(feature = "large")]
    pub use tablekit_large::LargeEntities;
    #[cfg(feature = "logtail")]
    pub use tablekit_logtail::{BlobLogReader, BlobLogWriter, LogTail, SpreadLog};
    #[cfg(feature = "retention")]
    pub use tablekit_retention::{Period, PeriodTables};
    #[cfg(feature = "series")]
    pub use tablekit_series::{Series, SeriesLayout, WideEntities};
}
