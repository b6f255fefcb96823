//! One property: its name, its `@odata.type` annotation when needed, and its value.

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::bytes::BytesOnly;
use super::json::{write_json_escaped, write_json_str};
use super::nested;
use crate::edm::markers::BINARY_MARKER;
use crate::edm::value::{EdmType, check_datetime, write_datetime};
use crate::error::{Error, Limit, Result};
use crate::keys::utf16_bytes;
use crate::limits::MAX_PROPERTY_BYTES;

/// Writes one property (name and value, with annotation when needed) and reports the value's
/// size as the service counts it, or nothing for `None`.
pub(super) struct PropertyWriter<'a, 'o> {
    pub(super) name: &'a str,
    pub(super) out: &'o mut Vec<u8>,
    pub(super) written: Option<usize>,
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
        let uuid =
            uuid::Uuid::from_slice(bytes).map_err(|e| Error::encode(self.name, e.to_string()))?;
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
            .map_err(|_| Error::encode(self.name, format!("{v} does not fit Edm.Int64")))?;
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
            Error::encode(
                self.name,
                format!("{v} is above i64::MAX and does not fit Edm.Int64"),
            )
        })?;
        self.int64(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<()> {
        let v = i64::try_from(v)
            .map_err(|_| Error::encode(self.name, format!("{v} does not fit Edm.Int64")))?;
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
pub(super) struct ByteSeq<'p, 'a, 'o> {
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
