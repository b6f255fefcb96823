//! The elements of a byte sequence: each must serialize as one `u8` (or a byte string).

use serde::Serialize;
use serde::ser::{self, Impossible};

use super::refuse_scalars;
use crate::error::{Error, Result};

/// Captures a byte string, or a single `u8` as a one-byte string.
pub(super) struct BytesOnly(pub(super) Option<Vec<u8>>);

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
                (), Error::encode("", $what);
                serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
                serialize_i64: i64, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
                serialize_f32: f32, serialize_f64: f64, serialize_char: char,
            }
            fn serialize_none(self) -> Result<()> { Err(Error::encode("", $what)) }
            fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<()> { Err(Error::encode("", $what)) }
            fn serialize_unit(self) -> Result<()> { Err(Error::encode("", $what)) }
            fn serialize_unit_struct(self, _: &'static str) -> Result<()> { Err(Error::encode("", $what)) }
            fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<()> { Err(Error::encode("", $what)) }
            fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Result<()> { v.serialize(self) }
            fn serialize_newtype_variant<T: Serialize + ?Sized>(self, _: &'static str, _: u32, _: &'static str, _: &T) -> Result<()> { Err(Error::encode("", $what)) }
            fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> { Err(Error::encode("", $what)) }
            fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> { Err(Error::encode("", $what)) }
            fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct> { Err(Error::encode("", $what)) }
            fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self::SerializeTupleVariant> { Err(Error::encode("", $what)) }
            fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> { Err(Error::encode("", $what)) }
            fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> { Err(Error::encode("", $what)) }
            fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self::SerializeStructVariant> { Err(Error::encode("", $what)) }
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
        Err(Error::encode("", "expected bytes"))
    }
});
