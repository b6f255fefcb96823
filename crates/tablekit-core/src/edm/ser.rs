//! Writing entities in the Table JSON format, with `@odata.type` annotations, in one pass.
//!
//! Serde does not tell a serializer the Rust type of a value, so types are recognised by the
//! calls serde makes:
//! - `i64`, `u32`, `u64` (≤ `i64::MAX`), `i128`/`u128` in range → `Edm.Int64` (a JSON string
//!   plus annotation: other SDKs and JavaScript lose precision above 2^53 otherwise);
//! - `i8`–`i32`, `u8`, `u16` → `Edm.Int32`; `f32`/`f64` → `Edm.Double` (NaN and ±∞ allowed);
//! - values serialized through `collect_str` that are RFC 3339 timestamps (this is how
//!   `chrono::DateTime` serializes) → `Edm.DateTime`; other `collect_str` values → strings;
//! - byte strings (`serde_bytes`, [`Binary`](super::Binary)) and sequences of `u8`
//!   (`Vec<u8>`) → `Edm.Binary`. This serializer is not "human readable", which makes
//!   `uuid::Uuid` serialize as its 16 bytes → `Edm.Guid`. A `serde_bytes` value of exactly 16
//!   bytes is therefore stored as a Guid too; wrap it in [`Binary`](super::Binary) to force
//!   `Edm.Binary`;
//! - `None` and `()` omit the property; unit enum variants are strings.
//!
//! Nested values (structs, maps, non-byte sequences) are refused: serialize them into one
//! property with [`edm::json`](super::json).

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::markers::BINARY_MARKER;
use super::value::{EdmType, check_datetime, write_datetime};
use crate::error::{Error, Limit, Result};
use crate::keys::{Keys, utf16_bytes};
use crate::limits::{
    MAX_ENTITY_BYTES, MAX_PROPERTY_BYTES, MAX_USER_PROPERTIES, validate_property_name,
};

/// Size and property count of a written entity, as the service counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntityStats {
    /// User properties written (system properties excluded).
    pub user_properties: usize,
    /// Entity size estimate: 4 + 2 × (|PK| + |RK|) + Σ (8 + 2 × |name| + value size), with
    /// lengths in UTF-16 units.
    pub size_bytes: usize,
}

/// Serializes `value` as the JSON body of an entity with the given keys, appending to `out`.
/// Service limits are checked on the way: 252 user properties, 64 KiB per String/Binary
/// property, 1 MiB per entity, property-name rules.
///
/// # Errors
/// [`Error::InvalidValue`] for values the Table service cannot represent,
/// [`Error::InvalidName`] for bad property names, [`Error::LimitExceeded`] for limits.
/// On error, `out` is truncated back to its original length.
pub fn write_entity<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    keys: &Keys,
    value: &T,
) -> Result<EntityStats> {
    let start = out.len();
    let result = write_entity_inner(out, keys, value);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Serializes `value` into a new JSON entity body. See [`write_entity`].
///
/// # Errors
/// As [`write_entity`].
pub fn to_entity_json<T: Serialize + ?Sized>(
    keys: &Keys,
    value: &T,
) -> Result<(Vec<u8>, EntityStats)> {
    let mut out = Vec::with_capacity(256);
    let stats = write_entity(&mut out, keys, value)?;
    Ok((out, stats))
}

fn write_entity_inner<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    keys: &Keys,
    value: &T,
) -> Result<EntityStats> {
    let stats = write_entity_unbounded(out, keys, value)?;
    if stats.user_properties > MAX_USER_PROPERTIES {
        return Err(Error::LimitExceeded {
            limit: Limit::UserProperties,
            actual: stats.user_properties,
        });
    }
    if stats.size_bytes > MAX_ENTITY_BYTES {
        return Err(Error::LimitExceeded {
            limit: Limit::EntityBytes,
            actual: stats.size_bytes,
        });
    }
    Ok(stats)
}

/// [`write_entity`] without the per-entity limits (252 properties, 1 MiB): every
/// per-property rule still applies. On error `out` may hold a partial entity.
pub(crate) fn write_entity_unbounded<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    keys: &Keys,
    value: &T,
) -> Result<EntityStats> {
    out.extend_from_slice(b"{\"PartitionKey\":");
    write_json_str(out, keys.pk());
    out.extend_from_slice(b",\"RowKey\":");
    write_json_str(out, keys.rk());
    let mut writer = EntityWriter {
        out,
        stats: EntityStats {
            user_properties: 0,
            size_bytes: 4 + utf16_bytes(keys.pk()) + utf16_bytes(keys.rk()),
        },
        names: Vec::new(),
    };
    value.serialize(&mut writer)?;
    let stats = writer.stats;
    writer.out.push(b'}');
    Ok(stats)
}

