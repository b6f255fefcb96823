//! [`CopySpec`]: one copy of every entity, under its own key prefix.

use std::fmt;
use std::sync::Arc;

use tablekit_core::keys::{KeyEncoder, validate_key};
use tablekit_core::limits::{MAX_KEY_BYTES, validate_property_name};
use tablekit_core::{Error, KeyKind, Result};

/// A function computing a key component (a partition, an id, an email) from an entity.
pub(crate) type KeyFn<T> = Arc<dyn Fn(&T) -> String + Send + Sync>;

/// One copy of every entity: a name, the key prefix that keeps its rows together, the function
/// that computes the entity's value for this copy (`000223`, `jonesj@contoso.com`), and the
/// properties the copy holds.
///
/// Values are made key-safe with [`KeyEncoder`] (a value without `/ \ # ? !` or control
/// characters is stored as is), so lookups take the plain value.
pub struct CopySpec<T> {
    pub(super) name: String,
    pub(super) prefix: String,
    key: KeyFn<T>,
    pub(super) projection: Option<Vec<String>>,
    width: Option<usize>,
}

impl<T> Clone for CopySpec<T> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            prefix: self.prefix.clone(),
            key: Arc::clone(&self.key),
            projection: self.projection.clone(),
            width: self.width,
        }
    }
}

impl<T> fmt::Debug for CopySpec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopySpec")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("projection", &self.projection)
            .field("width", &self.width)
            .finish_non_exhaustive()
    }
}

impl<T> CopySpec<T> {
    /// A copy named `name` whose keys start with `name_` (`CopySpec::new("email", …)` stores
    /// rows at `email_<value>`), holding every property of the entity.
    pub fn new(
        name: impl Into<String>,
        key: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        Self {
            prefix: format!("{name}_"),
            name,
            key: Arc::new(key),
            projection: None,
            width: None,
        }
    }

    /// Uses `prefix` instead of `name_`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Stores only these properties in this copy (the guide's "the email copy can omit
    /// `Age`"). Not allowed on the primary copy, which is always complete.
    #[must_use]
    pub fn project<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.projection = Some(properties.into_iter().map(Into::into).collect());
        self
    }

    /// Declares that every value of this copy is exactly `width` characters (a zero-padded id
    /// such as `000223`). Writes refuse other widths, and reads of the copy's key range skip
    /// longer keys that merely share the prefix — compound-key rows such as
    /// `empid_000123_2012` living next to the copies.
    #[must_use]
    pub fn fixed_width(mut self, width: usize) -> Self {
        self.width = Some(width);
        self
    }

    /// The copy's name (what `get_by` and `range_by` take).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key prefix of its rows (RowKey prefix in one partition, PartitionKey prefix across
    /// partitions).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The properties it holds, when projected.
    pub fn projection(&self) -> Option<&[String]> {
        self.projection.as_deref()
    }

    /// Its fixed value width, if declared.
    pub fn width(&self) -> Option<usize> {
        self.width
    }

    /// The entity's value for this copy, before encoding.
    pub fn value_of(&self, entity: &T) -> String {
        (self.key)(entity)
    }

    /// Checks a value against the declared width.
    pub(crate) fn check_value(&self, value: &str) -> Result<()> {
        match self.width {
            Some(width) if value.chars().count() != width => Err(Error::encode(
                &self.name,
                format!("value {value:?} must be exactly {width} characters"),
            )),
            _ => Ok(()),
        }
    }

    /// The key-safe form of a value.
    pub(crate) fn encode(&self, value: &str) -> Result<String> {
        self.check_value(value)?;
        KeyEncoder::new().encode(value)
    }

    /// The plain value behind an encoded key part, or `None` when the text cannot be one of
    /// this copy's values (not decodable, or not of the declared width).
    pub(crate) fn decode(&self, encoded: &str) -> Option<String> {
        let value = KeyEncoder::new().decode(encoded).ok()?;
        self.check_value(&value).ok()?;
        Some(value)
    }
}

pub(super) fn check_copy<T>(copy: &CopySpec<T>, fields: Option<&[&str]>) -> Result<()> {
    let name = &copy.name;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::invalid_argument(
            name,
            "a copy name must be non-empty ASCII letters, digits and `_`",
        ));
    }
    if copy.prefix.is_empty() {
        return Err(Error::invalid_argument(
            name,
            "a copy needs a non-empty prefix to keep its rows apart",
        ));
    }
    validate_key(KeyKind::RowKey, &copy.prefix)?;
    if copy.width == Some(0) || copy.width.is_some_and(|w| w > MAX_KEY_BYTES / 2) {
        return Err(Error::invalid_argument(
            name,
            "a fixed width must be 1 to 512 characters",
        ));
    }
    for property in copy.projection.iter().flatten() {
        validate_property_name(property)?;
        if let Some(fields) = fields {
            if !fields.contains(&property.as_str()) {
                return Err(Error::invalid_argument(
                    property,
                    format!("copy {name:?} projects a property the entity type does not have"),
                ));
            }
        }
    }
    Ok(())
}
