//! [`TypedTable`]: a table whose entities are read and written as one type, so that no call
//! names the type again.

use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::batch::Operation;
use tablekit_core::{AsEntity, ETag, IfMatch, IntoKeys, Result, Stored};

use super::{BulkOptions, BulkReport, Query, Table};

/// A [`Table`] whose entities are `T`s: reads return `Stored<T>` and writes take `T`s, so the
/// type is named once, at [`Table::typed`], and never again.
///
/// For a `#[derive(TableEntity)]` type the writes take `&T` itself: its keys come from its
/// fields. For a type without keys they take an [`Entity<T>`](tablekit_core::Entity) —
/// anything that is [`AsEntity<Value = T>`](AsEntity). Keys are given as anything
/// [`IntoKeys`]: `("Sales", "000223")`, [`Keys`](tablekit_core::Keys), or `&employee`.
///
/// Cheap to clone (a [`Table`] handle); holds no connection of its own. Every method sends
/// what the [`Table`] method of the same name sends, and fails as it does.
///
/// # Examples
/// ```no_run
/// use serde::{Deserialize, Serialize};
/// use tablekit_core::{Keys, TableEntity};
///
/// // `#[derive(TableEntity)]` (crate `tablekit-derive`) writes this impl from
/// // `#[table(partition_key = "{department}", row_key = "{id:06}")]`.
/// #[derive(Debug, Serialize, Deserialize)]
/// #[serde(rename_all = "PascalCase")]
/// struct Employee {
///     department: String,
///     id: u32,
///     email: String,
/// }
///
/// impl TableEntity for Employee {
///     fn keys(&self) -> tablekit_core::Result<Keys> {
///         Keys::new(&self.department, format!("{:06}", self.id))
///     }
/// }
///
/// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
/// let employees = table.typed::<Employee>();
/// let jones = Employee { department: "Sales".into(), id: 223, email: "jonesj@contoso.com".into() };
/// employees.insert(&jones).await?;
/// let stored = employees.get(("Sales", "000223")).await?.expect("just inserted");
/// assert_eq!(stored.value.email, "jonesj@contoso.com");
/// employees.delete(&jones, stored.if_match()).await?;
/// # Ok(()) }
/// ```
pub struct TypedTable<T> {
    table: Table,
    // `fn() -> T`: the handle neither owns nor borrows a `T`, so it is `Send`, `Sync` and
    // `Clone` whatever `T` is.
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedTable<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for TypedTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedTable")
            .field("table", &self.table.name())
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

/// How [`TypedTable::bulk_write`] writes each entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// Insert; an entity that exists is refused (409) and reported failed.
    Insert,
    /// Insert, or replace the whole entity (last writer wins).
    UpsertReplace,
    /// Insert, or merge the properties into the stored entity.
    UpsertMerge,
}

impl Table {
    /// This table, with its entities read and written as `T`s. No request is sent.
    pub fn typed<T>(&self) -> TypedTable<T> {
        TypedTable {
            table: self.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> TypedTable<T> {
    /// The untyped table, for anything else (other types, table lifecycle).
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// A query returning `T`s; nothing is sent until its pages are asked for. As
    /// [`Table::query`]: one request per page, filtered with `.filter(..)` (for example
    /// `Employee::EMAIL.eq("jonesj@contoso.com")`).
    pub fn query(&self) -> Query<T> {
        self.table.query::<T>()
    }

    /// Deletes the entity at `keys` if `if_match` holds. As [`Table::delete`].
    ///
    /// # Errors
    /// As [`Table::delete`]: [`NotFound`](tablekit_core::Error::NotFound) when it does not
    /// exist.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        self.table.delete(keys, if_match).await
    }

    /// Deletes the entity at `keys` whatever its ETag; returns whether it existed. As
    /// [`Table::delete_if_exists`].
    ///
    /// # Errors
    /// As [`Table::delete_if_exists`].
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        self.table.delete_if_exists(keys).await
    }
}

impl<T: DeserializeOwned> TypedTable<T> {
    /// Reads the entity at `keys` as a `T`: a point query. As [`Table::get`].
    ///
    /// # Errors
    /// As [`Table::get`]: [`Decode`](tablekit_core::Error::Decode) when the stored entity
    /// does not fit `T`.
    pub async fn get(&self, keys: impl IntoKeys) -> Result<Option<Stored<T>>> {
        self.table.get::<T>(keys).await
    }
}

impl<T: Serialize> TypedTable<T> {
    /// Inserts `entity` (`&T` for a `TableEntity`, or an `Entity<T>`). As [`Table::insert`].
    ///
    /// # Errors
    /// As [`Table::insert`].
    pub async fn insert(&self, entity: &impl AsEntity<Value = T>) -> Result<ETag> {
        self.table.insert(entity).await
    }

