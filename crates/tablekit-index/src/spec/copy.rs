//! [`CopySpec`]: one copy of every entity, under its own key prefix.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::edm::{field_names, to_properties};
use tablekit_core::keys::{KeyEncoder, validate_key};
use tablekit_core::limits::{MAX_KEY_BYTES, validate_property_name};
use tablekit_core::{Error, KeyKind, Result};

use super::key::{KeyPart, KeySource, Part};

/// One copy of every entity: a name, the key prefix that keeps its rows together, where the
/// entity's value for this copy comes from (`000223`, `jonesj@contoso.com`) and the
/// properties the copy holds. `R` is what its rows are read as: `T` itself unless the copy is
/// declared with [`with_projection_of`](Self::with_projection_of).
///
/// Declaring a copy on an [`IndexSpecBuilder`](crate::IndexSpecBuilder) returns its
/// [`CopyHandle`](crate::CopyHandle), which lookups take.
///
/// Values are made key-safe with [`KeyEncoder`] (a value without `/ \ # ? !` or control
/// characters is stored as is), so lookups take the plain value.
pub struct CopySpec<T, R = T> {
    pub(super) name: String,
    pub(super) prefix: String,
    pub(super) source: Arc<dyn KeySource<T>>,
    pub(super) projection: Option<Vec<String>>,
    width: Option<usize>,
    _row: PhantomData<fn() -> R>,
}

impl<T, R> Clone for CopySpec<T, R> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            prefix: self.prefix.clone(),
            source: Arc::clone(&self.source),
            projection: self.projection.clone(),
            width: self.width,
            _row: PhantomData,
        }
    }
}

impl<T, R> fmt::Debug for CopySpec<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopySpec")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("property", &self.source.property())
            .field("projection", &self.projection)
            .field("width", &self.width)
            .finish_non_exhaustive()
    }
}

impl<T> CopySpec<T> {
    /// A copy named `name` whose keys start with `name_` (`CopySpec::new("email",
    /// Employee::EMAIL)` stores rows at `email_<value>`), holding every property of the
    /// entity. `source` is a [`Property`](tablekit_core::filter::Property) constant of a text
    /// or integer field, or a closure computing the value (`|e: &Employee| e.email.to_lowercase()`).
    ///
    /// # Examples
    /// ```
    /// use tablekit_core::filter::Property;
    /// use tablekit_index::CopySpec;
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Employee { id: u32, email: String }
    /// # impl Employee { const ID: Property<u32> = Property::new("Id"); }
    ///
    /// let by_id = CopySpec::<Employee>::new("empid", Employee::ID).with_width(6);
    /// let by_domain = CopySpec::new("domain", |e: &Employee| {
    ///     e.email.rsplit('@').next().unwrap_or_default().to_owned()
    /// });
    /// assert_eq!((by_id.prefix(), by_domain.prefix()), ("empid_", "domain_"));
    /// ```
    pub fn new(name: impl Into<String>, source: impl KeySource<T> + 'static) -> Self {
        let name = name.into();
        Self {
            prefix: format!("{name}_"),
            name,
            source: Arc::new(source),
            projection: None,
            width: None,
            _row: PhantomData,
        }
    }
}

impl<T, R> CopySpec<T, R> {
    /// Uses `prefix` instead of `name_`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Stores only these properties in this copy (the guide's "the email copy can omit
    /// `Age`"). Not allowed on the primary copy, which is always complete. Its rows are still
    /// read as `R`; to read them as a type of their own, use
    /// [`with_projection_of`](Self::with_projection_of).
    #[must_use]
    pub fn with_projection<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.projection = Some(properties.into_iter().map(Into::into).collect());
        self
    }

    /// Stores only the properties `V` reads, and reads the copy's rows as `V`
    /// (`with_projection_of::<EmailCard>()`): lookups through this copy's handle return
    /// `Stored<V>`. A `V` that is not a plain struct (a map, an enum) keeps the projection as
    /// it was and only changes the type rows are read as.
    #[must_use]
    pub fn with_projection_of<V: DeserializeOwned>(self) -> CopySpec<T, V> {
        let projection = field_names::<V>()
            .map(|names| names.iter().map(|n| (*n).to_owned()).collect())
            .or(self.projection);
        CopySpec {
            name: self.name,
            prefix: self.prefix,
            source: self.source,
            projection,
            width: self.width,
            _row: PhantomData,
        }
    }

    /// Declares that every value of this copy is exactly `width` characters (a zero-padded id
    /// such as `000223`): integer values are zero-padded to it, text values must have it.
    /// Writes refuse other widths, and reads of the copy's key range skip longer keys that
    /// merely share the prefix — compound-key rows such as `empid_000123_2012` living next
    /// to the copies.
    #[must_use]
    pub fn with_width(mut self, width: usize) -> Self {
        self.width = Some(width);
        self
    }

    /// The copy's name (in reports, jobs and errors).
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

    /// The same declaration, its rows read as `T` (how the spec keeps copies of every row
    /// type in one list).
    pub(super) fn erase(self) -> CopySpec<T> {
        CopySpec {
            name: self.name,
            prefix: self.prefix,
            source: self.source,
            projection: self.projection,
            width: self.width,
            _row: PhantomData,
        }
    }

    /// The entity's value for this copy, `properties` being its encoded properties.
    pub(crate) fn value_from(&self, entity: &T, properties: &Properties) -> Result<String> {
        self.source
            .part(entity, properties)?
            .text(self.width, &self.name)
    }

    /// The text of a value a lookup gives.
    pub(crate) fn value_text(&self, value: impl KeyPart) -> Result<String> {
        value.into_part().text(self.width, &self.name)
    }

    /// The text of a range bound a lookup gives.
    pub(crate) fn bound_text(&self, bound: Part) -> Result<String> {
        bound.bound_text(self.width, &self.name)
    }

    /// Checks a value's text against the declared width.
    fn check_value(&self, value: &str) -> Result<()> {
        Part::Text(value.to_owned()).text(self.width, &self.name)?;
        Ok(())
    }

    /// The key-safe form of a value's text.
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

impl<T: Serialize, R> CopySpec<T, R> {
    /// The entity's value for this copy, as its keys hold it before encoding (`000223`).
    ///
    /// # Errors
    /// Encoding errors; [`Error::Encode`] for a value of the wrong width or a missing
    /// property.
    pub fn value_of(&self, entity: &T) -> Result<String> {
        self.value_from(entity, &to_properties(entity)?)
    }
}

/// Checks that a source's property is one `T` serializes (when `T`'s fields are known).
pub(super) fn check_source<T>(
    source: &dyn KeySource<T>,
    what: &str,
    fields: Option<&[&str]>,
) -> Result<()> {
    if let (Some(property), Some(fields)) = (source.property(), fields) {
        if !fields.contains(&property) {
            return Err(Error::invalid_argument(
                what,
                format!("the entity type has no property {property:?} to make a key of"),
            ));
        }
    }
    Ok(())
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
    check_source(copy.source.as_ref(), name, fields)?;
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
