//! Entity group transactions: planning (group by partition, split at 100 operations and below
//! the 4 MiB body limit, refuse duplicates).
//!
//! A transaction is atomic within one partition of one table. [`BatchPlan::atomic`] refuses
//! anything that cannot be one transaction; [`BatchPlan::best_effort`] groups and splits, and
//! then each resulting transaction is atomic on its own — not the plan as a whole.

use std::collections::HashMap;

use serde::Serialize;

use crate::edm::{Properties, parse_entity, to_entity_json};
use crate::entity::IfMatch;
use crate::error::{Error, Limit, Result};
use crate::keys::{Keys, PartitionKey};
use crate::limits::MAX_TRANSACTION_OPERATIONS;
use crate::table_entity::{AsEntity, IntoKeys};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// Create; fails if the entity exists (409).
    Insert,
    /// Overwrite the whole entity; fails if it does not exist (404) or the ETag differs (412).
    Replace,
    /// Overwrite the given properties; fails like Replace.
    Merge,
    /// Create or overwrite the whole entity.
    UpsertReplace,
    /// Create or overwrite the given properties.
    UpsertMerge,
    /// Remove; fails if it does not exist (404) or the ETag differs (412).
    Delete,
}

impl OperationKind {
    /// The HTTP method of this operation.
    pub fn method(self) -> &'static str {
        match self {
            OperationKind::Insert => "POST",
            OperationKind::Replace | OperationKind::UpsertReplace => "PUT",
            OperationKind::Merge | OperationKind::UpsertMerge => "MERGE",
            OperationKind::Delete => "DELETE",
        }
    }

    /// Whether the operation writes a body.
    pub fn writes(self) -> bool {
        self != OperationKind::Delete
    }
}

/// One write, already encoded and validated (keys, property names, limits), ready to be sent
/// alone or in a transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    kind: OperationKind,
    keys: Keys,
    if_match: Option<IfMatch>,
    body: Option<Vec<u8>>,
}

impl Operation {
    fn with_body<T: Serialize + ?Sized>(
        kind: OperationKind,
        keys: Keys,
        value: &T,
        if_match: Option<IfMatch>,
    ) -> Result<Self> {
        let (body, _) = to_entity_json(&keys, value)?;
        Ok(Self {
            kind,
            keys,
            if_match,
            body: Some(body),
        })
    }

    /// Insert `entity` (an [`Entity`](crate::Entity) or a
    /// [`TableEntity`](crate::TableEntity)); fails if it exists.
    ///
    /// # Errors
    /// The entity's key errors; encoding errors of [`crate::edm::write_entity`] (values that
    /// cannot be stored, property names, limits).
    pub fn insert(entity: &impl AsEntity) -> Result<Self> {
        Self::with_body(
            OperationKind::Insert,
            entity.entity_keys()?,
            entity.entity_value(),
            None,
        )
    }

    /// Replace `entity` if `if_match` holds.
    ///
    /// # Errors
    /// As [`Operation::insert`].
    pub fn replace(entity: &impl AsEntity, if_match: IfMatch) -> Result<Self> {
        Self::with_body(
            OperationKind::Replace,
            entity.entity_keys()?,
            entity.entity_value(),
            Some(if_match),
        )
    }

    /// Merge `entity`'s properties into the stored entity if `if_match` holds.
    ///
    /// # Errors
    /// As [`Operation::insert`].
    pub fn merge(entity: &impl AsEntity, if_match: IfMatch) -> Result<Self> {
        Self::with_body(
            OperationKind::Merge,
            entity.entity_keys()?,
            entity.entity_value(),
            Some(if_match),
        )
    }

    /// Insert or replace `entity`.
    ///
    /// # Errors
    /// As [`Operation::insert`].
    pub fn upsert_replace(entity: &impl AsEntity) -> Result<Self> {
        Self::with_body(
            OperationKind::UpsertReplace,
            entity.entity_keys()?,
            entity.entity_value(),
            None,
        )
    }

    /// Insert `entity` or merge its properties into the stored one.
    ///
    /// # Errors
    /// As [`Operation::insert`].
    pub fn upsert_merge(entity: &impl AsEntity) -> Result<Self> {
        Self::with_body(
            OperationKind::UpsertMerge,
            entity.entity_keys()?,
            entity.entity_value(),
            None,
        )
    }

