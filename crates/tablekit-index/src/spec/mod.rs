//! Index declarations: which copies of an entity exist, under which keys, holding which
//! properties. Pure: nothing here sends a request.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::edm::{field_names, to_properties};
use tablekit_core::limits::MAX_TRANSACTION_OPERATIONS;
use tablekit_core::{Error, Keys, Limit, Result};

mod copy;
mod handle;
pub(crate) mod key;

pub use copy::CopySpec;
use copy::{check_copy, check_source};
pub use handle::{CopyHandle, CopyId};
use key::KeySource;

/// Where copies are placed: all in the entity's partition (RowKey prefixes), or each in its
/// own partition (PartitionKey prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `PK=Sales, RK=email_jonesj@contoso.com`.
    Intra,
    /// `PK=email_Sales, RK=jonesj@contoso.com`.
    Inter,
}

/// The rows one entity is stored as: one per copy, the primary first.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub(crate) copies: Vec<CopyRow>,
}

/// One row of a [`Family`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CopyRow {
    /// The plain value (`000223`, `jonesj@contoso.com`).
    pub(crate) value: String,
    pub(crate) keys: Keys,
    pub(crate) props: Properties,
}

impl Family {
    pub(crate) fn primary(&self) -> &CopyRow {
        &self.copies[0]
    }
}

/// A declaration of how entities of type `T` are copied under alternative keys: the
/// partition (a property or a closure), the primary copy (the entity's identity; always
/// complete) and the secondary copies. Build it with [`IndexSpec::builder`]; use it with
/// [`IntraPartitionIndex`](crate::IntraPartitionIndex) or
/// [`InterPartitionIndex`](crate::InterPartitionIndex), and read through the
/// [`CopyHandle`]s its builder returned.
pub struct IndexSpec<T> {
    id: u64,
    partition: Arc<dyn KeySource<T>>,
    copies: Vec<CopySpec<T>>,
}

impl<T> Clone for IndexSpec<T> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            partition: Arc::clone(&self.partition),
            copies: self.copies.clone(),
        }
    }
}

impl<T> fmt::Debug for IndexSpec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexSpec")
            .field("partition", &self.partition.property())
            .field("copies", &self.copies)
            .finish_non_exhaustive()
    }
}

/// Builds an [`IndexSpec`]: each declared copy returns its [`CopyHandle`].
pub struct IndexSpecBuilder<T> {
    id: u64,
    partition: Arc<dyn KeySource<T>>,
    primaries: Vec<CopySpec<T>>,
    secondaries: Vec<CopySpec<T>>,
}

impl<T> fmt::Debug for IndexSpecBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexSpecBuilder")
            .field("partition", &self.partition.property())
            .field("primary", &self.primaries)
            .field("secondaries", &self.secondaries)
            .finish_non_exhaustive()
    }
}

impl<T> IndexSpec<T> {
    /// Starts a declaration; `partition` gives an entity's partition (`Sales`): a
    /// [`Property`](tablekit_core::filter::Property) constant of a text or integer field
    /// (`Employee::DEPARTMENT`) or a closure.
    ///
    /// # Examples
    /// ```
    /// use tablekit_core::filter::Property;
    /// use tablekit_index::{CopySpec, IndexSpec};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # #[serde(rename_all = "PascalCase")]
    /// # struct Employee { department: String, id: u32, email: String }
    /// # impl Employee {
    /// #     const DEPARTMENT: Property<String> = Property::new("Department");
    /// #     const ID: Property<u32> = Property::new("Id");
    /// #     const EMAIL: Property<String> = Property::new("Email");
    /// # }
    ///
    /// let mut spec = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
    /// let by_id = spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
    /// let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL));
    /// let spec = spec.build()?;
    /// assert_eq!(by_id, spec.primary_handle());
    /// assert_eq!(spec.copy(&by_email)?.name(), "email");
    /// # Ok::<(), tablekit_core::Error>(())
    /// ```
    pub fn builder(partition: impl KeySource<T> + 'static) -> IndexSpecBuilder<T> {
        IndexSpecBuilder {
            id: handle::next_spec_id(),
            partition: Arc::new(partition),
            primaries: Vec::new(),
            secondaries: Vec::new(),
        }
    }

    /// The primary copy.
    pub fn primary(&self) -> &CopySpec<T> {
        &self.copies[0]
    }

    /// The handle of the primary copy.
    pub fn primary_handle(&self) -> CopyHandle<T> {
        CopyHandle::new(self.id, 0)
    }

