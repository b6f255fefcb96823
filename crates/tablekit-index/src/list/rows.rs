//! The rows holding one value's list, and the writes that add or remove an item. Pure.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::Properties;
use tablekit_core::batch::Operation;
use tablekit_core::filter::Filter;
use tablekit_core::keys::utf16_bytes;
use tablekit_core::{ETag, Entity, Error, IfMatch, Keys, Limit, Result, Stored, Target};

use super::spec::{ListSpec, SHARDS};

/// What a list holds: an entity's RowKey (same partition) or its (PartitionKey, RowKey).
pub(crate) trait Item:
    Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync
{
}

impl<T: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync> Item for T {}

/// One index row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row<I> {
    pub(crate) rk: String,
    /// `None` when the row is not stored.
    pub(crate) etag: Option<ETag>,
    pub(crate) items: Vec<I>,
    /// Overflow rows created so far (base row only).
    pub(crate) shards: u32,
    /// Stored without any property: the placeholder an eventual list's job creates before
    /// its first entry, or an entity of someone else's that holds nothing.
    pub(crate) blank: bool,
}

/// A write to one index row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RowWrite<I> {
    /// Create the row; fails if someone else did first.
    Insert(Row<I>),
    /// Overwrite the row if it still has this ETag.
    Replace(Row<I>, ETag),
    /// Delete the row (by RowKey) if it still has this ETag.
    Delete(String, ETag),
}

impl<I> RowWrite<I> {
    #[cfg(test)]
    pub(crate) fn rk(&self) -> &str {
        match self {
            RowWrite::Insert(row) | RowWrite::Replace(row, _) => &row.rk,
            RowWrite::Delete(rk, _) => rk,
        }
    }
}

/// A value's rows: the base row and its overflow rows, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lists<I> {
    pub(crate) base: Row<I>,
    pub(crate) overflow: Vec<Row<I>>,
}

fn json_of<I: Item>(items: &[I]) -> Result<String> {
    serde_json::to_string(items).map_err(|e| Error::encode("", e.to_string()))
}

impl<I: Item> Row<I> {
    /// Reads a stored row as a list row, refusing any row this index could not have written:
    /// one with a property other than the list and its overflow count, with either of the
    /// wrong type, or with a count but no list. Such a row is someone else's entity that
    /// happens to sit under a list's key; taking it for an empty list would overwrite it.
    fn parse<T>(spec: &ListSpec<T>, stored: &Stored<Properties>) -> Result<Self> {
        let foreign = |reason: String| {
            Error::corrupt(
                Target::entity("", stored.keys.clone()),
                format!(
                    "it is not a row of list index `{}` ({reason}); nothing was written",
                    spec.name()
                ),
            )
        };
        if let Some((name, _)) = stored
            .value
            .iter()
            .find(|(name, _)| *name != spec.property() && *name != SHARDS)
        {
            return Err(foreign(format!("it has the property `{name}`")));
        }
        let items = match stored.value.get(spec.property()) {
            None if stored.value.is_empty() => Vec::new(),
            None => return Err(foreign(format!("it has no `{}`", spec.property()))),
            Some(value) => {
                let text = value
                    .as_str()
                    .ok_or_else(|| foreign(format!("`{}` is not a string", spec.property())))?;
                serde_json::from_str(text)
                    .map_err(|e| foreign(format!("`{}` is not a list: {e}", spec.property())))?
            }
        };
        let shards = match stored.value.get(SHARDS) {
            None => 0,
            Some(value) => value
                .as_i64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| foreign(format!("`{SHARDS}` is not a count")))?,
        };
        Ok(Self {
            rk: stored.keys.rk().to_owned(),
            etag: Some(stored.etag.clone()),
            items,
            shards,
            blank: stored.value.is_empty(),
        })
    }

    /// The row's properties.
    pub(crate) fn properties<T>(&self, spec: &ListSpec<T>) -> Result<Properties> {
        let mut props = Properties::new().with(spec.property(), json_of(&self.items)?);
        if self.shards > 0 {
            props.insert(SHARDS, i32::try_from(self.shards).unwrap_or(i32::MAX));
        }
        Ok(props)
    }
}

