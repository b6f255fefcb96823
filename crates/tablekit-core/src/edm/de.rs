//! Serving serde `Deserialize` types from parsed entity properties.
//!
//! Reading is lenient where the data allows it: an `Edm.Int64` (a JSON string) reads into any
//! integer type, unannotated numeric strings (`nometadata` responses) read into numbers,
//! base64 text reads into bytes, and any scalar reads into a `String`.

use std::borrow::Cow;

use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

use super::markers::{BINARY_MARKER, EDM_VALUE_MARKER};
use super::raw::{Raw, RawProp};
use super::value::EdmType;
use crate::error::{Error, Target};

type Result<T> = std::result::Result<T, DeError>;

/// Why the EDM deserializer could not serve a value: converted into [`Error::Decode`] at the
/// edge of the module. It keeps apart the two failures that mean "an entity of another type"
/// rather than "a malformed entity of this type" — a missing field and an unknown enum
/// variant — so that [`crate::OrUnknown`] can fall back on exactly those.
#[derive(Debug)]
pub(crate) struct DeError {
    /// The property being read; empty until known.
    pub(crate) property: String,
    pub(crate) reason: String,
    pub(crate) cause: Cause,
}

/// What kind of failure a [`DeError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A value of the wrong type, malformed text, anything else.
    Other,
    /// A required field (serde's `missing_field`), by name.
    MissingField(&'static str),
    /// An enum variant name the target type does not know (serde's `unknown_variant`).
    UnknownVariant,
}

impl DeError {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            property: String::new(),
            reason: reason.into(),
            cause: Cause::Other,
        }
    }

    /// Whether this error says that the entity's `discriminator` property is missing, or
    /// names a variant the target type does not know.
    pub(crate) fn is_unknown_discriminator(&self, discriminator: &str) -> bool {
        match self.cause {
            Cause::MissingField(field) => field == discriminator,
            Cause::UnknownVariant => self.property == discriminator,
            Cause::Other => false,
        }
    }

    /// The [`Error::Decode`] this is, for the entity at `target`.
    pub(crate) fn into_error(self, target: Target) -> Error {
        Error::Decode {
            target,
            property: self.property,
            reason: self.reason,
        }
    }
}

impl std::fmt::Display for DeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.property.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "property `{}`: {}", self.property, self.reason)
        }
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        let text = msg.to_string();
        // A `DeError` that went through a `Deserialize` impl generic over the deserializer
        // (`OrUnknown`) comes back as its `Display`: take the property back out of it.
        if let Some((property, reason)) = text
            .strip_prefix("property `")
            .and_then(|rest| rest.split_once("`: "))
        {
            return Self {
                property: property.to_owned(),
                reason: reason.to_owned(),
                cause: Cause::Other,
            };
        }
        Self::new(text)
    }

    fn missing_field(field: &'static str) -> Self {
        Self {
            property: field.to_owned(),
            reason: format!("missing property `{field}`"),
            cause: Cause::MissingField(field),
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let reason = if expected.is_empty() {
            format!("unknown variant `{variant}`, there are no variants")
        } else {
            format!(
                "unknown variant `{variant}`, expected one of {}",
                expected
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        Self {
            property: String::new(),
            reason,
            cause: Cause::UnknownVariant,
        }
    }
}

impl From<DeError> for Error {
    fn from(e: DeError) -> Self {
        e.into_error(Target::default())
    }
}

fn with_property(mut e: DeError, name: &str) -> DeError {
    if e.property.is_empty() {
        e.property = name.to_owned();
    }
    e
}

/// Deserializes a whole entity (its user properties) as a struct or map.
pub(crate) struct EntityDeserializer<'de> {
    pub(crate) props: std::vec::IntoIter<RawProp<'de>>,
}

impl<'de> Deserializer<'de> for EntityDeserializer<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_map(PropsAccess {
            props: self.props,
            pending: None,
        })
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

struct PropsAccess<'de> {
    props: std::vec::IntoIter<RawProp<'de>>,
    pending: Option<RawProp<'de>>,
}

impl<'de> MapAccess<'de> for PropsAccess<'de> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        let Some(prop) = self.props.next() else {
            return Ok(None);
        };
        let key = match &prop.name {
            Cow::Borrowed(b) => seed.deserialize(de::value::BorrowedStrDeserializer::new(b)),
            Cow::Owned(o) => seed.deserialize(de::value::StrDeserializer::new(o)),
        }?;
        self.pending = Some(prop);
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        let prop = self
            .pending
            .take()
            .ok_or_else(|| DeError::new("value without key"))?;
        let name = prop.name.clone();
        seed.deserialize(PropDe { prop })
            .map_err(|e| with_property(e, &name))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.props.len())
    }
}

/// One property value, deserialized according to what the target type asks for.
pub(crate) struct PropDe<'de> {
    pub(crate) prop: RawProp<'de>,
}

fn parse_num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T> {
    s.trim()
        .parse()
        .map_err(|_| DeError::new(format!("{s:?} is not a valid {what}")))
}

