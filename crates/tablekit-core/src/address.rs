//! The address of an entity as plain data: [`PartitionKey`], [`RowKey`] and [`Keys`].
//!
//! This module depends on nothing else in the crate, so that [`crate::error`] can name keys
//! in its errors without depending on key validation. The validating constructors (`new`,
//! `FromStr`, `TryFrom`, `Deserialize`) are implemented in [`crate::keys`], which depends on
//! the errors they return.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Serialize, Serializer};

macro_rules! key_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub(crate) String);

        impl $name {
            /// Wraps a key read from the service, which is valid by construction.
            pub(crate) fn from_service(value: String) -> Self {
                Self(value)
            }

            /// The key as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The key as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl From<$name> for String {
            fn from(key: $name) -> String {
                key.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
    };
}

key_type!(
    /// A validated PartitionKey: the partition (and transaction and scaling unit) of an entity.
    PartitionKey
);
key_type!(
    /// A validated RowKey: an entity's identity within its partition, and its sort order.
    RowKey
);

/// The full address of an entity within a table.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Keys {
    /// The entity's partition.
    #[serde(rename = "PartitionKey")]
    pub partition_key: PartitionKey,
    /// The entity's row within the partition.
    #[serde(rename = "RowKey")]
    pub row_key: RowKey,
}

impl Keys {
    /// Combines already validated keys.
    pub fn from_parts(partition_key: PartitionKey, row_key: RowKey) -> Self {
        Self {
            partition_key,
            row_key,
        }
    }

    /// The PartitionKey as a string.
    pub fn pk(&self) -> &str {
        &self.partition_key.0
    }

    /// The RowKey as a string.
    pub fn rk(&self) -> &str {
        &self.row_key.0
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keys({:?}, {:?})", self.partition_key.0, self.row_key.0)
    }
}

impl fmt::Display for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(PartitionKey={:?}, RowKey={:?})",
            self.partition_key.0, self.row_key.0
        )
    }
}
