//! Equality on encrypted properties through their beacons: a filter rewritten for the
//! service, and the comparison with the decrypted value that removes the entities whose
//! beacon matched by truncation only.

use serde::de::DeserializeOwned;
use tablekit_azure::Table;
use tablekit_core::edm::from_properties;
use tablekit_core::filter::{CmpOp, Filter};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Result, Stored, Target};

use crate::policy::EncryptionPolicy;

/// A query filter whose equalities with encrypted properties are rewritten to equalities
/// with their beacons ([`EncryptionPolicy::beacon_filter`]): [`filter`](Self::filter) is
/// what the service is sent, [`matches`](Self::matches) what a decrypted entity must also
/// satisfy, since values that are not equal may share a beacon.
#[derive(Debug, Clone, PartialEq)]
pub struct BeaconFilter {
    filter: Filter,
    equalities: Vec<(String, String)>,
}

impl BeaconFilter {
    /// The filter to send: every `Email eq 'x'` replaced by `_Beacon_Email eq '<beacon of
    /// x>'`, everything else as it was.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// The rewritten equalities: (encrypted property, value) pairs.
    pub fn equalities(&self) -> impl Iterator<Item = (&str, &str)> {
        self.equalities
            .iter()
            .map(|(p, v)| (p.as_str(), v.as_str()))
    }

    /// Whether a decrypted entity the filter returned holds every rewritten equality
    /// exactly: `false` for a false positive of the beacon (another value with the same
    /// truncated HMAC), which the caller drops.
    pub fn matches(&self, decrypted: &Properties) -> bool {
        self.equalities.iter().all(|(property, value)| {
            decrypted.get_str(property).ok().flatten() == Some(value.as_str())
        })
    }
}

impl EncryptionPolicy {
    /// Rewrites the equalities with encrypted properties in `filter` to equalities with their
    /// beacons ([`EncryptionPolicyBuilder::beacon`](crate::EncryptionPolicyBuilder::beacon)):
    /// `Filter::partition("Sales").and(Employee::EMAIL.eq("jun@contoso.example"))` becomes
    /// `(PartitionKey eq 'Sales') and (_Beacon_Email eq '3f2a')`. Other comparisons are left
    /// as they are. Raw filters are rewritten through their parse. Sends no request.
    ///
    /// Only an equality that must hold for the whole filter to hold can be rewritten — one
    /// joined to the rest by `and` — because after decryption only it is checked: under `or`
    /// or `not`, a beacon that matches by truncation would let an entity through (or keep one
    /// out) that the filter means otherwise.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`], before any request, for a comparison with an encrypted
    /// property that has no beacon, that is not `eq`, whose value is not a string, or that
    /// sits under `or` or `not`; and for raw text that does not parse and names an encrypted
    /// property.
    pub fn beacon_filter(&self, filter: &Filter) -> Result<BeaconFilter> {
        let mut equalities = Vec::new();
        let filter = self.rewrite(filter, true, &mut equalities)?;
        Ok(BeaconFilter { filter, equalities })
    }

    fn rewrite(
        &self,
        filter: &Filter,
        conjunct: bool,
        equalities: &mut Vec<(String, String)>,
    ) -> Result<Filter> {
        let refuse = |reason: String| Err(Error::InvalidFilter { reason });
        match filter {
            Filter::Compare {
                property,
                op,
                value,
            } if self.properties().any(|p| p == property) => {
                let Some(beacon) = self.beacon(property) else {
                    self.check_filter(filter)?;
                    return refuse(format!("`{property}` is encrypted and has no beacon"));
                };
                if !conjunct {
                    return refuse(format!(
                        "`{property}` is encrypted: an equality with it is answered through \
                         its beacon and checked after decryption, which holds only for an \
                         equality joined to the rest of the filter with `and`, not under `or` \
                         or `not`"
                    ));
                }
                let (CmpOp::Eq, EdmValue::String(text)) = (op, value) else {
                    return refuse(format!(
                        "`{property}` is encrypted: only `eq` with a string can be asked, \
                         through its beacon (a beacon keeps no order)"
                    ));
                };
                equalities.push((property.clone(), text.clone()));
                Ok(Filter::eq(beacon.stored_name(), beacon.value(text)))
            }
            Filter::Compare { .. } => Ok(filter.clone()),
            Filter::And(left, right) => Ok(self
                .rewrite(left, conjunct, equalities)?
                .and(self.rewrite(right, conjunct, equalities)?)),
            Filter::Or(left, right) => Ok(self
                .rewrite(left, false, equalities)?
                .or(self.rewrite(right, false, equalities)?)),
            Filter::Not(inner) => Ok(self.rewrite(inner, false, equalities)?.not()),
            Filter::Raw(raw) => match raw.parsed() {
                Some(parsed) => self.rewrite(parsed, conjunct, equalities),
                None => {
                    self.check_filter(filter)?;
                    Ok(filter.clone())
                }
            },
            other => {
                self.check_filter(other)?;
                Ok(other.clone())
            }
        }
    }

