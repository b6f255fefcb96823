//! The Entity Data Model: typed values and serde support for the Table JSON format.

mod value;

pub use value::{
    EdmType, EdmValue, check_datetime, format_datetime, max_datetime, min_datetime,
    parse_datetime, write_datetime,
};
