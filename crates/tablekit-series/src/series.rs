//! [`Series`]: a data series stored as one entity with one property per slot (§5.9).

use std::fmt;
use std::marker::PhantomData;

use tablekit_azure::Table;
use tablekit_core::edm::Properties;
use tablekit_core::{ETag, Entity, Error, IfMatch, Keys, Result, Stored};
use tracing::Instrument as _;

use crate::layout::{SeriesLayout, SlotValue};

/// A data series per entity: every series (e.g. one employee's messages per hour) is one
/// entity with one property per slot of its [`SeriesLayout`], so a whole chart is one point
/// read and one slot is one merge.
///
/// The handle is cheap to clone and sends nothing until an operation is called. Any
/// PartitionKey/RowKey can hold a series; other properties on the entity are kept (merges
/// touch only the slots they write) and returned by [`Series::read`].
///
/// | operation | requests | consistency |
/// |---|---|---|
/// | [`Series::set`], [`Series::set_many`] | 1 | last writer wins per slot |
/// | [`Series::add`] | 2 (+2 per conflict) | no increment lost (see [`Series::add`] for failures) |
/// | [`Series::read`] | 1 | strong: every acknowledged write |
/// | [`Series::delete`] | 1 | idempotent |
pub struct Series<V: SlotValue = i64> {
    table: Table,
    layout: SeriesLayout,
    _value: PhantomData<fn() -> V>,
}

impl<V: SlotValue> Clone for Series<V> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            layout: self.layout.clone(),
            _value: PhantomData,
        }
    }
}

impl<V: SlotValue> fmt::Debug for Series<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Series")
            .field("table", &self.table.name())
            .field("layout", &self.layout)
            .field("value", &std::any::type_name::<V>())
            .finish()
    }
}

/// A whole series as read: one value per slot (`None` for a slot never written) and the
/// entity's other properties.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesValues<V> {
    layout: SeriesLayout,
    values: Vec<Option<V>>,
    other: Properties,
}

impl<V: SlotValue> SeriesValues<V> {
    /// The value of slot `name` (`None` if never written or not a slot).
    pub fn get(&self, name: &str) -> Option<V> {
        self.layout.position(name).and_then(|i| self.values[i])
    }

    /// The value of slot `name`, zero if never written.
    pub fn get_or_zero(&self, name: &str) -> V {
        self.get(name).unwrap_or(V::ZERO)
    }

    /// Every slot's value, in layout order.
    pub fn values(&self) -> &[Option<V>] {
        &self.values
    }

    /// `(slot name, value)` pairs in layout order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<V>)> + '_ {
        self.layout
            .slots()
            .iter()
            .map(String::as_str)
            .zip(self.values.iter().copied())
    }

    /// The sum of the written slots; `None` on overflow.
    pub fn total(&self) -> Option<V> {
        self.values
            .iter()
            .flatten()
            .try_fold(V::ZERO, |sum, v| sum.checked_add(*v))
    }

    /// The entity's properties that are not slots.
    pub fn other(&self) -> &Properties {
        &self.other
    }

    /// The layout the values were read with.
    pub fn layout(&self) -> &SeriesLayout {
        &self.layout
    }
}

impl<V: SlotValue> Series<V> {
    /// A series handle on `table` with these slots. No request is sent.
    pub fn new(table: Table, layout: SeriesLayout) -> Self {
        Self {
            table,
            layout,
            _value: PhantomData,
        }
    }

    /// The table the series entities live in.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The declared slots.
    pub fn layout(&self) -> &SeriesLayout {
        &self.layout
    }

    /// Sets one slot to `value`, creating the series entity if it does not exist
    /// (InsertOrMerge: only this slot is sent; every other property is kept).
    ///
    /// **Requests: 1.** **Consistency:** unconditional, last writer wins for this slot;
    /// writers of other slots never conflict with it. Returns the entity's new ETag.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidName`] for a slot not in the layout. Then
    /// transport and service errors ([`Error::NotFound`] if the table does not exist).
    pub async fn set(&self, keys: &Keys, slot: &str, value: V) -> Result<ETag> {
        self.set_many(keys, [(slot, value)]).await
    }

