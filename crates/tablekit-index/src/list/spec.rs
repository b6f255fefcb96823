//! [`ListSpec`]: the declaration of an index over a non-unique value (last name → employees).

use std::fmt;
use std::sync::Arc;

use tablekit_core::keys::{CompoundKey, validate_key};
use tablekit_core::limits::{MAX_PROPERTY_BYTES, validate_property_name};
use tablekit_core::{Error, KeyKind, Keys, Limit, NameKind, Result};

use crate::spec::KeyFn;

/// The property of a base index row that counts the overflow rows created so far.
pub(crate) const SHARDS: &str = "Shards";

/// Declares an index of entities by a value they need not hold alone (a last name): how to
/// find an entity's keys and its value, and how the lists are stored.
///
/// A value's list is one index row (`Jones`) holding the entity references as a JSON array
/// in one string property (`EmployeeIDs`). When adding a reference would take the property
/// past [`max_list_bytes`](ListSpecBuilder::max_list_bytes) (default: the service's 64 KiB),
/// the row's references move to a new overflow row (`Jones_1`, `Jones_2`, …) and the base row
/// starts again: lists never fail for size. Values are escaped so that `_` can only separate
/// the overflow number (`Smith_Jones` is stored as `Smith!5FJones`).
pub struct ListSpec<T> {
    name: String,
    partition: KeyFn<T>,
    row_key: KeyFn<T>,
    value: KeyFn<T>,
    prefix: String,
    property: String,
    max_list_bytes: usize,
}

impl<T> Clone for ListSpec<T> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            partition: Arc::clone(&self.partition),
            row_key: Arc::clone(&self.row_key),
            value: Arc::clone(&self.value),
            prefix: self.prefix.clone(),
            property: self.property.clone(),
            max_list_bytes: self.max_list_bytes,
        }
    }
}

impl<T> fmt::Debug for ListSpec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListSpec")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("property", &self.property)
            .field("max_list_bytes", &self.max_list_bytes)
            .finish_non_exhaustive()
    }
}

/// Builds a [`ListSpec`].
pub struct ListSpecBuilder<T> {
    spec: ListSpec<T>,
}

impl<T> fmt::Debug for ListSpecBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spec.fmt(f)
    }
}

impl<T> ListSpec<T> {
    /// Starts a declaration named `name` (`lastname`): `partition` and `row_key` give an
    /// entity's keys (`Sales`, `000152`), `value` the value indexed (`Jones`). Index rows have
    /// no prefix and the list property is `Ids` until changed; a
    /// [`SamePartitionList`](crate::SamePartitionList) requires a prefix.
    pub fn builder(
        name: impl Into<String>,
        partition: impl Fn(&T) -> String + Send + Sync + 'static,
        row_key: impl Fn(&T) -> String + Send + Sync + 'static,
        value: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> ListSpecBuilder<T> {
        ListSpecBuilder {
            spec: ListSpec {
                name: name.into(),
                partition: Arc::new(partition),
                row_key: Arc::new(row_key),
                value: Arc::new(value),
                prefix: String::new(),
                property: "Ids".into(),
                max_list_bytes: MAX_PROPERTY_BYTES,
            },
        }
    }

    /// The index's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key prefix of its rows.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The property holding a row's list.
    pub fn property(&self) -> &str {
        &self.property
    }

    /// The most bytes (UTF-16 × 2) a row's list may take before it overflows.
    pub fn max_list_bytes(&self) -> usize {
        self.max_list_bytes
    }

    /// An entity's keys.
    ///
    /// # Errors
    /// Key errors.
    pub fn entity_keys(&self, entity: &T) -> Result<Keys> {
        Keys::new((self.partition)(entity), (self.row_key)(entity))
    }

    /// An entity's indexed value.
    pub fn value_of(&self, entity: &T) -> String {
        (self.value)(entity)
    }

    /// The RowKey of a value's base row (`Jones`), or of its overflow row `shard` (`Jones_2`).
    pub(crate) fn row_key(&self, value: &str, shard: u32) -> Result<String> {
        let key = CompoundKey::new('_');
        let tail = if shard == 0 {
            key.build([value])?
        } else {
            key.build([value, &shard.to_string()])?
        };
        let rk = format!("{}{tail}", self.prefix);
        validate_key(KeyKind::RowKey, &rk)?;
        Ok(rk)
    }

    /// The RowKey prefix of a value's overflow rows (`Jones_`).
    pub(crate) fn shard_prefix(&self, value: &str) -> Result<String> {
        Ok(format!("{}_", self.row_key(value, 0)?))
    }

    /// The overflow number of an overflow row of `value`, or `None` for other rows.
    pub(crate) fn shard_of(&self, value: &str, rk: &str) -> Option<u32> {
        let rest = rk.strip_prefix(self.shard_prefix(value).ok()?.as_str())?;
        rest.parse().ok().filter(|n| *n > 0)
    }
}

impl<T> ListSpecBuilder<T> {
    /// Puts every index row's key after `prefix` (`lastname_Jones`), keeping index rows apart
    /// from the entities they list in a shared partition. Required by
    /// [`SamePartitionList`](crate::SamePartitionList), which then refuses entities whose
    /// RowKey starts with it; choose one no entity's RowKey can start with.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.spec.prefix = prefix.into();
        self
    }

