//! Entity types that know their own keys ([`TableEntity`]), the ways to name an entity's
//! address ([`IntoKeys`]) and the values write operations accept ([`AsEntity`]).
//!
//! Everything here is computed in the caller's process: no method sends a request.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::entity::Entity;
use crate::error::Result;
use crate::keys::Keys;

/// A type whose values know where they are stored: their PartitionKey and RowKey are computed
/// from their fields by [`TableEntity::keys`].
///
/// `#[derive(TableEntity)]` (crate `tablekit-derive`, re-exported by `tablekit`) implements it
/// from key templates such as `#[table(partition_key = "{department}", row_key =
/// "{id:06}")]`, together with `Serialize`/`Deserialize` under PascalCase property names.
///
/// **Key fields are stored twice**: once in the keys and once as ordinary properties. A read
/// then rebuilds the value from its properties alone, without parsing keys back into fields
/// (which is impossible in general: `"{a}{b}"` has no unique inverse, and zero padding or
/// inverted ticks lose the original text), filters can compare the key fields with their own
/// types, and other SDKs see every field. The cost is the size of the copies, counted in the
/// entity's 1 MiB. To keep a key field out of the properties, implement the trait by hand and
/// skip the field in serde; the value read back then lacks it.
///
/// # Examples
/// Implemented by hand — any serde type whose properties follow the [`crate::edm`] rules can
/// be a `TableEntity`:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tablekit_core::keys::pad_number;
/// use tablekit_core::{Keys, Result, TableEntity};
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(rename_all = "PascalCase")]
/// struct Employee {
///     department: String,
///     id: u32,
///     email: String,
/// }
///
/// impl TableEntity for Employee {
///     fn keys(&self) -> Result<Keys> {
///         Keys::new(&self.department, pad_number(u64::from(self.id), 6)?)
///     }
/// }
///
/// let e = Employee { department: "Sales".into(), id: 223, email: "jonesj@contoso.com".into() };
/// assert_eq!(e.keys()?, Keys::new("Sales", "000223")?);
/// # Ok::<(), tablekit_core::Error>(())
/// ```
pub trait TableEntity: Serialize + DeserializeOwned {
    /// This value's PartitionKey and RowKey, computed and validated on every call (no request).
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] or [`crate::Error::LimitExceeded`] when a field's text
    /// makes an invalid key (a forbidden character, more than 1 KiB), and whatever error the
    /// key formatting reports (a number wider than its padding, a time outside .NET's range).
    fn keys(&self) -> Result<Keys>;

    /// The names of the properties of this type that client-side encryption stores encrypted
    /// (`tablekit_encryption::EncryptionPolicy::for_type` builds a policy from them).
    /// `#[derive(TableEntity)]` lists the fields marked `#[table(encrypt)]` — `String` and
    /// `Option<String>` fields, under their stored names. None by default.
    fn encrypted_properties() -> &'static [&'static str] {
        &[]
    }
}

/// Anything that names one entity's address: [`Keys`] (owned or borrowed), a pair of strings
/// `(partition_key, row_key)`, or a [`TableEntity`] value whose keys are computed.
///
/// Read and delete operations take `impl IntoKeys`, so `("Sales", "000223")` works where
/// `&Keys::new("Sales", "000223")?` does. String pairs are validated by
/// [`IntoKeys::into_keys`], before any request.
///
/// # Examples
/// ```
/// use tablekit_core::{IntoKeys, Keys};
///
/// let keys = Keys::new("Sales", "000223")?;
/// assert_eq!(("Sales", "000223").into_keys()?, keys);
/// assert_eq!((String::from("Sales"), format!("{:06}", 223)).into_keys()?, keys);
/// assert_eq!((&keys).into_keys()?, keys);
/// assert!(("Sales", "a/b").into_keys().is_err()); // `/` is not allowed in keys
/// # Ok::<(), tablekit_core::Error>(())
/// ```
pub trait IntoKeys {
    /// The validated keys.
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] or [`crate::Error::LimitExceeded`] for strings that are
    /// not valid keys; a [`TableEntity`]'s own key errors. [`Keys`] never fail.
    fn into_keys(self) -> Result<Keys>;
}

impl IntoKeys for Keys {
    fn into_keys(self) -> Result<Keys> {
        Ok(self)
    }
}

impl IntoKeys for &Keys {
    fn into_keys(self) -> Result<Keys> {
        Ok(self.clone())
    }
}

/// `(partition_key, row_key)` as any two string types: `(&str, &str)`, `(String, String)`,
/// `(&String, &String)`, or a mix.
impl<P: Into<String>, R: Into<String>> IntoKeys for (P, R) {
    fn into_keys(self) -> Result<Keys> {
        Keys::new(self.0, self.1)
    }
}

impl<E: TableEntity> IntoKeys for &E {
    fn into_keys(self) -> Result<Keys> {
        self.keys()
    }
}

/// What a write operation (insert, replace, merge, upsert) accepts: keys plus a value to
/// serialize as the entity's properties.
///
/// Implemented for [`Entity<T>`] (explicit keys, any serializable value) and for every
/// [`TableEntity`] (keys computed from the value, which is written whole).
///
/// # Examples
/// ```
/// use tablekit_core::{AsEntity, Entity, Keys};
///
/// let entity = Entity::new(Keys::new("Sales", "000223")?, [("Email", "jonesj@contoso.com")]);
/// assert_eq!(entity.entity_keys()?, Keys::new("Sales", "000223")?);
/// assert_eq!(entity.entity_value()[0].1, "jonesj@contoso.com");
/// # Ok::<(), tablekit_core::Error>(())
/// ```
pub trait AsEntity {
    /// The type serialized as the entity's properties.
    type Value: Serialize + ?Sized;

    /// The entity's keys.
    ///
    /// # Errors
    /// A [`TableEntity`]'s key errors; never for an [`Entity`], whose keys are validated.
    fn entity_keys(&self) -> Result<Keys>;

    /// The value to write as the entity's properties.
    fn entity_value(&self) -> &Self::Value;
}

impl<T: Serialize> AsEntity for Entity<T> {
    type Value = T;

    fn entity_keys(&self) -> Result<Keys> {
        Ok(self.keys.clone())
    }

    fn entity_value(&self) -> &T {
        &self.value
    }
}

impl<E: TableEntity> AsEntity for E {
    type Value = E;

    fn entity_keys(&self) -> Result<Keys> {
        self.keys()
    }

    fn entity_value(&self) -> &E {
        self
    }
}