    /// The secondary copies, in declaration order.
    pub fn secondaries(&self) -> &[CopySpec<T>] {
        &self.copies[1..]
    }

    /// Every copy, the primary first.
    pub fn copies(&self) -> &[CopySpec<T>] {
        &self.copies
    }

    /// The declaration of the copy a handle names.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a handle of another declaration.
    pub fn copy<R>(&self, handle: &CopyHandle<T, R>) -> Result<&CopySpec<T>> {
        Ok(&self.copies[self.position(handle.id)?])
    }

    /// The most operations one write needs: the primary, plus a delete and an insert per
    /// secondary copy whose value changed.
    pub fn max_operations(&self) -> usize {
        1 + 2 * (self.copies.len() - 1)
    }

    /// The position of the copy `id` names.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a handle of another declaration.
    pub(crate) fn position(&self, id: CopyId) -> Result<usize> {
        if id.spec == self.id && id.position < self.copies.len() {
            return Ok(id.position);
        }
        Err(Error::invalid_argument(
            "copy",
            format!(
                "the handle names a copy of another index declaration; this index declares {}",
                self.names()
            ),
        ))
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.copies.iter().map(|c| c.name()).collect();
        names.join(", ")
    }

    /// The position of the copy named `name` (a name read back from a queued job).
    pub(crate) fn position_named(&self, name: &str) -> Option<usize> {
        self.copies.iter().position(|c| c.name == name)
    }

    /// The positions of the copies a backfill writes: every secondary copy (`None`), or those
    /// `ids` name.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a handle of another declaration or the primary copy,
    /// which is the source of a backfill.
    pub(crate) fn backfill_targets(&self, ids: Option<&[CopyId]>) -> Result<Option<Vec<usize>>> {
        let Some(ids) = ids else {
            return Ok(None);
        };
        ids.iter()
            .map(|id| match self.position(*id)? {
                0 => Err(Error::invalid_argument(
                    self.copies[0].name(),
                    "the primary copy is the source of a backfill, not a target",
                )),
                i => Ok(i),
            })
            .collect::<Result<Vec<usize>>>()
            .map(Some)
    }

    /// The keys of copy `copy` for a value's text in a partition.
    pub(crate) fn copy_keys(
        &self,
        layout: Layout,
        copy: usize,
        partition: &str,
        value: &str,
    ) -> Result<Keys> {
        let spec = &self.copies[copy];
        let encoded = spec.encode(value)?;
        match layout {
            Layout::Intra => Keys::new(partition, format!("{}{encoded}", spec.prefix)),
            Layout::Inter => Keys::new(format!("{}{partition}", spec.prefix), encoded),
        }
    }

    /// The value of copy `copy` that a row with `keys` holds, or `None` if the row is not one
    /// of that copy's rows.
    pub(crate) fn value_in(&self, layout: Layout, copy: usize, keys: &Keys) -> Option<String> {
        let spec = &self.copies[copy];
        match layout {
            Layout::Intra => spec.decode(keys.rk().strip_prefix(spec.prefix.as_str())?),
            Layout::Inter => {
                keys.pk().strip_prefix(spec.prefix.as_str())?;
                spec.decode(keys.rk())
            }
        }
    }

    fn partition_from(&self, entity: &T, properties: &Properties) -> Result<String> {
        let what = self.partition.property().unwrap_or("partition");
        self.partition.part(entity, properties)?.text(None, what)
    }
}

impl<T: Serialize> IndexSpec<T> {
    /// An entity's partition.
    ///
    /// # Errors
    /// Encoding errors; [`Error::Encode`] for a missing partition property.
    pub fn partition_of(&self, entity: &T) -> Result<String> {
        self.partition_from(entity, &to_properties(entity)?)
    }

    /// Every row `entity` is stored as.
    pub(crate) fn family(&self, layout: Layout, entity: &T) -> Result<Family> {
        let full = to_properties(entity)?;
        let partition = self.partition_from(entity, &full)?;
        let copies = self
            .copies
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let value = spec.value_from(entity, &full)?;
                let keys = self.copy_keys(layout, i, &partition, &value)?;
                let props = match &spec.projection {
                    None => full.clone(),
                    Some(names) => full
                        .iter()
                        .filter(|(name, _)| names.iter().any(|n| n == name))
                        .map(|(name, v)| (name.to_owned(), v.clone()))
                        .collect(),
                };
                Ok(CopyRow { value, keys, props })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Family { copies })
    }
}

fn invalid(name: &str, reason: impl Into<String>) -> Error {
    Error::invalid_argument(name, reason)
}