    /// Delete the entity at `keys` — [`Keys`], a `(partition_key, row_key)` pair, or a
    /// [`TableEntity`](crate::TableEntity) — if `if_match` holds.
    ///
    /// # Errors
    /// Key errors of `keys` ([`IntoKeys::into_keys`]).
    pub fn delete(keys: impl IntoKeys, if_match: IfMatch) -> Result<Self> {
        Ok(Self {
            kind: OperationKind::Delete,
            keys: keys.into_keys()?,
            if_match: Some(if_match),
            body: None,
        })
    }

    /// What the operation does.
    pub fn kind(&self) -> OperationKind {
        self.kind
    }

    /// The entity it addresses.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Its ETag condition (replace, merge, delete).
    pub fn if_match(&self) -> Option<&IfMatch> {
        self.if_match.as_ref()
    }

    /// The encoded entity JSON (absent for deletes).
    pub fn body(&self) -> Option<&[u8]> {
        self.body.as_deref()
    }

    /// Whether `stored` — the properties now at this operation's keys, `None` when no entity
    /// is there — shows this operation's effect: a delete's entity is gone; a merge's sent
    /// properties are all there with the sent values; any other write's entity holds exactly
    /// the sent properties. No request is sent.
    ///
    /// This is how an outcome left unknown by a lost response is settled by reading: the
    /// effect in place means the write was applied, or that a write of the same content was.
    pub fn is_in_place(&self, stored: Option<&Properties>) -> bool {
        let Some(stored) = stored else {
            return self.kind == OperationKind::Delete;
        };
        let Some(body) = self.body() else {
            return false;
        };
        let Ok(sent) = parse_entity::<Properties>(body, Some("*")) else {
            return false;
        };
        match self.kind {
            OperationKind::Merge | OperationKind::UpsertMerge => {
                sent.value.iter().all(|(k, v)| stored.get(k) == Some(v))
            }
            _ => sent.value == *stored,
        }
    }
}

/// A planned operation and the caller's index for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The caller's index: the operation's position in the input.
    pub index: usize,
    /// The operation.
    pub operation: Operation,
}

/// Operations grouped by partition, ready to be encoded into entity group transactions.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPlan {
    atomic: bool,
    groups: Vec<(PartitionKey, Vec<Planned>)>,
    /// Where each caller index is: (group, position in it), so that
    /// [`operation`](Self::operation) is a lookup rather than a search — a bulk write looks up
    /// every one of its operations.
    located: Vec<(usize, usize)>,
}

impl BatchPlan {
    /// One transaction: all or nothing.
    ///
    /// # Errors
    /// Before any request: [`Error::LimitExceeded`] for more than 100 operations,
    /// [`Error::CrossPartitionTransaction`] for two partitions,
    /// [`Error::DuplicateInTransaction`] for two operations on one entity (with both caller
    /// indices), [`Error::InvalidArgument`] for an empty plan. The 4 MiB body limit is checked
    /// when the plan is encoded for sending.
    pub fn atomic(operations: impl IntoIterator<Item = Operation>) -> Result<Self> {
        let plan = Self::group(operations, true)?;
        if plan.groups.len() > 1 {
            let (a, first) = (&plan.groups[0].0, plan.groups[0].1[0].index);
            let (b, second) = (&plan.groups[1].0, plan.groups[1].1[0].index);
            let (first, second) = (first.min(second), first.max(second));
            return Err(Error::CrossPartitionTransaction {
                first,
                second,
                a: a.to_string(),
                b: b.to_string(),
            });
        }
        let count = plan.len();
        if count > MAX_TRANSACTION_OPERATIONS {
            return Err(Error::LimitExceeded {
                limit: Limit::TransactionOperations,
                actual: count,
            });
        }
        Ok(plan)
    }

    /// As many transactions as needed: grouped by partition (in order of first appearance),
    /// split at 100 operations and below 4 MiB. Each transaction is atomic; the plan is not.
    ///
    /// # Errors
    /// [`Error::DuplicateInTransaction`] for two operations on one entity,
    /// [`Error::InvalidArgument`] for an empty plan.
    pub fn best_effort(operations: impl IntoIterator<Item = Operation>) -> Result<Self> {
        Self::group(operations, false)
    }

