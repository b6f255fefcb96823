//! Splitting a logical entity into shards and joining shards back: deterministic and pure.
//! The types a user meets ([`WideSplit`], [`Shard`], [`MAX_SHARDS`]) are exported at the
//! crate root; the layout helpers stay inside the crate.

use std::collections::BTreeMap;

use tablekit_core::batch::Operation;
use tablekit_core::keys::utf16_bytes;
use tablekit_core::limits::{MAX_ENTITY_BYTES, MAX_USER_PROPERTIES};
use tablekit_core::{
    ETag, Entity, Error, IfMatch, Keys, Limit, NameKind, Result, RowKey, Stored, Target,
};
use tablekit_core::{EdmValue, Properties};
use uuid::Uuid;

/// The property every shard carries with the number of shards of its logical entity
/// (`Edm.Int32`): a reader detects a missing shard, a writer knows which shards to delete.
pub(crate) const SHARD_COUNT_PROPERTY: &str = "WideShardCount";

/// The property every shard carries with the id of the write that produced it (`Edm.Guid`):
/// shards of one logical entity always share it, so a read that mixes two writes is detected.
pub(crate) const WRITE_ID_PROPERTY: &str = "WideWriteId";

/// Most shards of one logical entity: two-digit suffixes `01`…`99`. A rewrite touches at
/// most 99 entities (writes plus deletes of shards no longer needed), so it always fits the
/// 100 operations of one transaction.
pub const MAX_SHARDS: usize = 99;

/// User properties per shard: the 252 an entity may hold, less the two bookkeeping ones.
pub(crate) const SHARD_USER_PROPERTIES: usize = MAX_USER_PROPERTIES - 2;

/// The RowKey of shard `number` (1-based) of the logical entity whose RowKey is `base`:
/// `{base}_{number:02}`, or just `{number:02}` for an empty base (the guide's `01`, `02`).
pub(crate) fn shard_row_key(base: &str, number: usize) -> String {
    if base.is_empty() {
        format!("{number:02}")
    } else {
        format!("{base}_{number:02}")
    }
}

/// The shard number of `row_key` if it is a shard row of `base` (exactly two digits, 01–99).
pub(crate) fn shard_number(base: &str, row_key: &str) -> Option<usize> {
    let suffix = if base.is_empty() {
        row_key
    } else {
        row_key.strip_prefix(base)?.strip_prefix('_')?
    };
    if suffix.len() != 2 || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix.parse().ok().filter(|n| (1..=MAX_SHARDS).contains(n))
}

/// The size the service counts for one property, as
/// [`tablekit_core::edm::write_entity`] counts it.
fn property_size(name: &str, value: &EdmValue) -> usize {
    let value = match value {
        EdmValue::String(s) => 4 + utf16_bytes(s),
        EdmValue::Binary(b) => 4 + b.len(),
        EdmValue::Int32(_) => 4,
        EdmValue::Boolean(_) => 1,
        EdmValue::Int64(_) | EdmValue::Double(_) | EdmValue::DateTime(_) => 8,
        EdmValue::Guid(_) => 16,
    };
    8 + utf16_bytes(name) + value
}

/// One physical entity of a split logical entity.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Shard {
    /// The shard's number, 1-based.
    pub number: usize,
    /// Its keys: the logical entity's PartitionKey, and `{RowKey}_{number:02}` as RowKey
    /// (just `{number:02}` for an empty RowKey).
    pub keys: Keys,
    /// Its share of the user properties (without the bookkeeping properties).
    pub properties: Properties,
    /// Its size as the service counts it, bookkeeping properties included (≤ 1 MiB).
    pub size_bytes: usize,
}

/// A logical entity split into shards by [`WideEntities::split`](crate::WideEntities::split):
/// properties in name order, each shard filled until the next property would exceed 250
/// user properties (252 less the two bookkeeping ones) or 1 MiB. The split
/// depends only on the properties, so the same value always gives the same shards.
#[derive(Debug, Clone, PartialEq)]
pub struct WideSplit {
    keys: Keys,
    shards: Vec<Shard>,
}

