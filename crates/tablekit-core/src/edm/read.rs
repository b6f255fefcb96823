//! Reading entities and query pages into `Stored<T>`.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor,
};

use super::bag::Properties;
use super::de::{DeError, EntityDeserializer};
use super::raw::{Raw, RawEntity, RawProp};
use super::value::{EdmValue, format_datetime, parse_datetime};
use crate::entity::{ETag, Stored};
use crate::error::{Error, Result, Target};
use crate::keys::{Keys, PartitionKey, RowKey};

fn into_stored<T: DeserializeOwned>(
    raw: RawEntity<'_>,
    etag_header: Option<&str>,
) -> Result<Stored<T>> {
    let keys = Keys::from_parts(
        PartitionKey::from_service(raw.partition_key.map(Cow::into_owned).unwrap_or_default()),
        RowKey::from_service(raw.row_key.map(Cow::into_owned).unwrap_or_default()),
    );
    let etag = match raw.etag.as_deref().or(etag_header) {
        Some(tag) => ETag::new(tag),
        None => {
            return Err(Error::decode(
                Target::entity("", keys),
                "odata.etag",
                "the response carries no ETag (request minimal metadata)",
            ));
        }
    };
    let timestamp = raw.timestamp.as_deref().and_then(parse_datetime);
    let value = match T::deserialize(EntityDeserializer {
        props: raw.props.into_iter(),
    }) {
        Ok(value) => value,
        Err(e) => return Err(e.into_error(Target::entity("", keys))),
    };
    Ok(Stored {
        keys,
        etag,
        timestamp,
        value,
    })
}

/// Reads one entity from its JSON (a Get Entity response body). `etag_header` is the
/// response's `ETag` header, used when the body has no `odata.etag`.
///
/// # Errors
/// [`Error::Decode`] when the JSON is malformed or a property does not fit `T`'s field,
/// naming the property and the entity's keys (the target's table is left empty: the body
/// does not say which table it came from).
pub fn parse_entity<T: DeserializeOwned>(
    body: &[u8],
    etag_header: Option<&str>,
) -> Result<Stored<T>> {
    let raw: RawEntity<'_> = serde_json::from_slice(body)
        .map_err(|e| Error::decode(Target::default(), "", format!("malformed entity JSON: {e}")))?;
    into_stored(raw, etag_header)
}

/// Reads the entities of a query response page (`{"value":[…]}`), in order.
///
/// # Errors
/// As [`parse_entity`].
pub fn parse_page<T: DeserializeOwned>(body: &[u8]) -> Result<Vec<Stored<T>>> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let page = PageSeed::<T>(std::marker::PhantomData).deserialize(&mut de);
    match page {
        Ok(entities) => entities,
        Err(e) => Err(Error::decode(
            Target::default(),
            "",
            format!("malformed query response: {e}"),
        )),
    }
}

/// Deserializes the page; entity-level errors are kept apart from JSON syntax errors so
/// that they surface with their own context.
struct PageSeed<T>(std::marker::PhantomData<T>);

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for PageSeed<T> {
    type Value = Result<Vec<Stored<T>>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for PageSeed<T> {
    type Value = Result<Vec<Stored<T>>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a query response object")
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut result = Ok(Vec::new());
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "value" {
                result = map.next_value_seed(EntitiesSeed::<T>(std::marker::PhantomData))?;
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(result)
    }
}

struct EntitiesSeed<T>(std::marker::PhantomData<T>);

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for EntitiesSeed<T> {
    type Value = Result<Vec<Stored<T>>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for EntitiesSeed<T> {
    type Value = Result<Vec<Stored<T>>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of entities")
    }
    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(raw) = seq.next_element::<RawEntity<'de>>()? {
            match into_stored(raw, None) {
                Ok(stored) => out.push(stored),
                Err(e) => {
                    // Drain the rest so the JSON stays well-formed, then report the first error.
                    while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                    return Ok(Err(e));
                }
            }
        }
        Ok(Ok(out))
    }
}

fn raw_props(props: &Properties) -> Vec<RawProp<'_>> {
    props
        .iter()
        .map(|(name, value)| {
            let (ty, value) = match value {
                EdmValue::String(s) => (None, Raw::Str(Cow::Borrowed(s.as_str()))),
                EdmValue::Int32(v) => (None, Raw::I64(i64::from(*v))),
                EdmValue::Int64(v) => (Some(super::EdmType::Int64), Raw::I64(*v)),
                EdmValue::Double(v) => (Some(super::EdmType::Double), Raw::F64(*v)),
                EdmValue::Boolean(v) => (None, Raw::Bool(*v)),
                EdmValue::DateTime(v) => (
                    Some(super::EdmType::DateTime),
                    Raw::Str(Cow::Owned(format_datetime(v))),
                ),
                EdmValue::Guid(v) => (
                    Some(super::EdmType::Guid),
                    Raw::Str(Cow::Owned(v.hyphenated().to_string())),
                ),
                EdmValue::Binary(v) => (
                    Some(super::EdmType::Binary),
                    Raw::Bytes(Cow::Borrowed(v.as_slice())),
                ),
            };
            RawProp {
                name: Cow::Borrowed(name),
                ty,
                value,
            }
        })
        .collect()
}

/// Reads a typed value from a property bag, as if it had been read from the service.
///
/// # Errors
/// [`Error::Decode`] naming the property when a property does not fit `T` (its target is
/// empty: a bag does not know where it was read from).
pub fn from_properties<T: DeserializeOwned>(props: &Properties) -> Result<T> {
    Ok(decode_properties(props)?)
}

/// [`from_properties`] with the deserializer's own error, which tells a missing or unknown
/// discriminator apart (see [`crate::OrUnknown`]).
pub(crate) fn decode_properties<T: DeserializeOwned>(
    props: &Properties,
) -> std::result::Result<T, DeError> {
    T::deserialize(EntityDeserializer {
        props: raw_props(props).into_iter(),
    })
}

/// Converts a typed value into a property bag, exactly as it would be written.
///
/// # Errors
/// As [`super::write_entity`].
pub fn to_properties<T: serde::Serialize + ?Sized>(value: &T) -> Result<Properties> {
    let keys = Keys::default();
    let (json, _) = super::ser::to_entity_json(&keys, value)?;
    bag_from_json(&json)
}

/// Converts a typed value into a property bag like [`to_properties`], checking every
/// per-property rule (names, types, 64 KiB per value) but not the per-entity limits (252
/// properties, 1 MiB): for patterns that store one logical value as several entities.
///
/// # Errors
/// As [`super::write_entity`], except [`Error::LimitExceeded`] for the property count or the
/// entity size.
pub fn to_properties_unbounded<T: serde::Serialize + ?Sized>(value: &T) -> Result<Properties> {
    let mut json = Vec::with_capacity(256);
    super::ser::write_entity_unbounded(&mut json, &Keys::default(), value)?;
    bag_from_json(&json)
}

fn bag_from_json(json: &[u8]) -> Result<Properties> {
    // The JSON was just written by the serializer: a failure to read it back is a bug of the
    // serializer, reported as the value that could not be stored.
    let raw: RawEntity<'_> = serde_json::from_slice(json)
        .map_err(|e| Error::encode("", format!("internal JSON error: {e}")))?;
    Properties::deserialize(EntityDeserializer {
        props: raw.props.into_iter(),
    })
    .map_err(|e| Error::encode(e.property, e.reason))
}
