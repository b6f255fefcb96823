//! [`Transaction`] and [`TypedTransaction`]: an entity group transaction written step by step
//! on a table handle, whose every refusal waits for [`submit`](Transaction::submit).

use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::{AsEntity, Error, IfMatch, IntoKeys, Result};

use super::{Table, TransactionOutcome, TypedTable};

/// One entity group transaction on a [`Table`], built step by step: every operation happens
/// or none does. Made by [`Table::transaction`]; for a [`TypedTable`], see
/// [`TypedTransaction`].
///
/// The steps (`insert`, `replace`, `merge`, `upsert_replace`, `upsert_merge`, `delete`) never
/// fail: each encodes its operation at once, so the builder borrows nothing, and keeps any
/// error for [`submit`](Self::submit), which refuses the whole transaction before sending
/// anything. An operation's index is its position among the steps, from 0.
///
/// # Examples
/// ```no_run
/// use tablekit_core::{Entity, IfMatch, Keys, Properties};
///
/// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
/// // Move an index row from one email to another: both happen or neither does.
/// let moved = Entity::new(
///     Keys::new("Sales", "email_jonesj@contoso.com")?,
///     Properties::new().with("EmployeeId", "000223"),
/// );
/// table
///     .transaction()
///     .insert(&moved)
///     .delete(("Sales", "email_jones@contoso.com"), IfMatch::Any)
///     .submit() // one request
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a transaction sends nothing until it is submitted"]
pub struct Transaction {
    table: Table,
    /// Each step's encoded operation, or why it could not be encoded, in the caller's order.
    steps: Vec<Result<Operation>>,
}

impl fmt::Debug for Transaction {
    // Neither keys nor bodies: the bodies are not yet through the handle's codec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("table", &self.table.name())
            .field("steps", &step_kinds(&self.steps))
            .finish()
    }
}

/// What a builder's `Debug` shows of its steps: each operation's kind, or that it was
/// refused — never keys or bodies.
pub(crate) fn step_kinds(
    steps: &[Result<Operation>],
) -> Vec<std::result::Result<tablekit_core::batch::OperationKind, &'static str>> {
    steps
        .iter()
        .map(|s| s.as_ref().map(Operation::kind).map_err(|_| "refused"))
        .collect()
}

impl Table {
    /// An empty entity group transaction on this table ([`Transaction`]). No request is sent
    /// until it is submitted.
    pub fn transaction(&self) -> Transaction {
        Transaction {
            table: self.clone(),
            steps: Vec::new(),
        }
    }
}

/// The steps of a transaction builder whose `steps` field holds each step's encoded
/// operation, or why it could not be encoded: the same methods, with the same meaning, on a
/// table's transaction and a sharded table's.
macro_rules! transaction_steps {
    () => {
        fn step(
            mut self,
            operation: tablekit_core::Result<tablekit_core::batch::Operation>,
        ) -> Self {
            self.steps.push(operation);
            self
        }

        /// Adds an insert of `entity` (an [`Entity`](tablekit_core::Entity) or a
        /// [`TableEntity`](tablekit_core::TableEntity)); the transaction fails if it exists.
        pub fn insert(self, entity: &impl tablekit_core::AsEntity) -> Self {
            self.step(tablekit_core::batch::Operation::insert(entity))
        }

        /// Adds a replace of the whole of `entity` if `if_match` holds; the transaction fails
        /// if the entity does not exist or its ETag differs.
        pub fn replace(
            self,
            entity: &impl tablekit_core::AsEntity,
            if_match: tablekit_core::IfMatch,
        ) -> Self {
            self.step(tablekit_core::batch::Operation::replace(entity, if_match))
        }

        /// Adds a merge of `entity`'s properties if `if_match` holds; fails as
        /// [`replace`](Self::replace) does.
        pub fn merge(
            self,
            entity: &impl tablekit_core::AsEntity,
            if_match: tablekit_core::IfMatch,
        ) -> Self {
            self.step(tablekit_core::batch::Operation::merge(entity, if_match))
        }

        /// Adds an insert of `entity`, or a replace of the whole stored entity.
        pub fn upsert_replace(self, entity: &impl tablekit_core::AsEntity) -> Self {
            self.step(tablekit_core::batch::Operation::upsert_replace(entity))
        }

        /// Adds an insert of `entity`, or a merge of its properties into the stored entity.
        pub fn upsert_merge(self, entity: &impl tablekit_core::AsEntity) -> Self {
            self.step(tablekit_core::batch::Operation::upsert_merge(entity))
        }

        /// Adds a delete of the entity at `keys` ([`IntoKeys`](tablekit_core::IntoKeys)) if
        /// `if_match` holds; the transaction fails if it does not exist or its ETag differs.
        pub fn delete(
            self,
            keys: impl tablekit_core::IntoKeys,
            if_match: tablekit_core::IfMatch,
        ) -> Self {
            self.step(tablekit_core::batch::Operation::delete(keys, if_match))
        }

        /// The number of steps so far.
        pub fn len(&self) -> usize {
            self.steps.len()
        }

        /// Whether no step was added.
        pub fn is_empty(&self) -> bool {
            self.steps.is_empty()
        }
    };
}
pub(crate) use transaction_steps;

