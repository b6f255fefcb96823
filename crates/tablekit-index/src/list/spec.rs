//! [`ListSpec`]: the declaration of an index over a non-unique value (last name → employees).

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::edm::{field_names, to_properties};
use tablekit_core::keys::{CompoundKey, validate_key};
use tablekit_core::limits::{MAX_PROPERTY_BYTES, validate_property_name};
use tablekit_core::{Error, KeyKind, Limit, NameKind, Result};

use crate::spec::key::KeySource;

/// The property of a base index row that counts the overflow rows created so far.
pub(crate) const SHARDS: &str = "Shards";

/// Declares an index of entities by a value they need not hold alone (a last name): where
/// the value comes from, and how the lists are stored. The entities' own keys are theirs
/// ([`TableEntity::keys`](tablekit_core::TableEntity::keys)).
///
/// A value's list is one index row (`Jones`) holding the entity references as a JSON array
/// in one string property (`EmployeeIDs`). When adding a reference would take the property
/// past [`with_max_list_bytes`](ListSpecBuilder::with_max_list_bytes) (default: the
/// service's 64 KiB), the row's references move to a new overflow row (`Jones_1`,
/// `Jones_2`, …) and the base row starts again: lists never fail for size. Values are escaped
/// so that `_` can only separate the overflow number (`Smith_Jones` is stored as
/// `Smith!5FJones`).
pub struct ListSpec<T> {
    name: String,
    value: Arc<dyn KeySource<T>>,
    prefix: String,
    property: String,
    max_list_bytes: usize,
}

impl<T> Clone for ListSpec<T> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
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
            .field("value", &self.value.property())
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
    /// Starts a declaration named `name` (`lastname`) of an index by `value` (the last name):
    /// a [`Property`](tablekit_core::filter::Property) constant of a text or integer field
    /// (`Employee::LAST_NAME`) or a closure. Index rows have no prefix and the list property
    /// is `Ids` until changed; a [`SamePartitionList`](crate::SamePartitionList) requires a
    /// prefix.
    ///
    /// # Examples
    /// ```
    /// use tablekit_core::filter::Property;
    /// use tablekit_index::ListSpec;
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # #[serde(rename_all = "PascalCase")]
    /// # struct Employee { last_name: String }
    /// # impl Employee { const LAST_NAME: Property<String> = Property::new("LastName"); }
    ///
    /// let by_last_name = ListSpec::<Employee>::builder("lastname", Employee::LAST_NAME)
    ///     .with_prefix("lastname_")
    ///     .with_property("EmployeeIDs")
    ///     .build()?;
    /// assert_eq!(by_last_name.property(), "EmployeeIDs");
    /// # Ok::<(), tablekit_core::Error>(())
    /// ```
    pub fn builder(
        name: impl Into<String>,
        value: impl KeySource<T> + 'static,
    ) -> ListSpecBuilder<T> {
        ListSpecBuilder {
            spec: ListSpec {
                name: name.into(),
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

impl<T: Serialize> ListSpec<T> {
    /// An entity's indexed value.
    ///
    /// # Errors
    /// Encoding errors; [`Error::Encode`] when the value's property is missing.
    pub fn value_of(&self, entity: &T) -> Result<String> {
        let what = self.value.property().unwrap_or(self.name.as_str());
        self.value
            .part(entity, &to_properties(entity)?)?
            .text(None, what)
    }

    /// Whether `entity`'s indexed value is `value` (an entity whose value cannot be computed
    /// has none).
    pub(crate) fn has_value(&self, entity: &T, value: &str) -> bool {
        matches!(self.value_of(entity), Ok(v) if v == value)
    }
}

impl<T> ListSpecBuilder<T> {
    /// Puts every index row's key after `prefix` (`lastname_Jones`), keeping index rows apart
    /// from the entities they list in a shared partition. Required by
    /// [`SamePartitionList`](crate::SamePartitionList), which then refuses entities whose
    /// RowKey starts with it; choose one no entity's RowKey can start with.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.spec.prefix = prefix.into();
        self
    }

    /// Names the property holding each row's list (the guide's `EmployeeIDs`).
    #[must_use]
    pub fn with_property(mut self, name: impl Into<String>) -> Self {
        self.spec.property = name.into();
        self
    }

    /// Lowers the size at which a row's list overflows into a new row (bytes of the JSON
    /// text, UTF-16 × 2; at most 64 KiB).
    #[must_use]
    pub fn with_max_list_bytes(mut self, bytes: usize) -> Self {
        self.spec.max_list_bytes = bytes;
        self
    }
}

impl<T: DeserializeOwned> ListSpecBuilder<T> {
    /// Checks the declaration.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad property name or one of the reserved `Shards`;
    /// [`Error::InvalidKey`] for a prefix keys may not hold; [`Error::LimitExceeded`] for a
    /// list size above 64 KiB; [`Error::InvalidArgument`] for an empty name, a value property
    /// `T` does not have, or a list size too small for any list.
    pub fn build(self) -> Result<ListSpec<T>> {
        let spec = self.spec;
        if spec.name.is_empty() {
            return Err(Error::invalid_argument("name", "a list index needs a name"));
        }
        if let (Some(property), Some(fields)) = (spec.value.property(), field_names::<T>()) {
            if !fields.contains(&property) {
                return Err(Error::invalid_argument(
                    &spec.name,
                    format!("the entity type has no property {property:?} to index"),
                ));
            }
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

    type E = (String, String, String);

    fn spec() -> ListSpec<E> {
        ListSpec::builder("lastname", |e: &E| e.2.clone())
            .with_property("EmployeeIDs")
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
        let base = || ListSpec::builder("lastname", |e: &E| e.2.clone());
        assert!(base().with_property("Shards").build().is_err());
        assert!(base().with_property("Employee IDs").build().is_err());
        assert!(base().with_prefix("a#").build().is_err());
        assert!(base().with_max_list_bytes(70_000).build().is_err());
        assert!(base().with_max_list_bytes(10).build().is_err());
    }
}
