//! [`IndexRead`]: the reads both secondary indexes share, written once over where their
//! copies live.

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::{Keys, Result, Stored};

use crate::range::{IndexRange, prefix_bounds, range_filter, value_bounds};
use crate::spec::key::{KeyPart, ValueRange};
use crate::spec::{CopyHandle, CopyId, Family, IndexSpec, Layout};

/// Where an index's copies live: the declaration, the layout, and the table of each copy.
pub struct Placement<T> {
    pub(crate) spec: Arc<IndexSpec<T>>,
    pub(crate) layout: Layout,
    /// The table of each copy, the primary first.
    pub(crate) tables: Vec<Table>,
}

impl<T> Placement<T> {
    /// Every copy in `table`.
    pub(crate) fn new(spec: Arc<IndexSpec<T>>, layout: Layout, table: Table) -> Self {
        let tables = vec![table; spec.copies().len()];
        Self {
            spec,
            layout,
            tables,
        }
    }

    /// The primary copies' table.
    pub(crate) fn primary_table(&self) -> &Table {
        &self.tables[0]
    }

    /// The keys of copy `copy` for `value` in `partition`.
    pub(crate) fn keys(&self, copy: usize, partition: &str, value: impl KeyPart) -> Result<Keys> {
        let text = self.spec.copies()[copy].value_text(value)?;
        self.spec.copy_keys(self.layout, copy, partition, &text)
    }

    /// The position, table and keys a point lookup through `copy` reads.
    fn locate(&self, copy: CopyId, partition: &str, value: impl KeyPart) -> Result<(Table, Keys)> {
        let position = self.spec.position(copy)?;
        let keys = self.keys(position, partition, value)?;
        Ok((self.tables[position].clone(), keys))
    }
}

impl<T: Send + Sync + 'static> Placement<T> {
    fn range<R: DeserializeOwned + Send + 'static>(
        &self,
        copy: CopyId,
        partition: &str,
        bounds: impl FnOnce(usize) -> Result<crate::range::EncodedBounds>,
    ) -> Result<IndexRange<R>> {
        let position = self.spec.position(copy)?;
        let filter = range_filter(
            &self.spec,
            self.layout,
            position,
            partition,
            &bounds(position)?,
        );
        Ok(IndexRange::new(
            &self.tables[position],
            Arc::clone(&self.spec),
            self.layout,
            position,
            filter,
        ))
    }
}

pub(crate) mod sealed {
    /// Gives [`IndexRead`](super::IndexRead) its placement; implemented by the two secondary
    /// indexes only.
    pub trait Indexed<T> {
        fn placement(&self) -> &super::Placement<T>;
    }
}

/// Reads through the copies of a secondary index: point reads by the primary value or
/// through any copy, and range reads sorted by a copy's value. Implemented by
/// [`IntraPartitionIndex`](crate::IntraPartitionIndex) (copies in the entity's partition,
/// under RowKey prefixes) and [`InterPartitionIndex`](crate::InterPartitionIndex) (each copy in
/// a partition of its own) alike; only where the copies live differs.
///
/// Copies are named by the [`CopyHandle`]s their declaration returned; values are text or
/// integers ([`KeyPart`]): `get_by(&by_email, "Sales", "jonesj@contoso.com")`,
/// `get("Sales", 223)` (padded to the primary's width) or `get("Sales", "000223")`.
///
/// **Consistency:** reads of the primary copy are strong. Reads of a secondary copy are
/// strong for the intra-partition index and eventual for the inter-partition index (a copy
/// may lag its primary until the entity's job has run).
///
/// **Errors**, before any request: [`InvalidArgument`](tablekit_core::Error::InvalidArgument)
/// for a handle of another index declaration; [`Encode`](tablekit_core::Error::Encode) for a
/// value of the wrong width; key errors.
pub trait IndexRead<T>: sealed::Indexed<T> {
    /// The declaration.
    fn spec(&self) -> &IndexSpec<T> {
        &self.placement().spec
    }

