//! [`CompoundRows`]: related rows under compound RowKeys (`empid_000123`,
//! `empid_000123_2012`) so one range query returns an entity with its children
//! (the design guide's compound key pattern).

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::{Query, Table};
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::keys::CompoundKey;
use tablekit_core::{ETag, Entity, IfMatch, Keys, Result, Stored};

/// Rows of a table addressed by compound RowKeys built with a [`CompoundKey`]: the employee
/// at `empid_000123` and its yearly reviews at `empid_000123_2012`, `empid_000123_2013`, in
/// one partition, so one point query reads a review and one range query reads an employee
/// with all its reviews — and one transaction can change them together.
///
/// Give every numeric component a fixed width ([`CompoundKey::with_width`]) so keys sort as
/// their components do; the separator is escaped inside text components, so parsing a key
/// gives back exactly what built it.
#[derive(Debug, Clone)]
pub struct CompoundRows {
    table: Table,
    key: CompoundKey,
}

impl CompoundRows {
    /// Rows of `table` keyed by `key`. No request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_core::Properties;
    /// use tablekit_core::keys::CompoundKey;
    /// use tablekit_index::CompoundRows;
    ///
    /// # async fn run(table: tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// // empid_000123, then empid_000123_2012, empid_000123_2013: ids six digits, years four.
    /// let reviews = CompoundRows::new(table, CompoundKey::new('_').with_width(1, 6).with_width(2, 4));
    /// let keys = reviews.keys("Sales", ["empid", "123", "2012"])?;
    /// assert_eq!(keys.rk(), "empid_000123_2012");
    /// // An employee and all its reviews: one range query.
    /// let rows: Vec<tablekit_core::Stored<Properties>> =
    ///     reviews.with_prefix("Sales", ["empid", "123"])?.collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(table: Table, key: CompoundKey) -> Self {
        Self { table, key }
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The key builder.
    pub fn key(&self) -> &CompoundKey {
        &self.key
    }

    /// The keys of the row with these components: `keys("Sales", ["empid", "123", "2012"])`
    /// is `Sales/empid_000123_2012` with widths 6 and 4.
    ///
    /// # Errors
    /// As [`CompoundKey::build`]; PartitionKey errors.
    pub fn keys<I, S>(&self, partition: &str, components: I) -> Result<Keys>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Keys::new(partition, self.key.build(components)?)
    }

    /// The components of a RowKey this builder made.
    ///
    /// # Errors
    /// As [`CompoundKey::parse`].
    pub fn components(&self, row_key: &str) -> Result<Vec<String>> {
        self.key.parse(row_key)
    }

    /// Inserts or replaces the row with these components.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// Key and encoding errors before any request; transport and service errors.
    pub async fn upsert<T: Serialize, I, S>(
        &self,
        partition: &str,
        components: I,
        value: &T,
    ) -> Result<ETag>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = self.keys(partition, components)?;
        self.table.upsert_replace(&Entity::new(keys, value)).await
    }

    /// An insert of the row with these components, for a transaction with its siblings
    /// (e.g. an employee and a review written together).
    ///
    /// # Errors
    /// Key and encoding errors.
    pub fn insert_operation<T: Serialize, I, S>(
        &self,
        partition: &str,
        components: I,
        value: &T,
    ) -> Result<Operation>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Operation::insert(&Entity::new(self.keys(partition, components)?, value))
    }

    /// Reads the row with these components, as `T` (named by the binding:
    /// `let review: Option<Stored<Review>> = rows.get(…).await?`): a point query.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// Key errors before any request; [`tablekit_core::Error::Decode`] when the row
    /// does not fit `T`.
    pub async fn get<T: DeserializeOwned, I, S>(
        &self,
        partition: &str,
        components: I,
    ) -> Result<Option<Stored<T>>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.table.get(&self.keys(partition, components)?).await
    }

    /// Deletes the row with these components, if `if_match` holds.
    ///
    /// **Requests:** 1.
    ///
    /// # Errors
    /// Key errors before any request; [`tablekit_core::Error::NotFound`] when the row does
    /// not exist; [`tablekit_core::Error::PreconditionFailed`] when its ETag is not the one
    /// given; transport and service errors.
    pub async fn delete<I, S>(
        &self,
        partition: &str,
        components: I,
        if_match: IfMatch,
    ) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.table
            .delete(self.keys(partition, components)?, if_match)
            .await
    }

    /// Deletes the row with these components if it exists; returns whether it did.
    ///
    /// **Requests:** 1.
    ///
    /// # Errors
    /// Key errors; transport and service errors.
    pub async fn delete_if_exists<I, S>(&self, partition: &str, components: I) -> Result<bool>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.table
            .delete_if_exists(self.keys(partition, components)?)
            .await
    }

    /// The filter selecting the row with exactly the components `prefix` and every row
    /// extending it (`empid_000123` and all `empid_000123_*`, nothing of `empid_000124`).
    ///
    /// # Errors
    /// As [`CompoundKey::range_for_prefix`] (its last component needs a fixed width).
    pub fn prefix_filter<I, S>(&self, partition: &str, prefix: I) -> Result<Filter>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Ok(Filter::row_key_range(
            partition,
            &self.key.range_for_prefix(prefix)?,
        ))
    }

    /// A range query over the rows of [`prefix_filter`](Self::prefix_filter), in key order:
    /// the parent first, then its children, read as `T` (named by the binding; the parent and
    /// its children usually differ, so `Properties` or an `OrUnknown` enum). A lazy
    /// [`Query`]: add `.select([...])` for a projection, `.resume(token)` to continue.
    ///
    /// **Requests:** one per page when read. **Consistency:** as a query.
    ///
    /// # Errors
    /// As [`prefix_filter`](Self::prefix_filter).
    pub fn with_prefix<T, I, S>(&self, partition: &str, prefix: I) -> Result<Query<T>>
    where
        T: DeserializeOwned + Send + 'static,
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Ok(self
            .table
            .query::<T>()
            .filter(self.prefix_filter(partition, prefix)?))
    }
}
