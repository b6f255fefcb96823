//! [`TypedRows`]: several entity types in one partition, told apart by an `EntityType`
//! property and kept contiguous by a RowKey prefix per type (the design guide's heterogeneous
//! entity types).

use serde::de::DeserializeOwned;
use tablekit_azure::{Query, Table};
use tablekit_core::batch::Operation;
use tablekit_core::edm::to_properties;
use tablekit_core::filter::Filter;
use tablekit_core::{
    ENTITY_TYPE, ETag, Entity, Error, IntoKeys, Keys, OrUnknown, Result, Stored, TableEntity,
    Target,
};
use tablekit_core::{EdmValue, Properties};

/// An entity type that shares partitions with others: its discriminator value (stored in the
/// [`ENTITY_TYPE`] property) and the RowKey prefix that keeps its rows together. Its own keys
/// ([`TableEntity::keys`]) must start with that prefix.
///
/// ```
/// use tablekit_core::keys::pad_number;
/// use tablekit_core::{Keys, Result, TableEntity};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Department { name: String, employee_count: i64 }
///
/// impl TableEntity for Department {
///     fn keys(&self) -> Result<Keys> {
///         Keys::new(&self.name, format!("DEPARTMENT_{}", self.name))
///     }
/// }
///
/// impl tablekit_index::EntityKind for Department {
///     const ENTITY_TYPE: &'static str = "Department";
///     const ROW_PREFIX: &'static str = "DEPARTMENT_";
/// }
/// ```
///
/// With `#[derive(TableEntity)]`, put the prefix in the row key template
/// (`row_key = "DEPARTMENT_{name}"`). To read a partition's mixed rows in one query, define
/// an enum with `#[serde(tag = "EntityType")]` whose variant names are the `ENTITY_TYPE`
/// values, and use [`TypedRows::all`].
pub trait EntityKind: TableEntity {
    /// The value of the `EntityType` property (`Employee`). Add a version (`Employee.v2`) to
    /// let old and new shapes coexist.
    const ENTITY_TYPE: &'static str;
    /// The RowKey prefix of this type's rows (`EMPLOYEE_`).
    const ROW_PREFIX: &'static str;
}

/// A table whose partitions hold several [`EntityKind`]s (employees and their department):
/// each row carries its `EntityType` and its RowKey starts with its type's prefix, so a
/// range query reads one type, and a partition query reads all of them, each type
/// contiguous.
#[derive(Debug, Clone)]
pub struct TypedRows {
    table: Table,
}

impl TypedRows {
    /// Typed rows of `table`. No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// # use tablekit_core::{Keys, OrUnknown, Result, Stored, TableEntity};
    /// # use tablekit_index::{EntityKind, TypedRows};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Department { name: String }
    /// # impl TableEntity for Department {
    /// #     fn keys(&self) -> Result<Keys> { Keys::new(&self.name, format!("DEPARTMENT_{}", self.name)) }
    /// # }
    /// # impl EntityKind for Department {
    /// #     const ENTITY_TYPE: &'static str = "Department";
    /// #     const ROW_PREFIX: &'static str = "DEPARTMENT_";
    /// # }
    /// # async fn run(table: tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// let rows = TypedRows::new(table);
    /// rows.insert(&Department { name: "Sales".into() }).await?; // with EntityType = Department
    /// let keys = TypedRows::keys::<Department>("Sales", "Sales")?; // Sales/DEPARTMENT_Sales
    /// let sales: Option<Stored<Department>> = rows.get(&keys).await?;
    /// let departments: Vec<Stored<Department>> = rows.of_kind("Sales").collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(table: Table) -> Self {
        Self { table }
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The keys of the `K` row `id` in `partition`: `Sales/EMPLOYEE_000123`, for
    /// [`get`](Self::get). No request is sent.
    ///
    /// # Errors
    /// Key errors.
    pub fn keys<K: EntityKind>(partition: &str, id: &str) -> Result<Keys> {
        Keys::new(partition, format!("{}{id}", K::ROW_PREFIX))
    }

