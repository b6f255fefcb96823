//! [`Properties`]: a dynamic property bag for untyped access, keeping every value's EDM type.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::adapters::Binary;
use super::markers::EDM_VALUE_MARKER;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::value::{EdmType, EdmValue, format_datetime, parse_datetime};
use crate::error::{Error, Target};

/// A dynamic set of typed properties (the user properties of an entity, without keys or
/// Timestamp). Read any entity as `Stored<Properties>` to inspect it without a Rust type;
/// write one as `Entity<Properties>`. Types survive a round trip through tablekit (an
/// `Edm.DateTime` stays a DateTime, an `Edm.Int64` an Int64).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties(BTreeMap<String, EdmValue>);

impl Properties {
    /// An empty bag.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of a property.
    pub fn get(&self, name: &str) -> Option<&EdmValue> {
        self.0.get(name)
    }

    /// An `Edm.String` property's value: `Ok(None)` when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type.
    ///
    /// ```
    /// use tablekit_core::Properties;
    ///
    /// let bag = Properties::new().with("Name", "Jun").with("Age", 47);
    /// assert_eq!(bag.get_str("Name"), Ok(Some("Jun")));
    /// assert_eq!(bag.get_str("Email"), Ok(None));
    /// assert!(bag.get_str("Age").is_err());
    /// ```
    pub fn get_str(&self, name: &str) -> Result<Option<&str>, PropertyTypeError> {
        self.typed(name, EdmType::String, EdmValue::as_str)
    }

    /// An integer property's value, `Edm.Int64` or an `Edm.Int32` widened: `Ok(None)` when the
    /// bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type.
    pub fn get_i64(&self, name: &str) -> Result<Option<i64>, PropertyTypeError> {
        self.typed(name, EdmType::Int64, EdmValue::as_i64)
    }

    /// An `Edm.Int32` property's value: `Ok(None)` when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type (an `Edm.Int64` too, even
    /// one that would fit).
    ///
    /// ```
    /// use tablekit_core::{EdmType, Properties};
    ///
    /// let bag = Properties::new().with("Age", 47).with("Name", "Jun");
    /// assert_eq!(bag.get_i32("Age"), Ok(Some(47)));
    /// assert_eq!(bag.get_i32("Height"), Ok(None));
    /// let wrong = bag.get_i32("Name").unwrap_err();
    /// assert_eq!((wrong.property(), wrong.found()), ("Name", EdmType::String));
    /// ```
    pub fn get_i32(&self, name: &str) -> Result<Option<i32>, PropertyTypeError> {
        self.typed(name, EdmType::Int32, |v| match v {
            EdmValue::Int32(v) => Some(*v),
            _ => None,
        })
    }

    /// An `Edm.Double` property's value, or an `Edm.Int32` one converted (exactly): `Ok(None)`
    /// when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type — an `Edm.Int64` too, which
    /// a double cannot always hold exactly.
    pub fn get_f64(&self, name: &str) -> Result<Option<f64>, PropertyTypeError> {
        self.typed(name, EdmType::Double, |v| match v {
            EdmValue::Double(v) => Some(*v),
            EdmValue::Int32(v) => Some(f64::from(*v)),
            _ => None,
        })
    }

    /// An `Edm.Boolean` property's value: `Ok(None)` when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type.
    pub fn get_bool(&self, name: &str) -> Result<Option<bool>, PropertyTypeError> {
        self.typed(name, EdmType::Boolean, EdmValue::as_bool)
    }

    /// An `Edm.DateTime` property's value: `Ok(None)` when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type (a string in RFC 3339 form
    /// too: it was stored as an `Edm.String`).
    pub fn get_datetime(&self, name: &str) -> Result<Option<DateTime<Utc>>, PropertyTypeError> {
        self.typed(name, EdmType::DateTime, EdmValue::as_datetime)
    }