    /// Names the property holding each row's list (the guide's `EmployeeIDs`).
    #[must_use]
    pub fn property(mut self, name: impl Into<String>) -> Self {
        self.spec.property = name.into();
        self
    }

    /// Lowers the size at which a row's list overflows into a new row (bytes of the JSON
    /// text, UTF-16 × 2; at most 64 KiB).
    #[must_use]
    pub fn max_list_bytes(mut self, bytes: usize) -> Self {
        self.spec.max_list_bytes = bytes;
        self
    }

    /// Checks the declaration.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad property name or one of the reserved `Shards`;
    /// [`Error::InvalidKey`] for a prefix keys may not hold; [`Error::LimitExceeded`] for a
    /// list size above 64 KiB; [`Error::InvalidArgument`] for an empty name or a list size
    /// too small for any list.
    pub fn build(self) -> Result<ListSpec<T>> {
        let spec = self.spec;
        if spec.name.is_empty() {
            return Err(Error::invalid_argument("name", "a list index needs a name"));
        }
        validate_property_name(&spec.property)?;
        if spec.property == SHARDS {
            return Err(Error::InvalidName {
                kind: NameKind::Property,
                name: SHARDS.into(),
                reason: "reserved for the count of overflow rows".into(),
            });
        }
        validate_key(KeyKind::RowKey, &spec.prefix)?;
        if spec.max_list_bytes > MAX_PROPERTY_BYTES {
            return Err(Error::LimitExceeded {
                limit: Limit::PropertyBytes {
                    property: spec.property.clone(),
                },
                actual: spec.max_list_bytes,
            });
        }
        if spec.max_list_bytes < 64 {
            return Err(Error::invalid_argument(
                "max_list_bytes",
                "a list needs at least 64 bytes",
            ));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ListSpec<(String, String, String)> {
        ListSpec::builder(
            "lastname",
            |e: &(String, String, String)| e.0.clone(),
            |e: &(String, String, String)| e.1.clone(),
            |e: &(String, String, String)| e.2.clone(),
        )
        .property("EmployeeIDs")
        .build()
        .unwrap()
    }

    #[test]
    fn rows_of_a_value_are_its_base_and_numbered_overflow_rows() {
        let spec = spec();
        assert_eq!(spec.row_key("Jones", 0).unwrap(), "Jones");
        assert_eq!(spec.row_key("Jones", 2).unwrap(), "Jones_2");
        assert_eq!(spec.shard_of("Jones", "Jones_2"), Some(2));
        assert_eq!(spec.shard_of("Jones", "Jones"), None);
        // A value containing `_` cannot pass for an overflow row.
        assert_eq!(spec.row_key("Jones_2", 0).unwrap(), "Jones!5F2");
        assert_eq!(spec.shard_of("Jones", "Jones!5F2"), None);
        assert_eq!(spec.row_key("a/b", 0).unwrap(), "a!2Fb");
    }

    #[test]
    fn unusable_declarations_are_refused() {
        let base = || {
            ListSpec::builder(
                "lastname",
                |e: &(String, String, String)| e.0.clone(),
                |e: &(String, String, String)| e.1.clone(),
                |e: &(String, String, String)| e.2.clone(),
            )
        };
        assert!(base().property("Shards").build().is_err());
        assert!(base().property("Employee IDs").build().is_err());
        assert!(base().prefix("a#").build().is_err());
        assert!(base().max_list_bytes(70_000).build().is_err());
        assert!(base().max_list_bytes(10).build().is_err());
    }
}
