//! [`Series`]: a data series stored as one entity with one property per slot (§5.9).

use std::fmt;
use std::marker::PhantomData;
use std::time::Instant;

use tablekit_azure::{Table, track_landing};
use tablekit_core::Properties;
use tablekit_core::{ETag, Entity, Error, IfMatch, IntoKeys, Keys, Result, Stored, Target};
use tracing::Instrument as _;

use crate::layout::{SeriesLayout, SlotValue};

/// The property in which [`Series::add`] keeps the ids of the most recent adds to an entity
/// (space-separated, newest last, at most [`ADDS_KEPT`]). An add whose outcome was unknown —
/// its response lost, its connection broken — finds out from it whether it was applied,
/// even when other writers have added since. [`Series::get`] leaves it out of
/// [`SeriesValues::other`].
pub const ADDS_PROPERTY: &str = "SeriesAdds";

/// How many add ids [`ADDS_PROPERTY`] keeps: an add stays recognisable until this many later
/// adds have landed on the same entity (about 550 characters).
pub const ADDS_KEPT: usize = 32;

/// A fresh add id: 64 random bits in hex.
fn add_id() -> String {
    format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0)
}

fn in_ledger(props: &Properties, id: &str) -> bool {
    props
        .get_str(ADDS_PROPERTY)
        .ok()
        .flatten()
        .is_some_and(|ledger| ledger.split(' ').any(|x| x == id))
}

/// The ledger after adding `id`: the stored ids, then `id`, the oldest dropped beyond
/// [`ADDS_KEPT`].
fn ledger_with(props: Option<&Properties>, id: &str) -> String {
    let mut ids: Vec<&str> = props
        .and_then(|p| p.get_str(ADDS_PROPERTY).ok().flatten())
        .map(|ledger| ledger.split(' ').filter(|x| !x.is_empty()).collect())
        .unwrap_or_default();
    ids.push(id);
    let skip = ids.len().saturating_sub(ADDS_KEPT);
    ids[skip..].join(" ")
}