    /// Replaces `entity` whole if `if_match` holds. As [`Table::replace`].
    ///
    /// # Errors
    /// As [`Table::replace`].
    pub async fn replace(
        &self,
        entity: &impl AsEntity<Value = T>,
        if_match: IfMatch,
    ) -> Result<ETag> {
        self.table.replace(entity, if_match).await
    }

    /// Merges `entity`'s properties if `if_match` holds. As [`Table::merge`].
    ///
    /// # Errors
    /// As [`Table::merge`].
    pub async fn merge(
        &self,
        entity: &impl AsEntity<Value = T>,
        if_match: IfMatch,
    ) -> Result<ETag> {
        self.table.merge(entity, if_match).await
    }

    /// Inserts `entity` or replaces it whole. As [`Table::upsert_replace`].
    ///
    /// # Errors
    /// As [`Table::upsert_replace`].
    pub async fn upsert_replace(&self, entity: &impl AsEntity<Value = T>) -> Result<ETag> {
        self.table.upsert_replace(entity).await
    }

    /// Inserts `entity` or merges its properties. As [`Table::upsert_merge`].
    ///
    /// # Errors
    /// As [`Table::upsert_merge`].
    pub async fn upsert_merge(&self, entity: &impl AsEntity<Value = T>) -> Result<ETag> {
        self.table.upsert_merge(entity).await
    }

    /// Writes many entities, each the same way (`mode`), with [`Table::bulk_write`]: grouped
    /// by partition, in transactions of up to 100, with one outcome per entity in the order
    /// given.
    ///
    /// Requests: as [`Table::bulk_write`]. Consistency: each transaction is atomic; the bulk
    /// write is not.
    ///
    /// # Errors
    /// Before any request: the first entity's key or encoding error, and the errors of
    /// [`Table::bulk_write`] (two entities with the same keys, none at all).
    pub async fn bulk_write<'a, E>(
        &self,
        mode: WriteMode,
        entities: impl IntoIterator<Item = &'a E>,
        options: BulkOptions,
    ) -> Result<BulkReport>
    where
        E: AsEntity<Value = T> + 'a,
    {
        let operations = entities
            .into_iter()
            .map(|e| match mode {
                WriteMode::Insert => Operation::insert(e),
                WriteMode::UpsertReplace => Operation::upsert_replace(e),
                WriteMode::UpsertMerge => Operation::upsert_merge(e),
            })
            .collect::<Result<Vec<_>>>()?;
        self.table.bulk_write(operations, options).await
    }
}

impl<T: Serialize + DeserializeOwned> TypedTable<T> {
    /// Reads the entity at `keys`, computes its new value with `change` (`None` when it does
    /// not exist) and writes it back under the ETag read, starting again on a conflict. As
    /// [`Table::update_with`]. The new value is written at `keys`, whatever keys its own
    /// fields would give.
    ///
    /// # Errors
    /// As [`Table::update_with`].
    pub async fn update_with<F>(&self, keys: impl IntoKeys, change: F) -> Result<Stored<T>>
    where
        F: FnMut(Option<T>) -> T,
    {
        self.table.update_with(keys, change).await
    }
}