/// Appends `s` as a JSON string literal.
pub(crate) fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    write_json_escaped(out, s);
    out.push(b'"');
}

/// Appends `s` escaped for a JSON string, without quotes. Besides what JSON requires, U+2028
/// and U+2029 are escaped: they are line terminators in JavaScript, and Azurite's batch parser
/// fails on them (HTTP 500, with part of the transaction applied).
fn write_json_escaped(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (escape, width): (&[u8], usize) = match b {
            b'"' => (b"\\\"", 1),
            b'\\' => (b"\\\\", 1),
            b'\n' => (b"\\n", 1),
            b'\r' => (b"\\r", 1),
            b'\t' => (b"\\t", 1),
            0..=0x1f => (b"", 1),
            0xE2 if bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9)) =>
            {
                (
                    if bytes[i + 2] == 0xA8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    },
                    3,
                )
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[run..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        i += width;
        run = i;
    }
    out.extend_from_slice(&bytes[run..]);
}

#[cfg(test)]
mod json_tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_json_and_javascript() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\"b\\c\n\u{1}\u{2028}\u{2029}é\u{2027}");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "\"a\\\"b\\\\c\\n\\u0001\\u2028\\u2029é\u{2027}\"");
        let back: String = serde_json::from_str(&text).unwrap();
        assert_eq!(back, "a\"b\\c\n\u{1}\u{2028}\u{2029}é\u{2027}");
    }
}

struct EntityWriter<'a> {
    out: &'a mut Vec<u8>,
    stats: EntityStats,
    /// Names written so far, to refuse duplicates (from maps or `#[serde(flatten)]`).
    names: Vec<String>,
}

impl EntityWriter<'_> {
    fn property<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<()> {
        let mark = self.out.len();
        let mut prop = PropertyWriter {
            name,
            out: self.out,
            written: None,
        };
        value
            .serialize(&mut prop)
            .map_err(|e| with_property(e, name))?;
        let Some(value_bytes) = prop.written else {
            // None / unit: the property is omitted.
            self.out.truncate(mark);
            return Ok(());
        };
        validate_property_name(name)?;
        if self.names.iter().any(|n| n == name) {
            return Err(Error::invalid_value(name, "the property is written twice"));
        }
        self.names.push(name.to_owned());
        self.stats.user_properties += 1;
        self.stats.size_bytes += 8 + utf16_bytes(name) + value_bytes;
        Ok(())
    }
}

fn with_property(e: Error, name: &str) -> Error {
    match e {
        Error::InvalidValue { property, reason } if property.is_empty() => {
            Error::invalid_value(name, reason)
        }
        other => other,
    }
}

fn nested(what: &str) -> Error {
    Error::invalid_value(
        "",
        format!(
            "{what} cannot be stored in one property; serialize it to a string with \
             #[serde(with = \"tablekit_core::edm::json\")] or flatten it"
        ),
    )
}

fn not_an_entity(what: &str) -> Error {
    Error::invalid_value(
        "",
        format!(
            "an entity must serialize as a struct or map, not {what} (for several entity types in \
             one table use #[serde(tag = \"EntityType\")])"
        ),
    )
}

/// Writes one property (name and value, with annotation when needed) and reports the value's
/// size as the service counts it, or nothing for `None`.
struct PropertyWriter<'a, 'o> {
    name: &'a str,
    out: &'o mut Vec<u8>,
    written: Option<usize>,
}

impl PropertyWriter<'_, '_> {
    fn head(&mut self, annotation: Option<EdmType>) {
        self.out.push(b',');
        if let Some(t) = annotation {
            self.out.push(b'"');
            // Property names are validated to need no JSON escaping except through this path.
            write_json_str_inner(self.out, self.name);
            self.out.extend_from_slice(b"@odata.type\":\"");
            self.out.extend_from_slice(t.as_str().as_bytes());
            self.out.extend_from_slice(b"\",");
        }
        write_json_str(self.out, self.name);
        self.out.push(b':');
    }

    fn int32(&mut self, v: i32) {
        self.head(None);
        self.out.extend_from_slice(itoa(i64::from(v)).as_bytes());
        self.written = Some(4);
    }

