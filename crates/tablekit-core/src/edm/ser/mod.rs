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
//!
//! The serializer is split by concern: [`entity`] writes the top-level struct or map,
//! [`property`] one property's value, [`key`] map keys (property names), [`bytes`] the
//! elements of byte sequences, [`json`] JSON string escaping.

mod bytes;
mod entity;
mod json;
mod key;
mod property;

use serde::Serialize;
use serde::ser;

pub(crate) use json::write_json_str;

use crate::error::{Error, Limit, Result};
use crate::keys::{Keys, utf16_bytes};
use crate::limits::{MAX_ENTITY_BYTES, MAX_USER_PROPERTIES};

/// Size and property count of a written entity, as the service counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
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
/// [`Error::Encode`] for values the Table service cannot represent,
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
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => {
            scratch.clear();
            let written = write_entity(&mut scratch, keys, value).map(|s| (scratch.to_vec(), s));
            // A body near the entity limit is not kept for the thread's lifetime.
            if scratch.capacity() > SCRATCH_KEPT {
                *scratch = Vec::new();
            }
            written
        }
        // Serializing `value` wrote another body on this thread.
        Err(_) => {
            let mut out = Vec::new();
            write_entity(&mut out, keys, value).map(|s| (out, s))
        }
    })
}

/// The largest buffer [`SCRATCH`] keeps between bodies.
pub(crate) const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    /// Where [`to_entity_json`] writes a body before copying it out at its exact size:
    /// written into a vector of its own, a body of a few hundred bytes grew through several
    /// reallocations and copies, and kept up to twice its size.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
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
    let mut writer = entity::EntityWriter {
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

/// `e`, naming `name` as its property when it names none yet.
fn with_property(e: Error, name: &str) -> Error {
    match e {
        Error::Encode { property, reason } if property.is_empty() => Error::encode(name, reason),
        other => other,
    }
}

fn nested(what: &str) -> Error {
    Error::encode(
        "",
        format!(
            "{what} cannot be stored in one property; serialize it to a string with \
             #[serde(with = \"tablekit_core::edm::json\")] or flatten it"
        ),
    )
}

fn not_an_entity(what: &str) -> Error {
    Error::encode(
        "",
        format!(
            "an entity must serialize as a struct or map, not {what} (for several entity types in \
             one table use #[serde(tag = \"EntityType\")])"
        ),
    )
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

use refuse_scalars;

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::encode("", msg.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Operation;
    use crate::edm::Properties;
    use crate::entity::Entity;

    /// Properties whose serialization builds another operation on the same thread, as a
    /// `Serialize` impl may.
    struct Nested(Properties);

    impl Serialize for Nested {
        fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            let inner = Entity::new(Keys::new("inner", "1").unwrap(), self.0.clone());
            let op = Operation::insert(&inner).map_err(serde::ser::Error::custom)?;
            assert!(op.body().is_some());
            self.0.serialize(s)
        }
    }

    #[test]
    fn bodies_are_their_entity_exactly_after_a_large_one_and_when_built_while_serializing() {
        let keys = Keys::new("p", "r").unwrap();
        let small = Properties::new().with("Name", "Ann").with("Age", 41);
        // A body over the buffer kept between bodies (UTF-8), each string under 64 KiB (UTF-16).
        let large = (0..4).fold(Properties::new(), |p, i| {
            p.with(format!("Notes{i}"), "x".repeat(SCRATCH_KEPT / 3))
        });
        let expected = |props: &Properties| {
            let mut body = Vec::new();
            write_entity(&mut body, &keys, props).unwrap();
            body
        };
        for props in [&small, &large, &small] {
            let op = Operation::insert(&Entity::new(keys.clone(), props.clone())).unwrap();
            assert_eq!(op.body().unwrap(), expected(props).as_slice());
        }
        let nested = Operation::insert(&Entity::new(keys.clone(), Nested(small.clone()))).unwrap();
        assert_eq!(nested.body().unwrap(), expected(&small).as_slice());
        // A failed body leaves nothing behind for the next one.
        let refused = Properties::new().with("Bad Name", 1);
        assert!(Operation::insert(&Entity::new(keys.clone(), refused)).is_err());
        let op = Operation::insert(&Entity::new(keys.clone(), small.clone())).unwrap();
        assert_eq!(op.body().unwrap(), expected(&small).as_slice());
    }
}