impl<T> IndexSpecBuilder<T> {
    /// Declares the primary copy: the entity's identity (`empid_000223`). It always holds
    /// every property; its value must never change for the life of the entity. Returns its
    /// handle.
    pub fn primary(&mut self, copy: CopySpec<T>) -> CopyHandle<T> {
        self.primaries.push(copy);
        CopyHandle::new(self.id, 0)
    }

    /// Declares a secondary copy (`email_jonesj@contoso.com`): a unique alternative key.
    /// Returns its handle, which reads the copy's rows as `R`.
    pub fn secondary<R>(&mut self, copy: CopySpec<T, R>) -> CopyHandle<T, R> {
        self.secondaries.push(copy.erase());
        CopyHandle::new(self.id, self.secondaries.len())
    }
}

impl<T: Serialize + DeserializeOwned> IndexSpecBuilder<T> {
    /// Checks the declaration and builds it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a missing or second primary, a projected primary, an
    /// empty or duplicate name, an empty prefix, a prefix that is the start of another one
    /// (their rows would mix), a property (as key source or in a projection) `T` does not
    /// have, or a zero width; [`Error::InvalidKey`] for a prefix with a character keys may
    /// not hold; [`Error::LimitExceeded`] ([`Limit::TransactionOperations`]) when one write
    /// could need more than 100 operations (more than 49 secondary copies), so the copies
    /// could not be kept in one transaction.
    pub fn build(self) -> Result<IndexSpec<T>> {
        let mut primaries = self.primaries.into_iter();
        let primary = primaries
            .next()
            .ok_or_else(|| invalid("", "an index declaration needs a primary copy"))?;
        if let Some(second) = primaries.next() {
            return Err(invalid(
                &second.name,
                format!(
                    "an index declaration has one primary copy; {:?} is already it",
                    primary.name
                ),
            ));
        }
        if primary.projection.is_some() {
            return Err(invalid(
                &primary.name,
                "the primary copy holds the whole entity; only secondary copies can be projected",
            ));
        }
        let mut copies = vec![primary];
        copies.extend(self.secondaries);
        let operations = 1 + 2 * (copies.len() - 1);
        if operations > MAX_TRANSACTION_OPERATIONS {
            return Err(Error::LimitExceeded {
                limit: Limit::TransactionOperations,
                actual: operations,
            });
        }
        let fields = field_names::<T>();
        check_source(self.partition.as_ref(), "partition", fields)?;
        for (i, copy) in copies.iter().enumerate() {
            check_copy(copy, fields)?;
            for other in &copies[..i] {
                if other.name == copy.name {
                    return Err(invalid(&copy.name, "two copies have this name"));
                }
                if other.prefix.starts_with(&copy.prefix) || copy.prefix.starts_with(&other.prefix)
                {
                    return Err(invalid(
                        &copy.name,
                        format!(
                            "prefix {:?} and prefix {:?} (of {:?}) overlap: one starts with the other, so their rows would mix",
                            copy.prefix, other.prefix, other.name
                        ),
                    ));
                }
            }
        }
        Ok(IndexSpec {
            id: self.id,
            partition: self.partition,
            copies,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use tablekit_core::filter::Property;

    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Employee {
        department: String,
        id: u32,
        email: String,
        age: i32,
    }

    impl Employee {
        const DEPARTMENT: Property<String> = Property::new("Department");
        const ID: Property<u32> = Property::new("Id");
        const EMAIL: Property<String> = Property::new("Email");
    }

    fn jones() -> Employee {
        Employee {
            department: "Sales".into(),
            id: 223,
            email: "jonesj@contoso.com".into(),
            age: 34,
        }
    }

    fn spec() -> (IndexSpec<Employee>, CopyHandle<Employee>) {
        let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
        spec.primary(CopySpec::new("empid", Employee::ID).with_width(6));
        let by_email = spec.secondary(CopySpec::new("email", Employee::EMAIL).with_projection([
            "Department",
            "Id",
            "Email",
        ]));
        (spec.build().unwrap(), by_email)
    }

    #[test]
    fn a_backfill_targets_secondary_copies_of_its_own_declaration_only() {
        let (spec, by_email) = spec();
        assert_eq!(spec.backfill_targets(None).unwrap(), None);
        assert_eq!(
            spec.backfill_targets(Some(&[by_email.id()])).unwrap(),
            Some(vec![1])
        );
        let (_, foreign) = self::spec();
        for bad in [spec.primary_handle().id(), foreign.id()] {
            let e = spec.backfill_targets(Some(&[bad])).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_guides_keys_in_both_layouts() {
        let (spec, _) = spec();
        let intra = spec.family(Layout::Intra, &jones()).unwrap();
        assert_eq!(
            intra.copies[0].keys,
            Keys::new("Sales", "empid_000223").unwrap()
        );
        assert_eq!(
            intra.copies[1].keys,
            Keys::new("Sales", "email_jonesj@contoso.com").unwrap()
        );
        assert!(intra.copies[0].props.contains("Age"));
        assert!(!intra.copies[1].props.contains("Age"), "projected away");
        let inter = spec.family(Layout::Inter, &jones()).unwrap();
        assert_eq!(
            inter.copies[0].keys,
            Keys::new("empid_Sales", "000223").unwrap()
        );
        assert_eq!(
            inter.copies[1].keys,
            Keys::new("email_Sales", "jonesj@contoso.com").unwrap()
        );
    }

    #[test]
    fn values_are_encoded_and_recognised() {
        let (spec, _) = spec();
        let keys = spec
            .copy_keys(Layout::Intra, 1, "Sales", "odd/#name@x")
            .unwrap();
        assert_eq!(keys.rk(), "email_odd!2F!23name@x");
        assert_eq!(
            spec.value_in(Layout::Intra, 1, &keys).as_deref(),
            Some("odd/#name@x")
        );
        // A compound-key row sharing the id prefix is not an id copy.
        let review = Keys::new("Sales", "empid_000123_2012").unwrap();
        assert_eq!(spec.value_in(Layout::Intra, 0, &review), None);
        assert!(spec.copy_keys(Layout::Intra, 0, "Sales", "123").is_err());
    }

    #[test]
    fn declarations_that_cannot_work_are_refused() {
        let key = |e: &Employee| e.email.clone();
        let base = || {
            let mut spec = IndexSpec::builder(Employee::DEPARTMENT);
            spec.primary(CopySpec::new("empid", Employee::ID));
            spec
        };
        assert!(
            IndexSpec::<Employee>::builder(Employee::DEPARTMENT)
                .build()
                .is_err()
        );
        let refused = |change: &dyn Fn(&mut IndexSpecBuilder<Employee>)| {
            let mut spec = base();
            change(&mut spec);
            spec.build().unwrap_err()
        };
        let overlapping = refused(&|s| {
            s.secondary(CopySpec::new("e", key).with_prefix("e"));
            s.secondary(CopySpec::new("email", key));
        });
        assert!(matches!(overlapping, Error::InvalidArgument { .. }));
        let duplicate = refused(&|s| {
            s.secondary(CopySpec::new("empid", key).with_prefix("x_"));
        });
        assert!(matches!(duplicate, Error::InvalidArgument { .. }));
        let typo = refused(&|s| {
            s.secondary(CopySpec::new("email", key).with_projection(["Emial"]));
        });
        assert!(matches!(typo, Error::InvalidArgument { .. }));
        let unknown_property = refused(&|s| {
            s.secondary(CopySpec::new("email", Property::<String>::new("Emial")));
        });
        assert!(matches!(unknown_property, Error::InvalidArgument { .. }));
        let bad_prefix = refused(&|s| {
            s.secondary(CopySpec::new("email", key).with_prefix("a/b"));
        });
        assert!(matches!(bad_prefix, Error::InvalidKey { .. }));
        let second_primary = refused(&|s| {
            s.primary(CopySpec::new("id", Employee::ID));
        });
        assert!(matches!(second_primary, Error::InvalidArgument { .. }));
        let mut projected_primary = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
        projected_primary.primary(CopySpec::new("empid", Employee::ID).with_projection(["Id"]));
        assert!(projected_primary.build().is_err());
        let mut unknown_partition = IndexSpec::<Employee>::builder(Property::<String>::new("Dept"));
        unknown_partition.primary(CopySpec::new("empid", Employee::ID));
        assert!(matches!(
            unknown_partition.build(),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn copies_that_cannot_share_one_transaction_are_refused() {
        let with = |secondaries: usize| {
            let mut spec = IndexSpec::<Employee>::builder(Employee::DEPARTMENT);
            spec.primary(CopySpec::new("empid", Employee::ID));
            for i in 0..secondaries {
                spec.secondary(CopySpec::new(format!("k{i:02}"), Employee::EMAIL));
            }
            spec.build()
        };
        assert_eq!(with(49).unwrap().max_operations(), 99);
        assert!(matches!(
            with(50),
            Err(Error::LimitExceeded {
                limit: Limit::TransactionOperations,
                actual: 101
            })
        ));
    }
}