    /// The table holding the copy `copy` names.
    ///
    /// # Errors
    /// [`InvalidArgument`](tablekit_core::Error::InvalidArgument) for a handle of another
    /// declaration.
    fn table_of<'a, R>(&'a self, copy: &CopyHandle<T, R>) -> Result<&'a Table>
    where
        T: 'a,
    {
        let placement = self.placement();
        Ok(&placement.tables[placement.spec.position(copy.id)?])
    }

    /// The keys of the copy `copy` holds for `value` in `partition`:
    /// `keys_by(&by_email, "Sales", "jonesj@contoso.com")` is
    /// `Sales/email_jonesj@contoso.com` in one partition, `email_Sales/jonesj@contoso.com`
    /// across partitions. No request is sent.
    ///
    /// # Errors
    /// As the trait says.
    fn keys_by<R>(
        &self,
        copy: &CopyHandle<T, R>,
        partition: &str,
        value: impl KeyPart,
    ) -> Result<Keys> {
        let placement = self.placement();
        placement.keys(placement.spec.position(copy.id)?, partition, value)
    }

    /// Reads an entity by its primary value (`get("Sales", "000223")`): a point query on its
    /// primary copy.
    ///
    /// **Requests:** 1. **Consistency:** strong.
    ///
    /// # Errors
    /// As the trait says; [`Decode`](tablekit_core::Error::Decode) when the stored entity
    /// does not fit `T`; transport and service errors.
    fn get(
        &self,
        partition: &str,
        id: impl KeyPart,
    ) -> impl Future<Output = Result<Option<Stored<T>>>> + Send
    where
        T: DeserializeOwned + Send + 'static,
    {
        let placement = self.placement();
        let target = placement.keys(0, partition, id);
        let table = placement.primary_table().clone();
        async move { table.get::<T>(target?).await }
    }

    /// Reads an entity through one of its copies (`get_by(&by_email, "Sales",
    /// "jonesj@contoso.com")`): a point query, whose row is read as the copy's `R`.
    ///
    /// **Requests:** 1. **Consistency:** as the trait says.
    ///
    /// # Errors
    /// As the trait says; [`Decode`](tablekit_core::Error::Decode) when the row does not
    /// fit `R` (a projected copy read as a type needing more: declare it with
    /// [`with_projection_of`](crate::CopySpec::with_projection_of)).
    fn get_by<R>(
        &self,
        copy: &CopyHandle<T, R>,
        partition: &str,
        value: impl KeyPart,
    ) -> impl Future<Output = Result<Option<Stored<R>>>> + Send
    where
        R: DeserializeOwned + Send + 'static,
    {
        let target = self.placement().locate(copy.id, partition, value);
        async move {
            let (table, keys) = target?;
            table.get::<R>(keys).await
        }
    }

    /// The copies of `copy` in `partition` whose values lie in `range`, sorted by that value:
    /// `range_by(&by_id, "Sales", "000100"..="000199")` (or `100..=199`, padded to the copy's
    /// width) is the guide's `RowKey ge 'empid_000100' and RowKey le 'empid_000199'` in one
    /// partition, `(PartitionKey eq 'empid_Sales') and (RowKey ge '000100') and (RowKey le
    /// '000199')` across partitions. Use `..` for the whole copy. A lazy [`IndexRange`]:
    /// nothing is sent until it is read.
    ///
    /// **Requests:** one per page when read. **Consistency:** as the trait says, per page.
    ///
    /// # Errors
    /// As the trait says; key errors for bounds too long to encode.
    fn range_by<R>(
        &self,
        copy: &CopyHandle<T, R>,
        partition: &str,
        range: impl ValueRange,
    ) -> Result<IndexRange<R>>
    where
        T: Send + Sync + 'static,
        R: DeserializeOwned + Send + 'static,
    {
        let placement = self.placement();
        placement.range(copy.id, partition, |position| {
            value_bounds(&placement.spec.copies()[position], range.bounds())
        })
    }

    /// The copies of `copy` in `partition` whose values start with `prefix`, sorted:
    /// `range_by_prefix(&by_email, "Sales", "a")` is the guide's `RowKey ge 'email_a' and
    /// RowKey lt 'email_b'`.
    ///
    /// **Requests:** one per page when read.
    ///
    /// # Errors
    /// As [`range_by`](Self::range_by).
    fn range_by_prefix<R>(
        &self,
        copy: &CopyHandle<T, R>,
        partition: &str,
        prefix: &str,
    ) -> Result<IndexRange<R>>
    where
        T: Send + Sync + 'static,
        R: DeserializeOwned + Send + 'static,
    {
        self.placement()
            .range(copy.id, partition, |_| prefix_bounds(prefix))
    }
}

/// What names one entity of an index when deleting it: the entity as read (`&T`: its copies
/// are computed from it), or its partition and primary value (`("Sales", "000223")`, read
/// first to find its copies).
pub trait IndexEntry<T>: entry::Sealed<T> {}

/// What an [`IndexEntry`] resolves to.
pub enum Resolved {
    /// The rows of the entity as given.
    Family(Family),
    /// The keys of its primary copy; its rows are read from there.
    Primary(Keys),
}

impl Resolved {
    /// The keys of the primary copy.
    pub(crate) fn primary_keys(self) -> Keys {
        match self {
            Resolved::Family(family) => family.primary().keys.clone(),
            Resolved::Primary(keys) => keys,
        }
    }
}

pub(crate) mod entry {
    /// Resolves an [`IndexEntry`](super::IndexEntry) against a placement.
    pub trait Sealed<T> {
        fn resolve(self, placement: &super::Placement<T>)
        -> tablekit_core::Result<super::Resolved>;
    }
}

impl<T: Serialize> entry::Sealed<T> for &T {
    fn resolve(self, placement: &Placement<T>) -> Result<Resolved> {
        Ok(Resolved::Family(
            placement.spec.family(placement.layout, self)?,
        ))
    }
}

impl<T: Serialize> IndexEntry<T> for &T {}

impl<T, P: AsRef<str>, V: KeyPart> entry::Sealed<T> for (P, V) {
    fn resolve(self, placement: &Placement<T>) -> Result<Resolved> {
        Ok(Resolved::Primary(placement.keys(
            0,
            self.0.as_ref(),
            self.1,
        )?))
    }
}

impl<T, P: AsRef<str>, V: KeyPart> IndexEntry<T> for (P, V) {}