impl Transaction {
    transaction_steps!();

    /// Sends the transaction: every operation is applied, or none is.
    ///
    /// Requests: 1 (as [`Table::submit`] for one atomic transaction: + 1 range read, 2 after
    /// waiting out late attempts, when a failure leaves the outcome open). None when it is
    /// refused before sending. Consistency: atomic, within one partition; the ETags returned
    /// are those the service gave each write.
    ///
    /// **Outcomes**, as [`Table::submit`]: `Ok` — every operation is stored, the outcome
    /// naming them `0..len()` in order with their new ETags (`None` for deletes);
    /// [`Error::Indeterminate`] — stored entirely or not at all, unknown which; any other
    /// error — nothing is stored, and no attempt of it can be any more.
    ///
    /// # Errors
    /// Before any request, for the first problem found:
    /// - [`Error::BatchFailed`] with the index of the first step that could not be encoded,
    ///   and its cause: the entity's key error ([`Error::InvalidKey`], a key over its limit)
    ///   or its encoding error ([`Error::Encode`], a property over its limit);
    /// - [`Error::DuplicateInTransaction`] naming the two steps that address one entity;
    /// - [`Error::CrossPartitionTransaction`] naming a step in each of two partitions;
    /// - [`Error::LimitExceeded`] for more than 100 operations, or a body of 4 MiB or more
    ///   (the limits of the whole transaction, with its actual count or size);
    /// - [`Error::InvalidArgument`] for a transaction without steps;
    /// - what [`Table::submit`] refuses before sending (the handle's codec, the Cosmos DB
    ///   Table API's limits).
    ///
    /// After sending: [`Error::BatchFailed`] with the index of the operation the service
    /// refused and its cause ([`Error::AlreadyExists`], [`Error::PreconditionFailed`] for a
    /// stale ETag, [`Error::NotFound`]), nothing written; [`Error::Indeterminate`] as above;
    /// transport, throttling and service errors that outlast the retries.
    pub async fn submit(self) -> Result<TransactionOutcome> {
        let Self { table, steps } = self;
        let plan = plan(steps)?;
        let mut outcomes = table.submit(&plan).await?;
        #[allow(clippy::expect_used)] // An atomic plan is one transaction: one outcome.
        let outcome = outcomes.pop().expect("an atomic plan has one outcome");
        Ok(outcome)
    }
}

/// The steps as one atomic plan, or the first reason they cannot be one.
/// The atomic plan of a builder's steps: the first step that could not be encoded is the
/// error, with its index.
pub(crate) fn plan(steps: Vec<Result<Operation>>) -> Result<BatchPlan> {
    let mut operations = Vec::with_capacity(steps.len());
    for (index, step) in steps.into_iter().enumerate() {
        match step {
            Ok(operation) => operations.push(operation),
            Err(source) => {
                return Err(Error::BatchFailed {
                    index,
                    source: Box::new(source),
                });
            }
        }
    }
    BatchPlan::atomic(operations)
}

/// One entity group transaction on a [`TypedTable<T>`], built step by step: writes take `T`s
/// (`&T` for a [`TableEntity`](tablekit_core::TableEntity), else an
/// [`Entity<T>`](tablekit_core::Entity)), deletes take keys. Made by
/// [`TypedTable::transaction`]; it is a [`Transaction`] in every other respect: the steps never
/// fail, and [`submit`](Self::submit) refuses the whole transaction before sending anything.
///
/// # Examples
/// ```no_run
/// use serde::{Deserialize, Serialize};
/// use tablekit_core::{IfMatch, Keys, TableEntity};
///
/// // `#[derive(TableEntity)]` writes this impl from
/// // `#[table(partition_key = "{department}", row_key = "{id:06}")]`.
/// #[derive(Serialize, Deserialize)]
/// #[serde(rename_all = "PascalCase")]
/// struct Employee {
///     department: String,
///     id: u32,
/// }
///
/// impl TableEntity for Employee {
///     fn keys(&self) -> tablekit_core::Result<Keys> {
///         Keys::new(&self.department, format!("{:06}", self.id))
///     }
/// }
///
/// # async fn f(employees: &tablekit_azure::TypedTable<Employee>) -> tablekit_core::Result<()> {
/// let (a, b) = (Employee { department: "Sales".into(), id: 1 }, Employee { department: "Sales".into(), id: 2 });
/// let c = employees.get(("Sales", "000003")).await?.expect("stored");
/// let outcome = employees
///     .transaction()
///     .insert(&a)
///     .upsert_merge(&b)
///     .replace(&c.value, c.if_match()) // only if nobody wrote it since it was read
///     .delete(("Sales", "000004"), IfMatch::Any)
///     .submit() // one request: all four or none
///     .await?;
/// assert_eq!(outcome.indices, [0, 1, 2, 3]);
/// # Ok(()) }
/// ```
#[must_use = "a transaction sends nothing until it is submitted"]
pub struct TypedTransaction<T> {
    inner: Transaction,
    // `fn(&T)`: the builder takes `T`s but holds none, so it is `Send` and `Sync` whatever `T`
    // is.
    _t: PhantomData<fn(&T)>,
}

