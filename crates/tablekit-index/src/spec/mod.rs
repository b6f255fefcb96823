//! Index declarations: which copies of an entity exist, under which keys, holding which
//! properties. Pure: nothing here sends a request.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::edm::{Properties, field_names, to_properties};
use tablekit_core::limits::MAX_TRANSACTION_OPERATIONS;
use tablekit_core::{Error, Keys, Limit, Result};

mod copy;

pub use copy::CopySpec;
pub(crate) use copy::KeyFn;
use copy::check_copy;

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
pub(crate) struct Family {
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
/// partition function, the primary copy (the entity's identity; always complete) and the
/// secondary copies. Build it with [`IndexSpec::builder`]; use it with
/// [`IntraPartitionIndex`](crate::IntraPartitionIndex) or
/// [`InterPartitionIndex`](crate::InterPartitionIndex).
pub struct IndexSpec<T> {
    partition: KeyFn<T>,
    copies: Vec<CopySpec<T>>,
}

impl<T> Clone for IndexSpec<T> {
    fn clone(&self) -> Self {
        Self {
            partition: Arc::clone(&self.partition),
            copies: self.copies.clone(),
        }
    }
}

impl<T> fmt::Debug for IndexSpec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexSpec")
            .field("copies", &self.copies)
            .finish_non_exhaustive()
    }
}

/// Builds an [`IndexSpec`].
pub struct IndexSpecBuilder<T> {
    partition: KeyFn<T>,
    primary: Option<CopySpec<T>>,
    secondaries: Vec<CopySpec<T>>,
}

impl<T> fmt::Debug for IndexSpecBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexSpecBuilder")
            .field("primary", &self.primary)
            .field("secondaries", &self.secondaries)
            .finish_non_exhaustive()
    }
}

impl<T> IndexSpec<T> {
    /// Starts a declaration; `partition` gives an entity's partition (`Sales`).
    pub fn builder(
        partition: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> IndexSpecBuilder<T> {
        IndexSpecBuilder {
            partition: Arc::new(partition),
            primary: None,
            secondaries: Vec::new(),
        }
    }

    /// The primary copy.
    pub fn primary(&self) -> &CopySpec<T> {
        &self.copies[0]
    }

    /// The secondary copies, in declaration order.
    pub fn secondaries(&self) -> &[CopySpec<T>] {
        &self.copies[1..]
    }

    /// Every copy, the primary first.
    pub fn copies(&self) -> &[CopySpec<T>] {
        &self.copies
    }

    /// An entity's partition.
    pub fn partition_of(&self, entity: &T) -> String {
        (self.partition)(entity)
    }

    /// The most operations one write needs: the primary, plus a delete and an insert per
    /// secondary copy whose value changed.
    pub fn max_operations(&self) -> usize {
        1 + 2 * (self.copies.len() - 1)
    }

    /// The positions of the copies a backfill writes: every secondary copy (`None`), or those
    /// named in `names`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name or the primary copy, which is the
    /// source of a backfill.
    pub(crate) fn backfill_targets(&self, names: Option<&[String]>) -> Result<Option<Vec<usize>>> {
        let Some(names) = names else {
            return Ok(None);
        };
        names
            .iter()
            .map(|n| match self.copy(n)? {
                (0, _) => Err(Error::invalid_argument(
                    n,
                    "the primary copy is the source of a backfill, not a target",
                )),
                (i, _) => Ok(i),
            })
            .collect::<Result<Vec<usize>>>()
            .map(Some)
    }

    /// The position and declaration of the copy named `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no copy has that name.
    pub fn copy(&self, name: &str) -> Result<(usize, &CopySpec<T>)> {
        self.copies
            .iter()
            .enumerate()
            .find(|(_, c)| c.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.copies.iter().map(|c| c.name.as_str()).collect();
                Error::invalid_argument(
                    "index",
                    format!("no index named {name:?} (declared: {})", known.join(", ")),
                )
            })
    }

    /// The keys of copy `copy` for a value in a partition.
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
}

