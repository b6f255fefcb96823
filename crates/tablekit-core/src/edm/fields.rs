//! The property names a type reads, for `$select` projection derived from the target type.

use std::cell::Cell;

use serde::de::{self, DeserializeOwned, Visitor};

/// The field names `T` deserializes (after `#[serde(rename)]`), if `T` is a plain struct.
/// Returns `None` for maps, enums and types with `#[serde(flatten)]`, whose properties cannot
/// be known in advance; a query should then select everything.
pub fn field_names<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let seen = Cell::new(None);
    let _ = T::deserialize(Probe(&seen));
    seen.get()
}

struct Probe<'a>(&'a Cell<Option<&'static [&'static str]>>);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field probe")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0.set(Some(fields));
        Err(Stop)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Emp {
        #[serde(rename = "Email")]
        email: String,
        age: Option<i32>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Flat {
        #[serde(flatten)]
        rest: std::collections::HashMap<String, String>,
    }

    #[test]
    fn struct_fields_are_found_and_open_shapes_are_not() {
        assert_eq!(field_names::<Emp>(), Some(&["Email", "age"][..]));
        assert_eq!(field_names::<Flat>(), None);
        assert_eq!(field_names::<crate::Properties>(), None);
    }
}