    /// The row as written: `value`'s keys, its properties plus `EntityType`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `value`'s RowKey does not start with its kind's
    /// prefix; [`Error::Encode`] when `value` has its own `EntityType` property with another
    /// value; key and encoding errors.
    pub fn entity<K: EntityKind>(value: &K) -> Result<Entity<Properties>> {
        let keys = value.keys()?;
        if !keys.rk().starts_with(K::ROW_PREFIX) {
            return Err(Error::invalid_argument(
                "keys",
                format!(
                    "{keys}: a {} row's RowKey starts with {:?}, which keeps each type's rows \
                     together",
                    K::ENTITY_TYPE,
                    K::ROW_PREFIX
                ),
            ));
        }
        let mut props = to_properties(value)?;
        match props.get(ENTITY_TYPE) {
            Some(EdmValue::String(t)) if t == K::ENTITY_TYPE => {}
            None => {
                props.insert(ENTITY_TYPE, K::ENTITY_TYPE);
            }
            Some(other) => {
                return Err(Error::encode(
                    ENTITY_TYPE,
                    format!(
                        "the value says {other:?}, its kind says {:?}",
                        K::ENTITY_TYPE
                    ),
                ));
            }
        }
        Ok(Entity::new(keys, props))
    }

    /// An insert of a `K` row, for a transaction mixing types (an employee and its
    /// department's count in one partition).
    ///
    /// # Errors
    /// As [`entity`](Self::entity).
    pub fn insert_operation<K: EntityKind>(value: &K) -> Result<Operation> {
        Operation::insert(&Self::entity(value)?)
    }

    /// Inserts a `K` row.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// As [`entity`](Self::entity) before any request; [`Error::AlreadyExists`].
    pub async fn insert<K: EntityKind>(&self, value: &K) -> Result<ETag> {
        self.table.insert(&Self::entity(value)?).await
    }

    /// Inserts or replaces a `K` row.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// As [`entity`](Self::entity) before any request.
    pub async fn upsert<K: EntityKind>(&self, value: &K) -> Result<ETag> {
        self.table.upsert_replace(&Self::entity(value)?).await
    }

    /// Reads the `K` row at `keys` — its [`Keys`] (from [`keys`](Self::keys): `Sales` and id
    /// `Sales` are `Sales/DEPARTMENT_Sales`), a `(partition_key, row_key)` pair of strings, or
    /// a `K` value — as a point query. `K` is named by the binding:
    /// `let d: Option<Stored<Department>> = rows.get(&sales).await?`.
    ///
    /// **Requests:** 1 (none when the keys are refused). **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors, and [`Error::InvalidArgument`] when the RowKey does not start with `K`'s
    /// prefix (no `K` row can live there), before any request; [`Error::Decode`] when the
    /// row's `EntityType` is not `K`'s, or it does not fit `K`.
    pub async fn get<K: EntityKind>(&self, keys: impl IntoKeys) -> Result<Option<Stored<K>>> {
        let keys = keys.into_keys()?;
        if !keys.rk().starts_with(K::ROW_PREFIX) {
            return Err(Error::invalid_argument(
                "keys",
                format!(
                    "{keys}: a {} row's RowKey starts with {:?}; build the keys with \
                     TypedRows::keys",
                    K::ENTITY_TYPE,
                    K::ROW_PREFIX
                ),
            ));
        }
        let Some(row) = self.table.get::<Properties>(keys).await? else {
            return Ok(None);
        };
        typed(row).map(Some)
    }

    /// The `K` rows of `partition`, in id order: a range query over `K`'s prefix (rows of
    /// other types are never read). A lazy [`Query`]: filter, project, page or resume it.
    ///
    /// **Requests:** one per page when read.
    pub fn of_kind<K: EntityKind + Send + 'static>(&self, partition: &str) -> Query<K> {
        self.table
            .query::<K>()
            .filter(Filter::row_prefix(partition, K::ROW_PREFIX))
    }

    /// Every row of `partition` as `E` — typically an enum tagged with `EntityType` — or, for
    /// types `E` does not know, as a property bag. Rows come in RowKey order, so each type's
    /// rows are contiguous. A lazy [`Query`].
    ///
    /// **Requests:** one per page when read.
    pub fn all<E: DeserializeOwned + Send + 'static>(
        &self,
        partition: &str,
    ) -> Query<OrUnknown<E>> {
        self.table
            .query::<OrUnknown<E>>()
            .filter(Filter::partition(partition))
    }
}

/// A row read as a property bag, checked to be a `K` and converted.
fn typed<K: EntityKind>(row: Stored<Properties>) -> Result<Stored<K>> {
    match row.value.get_str(ENTITY_TYPE).ok().flatten() {
        Some(t) if t == K::ENTITY_TYPE => {}
        other => {
            return Err(Error::decode(
                Target::entity("", row.keys.clone()),
                ENTITY_TYPE,
                format!("{other:?}, not {:?}", K::ENTITY_TYPE),
            ));
        }
    }
    let value = tablekit_core::edm::from_properties::<K>(&row.value)
        .map_err(|e| e.with_target(Target::entity("", row.keys.clone())))?;
    Ok(Stored {
        keys: row.keys,
        etag: row.etag,
        timestamp: row.timestamp,
        value,
    })
}
