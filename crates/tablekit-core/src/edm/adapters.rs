//! Field adapters: [`Binary`] to force `Edm.Binary`, and [`json`] to store a nested value as a
//! JSON string in one property.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::markers::BINARY_MARKER;

/// Bytes stored as `Edm.Binary` whatever their length. A plain 16-byte byte string is
/// indistinguishable from a `uuid::Uuid` through serde and would be stored as `Edm.Guid`;
/// this wrapper removes the ambiguity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Binary(pub Vec<u8>);

struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

impl Serialize for Binary {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(BINARY_MARKER, &Bytes(&self.0))
    }
}

pub(crate) struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("binary data")
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(E::custom)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(out)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(self)
    }
}

impl<'de> Deserialize<'de> for Binary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct(BINARY_MARKER, BytesVisitor)
            .map(Binary)
    }
}

impl From<Vec<u8>> for Binary {
    fn from(v: Vec<u8>) -> Self {
        Binary(v)
    }
}

/// Stores any serde value as a JSON string in one `Edm.String` property — the guide's advice
/// for complex values (lists, nested objects). Use as
/// `#[serde(with = "tablekit_core::edm::json")]`. The 64 KiB property limit applies to the
/// JSON text.
pub mod json {
    use serde::de::{DeserializeOwned, Error as _};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Serializes `value` as JSON text.
    ///
    /// # Errors
    /// When `value` cannot be represented in JSON.
    pub fn serialize<T: Serialize + ?Sized, S: Serializer>(
        value: &T,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(value).map_err(S::Error::custom)?;
        s.serialize_str(&text)
    }

    /// Deserializes a value from JSON text.
    ///
    /// # Errors
    /// When the property is not a string holding JSON of type `T`.
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text).map_err(D::Error::custom)
    }
}