impl<I: Item> RowWrite<I> {
    /// The write as a table operation in partition `pk`.
    pub(crate) fn operation<T>(&self, spec: &ListSpec<T>, pk: &str) -> Result<Operation> {
        Ok(match self {
            RowWrite::Insert(row) => {
                Operation::insert(&Entity::new(Keys::new(pk, &row.rk)?, row.properties(spec)?))?
            }
            RowWrite::Replace(row, etag) => Operation::replace(
                &Entity::new(Keys::new(pk, &row.rk)?, row.properties(spec)?),
                IfMatch::ETag(etag.clone()),
            )?,
            RowWrite::Delete(rk, etag) => {
                Operation::delete(Keys::new(pk, rk)?, IfMatch::ETag(etag.clone()))?
            }
        })
    }
}

impl<I: Item> Lists<I> {
    /// The state of `value`'s list from its stored rows (`base` absent when there is none).
    /// Overflow rows beyond the base row's count (left by an interrupted overflow) are
    /// ignored.
    pub(crate) fn from_rows<T>(
        spec: &ListSpec<T>,
        value: &str,
        base: Option<&Stored<Properties>>,
        overflow: &[Stored<Properties>],
    ) -> Result<Self> {
        let base = match base {
            Some(stored) => Row::parse(spec, stored)?,
            None => Row {
                rk: spec.row_key(value, 0)?,
                etag: None,
                items: Vec::new(),
                shards: 0,
                blank: false,
            },
        };
        let mut rows = Vec::new();
        for stored in overflow {
            if let Some(n) = spec.shard_of(value, stored.keys.rk()) {
                if n <= base.shards {
                    rows.push((n, Row::parse(spec, stored)?));
                }
            }
        }
        rows.sort_by_key(|(n, _)| *n);
        Ok(Self {
            base,
            overflow: rows.into_iter().map(|(_, r)| r).collect(),
        })
    }

    /// Every item, oldest first.
    pub(crate) fn items(&self) -> Vec<I> {
        self.overflow
            .iter()
            .chain(std::iter::once(&self.base))
            .flat_map(|r| r.items.iter().cloned())
            .collect()
    }

    /// Whether `item` is listed.
    pub(crate) fn contains(&self, item: &I) -> bool {
        self.overflow
            .iter()
            .chain(std::iter::once(&self.base))
            .any(|r| r.items.contains(item))
    }

    /// The writes that add `item` (none if it is listed): to the base row, or, when that
    /// would take the list past the size limit, moving the base row's items to a new
    /// overflow row first.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] when `item` alone is larger than a list may be.
    pub(crate) fn add<T>(
        &self,
        spec: &ListSpec<T>,
        value: &str,
        item: &I,
    ) -> Result<Vec<RowWrite<I>>> {
        if self.contains(item) {
            return Ok(Vec::new());
        }
        let mut grown = self.base.clone();
        grown.items.push(item.clone());
        let fits = |items: &[I]| -> Result<bool> {
            Ok(utf16_bytes(&json_of(items)?) <= spec.max_list_bytes())
        };
        if !fits(std::slice::from_ref(item))? {
            return Err(Error::LimitExceeded {
                limit: Limit::PropertyBytes {
                    property: spec.property().to_owned(),
                },
                actual: utf16_bytes(&json_of(std::slice::from_ref(item))?),
            });
        }
        let Some(etag) = self.base.etag.clone() else {
            return Ok(vec![RowWrite::Insert(grown)]);
        };
        if fits(&grown.items)? {
            return Ok(vec![RowWrite::Replace(grown, etag)]);
        }
        let shard = self.base.shards + 1;
        let spilled = Row {
            rk: spec.row_key(value, shard)?,
            etag: None,
            items: self.base.items.clone(),
            shards: 0,
            blank: false,
        };
        let fresh = Row {
            rk: self.base.rk.clone(),
            etag: None,
            items: vec![item.clone()],
            shards: shard,
            blank: false,
        };
        Ok(vec![
            RowWrite::Insert(spilled),
            RowWrite::Replace(fresh, etag),
        ])
    }