fn special_double(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "Infinity" | "INF" => Some(f64::INFINITY),
        "-Infinity" | "-INF" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

impl<'de> PropDe<'de> {
    fn ty(&self) -> EdmType {
        self.prop.edm_type()
    }

    fn visit_string<V: Visitor<'de>>(s: Cow<'de, str>, visitor: V) -> Result<V::Value> {
        match s {
            Cow::Borrowed(b) => visitor.visit_borrowed_str(b),
            Cow::Owned(o) => visitor.visit_string(o),
        }
    }

    /// The bytes of a Binary (or base64 text, or a Guid's 16 bytes), if the value has some.
    fn bytes(&self) -> Option<Vec<u8>> {
        match (&self.prop.value, self.ty()) {
            (Raw::Bytes(b), _) => Some(b.to_vec()),
            (Raw::Str(s), EdmType::Guid) => {
                uuid::Uuid::parse_str(s).ok().map(|u| u.as_bytes().to_vec())
            }
            (Raw::Str(s), EdmType::Binary | EdmType::String) => decode_base64(s),
            _ => None,
        }
    }

    fn integer<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.prop.value {
            Raw::I64(n) => visitor.visit_i64(n),
            Raw::U64(n) => visitor.visit_u64(n),
            Raw::Str(s) if s.starts_with('-') => visitor.visit_i64(parse_num(&s, "integer")?),
            Raw::Str(s) => visitor.visit_u64(parse_num(&s, "integer")?),
            Raw::F64(f) if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => {
                visitor.visit_i64(f as i64)
            }
            _ => self.any(visitor),
        }
    }

    fn any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let ty = self.ty();
        match (self.prop.value, ty) {
            (Raw::Null, _) => visitor.visit_unit(),
            (Raw::Bool(b), _) => visitor.visit_bool(b),
            (Raw::I64(n), EdmType::Double) => visitor.visit_f64(n as f64),
            (Raw::I64(n), _) => match i32::try_from(n) {
                Ok(small) if ty == EdmType::Int32 => visitor.visit_i32(small),
                _ => visitor.visit_i64(n),
            },
            (Raw::U64(n), _) => visitor.visit_u64(n),
            (Raw::F64(f), _) => visitor.visit_f64(f),
            (Raw::Bytes(b), _) => visitor.visit_byte_buf(b.into_owned()),
            (Raw::Str(s), EdmType::Int64) => visitor.visit_i64(parse_num(&s, "Edm.Int64")?),
            (Raw::Str(s), EdmType::Int32) => visitor.visit_i32(parse_num(&s, "Edm.Int32")?),
            (Raw::Str(s), EdmType::Double) => visitor
                .visit_f64(special_double(&s).map_or_else(|| parse_num(&s, "Edm.Double"), Ok)?),
            (Raw::Str(s), EdmType::Boolean) => visitor.visit_bool(parse_num(&s, "Edm.Boolean")?),
            (Raw::Str(s), EdmType::Binary) => match decode_base64(&s) {
                Some(bytes) => visitor.visit_byte_buf(bytes),
                None => Err(DeError::new("Edm.Binary value is not valid base64")),
            },
            (Raw::Str(s), _) => Self::visit_string(s, visitor),
        }
    }
}

macro_rules! via_integer {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            self.integer(visitor)
        }
    )*};
}

impl<'de> Deserializer<'de> for PropDe<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.any(visitor)
    }

    via_integer!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128);

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.prop.value {
            Raw::I64(n) => visitor.visit_f64(n as f64),
            Raw::U64(n) => visitor.visit_f64(n as f64),
            Raw::F64(f) => visitor.visit_f64(f),
            Raw::Str(s) => {
                visitor.visit_f64(special_double(&s).map_or_else(|| parse_num(&s, "number"), Ok)?)
            }
            _ => self.any(visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.prop.value {
            Raw::Str(s) => visitor.visit_bool(parse_num(&s, "boolean")?),
            _ => self.any(visitor),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.prop.value {
            Raw::Str(s) => Self::visit_string(s, visitor),
            Raw::I64(n) => visitor.visit_string(n.to_string()),
            Raw::U64(n) => visitor.visit_string(n.to_string()),
            Raw::F64(f) => visitor.visit_string(f.to_string()),
            Raw::Bool(b) => visitor.visit_string(b.to_string()),
            Raw::Bytes(b) => {
                use base64::Engine as _;
                visitor.visit_string(base64::engine::general_purpose::STANDARD.encode(b))
            }
            Raw::Null => visitor.visit_unit(),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.bytes() {
            Some(bytes) => visitor.visit_byte_buf(bytes),
            None => self.any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.bytes() {
            Some(bytes) => visitor.visit_seq(de::value::SeqDeserializer::<_, DeError>::new(
                bytes.into_iter(),
            )),
            None => Err(DeError::new(format!(
                "a {} property cannot be read as a sequence (store lists with tablekit_core::edm::json)",
                self.ty()
            ))),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.prop.value {
            Raw::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        if name == EDM_VALUE_MARKER {
            let ty = self.ty();
            return visitor.visit_seq(TypedPair {
                ty: Some(ty),
                value: Some(self),
            });
        }
        if name == BINARY_MARKER {
            return visitor.visit_newtype_struct(self);
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        match self.prop.value {
            Raw::Str(s) => visitor.visit_enum(s.into_owned().into_deserializer()),
            _ => Err(DeError::new(
                "an enum is stored as the variant's name (a string)",
            )),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(DeError::new(
            "a property cannot be read as a map or struct (store nested values with tablekit_core::edm::json)",
        ))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_map(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }
}

/// The `(type name, value)` protocol used by [`super::EdmValue`]'s `Deserialize`.
struct TypedPair<'de> {
    ty: Option<EdmType>,
    value: Option<PropDe<'de>>,
}

impl<'de> SeqAccess<'de> for TypedPair<'de> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if let Some(ty) = self.ty.take() {
            return seed
                .deserialize(de::value::BorrowedStrDeserializer::new(ty.as_str()))
                .map(Some);
        }
        match self.value.take() {
            Some(value) => seed.deserialize(value).map(Some),
            None => Ok(None),
        }
    }
}