impl WideSplit {
    /// Splits `properties` for the logical entity at `keys` (its RowKey is the shards' base).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a property named [`SHARD_COUNT_PROPERTY`] or
    /// [`WRITE_ID_PROPERTY`]; [`Error::LimitExceeded`] when the shard RowKeys would be too
    /// long, or with [`Limit::Custom`] when more than [`MAX_SHARDS`] shards are needed.
    pub(crate) fn new(keys: &Keys, properties: Properties) -> Result<Self> {
        for reserved in [SHARD_COUNT_PROPERTY, WRITE_ID_PROPERTY] {
            if properties.contains(reserved) {
                return Err(Error::InvalidName {
                    kind: NameKind::Property,
                    name: reserved.to_owned(),
                    reason: "reserved for the wide-entity layout".into(),
                });
            }
        }
        // Every shard RowKey has the same length, so one check covers them all.
        let row_key = |n| RowKey::new(shard_row_key(keys.rk(), n));
        let empty_size = 4
            + utf16_bytes(keys.pk())
            + utf16_bytes(&row_key(MAX_SHARDS)?)
            + property_size(SHARD_COUNT_PROPERTY, &EdmValue::Int32(0))
            + property_size(WRITE_ID_PROPERTY, &EdmValue::Guid(Uuid::nil()));
        let mut groups: Vec<(Properties, usize)> = vec![(Properties::new(), empty_size)];
        for (name, value) in properties {
            let size = property_size(&name, &value);
            let (props, used) = groups.last_mut().expect("at least one group");
            if props.len() < SHARD_USER_PROPERTIES && *used + size <= MAX_ENTITY_BYTES {
                props.insert(name, value);
                *used += size;
            } else {
                groups.push((Properties::new().with(name, value), empty_size + size));
            }
        }
        if groups.len() > MAX_SHARDS {
            return Err(Error::LimitExceeded {
                limit: Limit::Custom {
                    what: "shards per wide entity".into(),
                    max: MAX_SHARDS,
                },
                actual: groups.len(),
            });
        }
        let shards = groups
            .into_iter()
            .enumerate()
            .map(|(i, (properties, size_bytes))| {
                Ok(Shard {
                    number: i + 1,
                    keys: Keys::from_parts(keys.partition_key.clone(), row_key(i + 1)?),
                    properties,
                    size_bytes,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            keys: keys.clone(),
            shards,
        })
    }

    /// The logical entity's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The shards, in order.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Number of shards (at least 1).
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Always `false`: even an empty logical entity has one shard.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// The operations that make this split the stored state, in one transaction: for each
    /// shard a replace carrying the current shard's ETag (or an insert where there is none),
    /// and a delete carrying the ETag of every current shard beyond the new count.
    pub(crate) fn operations(
        &self,
        write_id: Uuid,
        current: &BTreeMap<usize, ETag>,
    ) -> Result<Vec<Operation>> {
        let count = i32::try_from(self.shards.len()).unwrap_or(i32::MAX);
        let mut ops = Vec::with_capacity(self.shards.len().max(current.len()));
        for shard in &self.shards {
            let mut props = shard.properties.clone();
            props.insert(SHARD_COUNT_PROPERTY, count);
            props.insert(WRITE_ID_PROPERTY, write_id);
            let entity = Entity::new(shard.keys.clone(), props);
            ops.push(match current.get(&shard.number) {
                Some(etag) => Operation::replace(&entity, IfMatch::ETag(etag.clone()))?,
                None => Operation::insert(&entity)?,
            });
        }
        for (&number, etag) in current.range(self.shards.len() + 1..) {
            let row_key = RowKey::new(shard_row_key(self.keys.rk(), number))?;
            let keys = Keys::from_parts(self.keys.partition_key.clone(), row_key);
            ops.push(Operation::delete(keys, IfMatch::ETag(etag.clone()))?);
        }
        Ok(ops)
    }
}

/// What the rows of a wide entity's key range say.
#[derive(Debug)]
pub(crate) enum Joined {
    /// No shard row.
    Absent,
    /// Shards of one write, complete: their ETags by number, and the user properties.
    Whole {
        write_id: Uuid,
        shards: BTreeMap<usize, (Keys, ETag)>,
        properties: Properties,
    },
    /// Shards that do not form one write (a read between writes, or damaged data).
    Torn(String),
}

/// Joins the rows of a wide entity's key range (other rows in the range are ignored).
///
/// # Errors
/// [`Error::Corrupt`] for a shard row without valid bookkeeping properties (a row tablekit
/// did not write) or a property held by two shards.
pub(crate) fn join(base: &Keys, rows: Vec<Stored<Properties>>) -> Result<Joined> {
    let mut shards = BTreeMap::new();
    let mut properties = Properties::new();
    let mut identity: Option<(i64, Uuid)> = None;
    let mut mixed = false;
    for row in rows {
        let Some(number) = shard_number(base.rk(), row.keys.rk()) else {
            continue;
        };
        let mut value = row.value;
        let count = value.remove(SHARD_COUNT_PROPERTY).and_then(|v| v.as_i64());
        let id = value.remove(WRITE_ID_PROPERTY).and_then(|v| v.as_guid());
        let (Some(count), Some(id)) = (count, id) else {
            return Err(Error::corrupt(
                Target::entity("", row.keys),
                format!(
                    "it lies in the shard range of wide entity {base} but has no valid \
                     {SHARD_COUNT_PROPERTY}/{WRITE_ID_PROPERTY}: it was not written as a shard",
                ),
            ));
        };
        mixed |= *identity.get_or_insert((count, id)) != (count, id);
        for (name, v) in value {
            if properties.insert(name.clone(), v).is_some() {
                return Err(Error::corrupt(
                    Target::entity("", base.clone()),
                    format!("property `{name}` is held by two of its shards"),
                ));
            }
        }
        shards.insert(number, (row.keys, row.etag));
    }
    let Some((count, write_id)) = identity else {
        return Ok(Joined::Absent);
    };
    let complete = usize::try_from(count).is_ok_and(|count| shards.keys().copied().eq(1..=count));
    if mixed || !complete {
        let found: Vec<usize> = shards.keys().copied().collect();
        return Ok(Joined::Torn(format!(
            "shards {found:?} of wide entity {base} do not form one write (first says {count} \
             shards, write {write_id}{})",
            if mixed { "; other shards differ" } else { "" }
        )));
    }
    Ok(Joined::Whole {
        write_id,
        shards,
        properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit_core::edm::{parse_entity, to_entity_json};

    fn keys() -> Keys {
        Keys::new("000223", "DailyIm").unwrap()
    }

    fn days(n: usize) -> Properties {
        (1..=n)
            .map(|d| (format!("D{d:03}"), EdmValue::Int32(d as i32)))
            .collect()
    }

    #[test]
    fn row_keys_round_trip() {
        assert_eq!(shard_row_key("DailyIm", 1), "DailyIm_01");
        assert_eq!(shard_row_key("", 2), "02");
        assert_eq!(shard_number("DailyIm", "DailyIm_07"), Some(7));
        assert_eq!(shard_number("", "99"), Some(99));
        for not_a_shard in [
            "DailyIm_00",
            "DailyIm_1",
            "DailyIm_001",
            "DailyIm_0a",
            "DailyIm01",
            "X_01",
        ] {
            assert_eq!(shard_number("DailyIm", not_a_shard), None, "{not_a_shard}");
        }
        assert_eq!(shard_number("DailyIm", "DailyIm_02_01"), None);
    }

    #[test]
    fn a_year_of_days_splits_into_two_shards_deterministically() {
        let split = WideSplit::new(&keys(), days(365)).unwrap();
        assert_eq!(split.len(), 2);
        assert_eq!(split.shards()[0].properties.len(), SHARD_USER_PROPERTIES);
        assert_eq!(
            split.shards()[1].properties.len(),
            365 - SHARD_USER_PROPERTIES
        );
        assert_eq!(split.shards()[1].keys.rk(), "DailyIm_02");
        assert_eq!(WideSplit::new(&keys(), days(365)).unwrap(), split);
        assert_eq!(WideSplit::new(&keys(), days(250)).unwrap().len(), 1);
        assert_eq!(WideSplit::new(&keys(), Properties::new()).unwrap().len(), 1);
    }

    #[test]
    fn shards_respect_the_entity_size_and_the_count_matches_the_encoder() {
        // 40 strings of 30,000 UTF-16 units: 60 KB each as the service counts, ~2.3 MiB.
        let props: Properties = (0..40)
            .map(|i| (format!("P{i:02}"), EdmValue::String("é".repeat(30_000))))
            .collect();
        let split = WideSplit::new(&keys(), props).unwrap();
        assert_eq!(split.len(), 3);
        let ops = split.operations(Uuid::new_v4(), &BTreeMap::new()).unwrap();
        for (shard, op) in split.shards().iter().zip(&ops) {
            let sent = parse_entity::<Properties>(op.body().unwrap(), Some("*")).unwrap();
            let (_, stats) = to_entity_json(&shard.keys, &sent.value).unwrap();
            assert_eq!(stats.size_bytes, shard.size_bytes, "shard {}", shard.number);
            assert!(shard.size_bytes <= MAX_ENTITY_BYTES);
        }
    }

    #[test]
    fn too_many_shards_and_reserved_names_are_refused() {
        let huge: Properties = (0..99 * 16)
            .map(|i| (format!("P{i:04}"), EdmValue::Binary(vec![0; 65_536])))
            .collect();
        assert!(matches!(
            WideSplit::new(&keys(), huge),
            Err(Error::LimitExceeded {
                limit: Limit::Custom { max: 99, .. },
                ..
            })
        ));
        let reserved = Properties::new().with(WRITE_ID_PROPERTY, 1);
        assert!(matches!(
            WideSplit::new(&keys(), reserved),
            Err(Error::InvalidName { .. })
        ));
        let long_base = Keys::new("p", "r".repeat(511)).unwrap();
        assert!(matches!(
            WideSplit::new(&long_base, Properties::new()),
            Err(Error::LimitExceeded { .. })
        ));
    }

    #[test]
    fn a_rewrite_replaces_inserts_and_deletes_with_etags() {
        use tablekit_core::batch::OperationKind;
        let split = WideSplit::new(&keys(), days(300)).unwrap();
        let tag = |s: &str| ETag::new(s);
        let current: BTreeMap<usize, ETag> = [(1, tag("a")), (3, tag("c")), (4, tag("d"))]
            .into_iter()
            .collect();
        let ops = split.operations(Uuid::nil(), &current).unwrap();
        let summary: Vec<(OperationKind, &str, Option<&str>)> = ops
            .iter()
            .map(|op| {
                (
                    op.kind(),
                    op.keys().rk(),
                    op.if_match().map(IfMatch::header_value),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (OperationKind::Replace, "DailyIm_01", Some("a")),
                (OperationKind::Insert, "DailyIm_02", None),
                (OperationKind::Delete, "DailyIm_03", Some("c")),
                (OperationKind::Delete, "DailyIm_04", Some("d")),
            ]
        );
    }

    fn row(rk: &str, count: i32, id: Uuid, extra: (&str, i32)) -> Stored<Properties> {
        Stored {
            keys: Keys::new("000223", rk).unwrap(),
            etag: ETag::new(format!("e{rk}")),
            timestamp: None,
            value: Properties::new()
                .with(SHARD_COUNT_PROPERTY, count)
                .with(WRITE_ID_PROPERTY, id)
                .with(extra.0, extra.1),
        }
    }

    #[test]
    fn joining_detects_mixed_and_missing_shards() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let whole = join(
            &keys(),
            vec![
                row("DailyIm_01", 2, a, ("D001", 1)),
                row("DailyIm_02", 2, a, ("D300", 300)),
                row("DailyIm_0x", 2, b, ("Other", 0)),
            ],
        )
        .unwrap();
        let Joined::Whole {
            write_id,
            shards,
            properties,
        } = whole
        else {
            panic!("{whole:?}")
        };
        assert_eq!((write_id, shards.len(), properties.len()), (a, 2, 2));
        let mixed = join(
            &keys(),
            vec![
                row("DailyIm_01", 2, a, ("D001", 1)),
                row("DailyIm_02", 2, b, ("D300", 3)),
            ],
        )
        .unwrap();
        assert!(matches!(mixed, Joined::Torn(_)));
        let missing = join(&keys(), vec![row("DailyIm_02", 2, a, ("D300", 3))]).unwrap();
        assert!(matches!(missing, Joined::Torn(_)));
        assert!(matches!(join(&keys(), vec![]).unwrap(), Joined::Absent));
        let mut foreign = row("DailyIm_01", 1, a, ("D001", 1));
        foreign.value.remove(WRITE_ID_PROPERTY);
        assert!(join(&keys(), vec![foreign]).is_err());
    }
}