    fn group(operations: impl IntoIterator<Item = Operation>, atomic: bool) -> Result<Self> {
        let mut groups: Vec<(PartitionKey, Vec<Planned>)> = Vec::new();
        let mut group_of: HashMap<PartitionKey, usize> = HashMap::new();
        let mut seen: HashMap<Keys, usize> = HashMap::new();
        let mut located = Vec::new();
        for (index, operation) in operations.into_iter().enumerate() {
            if let Some(&first) = seen.get(&operation.keys) {
                return Err(Error::DuplicateInTransaction {
                    keys: operation.keys.clone(),
                    first,
                    second: index,
                });
            }
            seen.insert(operation.keys.clone(), index);
            let pk = &operation.keys.partition_key;
            let slot = match group_of.get(pk) {
                Some(&slot) => slot,
                None => {
                    group_of.insert(pk.clone(), groups.len());
                    groups.push((pk.clone(), Vec::new()));
                    groups.len() - 1
                }
            };
            located.push((slot, groups[slot].1.len()));
            groups[slot].1.push(Planned { index, operation });
        }
        if groups.is_empty() {
            return Err(Error::invalid_argument(
                "operations",
                "a batch needs at least one operation",
            ));
        }
        Ok(Self {
            atomic,
            groups,
            located,
        })
    }

    /// Whether the plan must be a single transaction.
    pub fn is_atomic(&self) -> bool {
        self.atomic
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|(_, ops)| ops.len()).sum()
    }

    /// Whether the plan has no operations (never true for a constructed plan).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The partitions the plan touches, in order of first appearance.
    pub fn partitions(&self) -> impl Iterator<Item = &PartitionKey> {
        self.groups.iter().map(|(pk, _)| pk)
    }

    /// The planned operations, grouped by partition.
    pub fn groups(&self) -> impl Iterator<Item = (&PartitionKey, &[Planned])> {
        self.groups.iter().map(|(pk, ops)| (pk, ops.as_slice()))
    }

    /// The operation with the caller's index `index`.
    pub fn operation(&self, index: usize) -> Option<&Operation> {
        let &(group, position) = self.located.get(index)?;
        Some(&self.groups[group].1[position].operation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::{ETag, Entity};

    fn entity(v: i64) -> Entity<Properties> {
        Entity::try_new("p", "r", Properties::new().with("V", v).with("W", "w")).unwrap()
    }

    #[test]
    fn each_caller_index_finds_its_own_operation_across_partitions() {
        let ops: Vec<Operation> = (0..30)
            .map(|i| {
                let e = Entity::try_new(
                    format!("p{}", i % 3),
                    format!("r{i:02}"),
                    Properties::new().with("V", i64::from(i)),
                )
                .unwrap();
                Operation::insert(&e).unwrap()
            })
            .collect();
        let plan = BatchPlan::best_effort(ops.clone()).unwrap();
        assert_eq!(plan.groups().count(), 3);
        for (i, op) in ops.iter().enumerate() {
            assert_eq!(plan.operation(i), Some(op), "index {i}");
        }
        assert_eq!(plan.operation(30), None);
    }

    #[test]
    fn an_effect_is_in_place_only_when_the_stored_entity_shows_it() {
        let stored = entity(1).value;
        let other = entity(2).value;
        let insert = Operation::insert(&entity(1)).unwrap();
        assert!(insert.is_in_place(Some(&stored)));
        assert!(!insert.is_in_place(Some(&other)));
        assert!(!insert.is_in_place(None));
        let merge = Operation::upsert_merge(
            &Entity::try_new("p", "r", Properties::new().with("V", 1i64)).unwrap(),
        )
        .unwrap();
        assert!(
            merge.is_in_place(Some(&stored)),
            "the sent properties are there"
        );
        assert!(!merge.is_in_place(Some(&other)));
        let replace = Operation::upsert_replace(
            &Entity::try_new("p", "r", Properties::new().with("V", 1i64)).unwrap(),
        )
        .unwrap();
        assert!(
            !replace.is_in_place(Some(&stored)),
            "a replace leaves no other property"
        );
        let delete = Operation::delete(("p", "r"), IfMatch::ETag(ETag::new("W/\"1\""))).unwrap();
        assert!(delete.is_in_place(None));
        assert!(!delete.is_in_place(Some(&stored)));
    }
}