    /// Runs a query whose filter may compare encrypted properties for equality, through
    /// their beacons: the filter is rewritten ([`beacon_filter`](Self::beacon_filter)), sent
    /// through `table` encrypting with this policy, every entity returned is decrypted, and
    /// those whose decrypted values are not the ones asked for — false positives of the
    /// truncated beacon — are dropped before they are read as `T`.
    ///
    /// `Employee::EMAIL.eq(x)` is the typed way to write the equality:
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use tablekit_core::filter::{Filter, Property};
    /// # use tablekit_encryption::{AesKeyWrap, BeaconKey, EncryptionPolicy};
    /// # #[derive(serde::Deserialize)] struct Employee { }
    /// # impl Employee { const EMAIL: Property<String> = Property::new("Email"); }
    /// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// let kek = Arc::new(AesKeyWrap::new("hr-2026", &[7u8; 32])?);
    /// let beacons = BeaconKey::new("hr-beacons-2026", &[9u8; 32])?;
    /// let policy = EncryptionPolicy::builder(kek)
    ///     .properties(["Email"])
    ///     .beacon(beacons.standard_beacon("Email", 16)?)
    ///     .build()?;
    /// let found = policy
    ///     .search::<Employee>(table, Filter::partition("Sales")
    ///         .and(Employee::EMAIL.eq("jun@contoso.example")))
    ///     .await?;
    /// # let _ = found; Ok(()) }
    /// ```
    ///
    /// **Requests:** those of the query (one per page of candidates), as the table's scan
    /// policy allows its shape; no other. The key-encryption key is called once per candidate
    /// read, as for any read. **Consistency:** that of a query, per page.
    ///
    /// # Errors
    /// Before any request: as [`beacon_filter`](Self::beacon_filter). Then the query's
    /// errors; a candidate that does not decrypt is `Corrupt` naming it; one that does not
    /// fit `T` is `Decode` naming it.
    pub async fn search<T: DeserializeOwned + Send + 'static>(
        &self,
        table: &Table,
        filter: Filter,
    ) -> Result<Vec<Stored<T>>> {
        let rewritten = self.beacon_filter(&filter)?;
        let table = self.table(table);
        let candidates = table
            .query::<Properties>()
            .filter(rewritten.filter.clone())
            .collect()
            .await?;
        candidates
            .into_iter()
            .filter(|candidate| rewritten.matches(&candidate.value))
            .map(|candidate| {
                let value = from_properties::<T>(&candidate.value).map_err(|error| {
                    error.with_target(Target::entity(table.name(), candidate.keys.clone()))
                })?;
                Ok(Stored {
                    keys: candidate.keys,
                    etag: candidate.etag,
                    timestamp: candidate.timestamp,
                    value,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablekit_core::filter::Filter;

    use crate::{AesKeyWrap, BeaconKey, EncryptionPolicy};

    fn policy() -> EncryptionPolicy {
        let kek = Arc::new(AesKeyWrap::new("k", &[1; 32]).unwrap());
        let root = BeaconKey::new("b", &[2; 32]).unwrap();
        EncryptionPolicy::builder(kek)
            .properties(["Email", "Notes"])
            .beacon(root.standard_beacon("Email", 16).unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn an_equality_joined_with_and_is_rewritten_to_the_beacon() {
        let policy = policy();
        let beacon = policy.beacon("Email").unwrap().value("jun@contoso.example");
        for filter in [
            Filter::partition("Sales").and(Filter::eq("Email", "jun@contoso.example")),
            Filter::raw("PartitionKey eq 'Sales' and Email eq 'jun@contoso.example'"),
        ] {
            let rewritten = policy.beacon_filter(&filter).unwrap();
            assert_eq!(
                rewritten.filter(),
                &Filter::partition("Sales").and(Filter::eq("_Beacon_Email", beacon.as_str()))
            );
            assert_eq!(
                rewritten.equalities().collect::<Vec<_>>(),
                [("Email", "jun@contoso.example")]
            );
            assert!(policy.check_filter(rewritten.filter()).is_ok());
        }
        // A filter without encrypted properties is sent as it is.
        let plain = Filter::partition("Sales").or(Filter::eq("Age", 3i64));
        assert_eq!(policy.beacon_filter(&plain).unwrap().filter(), &plain);
    }

    #[test]
    fn what_a_beacon_cannot_answer_is_refused() {
        let policy = policy();
        let refused = [
            Filter::eq("Notes", "x"),
            Filter::ne("Email", "x"),
            Filter::ge("Email", "x"),
            Filter::eq("Email", 3i64),
            Filter::partition("Sales").or(Filter::eq("Email", "x")),
            Filter::not(Filter::eq("Email", "x")),
            Filter::raw("Email eq 'x' or"),
        ];
        for filter in refused {
            let error = policy.beacon_filter(&filter).unwrap_err();
            assert!(
                matches!(error, tablekit_core::Error::InvalidFilter { .. }),
                "{filter:?}: {error:?}"
            );
        }
    }

    #[test]
    fn a_false_positive_is_told_apart_after_decryption() {
        let policy = policy();
        let rewritten = policy
            .beacon_filter(&Filter::eq("Email", "jun@contoso.example"))
            .unwrap();
        let entity = |email: &str| tablekit_core::Properties::new().with("Email", email);
        assert!(rewritten.matches(&entity("jun@contoso.example")));
        assert!(!rewritten.matches(&entity("mei@contoso.example")));
        assert!(!rewritten.matches(&tablekit_core::Properties::new()));
    }
}