impl<T> fmt::Debug for TypedTransaction<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedTransaction")
            .field("type", &std::any::type_name::<T>())
            .field("transaction", &self.inner)
            .finish()
    }
}

impl<T> TypedTable<T> {
    /// An empty entity group transaction on this table, whose writes take `T`s
    /// ([`TypedTransaction`]). No request is sent until it is submitted.
    pub fn transaction(&self) -> TypedTransaction<T> {
        TypedTransaction {
            inner: self.table().transaction(),
            _t: PhantomData,
        }
    }
}

impl<T> TypedTransaction<T> {
    fn map(self, step: impl FnOnce(Transaction) -> Transaction) -> Self {
        Self {
            inner: step(self.inner),
            _t: PhantomData,
        }
    }

    /// Adds a delete of the entity at `keys` if `if_match` holds. As
    /// [`Transaction::delete`].
    pub fn delete(self, keys: impl IntoKeys, if_match: IfMatch) -> Self {
        self.map(|tx| tx.delete(keys, if_match))
    }

    /// The number of steps so far.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no step was added.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Sends the transaction: every operation is applied, or none is.
    ///
    /// Requests: 1, none when it is refused before sending. Consistency: atomic, within one
    /// partition. Outcomes as [`Transaction::submit`].
    ///
    /// # Errors
    /// As [`Transaction::submit`]: before any request, [`Error::BatchFailed`] naming the first
    /// step that could not be encoded, [`Error::DuplicateInTransaction`],
    /// [`Error::CrossPartitionTransaction`], [`Error::LimitExceeded`] (over 100 operations, a
    /// body of 4 MiB or more), [`Error::InvalidArgument`] (no steps); after sending,
    /// [`Error::BatchFailed`] naming the operation the service refused, nothing written.
    pub async fn submit(self) -> Result<TransactionOutcome> {
        self.inner.submit().await
    }
}

impl<T: Serialize> TypedTransaction<T> {
    /// Adds an insert of `entity`. As [`Transaction::insert`].
    pub fn insert(self, entity: &impl AsEntity<Value = T>) -> Self {
        self.map(|tx| tx.insert(entity))
    }

    /// Adds a replace of the whole of `entity` if `if_match` holds. As
    /// [`Transaction::replace`].
    pub fn replace(self, entity: &impl AsEntity<Value = T>, if_match: IfMatch) -> Self {
        self.map(|tx| tx.replace(entity, if_match))
    }

    /// Adds a merge of `entity`'s properties if `if_match` holds. As [`Transaction::merge`].
    pub fn merge(self, entity: &impl AsEntity<Value = T>, if_match: IfMatch) -> Self {
        self.map(|tx| tx.merge(entity, if_match))
    }

    /// Adds an insert of `entity`, or a replace of the whole stored entity. As
    /// [`Transaction::upsert_replace`].
    pub fn upsert_replace(self, entity: &impl AsEntity<Value = T>) -> Self {
        self.map(|tx| tx.upsert_replace(entity))
    }

    /// Adds an insert of `entity`, or a merge of its properties into the stored entity. As
    /// [`Transaction::upsert_merge`].
    pub fn upsert_merge(self, entity: &impl AsEntity<Value = T>) -> Self {
        self.map(|tx| tx.upsert_merge(entity))
    }
}

#[cfg(test)]
mod tests {
    use tablekit_core::{Entity, ErrorKind, Keys, Properties};

    use super::*;
    use crate::Account;

    fn table() -> Table {
        Account::emulator().table("Steps").unwrap()
    }

    fn row(rk: &str) -> Entity<Properties> {
        Entity::new(Keys::new("p", rk).unwrap(), Properties::new().with("V", 1))
    }

    #[test]
    fn a_step_that_cannot_be_encoded_is_named_by_its_index() {
        let tx = table()
            .transaction()
            .insert(&row("a"))
            .delete(("p", "bad/key"), IfMatch::Any)
            .insert(&row("b"));
        assert_eq!(tx.len(), 3);
        match plan(tx.steps) {
            Err(Error::BatchFailed { index: 1, source }) => {
                assert_eq!(source.kind(), ErrorKind::InvalidInput, "{source}")
            }
            other => panic!("{other:?}"),
        }
    }

    fn send<F: Send>(_: F) {}

    #[test]
    fn submitting_is_a_send_future_whatever_the_type() {
        // `Rc` is neither `Send` nor `Sync`; the typed builder holds no `T`.
        send(table().transaction().submit());
        send(table().typed::<std::rc::Rc<u8>>().transaction().submit());
    }

    #[test]
    fn the_plan_keeps_the_callers_order() {
        let tx = table()
            .transaction()
            .insert(&row("b"))
            .upsert_merge(&row("a"));
        let plan = plan(tx.steps).unwrap();
        assert!(plan.is_atomic());
        assert_eq!(plan.operation(0).unwrap().keys().rk(), "b");
        assert_eq!(plan.operation(1).unwrap().keys().rk(), "a");
    }
}