    fn int64(&mut self, v: i64) {
        self.head(Some(EdmType::Int64));
        self.out.push(b'"');
        self.out.extend_from_slice(itoa(v).as_bytes());
        self.out.push(b'"');
        self.written = Some(8);
    }

    fn string(&mut self, v: &str) -> Result<()> {
        let size = utf16_bytes(v);
        if size > MAX_PROPERTY_BYTES {
            return Err(Error::LimitExceeded {
                limit: Limit::PropertyBytes {
                    property: self.name.to_owned(),
                },
                actual: size,
            });
        }
        self.head(None);
        write_json_str(self.out, v);
        self.written = Some(4 + size);
        Ok(())
    }

    fn binary(&mut self, v: &[u8]) -> Result<()> {
        if v.len() > MAX_PROPERTY_BYTES {
            return Err(Error::LimitExceeded {
                limit: Limit::PropertyBytes {
                    property: self.name.to_owned(),
                },
                actual: v.len(),
            });
        }
        self.head(Some(EdmType::Binary));
        self.out.push(b'"');
        use base64::Engine as _;
        let mut encoded = String::with_capacity(v.len().div_ceil(3) * 4);
        base64::engine::general_purpose::STANDARD.encode_string(v, &mut encoded);
        self.out.extend_from_slice(encoded.as_bytes());
        self.out.push(b'"');
        self.written = Some(4 + v.len());
        Ok(())
    }

    fn guid(&mut self, bytes: &[u8]) -> Result<()> {
        let uuid = uuid::Uuid::from_slice(bytes)
            .map_err(|e| Error::invalid_value(self.name, e.to_string()))?;
        self.head(Some(EdmType::Guid));
        self.out.push(b'"');
        self.out.extend_from_slice(
            uuid.hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer())
                .as_bytes(),
        );
        self.out.push(b'"');
        self.written = Some(16);
        Ok(())
    }

    fn double(&mut self, v: f64) {
        self.head(Some(EdmType::Double));
        if v.is_finite() {
            let _ = serde_json::to_writer(&mut *self.out, &v);
        } else if v.is_nan() {
            self.out.extend_from_slice(b"\"NaN\"");
        } else if v > 0.0 {
            self.out.extend_from_slice(b"\"Infinity\"");
        } else {
            self.out.extend_from_slice(b"\"-Infinity\"");
        }
        self.written = Some(8);
    }

    fn datetime(&mut self, dt: &chrono::DateTime<chrono::Utc>) -> Result<()> {
        check_datetime(self.name, dt)?;
        self.head(Some(EdmType::DateTime));
        let mut text = String::with_capacity(30);
        text.push('"');
        write_datetime(&mut text, dt);
        text.push('"');
        self.out.extend_from_slice(text.as_bytes());
        self.written = Some(8);
        Ok(())
    }
}

fn write_json_str_inner(out: &mut Vec<u8>, s: &str) {
    write_json_escaped(out, s);
}

fn itoa(v: i64) -> String {
    v.to_string()
}

/// Parses the text of a `collect_str` value as an RFC 3339 timestamp with a zone, the form
/// `chrono::DateTime` serializes to.
fn rfc3339(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let b = text.as_bytes();
    // Cheap shape check first: collect_str is also used by Display-based serializers.
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b't') {
        return None;
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|d| d.with_timezone(&chrono::Utc))
}

impl<'a, 'o> ser::Serializer for &'a mut EntityWriter<'o> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = MapEntries<'a, 'o>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), Error>;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<MapEntries<'a, 'o>> {
        Ok(MapEntries {
            writer: self,
            key: None,
        })
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        Ok(())
    }
    fn serialize_none(self) -> Result<()> {
        Err(not_an_entity("None"))
    }
    fn serialize_bool(self, _: bool) -> Result<()> {
        Err(not_an_entity("a boolean"))
    }
    fn serialize_i8(self, _: i8) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_i16(self, _: i16) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_i32(self, _: i32) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_i64(self, _: i64) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_u8(self, _: u8) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_u16(self, _: u16) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_u32(self, _: u32) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_u64(self, _: u64) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_f32(self, _: f32) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_f64(self, _: f64) -> Result<()> {
        Err(not_an_entity("a number"))
    }
    fn serialize_char(self, _: char) -> Result<()> {
        Err(not_an_entity("a character"))
    }
    fn serialize_str(self, _: &str) -> Result<()> {
        Err(not_an_entity("a string"))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<()> {
        Err(not_an_entity("bytes"))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<()> {
        Err(not_an_entity("a unit enum variant"))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<()> {
        Err(not_an_entity("an externally tagged enum"))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(not_an_entity("a sequence"))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(not_an_entity("a tuple"))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(not_an_entity("a tuple struct"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(not_an_entity("an externally tagged enum"))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(not_an_entity("an externally tagged enum"))
    }
}

impl ser::SerializeStruct for &mut EntityWriter<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.property(key, value)
    }
    fn end(self) -> Result<()> {
        Ok(())
    }
}

/// Map entries of a top-level map (or a struct with `#[serde(flatten)]`).
pub(crate) struct MapEntries<'a, 'o> {
    writer: &'a mut EntityWriter<'o>,
    key: Option<String>,
}

impl ser::SerializeMap for MapEntries<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        self.key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let key = self
            .key
            .take()
            .ok_or_else(|| Error::invalid_value("", "map value without a key"))?;
        self.writer.property(&key, value)
    }
    fn end(self) -> Result<()> {
        Ok(())
    }
}