impl<T: Serialize> IndexSpec<T> {
    /// Every row `entity` is stored as.
    pub(crate) fn family(&self, layout: Layout, entity: &T) -> Result<Family> {
        let partition = self.partition_of(entity);
        let full = to_properties(entity)?;
        let copies = self
            .copies
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let value = spec.value_of(entity);
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

impl<T: Serialize + DeserializeOwned> IndexSpecBuilder<T> {
    /// Sets the primary copy: the entity's identity (`empid_000223`). It always holds every
    /// property; its value must never change for the life of the entity.
    #[must_use]
    pub fn primary(mut self, copy: CopySpec<T>) -> Self {
        self.primary = Some(copy);
        self
    }

    /// Adds a secondary copy (`email_jonesj@contoso.com`): a unique alternative key.
    #[must_use]
    pub fn secondary(mut self, copy: CopySpec<T>) -> Self {
        self.secondaries.push(copy);
        self
    }

    /// Checks the declaration and builds it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a missing primary, a projected primary, an empty or
    /// duplicate name, an empty prefix, a prefix that is the start of another one (their rows
    /// would mix), a projection naming a property `T` does not have, or a zero width;
    /// [`Error::InvalidKey`] for a prefix with a character keys may not hold;
    /// [`Error::LimitExceeded`] ([`Limit::TransactionOperations`]) when one write could need
    /// more than 100 operations (more than 49 secondary copies), so the copies could not be
    /// kept in one transaction.
    pub fn build(self) -> Result<IndexSpec<T>> {
        let primary = self
            .primary
            .ok_or_else(|| invalid("", "an index declaration needs a primary copy"))?;
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
            partition: self.partition,
            copies,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Employee {
        department: String,
        id: u32,
        email: String,
        age: i32,
    }

    fn jones() -> Employee {
        Employee {
            department: "Sales".into(),
            id: 223,
            email: "jonesj@contoso.com".into(),
            age: 34,
        }
    }

    fn spec() -> IndexSpec<Employee> {
        IndexSpec::builder(|e: &Employee| e.department.clone())
            .primary(CopySpec::new("empid", |e: &Employee| format!("{:06}", e.id)).fixed_width(6))
            .secondary(
                CopySpec::new("email", |e: &Employee| e.email.clone()).project([
                    "Department",
                    "Id",
                    "Email",
                ]),
            )
            .build()
            .unwrap()
    }

    #[test]
    fn a_backfill_targets_named_secondary_copies_only() {
        let spec = spec();
        assert_eq!(spec.backfill_targets(None).unwrap(), None);
        assert_eq!(
            spec.backfill_targets(Some(&["email".to_owned()])).unwrap(),
            Some(vec![1])
        );
        for bad in ["empid", "phone"] {
            let e = spec.backfill_targets(Some(&[bad.to_owned()])).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn the_guides_keys_in_both_layouts() {
        let spec = spec();
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
        let spec = spec();
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
            IndexSpec::builder(|e: &Employee| e.department.clone())
                .primary(CopySpec::new("empid", |e: &Employee| e.id.to_string()))
        };
        assert!(
            IndexSpec::<Employee>::builder(|e| e.department.clone())
                .build()
                .is_err()
        );
        let overlapping = base()
            .secondary(CopySpec::new("e", key).with_prefix("e"))
            .secondary(CopySpec::new("email", key))
            .build();
        assert!(matches!(overlapping, Err(Error::InvalidArgument { .. })));
        let duplicate = base().secondary(CopySpec::new("empid", key).with_prefix("x_"));
        assert!(duplicate.build().is_err());
        let typo = base().secondary(CopySpec::new("email", key).project(["Emial"]));
        assert!(typo.build().is_err());
        let bad_prefix = base().secondary(CopySpec::new("email", key).with_prefix("a/b"));
        assert!(matches!(bad_prefix.build(), Err(Error::InvalidKey { .. })));
        let projected_primary = IndexSpec::builder(|e: &Employee| e.department.clone())
            .primary(CopySpec::new("empid", |e: &Employee| e.id.to_string()).project(["Id"]))
            .build();
        assert!(projected_primary.is_err());
    }

    #[test]
    fn copies_that_cannot_share_one_transaction_are_refused() {
        let mut builder = IndexSpec::builder(|e: &Employee| e.department.clone())
            .primary(CopySpec::new("empid", |e: &Employee| e.id.to_string()));
        for i in 0..49 {
            builder = builder.secondary(CopySpec::new(format!("k{i:02}"), |e: &Employee| {
                e.email.clone()
            }));
        }
        let ok = builder.build().unwrap();
        assert_eq!(ok.max_operations(), 99);
        let mut builder = IndexSpec::builder(|e: &Employee| e.department.clone())
            .primary(CopySpec::new("empid", |e: &Employee| e.id.to_string()));
        for i in 0..50 {
            builder = builder.secondary(CopySpec::new(format!("k{i:02}"), |e: &Employee| {
                e.email.clone()
            }));
        }
        assert!(matches!(
            builder.build(),
            Err(Error::LimitExceeded {
                limit: Limit::TransactionOperations,
                actual: 101
            })
        ));
    }
}