    /// Sets several slots in one InsertOrMerge; the slots not given are kept.
    ///
    /// **Requests: 1.** **Consistency:** atomic for the slots given (one entity write),
    /// last writer wins.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidName`] for a slot not in the layout,
    /// [`Error::InvalidValue`] for no slot or a slot given twice. Then as [`Series::set`].
    pub async fn set_many<'a, I>(&self, keys: &Keys, values: I) -> Result<ETag>
    where
        I: IntoIterator<Item = (&'a str, V)>,
    {
        let mut props = Properties::new();
        for (slot, value) in values {
            self.layout.require(slot)?;
            if props.insert(slot, value.to_edm()).is_some() {
                return Err(Error::invalid_value(slot, "the slot is given twice"));
            }
        }
        if props.is_empty() {
            return Err(Error::invalid_value("", "no slot to set"));
        }
        let span = tracing::debug_span!("tablekit.series.set", table = %self.table.name(), pk = %keys.pk(), rk = %keys.rk(), slots = props.len());
        self.table
            .upsert_merge(&Entity::new(keys.clone(), props))
            .instrument(span)
            .await
    }

    /// Adds `delta` to one slot and returns the slot's new value. Concurrent adds are never
    /// lost: the slot is read, then merged only if the entity's ETag is still the one read;
    /// on a conflict (412, or 409 when two writers create the entity at once) it starts again
    /// from the read, with backoff, up to the account's conflict-retry limit.
    ///
    /// **Requests: 2 per attempt** (a point read, then a merge carrying the read ETag — or an
    /// insert when the entity does not exist yet). **Consistency:** linearizable per entity.
    /// Only the one slot is written; the other slots and properties are untouched.
    ///
    /// **Under failures:** a merge refused with 503 or 429 is retried as if never sent; a
    /// merge whose response was lost is verified by reading the slot back, so a single
    /// writer per series counts every add exactly once. With several writers on one series,
    /// a lost response or a broken connection followed by another writer's add before the
    /// retry makes this add ambiguous: it may be counted twice or not at all. Keep one writer
    /// per series where exact counts matter under failures.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidName`] for a slot not in the layout. Then
    /// [`Error::InvalidValue`] when the stored slot is not a number of this type or the sum
    /// overflows; [`Error::PreconditionFailed`]/[`Error::AlreadyExists`] when conflicts
    /// outlast the retry limit; transport and service errors.
    pub async fn add(&self, keys: &Keys, slot: &str, delta: V) -> Result<V> {
        self.layout.require(slot)?;
        let span = tracing::debug_span!("tablekit.series.add", table = %self.table.name(), pk = %keys.pk(), rk = %keys.rk(), slot);
        async {
            let mut conflicts = self.table.account().conflict_loop();
            loop {
                match self.try_add(keys, slot, delta).await {
                    Ok(value) => return Ok(value),
                    Err(e) => conflicts.retry(e).await?,
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn try_add(&self, keys: &Keys, slot: &str, delta: V) -> Result<V> {
        let current = self.table.get::<Properties>(keys).await?;
        let stored = match &current {
            Some(entity) => read_slot::<V>(&entity.value, slot)?,
            None => None,
        };
        let value = stored
            .unwrap_or(V::ZERO)
            .checked_add(delta)
            .ok_or_else(|| Error::invalid_value(slot, format!("{stored:?} + {delta} overflows")))?;
        let entity = Entity::new(keys.clone(), Properties::new().with(slot, value.to_edm()));
        match current {
            Some(read) => self.table.merge(&entity, read.if_match()).await?,
            None => self.table.insert(&entity).await?,
        };
        Ok(value)
    }

    /// Reads the whole series: one point query.
    ///
    /// **Requests: 1.** **Consistency:** strong — reflects every acknowledged write.
    /// Returns `None` when the series entity does not exist.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] naming the slot when a stored slot is not a number of this
    /// type; [`Error::NotFound`] if the table does not exist.
    pub async fn read(&self, keys: &Keys) -> Result<Option<Stored<SeriesValues<V>>>> {
        let span = tracing::debug_span!("tablekit.series.read", table = %self.table.name(), pk = %keys.pk(), rk = %keys.rk());
        let Some(stored) = self.table.get::<Properties>(keys).instrument(span).await? else {
            return Ok(None);
        };
        let mut other = stored.value.clone();
        let mut values = Vec::with_capacity(self.layout.len());
        for slot in self.layout.slots() {
            values.push(read_slot::<V>(&stored.value, slot)?);
            other.remove(slot);
        }
        Ok(Some(stored.map(|_| SeriesValues {
            layout: self.layout.clone(),
            values,
            other,
        })))
    }

    /// Deletes the series entity (all slots); absent is fine. Returns whether it existed.
    ///
    /// **Requests: 1.** **Consistency:** unconditional and idempotent.
    ///
    /// # Errors
    /// Transport and service errors ([`Error::NotFound`] if the table does not exist).
    pub async fn delete(&self, keys: &Keys) -> Result<bool> {
        self.table.delete_if_exists(keys).await
    }

    /// Deletes the series only if it still has the ETag `if_match` names (e.g. from a read).
    ///
    /// **Requests: 1.**
    ///
    /// # Errors
    /// [`Error::PreconditionFailed`] if it changed, [`Error::NotFound`] if it does not exist.
    pub async fn delete_if(&self, keys: &Keys, if_match: IfMatch) -> Result<()> {
        self.table.delete(keys, if_match).await
    }
}

/// A slot's stored value: `None` when absent, an error when it is not a number of type `V`.
fn read_slot<V: SlotValue>(props: &Properties, slot: &str) -> Result<Option<V>> {
    match props.get(slot) {
        None => Ok(None),
        Some(value) => V::from_edm(value).map(Some).ok_or_else(|| {
            Error::invalid_value(
                slot,
                format!(
                    "stored as {}, which does not convert to {}",
                    value.edm_type(),
                    std::any::type_name::<V>()
                ),
            )
        }),
    }
}
