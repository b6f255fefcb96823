//! The one transaction that moves an entity's copies from one state to the next. Pure.

use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{ETag, Entity, IfMatch, Properties, Result};

use crate::spec::Family;

/// What an operation of a family transaction is for: decides how its failure is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The primary copy, written with the ETag read (or inserted): the guard of the family.
    Guard,
    /// A secondary copy whose value is unchanged, rewritten (and re-created if missing).
    Refresh,
    /// A new secondary copy: inserted, so a value another entity holds is refused.
    Claim,
    /// A secondary copy whose value is gone: deleted. Already missing is fine.
    Release,
}

/// Operations and their roles, index by index.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) ops: Vec<Operation>,
    pub(crate) roles: Vec<Role>,
}

impl Plan {
    fn push(&mut self, op: Operation, role: Role) {
        self.ops.push(op);
        self.roles.push(role);
    }

    /// The plan without operation `index` (a release whose row was already gone).
    pub(crate) fn without(&mut self, index: usize) {
        self.ops.remove(index);
        self.roles.remove(index);
    }

    pub(crate) fn batch(&self) -> Result<BatchPlan> {
        BatchPlan::atomic(self.ops.iter().cloned())
    }
}

/// A new entity: every copy inserted.
pub(crate) fn insert(new: &Family) -> Result<Plan> {
    let mut plan = Plan {
        ops: Vec::new(),
        roles: Vec::new(),
    };
    for (i, row) in new.copies.iter().enumerate() {
        let op = Operation::insert(&Entity::new(row.keys.clone(), &row.props))?;
        plan.push(op, if i == 0 { Role::Guard } else { Role::Claim });
    }
    Ok(plan)
}

/// An existing entity (`old`, read with `etag`) becoming `new`: the primary replaced under
/// the ETag; unchanged copies rewritten; changed ones released and claimed.
pub(crate) fn change(old: &Family, etag: &ETag, new: &Family) -> Result<Plan> {
    let mut plan = Plan {
        ops: Vec::new(),
        roles: Vec::new(),
    };
    let primary = new.primary();
    plan.push(
        Operation::replace(
            &Entity::new(primary.keys.clone(), &primary.props),
            IfMatch::ETag(etag.clone()),
        )?,
        Role::Guard,
    );
    for (before, after) in old.copies.iter().zip(&new.copies).skip(1) {
        let entity = Entity::new(after.keys.clone(), &after.props);
        if before.keys == after.keys {
            plan.push(Operation::upsert_replace(&entity)?, Role::Refresh);
        } else {
            plan.push(
                Operation::delete(before.keys.clone(), IfMatch::Any)?,
                Role::Release,
            );
            plan.push(Operation::insert(&entity)?, Role::Claim);
        }
    }
    Ok(plan)
}

/// An existing entity removed: the primary deleted under the ETag, the others released.
pub(crate) fn delete(old: &Family, etag: &ETag) -> Result<Plan> {
    let mut plan = Plan {
        ops: Vec::new(),
        roles: Vec::new(),
    };
    plan.push(
        Operation::delete(old.primary().keys.clone(), IfMatch::ETag(etag.clone()))?,
        Role::Guard,
    );
    for row in &old.copies[1..] {
        plan.push(
            Operation::delete(row.keys.clone(), IfMatch::Any)?,
            Role::Release,
        );
    }
    Ok(plan)
}

/// The copies of an existing entity rewritten from it, guarded by the primary's ETag (an empty
/// merge: the primary keeps its properties but any concurrent write makes the transaction
/// fail). `only` limits the secondary copies written (by position).
pub(crate) fn rewrite(family: &Family, etag: &ETag, only: Option<&[usize]>) -> Result<Plan> {
    let mut plan = Plan {
        ops: Vec::new(),
        roles: Vec::new(),
    };
    let guard = Entity::new(family.primary().keys.clone(), Properties::new());
    plan.push(
        Operation::merge(&guard, IfMatch::ETag(etag.clone()))?,
        Role::Guard,
    );
    for (i, row) in family.copies.iter().enumerate().skip(1) {
        if only.is_some_and(|only| !only.contains(&i)) {
            continue;
        }
        let entity = Entity::new(row.keys.clone(), &row.props);
        plan.push(Operation::upsert_replace(&entity)?, Role::Refresh);
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use tablekit_core::Keys;
    use tablekit_core::batch::OperationKind;

    use super::*;
    use crate::spec::CopyRow;

    fn family(email: &str) -> Family {
        let row = |pk: &str, rk: String| CopyRow {
            value: String::new(),
            keys: Keys::new(pk, rk).unwrap(),
            props: Properties::new().with("Email", email),
        };
        Family {
            copies: vec![
                row("Sales", "empid_000223".into()),
                row("Sales", format!("email_{email}")),
            ],
        }
    }

    fn kinds(plan: &Plan) -> Vec<(OperationKind, Role, String)> {
        plan.ops
            .iter()
            .zip(&plan.roles)
            .map(|(op, role)| (op.kind(), *role, op.keys().rk().to_owned()))
            .collect()
    }

    #[test]
    fn a_new_email_releases_the_old_copy_and_claims_the_new_one() {
        let etag = ETag::new("W/\"1\"");
        let plan = change(&family("a@x"), &etag, &family("b@x")).unwrap();
        assert_eq!(
            kinds(&plan),
            vec![
                (OperationKind::Replace, Role::Guard, "empid_000223".into()),
                (OperationKind::Delete, Role::Release, "email_a@x".into()),
                (OperationKind::Insert, Role::Claim, "email_b@x".into()),
            ]
        );
        assert_eq!(plan.ops[0].if_match(), Some(&IfMatch::ETag(etag)));
        assert!(plan.batch().is_ok(), "one partition, one transaction");
    }

    #[test]
    fn an_unchanged_email_is_rewritten_in_place() {
        let plan = change(&family("a@x"), &ETag::new("e"), &family("a@x")).unwrap();
        assert_eq!(plan.roles, vec![Role::Guard, Role::Refresh]);
        assert_eq!(plan.ops[1].kind(), OperationKind::UpsertReplace);
    }

    #[test]
    fn inserts_and_deletes_cover_every_copy() {
        let plan = insert(&family("a@x")).unwrap();
        assert_eq!(plan.roles, vec![Role::Guard, Role::Claim]);
        let mut plan = delete(&family("a@x"), &ETag::new("e")).unwrap();
        assert_eq!(plan.roles, vec![Role::Guard, Role::Release]);
        plan.without(1);
        assert_eq!(plan.ops.len(), 1);
    }
}
