//! The Entity Data Model: typed values, and serde support for the Table JSON format.
//!
//! Ordinary `#[derive(Serialize, Deserialize)]` types are written with the `@odata.type`
//! annotations other SDKs expect and read back from JSON written by any SDK, with or without
//! annotations. See [`write_entity`] for the type mapping.

mod adapters;
pub(crate) mod bag;
mod de;
mod fields;
pub(crate) mod markers;
mod raw;
pub(crate) mod read;
mod ser;
pub(crate) mod value;

pub use adapters::{Binary, json};
// Named at the crate root (`tablekit_core::Properties`): one path per type.
pub(crate) use bag::Properties;
pub use read::{from_properties, to_properties};
pub use ser::EntityStats;
pub(crate) use value::{EdmType, EdmValue};
pub use value::{max_datetime, min_datetime};
// The JSON wire format of entities, for tablekit's own crates: not a public API.
#[doc(hidden)]
pub use fields::field_names;
#[doc(hidden)]
pub use read::{parse_entity, parse_page, parse_page_each, to_properties_unbounded};
#[doc(hidden)]
pub use ser::{to_entity_json, write_entity};
#[doc(hidden)]
pub use value::{check_datetime, format_datetime, parse_datetime, write_datetime};
