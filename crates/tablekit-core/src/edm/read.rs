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

/// Reads the entities of a query response page one by one, for per-entity reads: each
/// entity as a property bag, and — only when one of its stored values does not read as its
/// own EDM type (an `Edm.Int64` that is not a number, an `Edm.DateTime` that is not a time,
/// written by another client) — the bag holds the properties that do read, and the second
/// element is the entity read as `T` straight from what was stored: `Ok` when `T` does not
/// need the unreadable property (a plain query into `T` reads it too), else the error
/// ([`Error::Decode`] naming the property). The page never fails for one entity.
///
/// # Errors
/// [`Error::Decode`] for malformed page JSON and for an entity without an ETag (both are the
/// response's, not an entity's).
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub fn parse_page_each<T: DeserializeOwned>(
    body: &[u8],
) -> Result<Vec<(Stored<Properties>, Option<Result<T>>)>> {
    let page: RawPage<'_> = serde_json::from_slice(body).map_err(|e| {
        Error::decode(
            Target::default(),
            "",
            format!("malformed query response: {e}"),
        )
    })?;
    page.0
        .into_iter()
        .map(|raw| {
            let props = raw.props.clone();
            let shell = RawEntity {
                props: Vec::new(),
                ..raw
            };
            let mut stored = into_stored::<Properties>(shell, None)?;
            if let Ok(value) = Properties::deserialize(EntityDeserializer {
                props: props.clone().into_iter(),
            }) {
                stored.value = value;
                return Ok((stored, None));
            }
            let direct = T::deserialize(EntityDeserializer {
                props: props.clone().into_iter(),
            })
            .map_err(|e| e.into_error(Target::entity("", stored.keys.clone())));
            // Keep every property that reads on its own.
            for prop in props {
                if let Ok(one) = Properties::deserialize(EntityDeserializer {
                    props: vec![prop].into_iter(),
                }) {
                    for (name, value) in one {
                        stored.value.insert(name, value);
                    }
                }
            }
            Ok((stored, Some(direct)))
        })
        .collect()
}

/// A query response page's entities, unread.
struct RawPage<'a>(Vec<RawEntity<'a>>);

impl<'de> Deserialize<'de> for RawPage<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawPage<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a query response object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut entities = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "value" {
                        entities = map.next_value()?;
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
                Ok(RawPage(entities))
            }
        }
        d.deserialize_map(V)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of three: a good entity, one whose `Edm.Int64` is not a number, one whose
    /// `Edm.DateTime` is not a time.
    const PAGE: &str = r#"{"value":[
        {"odata.etag":"W/\"1\"","PartitionKey":"p","RowKey":"1","N@odata.type":"Edm.Int64","N":"7","S":"a"},
        {"odata.etag":"W/\"2\"","PartitionKey":"p","RowKey":"2","N@odata.type":"Edm.Int64","N":"abc","S":"b"},
        {"odata.etag":"W/\"3\"","PartitionKey":"p","RowKey":"3","S":"c","D@odata.type":"Edm.DateTime","D":"not a time"}
    ]}"#;

    #[test]
    fn each_entity_is_read_on_its_own() {
        // The page as a whole does not read into bags: the second entity fails it.
        let whole = parse_page::<Properties>(PAGE.as_bytes()).unwrap_err();
        assert!(
            matches!(&whole, Error::Decode { property, .. } if property == "N"),
            "{whole:?}"
        );

        let each = parse_page_each::<Properties>(PAGE.as_bytes()).unwrap();
        let rows: Vec<(&str, Option<&str>)> = each
            .iter()
            .map(|(s, e)| {
                let property = e.as_ref().map(|e| match e {
                    Err(Error::Decode { property, .. }) => property.as_str(),
                    other => panic!("{other:?}"),
                });
                (s.keys.rk(), property)
            })
            .collect();
        assert_eq!(rows, [("1", None), ("2", Some("N")), ("3", Some("D"))]);
        assert_eq!(each[0].0.value.get_i64("N").unwrap(), Some(7));
        // A bad entity keeps its ETag and the properties that read; the bad one is left out.
        let (bad, error) = &each[1];
        assert_eq!(bad.etag.as_str(), "W/\"2\"");
        assert_eq!(bad.value.get_str("S").unwrap(), Some("b"));
        assert!(!bad.value.contains("N"));
        let Some(Err(Error::Decode { target, .. })) = error else {
            panic!("{error:?}")
        };
        assert_eq!(target, &Target::entity("", Keys::new("p", "2").unwrap()));
        assert_eq!(each[2].0.value.get_str("S").unwrap(), Some("c"));
        assert!(!each[2].0.value.contains("D"));

        // Read as a type that does not need the unreadable value, the entity reads, as a
        // plain query into that type reads it; one that needs it names it.
        #[derive(Debug, Deserialize)]
        struct OnlyS {
            #[serde(rename = "S")]
            s: String,
        }
        #[derive(Debug, Deserialize)]
        struct WithN {
            #[serde(rename = "N")]
            #[allow(dead_code)]
            n: Option<i64>,
        }
        let typed = parse_page_each::<OnlyS>(PAGE.as_bytes()).unwrap();
        assert!(typed[0].1.is_none());
        assert_eq!(typed[2].1.as_ref().unwrap().as_ref().unwrap().s, "c");
        let typed = parse_page_each::<WithN>(PAGE.as_bytes()).unwrap();
        assert!(matches!(
            &typed[1].1,
            Some(Err(Error::Decode { property, .. })) if property == "N"
        ));
        assert!(parse_page::<OnlyS>(PAGE.as_bytes()).is_ok());
    }

    #[test]
    fn a_malformed_page_or_a_missing_etag_is_the_pages_error() {
        assert!(parse_page_each::<Properties>(b"{\"value\":[{").is_err());
        let no_etag = br#"{"value":[{"PartitionKey":"p","RowKey":"1"}]}"#;
        assert!(matches!(
            parse_page_each::<Properties>(no_etag),
            Err(Error::Decode { property, .. }) if property == "odata.etag"
        ));
    }
}
