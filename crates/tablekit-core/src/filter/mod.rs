//! Typed OData filters and the query shape they imply.
//!
//! [`Filter`] builds `$filter` expressions from typed values, renders them with correct
//! literal escaping ([`Filter::render`]), parses the same subset back ([`Filter::parse`]) and
//! classifies them by cost ([`Filter::shape`]). [`Property`] binds a property name to its Rust
//! type, so comparisons accept only values of that type.

mod ast;
mod parse;
mod property;
mod render;
mod shape;

pub use ast::{CmpOp, Filter, PARTITION_KEY, ROW_KEY, RawFilter};
pub use property::{FilterValue, Property, Untyped};
