//! Typed OData filters and the query shape they imply.

mod shape;

pub use shape::QueryShape;
