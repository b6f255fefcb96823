#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod address;
pub mod batch;
pub mod edm;
// The entity model and the error type are named at the crate root only: one path per type.
mod entity;
mod error;
pub mod filter;
pub mod keys;
pub mod limits;
mod query_shape;
mod table_entity;
#[doc(hidden)]
pub mod wire;

/// Support for the code `#[derive(TableEntity)]` generates; not a public API.
#[doc(hidden)]
#[path = "derive_support.rs"]
pub mod __private;

// Named by their module (`batch::BatchPlan`); these paths stay for tablekit's own crates.
pub use address::{Keys, PartitionKey, RowKey};
#[doc(hidden)]
pub use batch::{BatchPlan, Operation, OperationKind};
pub use edm::bag::{Properties, PropertyTypeError};
pub use edm::value::{EdmType, EdmValue};
pub use entity::{ENTITY_TYPE, ETag, Entity, IfMatch, OrUnknown, Stored};
pub use error::{
    BoxError, ConnectionFailure, Error, ErrorKind, KeyKind, Limit, NameKind, RequestIds,
    ResourceKind, Result, Target, ThrottleScope,
};
pub use query_shape::QueryShape;
pub use table_entity::{AsEntity, IntoKeys, TableEntity};
