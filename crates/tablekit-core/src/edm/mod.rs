//! The Entity Data Model: typed values, and serde support for the Table JSON format.
//!
//! Ordinary `#[derive(Serialize, Deserialize)]` types are written with the `@odata.type`
//! annotations other SDKs expect and read back from JSON written by any SDK, with or without
//! annotations. See [`write_entity`] for the type mapping.

mod adapters;
mod bag;
mod de;
mod fields;
pub(crate) mod markers;
mod raw;
pub(crate) mod read;
mod ser;
pub(crate) mod value;

pub use adapters::{Binary, json};
pub use bag::{Properties, PropertyTypeError};
pub use fields::field_names;
pub use read::{
    from_properties, parse_entity, parse_page, parse_page_each, to_properties,
    to_properties_unbounded,
};
pub use ser::{EntityStats, to_entity_json, write_entity};
pub use value::{
    EdmType, EdmValue, check_datetime, format_datetime, max_datetime, min_datetime, parse_datetime,
    write_datetime,
};