/// A data series per entity: every series (e.g. one employee's messages per hour) is one
/// entity with one property per slot of its [`SeriesLayout`], so a whole chart is one point
/// read and one slot is one merge.
///
/// The handle is cheap to clone and sends nothing until an operation is called. Any
/// PartitionKey/RowKey can hold a series; other properties on the entity are kept (merges
/// touch only the slots they write) and returned by [`Series::get`].
///
/// | operation | requests | consistency |
/// |---|---|---|
/// | [`Series::upsert_slot`], [`Series::upsert_slots`] | 1 | last writer wins per slot |
/// | [`Series::add`] | 2 (+2 per conflict) | every increment counted once, also under failures |
/// | [`Series::get`] | 1 | strong: every acknowledged write |
/// | [`Series::delete`] | 1 | conditional on an [`IfMatch`]; `NotFound` when absent |
/// | [`Series::delete_if_exists`] | 1 | idempotent |
///
/// Every operation that addresses a series takes its keys as [`IntoKeys`]: [`Keys`], a
/// `(partition_key, row_key)` pair of strings, or a [`tablekit_core::TableEntity`].
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
    ///
    /// `V` is the slots' number type: `i64` unless the handle's type says otherwise
    /// (`Series<f64>`, `Series<i32>`).
    ///
    /// # Examples
    /// ```no_run
    /// use tablekit_azure::Account;
    /// use tablekit_series::{Series, SeriesLayout};
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// let table = Account::emulator().table("ImCounts")?;
    /// // One entity per employee and day, one Int64 property per hour.
    /// let hourly: Series = Series::new(table, SeriesLayout::hours());
    /// hourly.add(("000223", "ImPerHour"), "H13", 1).await?; // 2 requests
    /// let chart = hourly.get(("000223", "ImPerHour")).await?; // 1 request
    /// assert_eq!(chart.map(|c| c.value.get_or_zero("H13")), Some(1));
    /// # Ok(()) }
    /// ```
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
    /// Before any request: invalid keys, [`Error::InvalidName`] for a slot not in the layout.
    /// Then transport and service errors ([`Error::NotFound`] if the table does not exist).
    pub async fn upsert_slot(&self, keys: impl IntoKeys, slot: &str, value: V) -> Result<ETag> {
        self.upsert_slots(keys, [(slot, value)]).await
    }

    /// Sets several slots in one InsertOrMerge; the slots not given are kept.
    ///
    /// **Requests: 1.** **Consistency:** atomic for the slots given (one entity write),
    /// last writer wins.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidName`] for a slot not in the layout,
    /// [`Error::InvalidArgument`] for no slot or a slot given twice. Then as [`Series::upsert_slot`].
    pub async fn upsert_slots<'a, I>(&self, keys: impl IntoKeys, values: I) -> Result<ETag>
    where
        I: IntoIterator<Item = (&'a str, V)>,
    {
        let keys = keys.into_keys()?;
        let mut props = Properties::new();
        for (slot, value) in values {
            self.layout.require(slot)?;
            if props.insert(slot, value.to_edm()).is_some() {
                return Err(Error::invalid_argument(slot, "the slot is given twice"));
            }
        }
        if props.is_empty() {
            return Err(Error::invalid_argument("values", "no slot to set"));
        }
        let span = tracing::debug_span!("tablekit.series.set", table = %self.table.name(), slots = props.len());
        self.table
            .upsert_merge(&Entity::new(keys, props))
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
    /// **Under failures:** every add is counted exactly once, also with several writers on
    /// one series. A merge refused with 503 or 429 is retried as if never sent. A merge whose
    /// outcome is unknown (response lost, connection broken) is settled by the entity's
    /// ledger of recent adds ([`ADDS_PROPERTY`]), which every add extends in the same merge:
    /// when the next read finds this add's id, the add was applied and is not repeated; when
    /// it does not, it was not, and the add starts again from that read. When the add gives
    /// up (its retries used up) with such a merge still open, it waits until that merge has
    /// landed or never will ([`tablekit_azure::track_landing`]: at most
    /// [`Settings::late_landing`](tablekit_azure::Settings::late_landing) after its last
    /// attempt) and reads the ledger once more (+1 request), so that its answer is definite:
    /// **`Ok` ⇒ counted once; [`Error::Indeterminate`] ⇒ unknown; any other error ⇒ not
    /// counted, and never will be** — repeating the add then counts it once. The ledger keeps
    /// the last [`ADDS_KEPT`] ids, so the one limit is more than that many other adds landing
    /// between the unknown outcome and the read that follows it (milliseconds, or the wait
    /// above). A layout that fills all 252 properties leaves no room for the ledger
    /// ([`SeriesLayout::keeps_add_ledger`]); its adds are exactly once only with one writer
    /// per series, and one that gives up with a merge open is [`Error::Indeterminate`].
    ///
    /// # Errors
    /// Before any request: invalid keys, [`Error::InvalidName`] for a slot not in the layout.
    /// Then [`Error::Decode`] when the stored slot is not a number of this type,
    /// [`Error::Encode`] when the sum overflows; [`Error::PreconditionFailed`]/[`Error::AlreadyExists`] when conflicts
    /// outlast the retry limit; transport and service errors — each meaning the add was not
    /// counted; [`Error::Indeterminate`] when a merge's outcome stayed unknown (the read that
    /// settles it failed, or the layout keeps no ledger).
    pub async fn add(&self, keys: impl IntoKeys, slot: &str, delta: V) -> Result<V> {
        let keys = &keys.into_keys()?;
        self.layout.require(slot)?;
        let span = tracing::debug_span!("tablekit.series.add", table = %self.table.name(), slot);
        async {
            let mut conflicts = self.table.account().conflict_loop();
            let id = add_id();
            let mut sent = None;
            // When every write attempt of this add that got no definite answer has landed
            // or never will.
            let mut unsettled: Option<Instant> = None;
            loop {
                let (tried, lands_by) =
                    track_landing(self.try_add(keys, slot, delta, &id, &mut sent)).await;
                unsettled = unsettled.max(lands_by);
                let error = match tried {
                    Ok(value) => return Ok(value),
                    Err(e) if e.is_conflict() => e,
                    Err(e) => {
                        return match (unsettled, sent) {
                            (Some(lands_by), Some(value)) => {
                                self.settle(keys, &id, value, lands_by, e).await
                            }
                            _ => Err(e),
                        };
                    }
                };
                // A conflict: whatever this attempt sent cannot land any more (its condition
                // no longer holds), and the next read tells whether an earlier one did.
                conflicts.retry(error).await?;
            }
        }
        .instrument(span)
        .await
    }

    /// After an add failed with writes whose outcome is unknown (`error`): waits until they
    /// have landed or never will (`lands_by`), then reads the ledger. Its id there means the
    /// add was applied, with the slot at `value`; its absence, that it was not and never will
    /// be, and `error` stands. [`Error::Indeterminate`] when the read fails, or when the
    /// layout keeps no ledger.
    async fn settle(
        &self,
        keys: &Keys,
        id: &str,
        value: V,
        lands_by: Instant,
        error: Error,
    ) -> Result<V> {
        let unknown = |why: String| Error::Indeterminate {
            target: self.target(keys),
            reason: format!("the add may have been applied ({error}); {why}"),
        };
        if !self.layout.keeps_add_ledger() {
            return Err(unknown(
                "the layout fills every property, leaving no room for the ledger that would tell"
                    .into(),
            ));
        }
        tokio::time::sleep_until(lands_by.into()).await;
        match self.table.get::<Properties>(keys).await {
            Ok(Some(read)) if in_ledger(&read.value, id) => Ok(value),
            Ok(_) => Err(error),
            Err(read) => Err(unknown(format!("reading it back failed: {read}"))),
        }
    }

    /// One attempt: read, then a write conditioned on what was read. `sent` is the value the
    /// latest earlier attempt wrote; if the read finds `id` in the ledger, that write was
    /// applied and is the result.
    async fn try_add(
        &self,
        keys: &Keys,
        slot: &str,
        delta: V,
        id: &str,
        sent: &mut Option<V>,
    ) -> Result<V> {
        let current = self.table.get::<Properties>(keys).await?;
        let ledger = self.layout.keeps_add_ledger();
        if let (true, Some(value), Some(read)) = (ledger, *sent, &current) {
            if in_ledger(&read.value, id) {
                return Ok(value);
            }
        }
        let stored = match &current {
            Some(entity) => read_slot::<V>(&entity.value, slot, &self.target(keys))?,
            None => None,
        };
        let value = stored
            .unwrap_or(V::ZERO)
            .checked_add(delta)
            .ok_or_else(|| Error::encode(slot, format!("{stored:?} + {delta} overflows")))?;
        let mut props = Properties::new().with(slot, value.to_edm());
        if ledger {
            props.insert(
                ADDS_PROPERTY,
                ledger_with(current.as_ref().map(|c| &c.value), id),
            );
        }
        let entity = Entity::new(keys.clone(), props);
        *sent = Some(value);
        match current {
            Some(read) => self.table.merge(&entity, read.if_match()).await?,
            None => self.table.insert(&entity).await?,
        };
        Ok(value)
    }

    /// The series entity at `keys`, as the target of an error.
    fn target(&self, keys: &Keys) -> Target {
        Target::entity(self.table.name(), keys.clone())
    }

    /// Reads the whole series: one point query.
    ///
    /// **Requests: 1.** **Consistency:** strong — reflects every acknowledged write.
    /// Returns `None` when the series entity does not exist.
    ///
    /// # Errors
    /// Invalid keys, before any request. [`Error::Decode`] naming the slot when a stored slot
    /// is not a number of this type; [`Error::NotFound`] if the table does not exist.
    pub async fn get(&self, keys: impl IntoKeys) -> Result<Option<Stored<SeriesValues<V>>>> {
        let keys = &keys.into_keys()?;
        let span = tracing::debug_span!("tablekit.series.read", table = %self.table.name());
        let Some(stored) = self.table.get::<Properties>(keys).instrument(span).await? else {
            return Ok(None);
        };
        let mut other = stored.value.clone();
        let mut values = Vec::with_capacity(self.layout.len());
        for slot in self.layout.slots() {
            values.push(read_slot::<V>(&stored.value, slot, &self.target(keys))?);
            other.remove(slot);
        }
        if self.layout.keeps_add_ledger() {
            other.remove(ADDS_PROPERTY);
        }
        Ok(Some(stored.map(|_| SeriesValues {
            layout: self.layout.clone(),
            values,
            other,
        })))
    }

    /// Deletes the series entity (all slots) if it matches `if_match`: the ETag of a read
    /// ([`Stored::if_match`]) deletes only the series as read; [`IfMatch::Any`] deletes it
    /// whatever it holds.
    ///
    /// **Requests: 1.** **Consistency:** conditional on `if_match`.
    ///
    /// # Errors
    /// Invalid keys, before any request. [`Error::NotFound`] when the series (or the table)
    /// does not exist; [`Error::PreconditionFailed`] when it changed since the read.
    pub async fn delete(&self, keys: impl IntoKeys, if_match: IfMatch) -> Result<()> {
        self.table.delete(keys, if_match).await
    }

    /// Deletes the series entity (all slots) whatever it holds; absent is fine. Returns
    /// whether it existed.
    ///
    /// **Requests: 1.** **Consistency:** unconditional and idempotent.
    ///
    /// # Errors
    /// Invalid keys, before any request. Transport and service errors ([`Error::NotFound`]
    /// if the table does not exist).
    pub async fn delete_if_exists(&self, keys: impl IntoKeys) -> Result<bool> {
        self.table.delete_if_exists(keys).await
    }
}

/// A slot's stored value: `None` when absent, an error when it is not a number of type `V`.
fn read_slot<V: SlotValue>(props: &Properties, slot: &str, at: &Target) -> Result<Option<V>> {
    match props.get(slot) {
        None => Ok(None),
        Some(value) => V::from_edm(value).map(Some).ok_or_else(|| {
            Error::decode(
                at.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_keeps_the_newest_ids_in_order() {
        assert_eq!(ledger_with(None, "a"), "a");
        let mut props = Properties::new();
        let mut ids = Vec::new();
        for n in 0..(ADDS_KEPT + 5) {
            let id = format!("{n:016x}");
            props.insert(ADDS_PROPERTY, ledger_with(Some(&props), &id));
            assert!(in_ledger(&props, &id));
            ids.push(id);
        }
        let ledger = props.get_str(ADDS_PROPERTY).unwrap().unwrap();
        assert_eq!(ledger, ids[5..].join(" "), "the 5 oldest dropped");
        assert!(!in_ledger(&props, &ids[4]));
        assert!(!in_ledger(&props, ""), "an empty id never matches");
        assert_ne!(add_id(), add_id());
        assert_eq!(add_id().len(), 16);
    }
}
