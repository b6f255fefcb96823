//! The entity model: [`Entity`] to write, [`Stored`] as read, [`ETag`] and [`IfMatch`] for
//! optimistic concurrency, [`OrUnknown`] for heterogeneous tables.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};

use crate::edm::Properties;
use crate::edm::read::decode_properties;
use crate::keys::Keys;

/// The name of the discriminator property that tells entity types apart in a heterogeneous
/// table. Use it with serde's internally tagged enums: `#[serde(tag = "EntityType")]`.
pub const ENTITY_TYPE: &str = "EntityType";

/// An entity's concurrency token: changes with every write (the service derives it from the
/// entity's last-modified time).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ETag(String);

impl ETag {
    /// Wraps an ETag as the service returned it (e.g. `W/"datetime'2026-11-22T10%3A00%3A00.1234567Z'"`).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The ETag text, as sent in an `If-Match` header.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The entity's last-modified time encoded in the ETag
    /// (`W/"datetime'2026-11-22T10%3A00%3A00.1234567Z'"`), so a write's result carries the
    /// same Timestamp a later read would return. `None` for ETags of another shape.
    pub fn timestamp(&self) -> Option<DateTime<Utc>> {
        let start = self.0.find("datetime'")? + "datetime'".len();
        let rest = &self.0[start..];
        let text = rest[..rest.find('\'')?]
            .replace("%3A", ":")
            .replace("%3a", ":");
        crate::edm::parse_datetime(&text)
    }
}

impl fmt::Debug for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ETag({})", self.0)
    }
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_carries_the_write_time() {
        let tag = ETag::new("W/\"datetime'2026-11-22T10%3A00%3A00.1234567Z'\"");
        assert_eq!(
            crate::edm::format_datetime(&tag.timestamp().unwrap()),
            "2026-11-22T10:00:00.1234567Z"
        );
        assert_eq!(ETag::new("\"0x8D\"").timestamp(), None);
    }
}

/// The condition of a replace, merge or delete.
///
/// There is deliberately no default: unconditional writes (last writer wins) must be asked for
/// with [`IfMatch::Any`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IfMatch {
    /// Write whatever the entity's current ETag (`If-Match: *`); the entity must exist.
    Any,
    /// Write only if the entity still has this ETag; otherwise the write fails with
    /// [`crate::Error::PreconditionFailed`] (HTTP 412).
    ETag(ETag),
}

impl IfMatch {
    /// The `If-Match` header value.
    pub fn header_value(&self) -> &str {
        match self {
            IfMatch::Any => "*",
            IfMatch::ETag(tag) => tag.as_str(),
        }
    }
}

impl From<ETag> for IfMatch {
    fn from(tag: ETag) -> Self {
        IfMatch::ETag(tag)
    }
}

impl From<&ETag> for IfMatch {
    fn from(tag: &ETag) -> Self {
        IfMatch::ETag(tag.clone())
    }
}

/// An entity to write: its keys and a value. The value's type needs no key fields; any serde
/// struct or map works (see [`crate::edm`] for how fields map to EDM types).
#[derive(Debug, Clone, PartialEq)]
pub struct Entity<T> {
    /// Where the entity lives.
    pub keys: Keys,
    /// Its user properties.
    pub value: T,
}

impl<T> Entity<T> {
    /// An entity with these keys and value.
    pub fn new(keys: Keys, value: T) -> Self {
        Self { keys, value }
    }

    /// An entity from string keys.
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] or [`crate::Error::LimitExceeded`] for invalid keys.
    pub fn try_new(
        partition_key: impl Into<String>,
        row_key: impl Into<String>,
        value: T,
    ) -> crate::Result<Self> {
        Ok(Self {
            keys: Keys::new(partition_key, row_key)?,
            value,
        })
    }
}

/// An entity as read from the service: keys, ETag, server Timestamp and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored<T> {
    /// Where the entity lives.
    pub keys: Keys,
    /// Its current ETag: pass [`Stored::if_match`] to a conditional write.
    pub etag: ETag,
    /// The server's last-modified time (absent only when a projection or response omitted it).
    pub timestamp: Option<DateTime<Utc>>,
    /// Its user properties.
    pub value: T,
}

impl<T> Stored<T> {
    /// The condition that makes a write succeed only if nobody changed the entity since it
    /// was read.
    pub fn if_match(&self) -> IfMatch {
        IfMatch::ETag(self.etag.clone())
    }

    /// Transforms the value, keeping keys, ETag and Timestamp.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Stored<U> {
        Stored {
            keys: self.keys,
            etag: self.etag,
            timestamp: self.timestamp,
            value: f(self.value),
        }
    }

    /// The entity, for writing back.
    pub fn into_entity(self) -> Entity<T> {
        Entity {
            keys: self.keys,
            value: self.value,
        }
    }
}

/// A heterogeneous-table read: the entity as `T` (typically an internally tagged enum over
/// [`ENTITY_TYPE`]) or, when it is of a type `T` does not know, its raw properties.
///
/// An entity is [`OrUnknown::Unknown`] only when its [`ENTITY_TYPE`] property is missing or
/// names a type `T` does not know. An entity of a type `T` knows that does not fit it — a
/// property missing or of another type — fails the read with [`crate::Error::Decode`], so
/// that broken data is not mistaken for a foreign type and skipped.
#[derive(Debug, Clone, PartialEq)]
pub enum OrUnknown<T> {
    /// An entity type `T` understands.
    Known(T),
    /// Anything else, as a property bag (its [`ENTITY_TYPE`] property tells what it is).
    Unknown(Properties),
}

impl<T> OrUnknown<T> {
    /// The known value, if any.
    pub fn known(self) -> Option<T> {
        match self {
            OrUnknown::Known(t) => Some(t),
            OrUnknown::Unknown(_) => None,
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for OrUnknown<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read once as a typed bag, then try the known types: types are kept exactly.
        let props = Properties::deserialize(d)?;
        match decode_properties::<T>(&props) {
            Ok(value) => Ok(OrUnknown::Known(value)),
            Err(e) if e.is_unknown_discriminator(ENTITY_TYPE) => Ok(OrUnknown::Unknown(props)),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

impl<T: Serialize> Serialize for OrUnknown<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OrUnknown::Known(t) => t.serialize(s),
            OrUnknown::Unknown(p) => p.serialize(s),
        }
    }
}