    /// An `Edm.Guid` property's value: `Ok(None)` when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type (a string spelling a GUID
    /// too).
    pub fn get_guid(&self, name: &str) -> Result<Option<Uuid>, PropertyTypeError> {
        self.typed(name, EdmType::Guid, EdmValue::as_guid)
    }

    /// An `Edm.Binary` property's bytes: `Ok(None)` when the bag has no such property.
    ///
    /// # Errors
    /// [`PropertyTypeError`] when the property holds another type.
    pub fn get_binary(&self, name: &str) -> Result<Option<&[u8]>, PropertyTypeError> {
        self.typed(name, EdmType::Binary, EdmValue::as_bytes)
    }

    fn typed<'a, T>(
        &'a self,
        name: &str,
        expected: EdmType,
        read: impl FnOnce(&'a EdmValue) -> Option<T>,
    ) -> Result<Option<T>, PropertyTypeError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        read(value).map(Some).ok_or_else(|| PropertyTypeError {
            property: name.to_owned(),
            expected,
            found: value.edm_type(),
        })
    }

    /// Sets a property, returning the previous value.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<EdmValue>,
    ) -> Option<EdmValue> {
        self.0.insert(name.into(), value.into())
    }

    /// Sets a property and returns the bag (builder style).
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<EdmValue>) -> Self {
        self.insert(name, value);
        self
    }

    /// Removes a property.
    pub fn remove(&mut self, name: &str) -> Option<EdmValue> {
        self.0.remove(name)
    }

    /// Whether the bag has a property.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Number of properties.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the bag is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The properties in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &EdmValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// A property of a [`Properties`] bag holds another EDM type than a typed getter reads
/// (`get_i32` of an `Edm.String`, say). A missing property is not this error: the getters
/// return `Ok(None)` for it.
///
/// Converts into [`Error::Decode`](crate::Error::Decode) naming the property, so `?` works in
/// functions returning [`tablekit_core::Result`](crate::Result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("property {property} is an {found}, not an {expected}")]
pub struct PropertyTypeError {
    property: String,
    expected: EdmType,
    found: EdmType,
}

impl PropertyTypeError {
    /// The property's name.
    pub fn property(&self) -> &str {
        &self.property
    }

    /// The type the getter reads (for `get_f64`, `Edm.Double`, though it takes an `Edm.Int32`
    /// too).
    pub fn expected(&self) -> EdmType {
        self.expected
    }

    /// The type the property holds.
    pub fn found(&self) -> EdmType {
        self.found
    }
}

impl From<PropertyTypeError> for Error {
    fn from(e: PropertyTypeError) -> Self {
        let reason = format!("is an {}, not an {}", e.found, e.expected);
        Error::decode(Target::default(), e.property, reason)
    }
}

impl FromIterator<(String, EdmValue)> for Properties {
    fn from_iter<I: IntoIterator<Item = (String, EdmValue)>>(iter: I) -> Self {
        Properties(iter.into_iter().collect())
    }
}

