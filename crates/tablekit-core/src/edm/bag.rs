//! [`Properties`]: a dynamic property bag for untyped access, keeping every value's EDM type.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::adapters::Binary;
use super::markers::EDM_VALUE_MARKER;
use super::value::{EdmType, EdmValue, format_datetime, parse_datetime};

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

    /// A string property's value.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(EdmValue::as_str)
    }

    /// An integer property's value (Int32 or Int64).
    pub fn get_i64(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(EdmValue::as_i64)
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
