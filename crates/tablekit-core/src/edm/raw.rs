//! Parsing entity JSON once into borrowed, type-resolved properties.
//!
//! The service (and other SDKs) write a property's `name@odata.type` annotation next to its
//! value, before or after it, or not at all (`nometadata`, or types JSON can express). This
//! module pairs annotations with values without copying strings that need no unescaping.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::value::EdmType;

/// A JSON scalar as it appeared in the entity.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Raw<'a> {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(Cow<'a, str>),
    /// Only produced from a [`super::Properties`] bag, never from JSON.
    Bytes(Cow<'a, [u8]>),
}

/// One user property: name, annotated type (if any) and raw value.
#[derive(Debug, Clone)]
pub(crate) struct RawProp<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) ty: Option<EdmType>,
    pub(crate) value: Raw<'a>,
}

impl RawProp<'_> {
    /// The property's EDM type: its annotation, or what the JSON value implies.
    pub(crate) fn edm_type(&self) -> EdmType {
        if let Some(t) = self.ty {
            return t;
        }
        match &self.value {
            Raw::Bool(_) => EdmType::Boolean,
            Raw::I64(n) if i32::try_from(*n).is_ok() => EdmType::Int32,
            Raw::I64(_) | Raw::U64(_) => EdmType::Int64,
            Raw::F64(_) => EdmType::Double,
            Raw::Bytes(_) => EdmType::Binary,
            Raw::Null | Raw::Str(_) => EdmType::String,
        }
    }
}

/// An entity as read: system properties apart, user properties in order.
#[derive(Debug, Default)]
pub(crate) struct RawEntity<'a> {
    pub(crate) partition_key: Option<Cow<'a, str>>,
    pub(crate) row_key: Option<Cow<'a, str>>,
    pub(crate) timestamp: Option<Cow<'a, str>>,
    pub(crate) etag: Option<Cow<'a, str>>,
    pub(crate) props: Vec<RawProp<'a>>,
}

/// A string that borrows from the input when it contains no escapes.
pub(crate) struct CowStr<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Raw<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Raw<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a property value (string, number, boolean or null)")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Raw::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Raw::Null)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Raw::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Raw::I64(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(i64::try_from(v).map_or(Raw::U64(v), Raw::I64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Raw::F64(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Raw::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Raw::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Raw::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
                Err(de::Error::custom("a property value cannot be an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
                Err(de::Error::custom("a property value cannot be an object"))
            }
        }
        d.deserialize_any(V)
    }
}

const ANNOTATION: &str = "@odata.type";

impl<'de> Deserialize<'de> for RawEntity<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEntity<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an entity object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entity = RawEntity::default();
                let mut annotations: Vec<(Cow<'de, str>, Cow<'de, str>)> = Vec::new();
                while let Some(CowStr(key)) = map.next_key::<CowStr<'de>>()? {
                    match &*key {
                        "PartitionKey" => {
                            entity.partition_key = Some(map.next_value::<CowStr<'de>>()?.0)
                        }
                        "RowKey" => entity.row_key = Some(map.next_value::<CowStr<'de>>()?.0),
                        "Timestamp" => entity.timestamp = Some(map.next_value::<CowStr<'de>>()?.0),
                        "odata.etag" => entity.etag = Some(map.next_value::<CowStr<'de>>()?.0),
                        k if k.ends_with(ANNOTATION) => {
                            let CowStr(ty) = map.next_value::<CowStr<'de>>()?;
                            let name = match key {
                                Cow::Borrowed(b) => Cow::Borrowed(&b[..b.len() - ANNOTATION.len()]),
                                Cow::Owned(mut o) => {
                                    o.truncate(o.len() - ANNOTATION.len());
                                    Cow::Owned(o)
                                }
                            };
                            annotations.push((name, ty));
                        }
                        k if k.starts_with("odata.") => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                        _ => {
                            let value = map.next_value::<Raw<'de>>()?;
                            entity.props.push(RawProp {
                                name: key,
                                ty: None,
                                value,
                            });
                        }
                    }
                }
                for (name, ty) in annotations {
                    if let Some(prop) = entity.props.iter_mut().find(|p| p.name == name) {
                        // Unknown type names (none exist today) are treated as unannotated.
                        prop.ty = EdmType::parse(&ty);
                    }
                }
                Ok(entity)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_pair_with_values_in_any_order() {
        let json = r#"{"odata.etag":"W/\"1\"","PartitionKey":"p","RowKey":"r",
            "Timestamp@odata.type":"Edm.DateTime","Timestamp":"2026-11-22T10:00:00.1234567Z",
            "n@odata.type":"Edm.Int64","n":"5000000000","d":"2026-01-01T00:00:00Z",
            "d@odata.type":"Edm.DateTime","s":"x\"y","i":7,"f":1.5,"b":true}"#;
        let e: RawEntity<'_> = serde_json::from_str(json).unwrap();
        assert_eq!(e.partition_key.as_deref(), Some("p"));
        assert_eq!(e.etag.as_deref(), Some("W/\"1\""));
        let types: Vec<(&str, EdmType)> =
            e.props.iter().map(|p| (&*p.name, p.edm_type())).collect();
        assert_eq!(
            types,
            [
                ("n", EdmType::Int64),
                ("d", EdmType::DateTime),
                ("s", EdmType::String),
                ("i", EdmType::Int32),
                ("f", EdmType::Double),
                ("b", EdmType::Boolean)
            ]
        );
        assert!(
            matches!(&e.props[0].value, Raw::Str(Cow::Borrowed("5000000000"))),
            "no copy for plain strings"
        );
        assert!(matches!(&e.props[2].value, Raw::Str(Cow::Owned(s)) if s == "x\"y"));
    }
}
