#![doc = include_str!("../README.md")]

pub mod edm;
pub mod error;
pub mod filter;
pub mod keys;
pub mod limits;

pub use edm::{EdmType, EdmValue};
pub use error::{Error, ErrorKind, KeyKind, Limit, NameKind, Result, Target};
pub use filter::QueryShape;
pub use keys::{Keys, PartitionKey, RowKey};
