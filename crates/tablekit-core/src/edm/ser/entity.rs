//! The top-level serializer: an entity is a struct or a map whose fields are its properties.

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::key::KeySerializer;
use super::property::PropertyWriter;
use super::{EntityStats, not_an_entity, with_property};
use crate::error::{Error, Result};
use crate::keys::utf16_bytes;
use crate::limits::validate_property_name;

pub(super) struct EntityWriter<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) stats: EntityStats,
    /// Names written so far, to refuse duplicates (from maps or `#[serde(flatten)]`).
    pub(super) names: Vec<String>,
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
            return Err(Error::encode(name, "the property is written twice"));
        }
        self.names.push(name.to_owned());
        self.stats.user_properties += 1;
        self.stats.size_bytes += 8 + utf16_bytes(name) + value_bytes;
        Ok(())
    }
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
            .ok_or_else(|| Error::encode("", "map value without a key"))?;
        self.writer.property(&key, value)
    }
    fn end(self) -> Result<()> {
        Ok(())
    }
}