    /// The writes that remove `item` (none if it is not listed). An emptied overflow row is
    /// deleted; an emptied base row too, unless it still counts overflow rows.
    pub(crate) fn remove(&self, item: &I) -> Vec<RowWrite<I>> {
        let rows = self.overflow.iter().chain(std::iter::once(&self.base));
        let Some(row) = rows.into_iter().find(|r| r.items.contains(item)) else {
            return Vec::new();
        };
        let Some(etag) = row.etag.clone() else {
            return Vec::new();
        };
        let mut shrunk = row.clone();
        shrunk.items.retain(|i| i != item);
        if shrunk.items.is_empty() && shrunk.shards == 0 {
            vec![RowWrite::Delete(shrunk.rk, etag)]
        } else {
            vec![RowWrite::Replace(shrunk, etag)]
        }
    }
}

/// Reads `value`'s rows in partition `pk` of `table`: the base row (a point read) and, when it
/// counts overflow rows, those (one range query).
pub(crate) async fn read_lists<I: Item, T>(
    table: &Table,
    spec: &ListSpec<T>,
    pk: &str,
    value: &str,
) -> Result<Lists<I>> {
    let base = table
        .get::<Properties>(&Keys::new(pk, spec.row_key(value, 0)?)?)
        .await?;
    let has_overflow = base
        .as_ref()
        .and_then(|b| b.value.get_i64(SHARDS).ok().flatten())
        .is_some_and(|n| n > 0);
    let overflow = if has_overflow {
        let filter = Filter::row_prefix(pk, &spec.shard_prefix(value)?);
        table.query::<Properties>().filter(filter).collect().await?
    } else {
        Vec::new()
    };
    Lists::from_rows(spec, value, base.as_ref(), &overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    type E = (String, String, String);

    fn spec(max: usize) -> ListSpec<E> {
        ListSpec::builder("lastname", |e: &E| e.2.clone())
            .with_property("EmployeeIDs")
            .with_max_list_bytes(max)
            .build()
            .unwrap()
    }

    fn stored(rk: &str, props: Properties) -> Stored<Properties> {
        Stored {
            keys: Keys::new("Sales", rk).unwrap(),
            etag: ETag::new(format!("etag-{rk}")),
            timestamp: None,
            value: props,
        }
    }

    /// Applies writes the way the service would, giving back the stored rows.
    fn apply(
        spec: &ListSpec<E>,
        rows: &mut Vec<Stored<Properties>>,
        writes: Vec<RowWrite<String>>,
    ) {
        for w in writes {
            rows.retain(|r| r.keys.rk() != w.rk());
            match w {
                RowWrite::Insert(row) | RowWrite::Replace(row, _) => {
                    rows.push(stored(&row.rk, row.properties(spec).unwrap()));
                }
                RowWrite::Delete(..) => {}
            }
        }
    }

    fn state(spec: &ListSpec<E>, rows: &[Stored<Properties>]) -> Lists<String> {
        let base = rows.iter().find(|r| r.keys.rk() == "Jones");
        Lists::from_rows(spec, "Jones", base, rows).unwrap()
    }

    #[test]
    fn the_first_item_inserts_the_row_and_later_ones_replace_it() {
        let spec = spec(1000);
        let empty = state(&spec, &[]);
        let writes = empty.add(&spec, "Jones", &"000152".to_owned()).unwrap();
        assert!(matches!(&writes[..], [RowWrite::Insert(row)] if row.rk == "Jones"));
        let mut rows = Vec::new();
        apply(&spec, &mut rows, writes);
        assert_eq!(
            rows[0].value.get_str("EmployeeIDs").unwrap(),
            Some("[\"000152\"]")
        );
        let writes = state(&spec, &rows)
            .add(&spec, "Jones", &"000223".to_owned())
            .unwrap();
        assert!(
            matches!(&writes[..], [RowWrite::Replace(_, etag)] if etag.as_str() == "etag-Jones")
        );
        apply(&spec, &mut rows, writes);
        assert_eq!(state(&spec, &rows).items(), ["000152", "000223"]);
        assert!(
            state(&spec, &rows)
                .add(&spec, "Jones", &"000152".to_owned())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_full_list_overflows_into_numbered_rows_and_keeps_every_item() {
        let spec = spec(100); // about six ids per row
        let mut rows = Vec::new();
        let ids: Vec<String> = (0..40).map(|i| format!("{i:06}")).collect();
        for id in &ids {
            let writes = state(&spec, &rows).add(&spec, "Jones", id).unwrap();
            apply(&spec, &mut rows, writes);
            for r in &rows {
                let text = r.value.get_str("EmployeeIDs").unwrap().unwrap();
                assert!(utf16_bytes(text) <= 100, "{text}");
            }
        }
        let keys: Vec<&str> = rows.iter().map(|r| r.keys.rk()).collect();
        assert!(
            keys.contains(&"Jones_1") && keys.contains(&"Jones_2"),
            "{keys:?}"
        );
        let now = state(&spec, &rows);
        assert_eq!(now.items(), ids, "every id once, oldest first");
        // Removing from an overflow row rewrites only that row; emptying it deletes it.
        let writes = now.remove(&"000000".to_owned());
        assert!(matches!(&writes[..], [RowWrite::Replace(row, _)] if row.rk == "Jones_1"));
        let overflowed: Vec<String> = now.overflow[0].items.clone();
        for id in &overflowed {
            let writes = state(&spec, &rows).remove(id);
            apply(&spec, &mut rows, writes);
        }
        assert!(rows.iter().all(|r| r.keys.rk() != "Jones_1"));
        assert_eq!(
            state(&spec, &rows).items().len(),
            ids.len() - overflowed.len()
        );
        // An id too large for any row is refused.
        assert!(matches!(
            state(&spec, &rows).add(&spec, "Jones", &"x".repeat(60)),
            Err(Error::LimitExceeded { .. })
        ));
    }

    #[test]
    fn the_last_item_deletes_the_base_row_and_stray_overflow_rows_are_ignored() {
        let spec = spec(1000);
        let mut rows = Vec::new();
        let writes = state(&spec, &rows)
            .add(&spec, "Jones", &"1".to_owned())
            .unwrap();
        apply(&spec, &mut rows, writes);
        let writes = state(&spec, &rows).remove(&"1".to_owned());
        assert!(matches!(&writes[..], [RowWrite::Delete(rk, _)] if rk == "Jones"));
        // An overflow row the base does not count (an interrupted overflow) is not read.
        let stray = stored("Jones_1", Properties::new().with("EmployeeIDs", "[\"9\"]"));
        assert!(state(&spec, &[rows[0].clone(), stray]).items() == ["1"]);
    }

    #[test]
    fn rows_this_index_could_not_have_written_are_refused() {
        let spec = spec(1000);
        let read = |props: Properties| {
            let base = stored("Jones", props);
            Lists::<String>::from_rows(&spec, "Jones", Some(&base), &[])
        };
        let refused = |props: Properties| {
            let err = read(props).unwrap_err();
            assert!(err.to_string().contains("RowKey=\"Jones\""), "{err}");
        };
        refused(Properties::new().with("FirstName", "Jun"));
        refused(
            Properties::new()
                .with("EmployeeIDs", "[]")
                .with("FirstName", "Jun"),
        );
        refused(Properties::new().with("EmployeeIDs", 7));
        refused(Properties::new().with("EmployeeIDs", "Jones"));
        refused(Properties::new().with(SHARDS, 1));
        refused(
            Properties::new()
                .with("EmployeeIDs", "[]")
                .with(SHARDS, "one"),
        );
        // What the index writes, and the empty placeholder an eventual list's job creates.
        let listed = read(
            Properties::new()
                .with("EmployeeIDs", "[\"1\"]")
                .with(SHARDS, 2),
        )
        .unwrap();
        assert_eq!(
            (listed.items(), listed.base.shards),
            (vec!["1".to_owned()], 2)
        );
        let blank = read(Properties::new()).unwrap();
        assert!(blank.base.blank && blank.items().is_empty());
    }
}