impl IntoIterator for Properties {
    type Item = (String, EdmValue);
    type IntoIter = std::collections::btree_map::IntoIter<String, EdmValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl Serialize for Properties {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Properties {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Properties;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of properties")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Properties, A::Error> {
                let mut out = BTreeMap::new();
                // The service stores no nulls; Azure answers a projection naming a property
                // an entity lacks with a null, which is read as the absence it stands for.
                while let Some((k, v)) = map.next_entry::<String, Option<EdmValue>>()? {
                    if let Some(v) = v {
                        out.insert(k, v);
                    }
                }
                Ok(Properties(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for EdmValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            EdmValue::String(v) => s.serialize_str(v),
            EdmValue::Int32(v) => s.serialize_i32(*v),
            EdmValue::Int64(v) => s.serialize_i64(*v),
            EdmValue::Double(v) => s.serialize_f64(*v),
            EdmValue::Boolean(v) => s.serialize_bool(*v),
            // `collect_str` of RFC 3339 text is how tablekit's writer recognises a DateTime.
            EdmValue::DateTime(v) => s.collect_str(&format_datetime(v)),
            EdmValue::Guid(v) => v.serialize(s),
            EdmValue::Binary(v) => Binary(v.clone()).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for EdmValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct(EDM_VALUE_MARKER, EdmValueVisitor)
    }
}

struct EdmValueVisitor;

impl<'de> Visitor<'de> for EdmValueVisitor {
    type Value = EdmValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a property value")
    }

    /// tablekit's deserializer: a `(type name, value)` pair.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EdmValue, A::Error> {
        let name: String = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("missing EDM type"))?;
        let ty = EdmType::parse(&name)
            .ok_or_else(|| de::Error::custom(format!("unknown EDM type {name}")))?;
        let missing = || de::Error::custom("missing value");
        Ok(match ty {
            EdmType::String => EdmValue::String(seq.next_element()?.ok_or_else(missing)?),
            EdmType::Int32 => EdmValue::Int32(seq.next_element()?.ok_or_else(missing)?),
            EdmType::Int64 => EdmValue::Int64(seq.next_element()?.ok_or_else(missing)?),
            EdmType::Double => EdmValue::Double(seq.next_element()?.ok_or_else(missing)?),
            EdmType::Boolean => EdmValue::Boolean(seq.next_element()?.ok_or_else(missing)?),
            EdmType::DateTime => {
                let text: String = seq.next_element()?.ok_or_else(missing)?;
                EdmValue::DateTime(
                    parse_datetime(&text)
                        .ok_or_else(|| de::Error::custom("malformed Edm.DateTime"))?,
                )
            }
            EdmType::Guid => {
                let text: String = seq.next_element()?.ok_or_else(missing)?;
                EdmValue::Guid(uuid::Uuid::parse_str(&text).map_err(de::Error::custom)?)
            }
            EdmType::Binary => {
                EdmValue::Binary(seq.next_element::<Binary>()?.ok_or_else(missing)?.0)
            }
        })
    }

    /// Any other deserializer: infer the type from the data.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<EdmValue, D::Error> {
        d.deserialize_any(InferVisitor)
    }
}

struct InferVisitor;