/// Serializer methods that refuse a scalar with the same error:
/// `refuse_scalars! { Ok type, error; serialize_bool: bool, ... }`.
macro_rules! refuse_scalars {
    ($ok:ty, $error:expr; $($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<$ok> {
            Err($error)
        })*
    };
}

/// Accepts only string-like map keys (property names).
struct KeySerializer;

impl ser::Serializer for KeySerializer {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = Impossible<String, Error>;
    type SerializeTuple = Impossible<String, Error>;
    type SerializeTupleStruct = Impossible<String, Error>;
    type SerializeTupleVariant = Impossible<String, Error>;
    type SerializeMap = Impossible<String, Error>;
    type SerializeStruct = Impossible<String, Error>;
    type SerializeStructVariant = Impossible<String, Error>;

    fn serialize_str(self, v: &str) -> Result<String> {
        Ok(v.to_owned())
    }
    fn serialize_char(self, v: char) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<String> {
        v.serialize(self)
    }
    fn collect_str<T: std::fmt::Display + ?Sized>(self, v: &T) -> Result<String> {
        Ok(v.to_string())
    }
    refuse_scalars! {
        String, bad_key();
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_f32: f32, serialize_f64: f64, serialize_bytes: &[u8],
    }
    fn serialize_none(self) -> Result<String> {
        Err(bad_key())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String> {
        Err(bad_key())
    }
    fn serialize_unit(self) -> Result<String> {
        Err(bad_key())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String> {
        Err(bad_key())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String> {
        Err(bad_key())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(bad_key())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(bad_key())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(bad_key())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(bad_key())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(bad_key())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(bad_key())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(bad_key())
    }
}

fn bad_key() -> Error {
    Error::invalid_value("", "property names (map keys) must be strings")
}

impl<'p, 'a, 'o> ser::Serializer for &'p mut PropertyWriter<'a, 'o> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ByteSeq<'p, 'a, 'o>;
    type SerializeTuple = ByteSeq<'p, 'a, 'o>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Impossible<(), Error>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn is_human_readable(&self) -> bool {
        // Makes `uuid::Uuid` serialize as 16 bytes, which is how a Guid is recognised.
        false
    }

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.head(None);
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        self.written = Some(1);
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<()> {
        self.int32(i32::from(v));
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<()> {
        self.int32(i32::from(v));
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<()> {
        self.int32(v);
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<()> {
        self.int64(v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<()> {
        let v = i64::try_from(v)
            .map_err(|_| Error::invalid_value(self.name, format!("{v} does not fit Edm.Int64")))?;
        self.int64(v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.int32(i32::from(v));
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<()> {
        self.int32(i32::from(v));
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<()> {
        // Always Int64, so one field keeps one type whatever its value.
        self.int64(i64::from(v));
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<()> {
        let v = i64::try_from(v).map_err(|_| {
            Error::invalid_value(
                self.name,
                format!("{v} is above i64::MAX and does not fit Edm.Int64"),
            )
        })?;
        self.int64(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        let v = i64::try_from(v)
            .map_err(|_| Error::invalid_value(self.name, format!("{v} does not fit Edm.Int64")))?;
        self.int64(v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<()> {
        self.double(f64::from(v));
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<()> {
        self.double(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<()> {
        self.string(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<()> {
        self.string(v)
    }
    fn collect_str<T: std::fmt::Display + ?Sized>(self, v: &T) -> Result<()> {
        let text = v.to_string();
        match rfc3339(&text) {
            Some(dt) => self.datetime(&dt),
            None => self.string(&text),
        }
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        if v.len() == 16 {
            self.guid(v)
        } else {
            self.binary(v)
        }
    }
    fn serialize_none(self) -> Result<()> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<()> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<()> {
        if name == BINARY_MARKER {
            let mut bytes = BytesOnly(None);
            v.serialize(&mut bytes)?;
            return self.binary(bytes.0.as_deref().unwrap_or_default());
        }
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<()> {
        Err(nested("an enum variant with data"))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<ByteSeq<'p, 'a, 'o>> {
        Ok(ByteSeq {
            bytes: Vec::with_capacity(len.unwrap_or(0)),
            prop: self,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<ByteSeq<'p, 'a, 'o>> {
        Ok(ByteSeq {
            bytes: Vec::with_capacity(len),
            prop: self,
        })
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(nested("a tuple struct"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(nested("an enum variant with data"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(nested("a map"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(nested("a struct"))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(nested("an enum variant with data"))
    }
}

/// A sequence property: accepted only when every element is a `u8` (`Vec<u8>`, `[u8; N]`),
/// and stored as `Edm.Binary`.
pub(crate) struct ByteSeq<'p, 'a, 'o> {
    bytes: Vec<u8>,
    prop: &'p mut PropertyWriter<'a, 'o>,
}

impl ByteSeq<'_, '_, '_> {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let mut byte = BytesOnly(None);
        value
            .serialize(&mut byte)
            .map_err(|_| nested("a sequence of non-byte values"))?;
        match byte.0 {
            Some(b) if b.len() == 1 => {
                self.bytes.push(b[0]);
                Ok(())
            }
            _ => Err(nested("a sequence of non-byte values")),
        }
    }
}

impl ser::SerializeSeq for ByteSeq<'_, '_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }
    fn end(self) -> Result<()> {
        self.prop.binary(&self.bytes)
    }
}

impl ser::SerializeTuple for ByteSeq<'_, '_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }
    fn end(self) -> Result<()> {
        self.prop.binary(&self.bytes)
    }
}

/// Captures a byte string, or a single `u8` as a one-byte string.
struct BytesOnly(Option<Vec<u8>>);

macro_rules! refuse_all_but {
    ($ty:ty, $what:literal, { $($keep:item)* }) => {
        impl ser::Serializer for &mut $ty {
            type Ok = ();
            type Error = Error;
            type SerializeSeq = Impossible<(), Error>;
            type SerializeTuple = Impossible<(), Error>;
            type SerializeTupleStruct = Impossible<(), Error>;
            type SerializeTupleVariant = Impossible<(), Error>;
            type SerializeMap = Impossible<(), Error>;
            type SerializeStruct = Impossible<(), Error>;
            type SerializeStructVariant = Impossible<(), Error>;
            $($keep)*
            refuse_scalars! {
                (), Error::invalid_value("", $what);
                serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
                serialize_i64: i64, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
                serialize_f32: f32, serialize_f64: f64, serialize_char: char,
            }
            fn serialize_none(self) -> Result<()> { Err(Error::invalid_value("", $what)) }
            fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<()> { Err(Error::invalid_value("", $what)) }
            fn serialize_unit(self) -> Result<()> { Err(Error::invalid_value("", $what)) }
            fn serialize_unit_struct(self, _: &'static str) -> Result<()> { Err(Error::invalid_value("", $what)) }
            fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<()> { Err(Error::invalid_value("", $what)) }
            fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<()> { v.serialize(self) }
            fn serialize_newtype_variant<T: Serialize + ?Sized>(self, _: &'static str, _: u32, _: &'static str, _: &T) -> Result<()> { Err(Error::invalid_value("", $what)) }
            fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> { Err(Error::invalid_value("", $what)) }
            fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> { Err(Error::invalid_value("", $what)) }
            fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct> { Err(Error::invalid_value("", $what)) }
            fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self::SerializeTupleVariant> { Err(Error::invalid_value("", $what)) }
            fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> { Err(Error::invalid_value("", $what)) }
            fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> { Err(Error::invalid_value("", $what)) }
            fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self::SerializeStructVariant> { Err(Error::invalid_value("", $what)) }
        }
    };
}

refuse_all_but!(BytesOnly, "expected bytes", {
    fn serialize_u8(self, v: u8) -> Result<()> {
        self.0 = Some(vec![v]);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        self.0 = Some(v.to_vec());
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<()> {
        Err(Error::invalid_value("", "expected bytes"))
    }
});

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::invalid_value("", msg.to_string())
    }
}