impl<'de> Visitor<'de> for InferVisitor {
    type Value = EdmValue;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar property value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<EdmValue, E> {
        Ok(EdmValue::Boolean(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<EdmValue, E> {
        Ok(i32::try_from(v).map_or(EdmValue::Int64(v), EdmValue::Int32))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<EdmValue, E> {
        i64::try_from(v)
            .map(|v| self.visit_i64(v))
            .map_err(|_| E::custom("integer above i64::MAX"))?
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<EdmValue, E> {
        Ok(EdmValue::Double(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<EdmValue, E> {
        Ok(EdmValue::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<EdmValue, E> {
        Ok(EdmValue::String(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<EdmValue, E> {
        Ok(EdmValue::Binary(v.to_vec()))
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<EdmValue, E> {
        Ok(EdmValue::Binary(v))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;
    use crate::ErrorKind;

    fn bag() -> Properties {
        Properties::new()
            .with("S", "text")
            .with("I32", 7_i32)
            .with("I64", 1_i64 << 40)
            .with("D", 2.5_f64)
            .with("B", true)
            .with("T", Utc.with_ymd_and_hms(2026, 11, 27, 10, 0, 0).unwrap())
            .with("G", Uuid::from_u128(0x1234))
            .with("Bin", vec![0_u8, 1, 255])
    }

    /// The type error of reading `property` as `expected`, or a panic.
    fn mismatch<T: fmt::Debug>(
        got: Result<Option<T>, PropertyTypeError>,
        property: &str,
        expected: EdmType,
        found: EdmType,
    ) {
        let e = got.unwrap_err();
        assert_eq!(
            (e.property(), e.expected(), e.found()),
            (property, expected, found)
        );
    }

    #[test]
    fn get_i32_reads_int32_only() {
        let b = bag();
        assert_eq!(b.get_i32("I32"), Ok(Some(7)));
        assert_eq!(b.get_i32("Missing"), Ok(None));
        mismatch(b.get_i32("I64"), "I64", EdmType::Int32, EdmType::Int64);
        mismatch(b.get_i32("S"), "S", EdmType::Int32, EdmType::String);
    }

    #[test]
    fn get_f64_reads_doubles_and_exact_int32s_but_not_int64s() {
        let b = bag();
        assert_eq!(b.get_f64("D"), Ok(Some(2.5)));
        assert_eq!(b.get_f64("I32"), Ok(Some(7.0)));
        assert_eq!(b.get_f64("Missing"), Ok(None));
        mismatch(b.get_f64("I64"), "I64", EdmType::Double, EdmType::Int64);
        mismatch(b.get_f64("B"), "B", EdmType::Double, EdmType::Boolean);
    }

    #[test]
    fn get_bool_reads_booleans_only() {
        let b = bag();
        assert_eq!(b.get_bool("B"), Ok(Some(true)));
        assert_eq!(b.get_bool("Missing"), Ok(None));
        mismatch(b.get_bool("I32"), "I32", EdmType::Boolean, EdmType::Int32);
    }

    #[test]
    fn get_datetime_reads_datetimes_not_their_text() {
        let b = bag().with("Text", "2026-11-27T10:00:00Z");
        let at = Utc.with_ymd_and_hms(2026, 11, 27, 10, 0, 0).unwrap();
        assert_eq!(b.get_datetime("T"), Ok(Some(at)));
        assert_eq!(b.get_datetime("Missing"), Ok(None));
        mismatch(
            b.get_datetime("Text"),
            "Text",
            EdmType::DateTime,
            EdmType::String,
        );
    }

    #[test]
    fn get_guid_reads_guids_not_their_text() {
        let b = bag().with("Text", Uuid::from_u128(0x1234).to_string());
        assert_eq!(b.get_guid("G"), Ok(Some(Uuid::from_u128(0x1234))));
        assert_eq!(b.get_guid("Missing"), Ok(None));
        mismatch(b.get_guid("Text"), "Text", EdmType::Guid, EdmType::String);
    }

    #[test]
    fn get_binary_reads_bytes_only() {
        let b = bag();
        assert_eq!(b.get_binary("Bin"), Ok(Some(&[0_u8, 1, 255][..])));
        assert_eq!(b.get_binary("Missing"), Ok(None));
        mismatch(b.get_binary("S"), "S", EdmType::Binary, EdmType::String);
    }

    #[test]
    fn get_str_and_get_i64_tell_a_missing_property_from_a_mistyped_one() {
        let b = bag();
        assert_eq!(b.get_str("S"), Ok(Some("text")));
        assert_eq!(b.get_str("Missing"), Ok(None));
        mismatch(b.get_str("I32"), "I32", EdmType::String, EdmType::Int32);
        assert_eq!(b.get_i64("I64"), Ok(Some(1 << 40)));
        assert_eq!(b.get_i64("I32"), Ok(Some(7)), "an Int32 widens");
        mismatch(b.get_i64("S"), "S", EdmType::Int64, EdmType::String);
        assert_eq!(b.get_i64("Missing"), Ok(None));
    }

    #[test]
    fn a_type_error_is_a_decode_error_naming_the_property_and_both_types() {
        fn age(b: &Properties) -> crate::Result<Option<i32>> {
            Ok(b.get_i32("S")?)
        }
        let e = age(&bag()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Decode);
        let text = e.to_string();
        assert!(
            text.contains('S') && text.contains("Edm.String") && text.contains("Edm.Int32"),
            "{text}"
        );
        let direct = bag().get_i32("S").unwrap_err().to_string();
        assert_eq!(direct, "property S is an Edm.String, not an Edm.Int32");
    }
}
