//! Audits: compare the copies an index holds with the copies its primaries call for. The
//! comparison is pure; reading the rows is the caller's.

use std::collections::HashMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::Properties;
use tablekit_core::edm::from_properties;
use tablekit_core::{ETag, Keys, Result, Stored};

use crate::spec::{Family, IndexSpec, Layout};

/// One copy that is not what its primary calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyIssue {
    /// The copy's name (`email`).
    pub index: String,
    /// Where the copy is (or should be).
    pub keys: Keys,
    /// The primary copy it belongs to; `None` for an orphan.
    pub primary: Option<Keys>,
}

/// What [`verify`](crate::IntraPartitionIndex::verify) found in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The partition audited (`Sales`).
    pub partition: String,
    /// Primary copies read.
    pub primaries: usize,
    /// Copies checked against their primaries.
    pub checked: usize,
    /// Copies a primary calls for that do not exist.
    pub missing: Vec<CopyIssue>,
    /// Copies that exist with other properties than their primary calls for.
    pub stale: Vec<CopyIssue>,
    /// Copies no primary calls for (left behind by a changed value or a deleted entity).
    pub orphaned: Vec<CopyIssue>,
    /// Copies several primaries call for: two entities share a value that should be unique.
    /// Repair leaves these to the application.
    pub contested: Vec<CopyIssue>,
}

impl VerifyReport {
    /// Whether every copy matches its primary.
    pub fn is_consistent(&self) -> bool {
        self.issues() == 0
    }

    /// The number of problems found.
    pub fn issues(&self) -> usize {
        self.missing.len() + self.stale.len() + self.orphaned.len() + self.contested.len()
    }
}

/// What [`repair`](crate::IntraPartitionIndex::repair) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairReport {
    /// The audit repair acted on.
    pub found: VerifyReport,
    /// Entities whose copies were rewritten from their primary.
    pub rewritten: usize,
    /// Orphaned copies deleted.
    pub deleted: usize,
    /// Fixes left out because a writer changed the rows since the audit (its own write keeps
    /// the copies right).
    pub skipped: usize,
}

/// A primary with missing or stale copies.
#[derive(Debug, Clone)]
pub(crate) struct Broken {
    pub(crate) primary: Stored<Properties>,
    pub(crate) family: Family,
}

/// An orphaned copy, with the ETag it had when read.
#[derive(Debug, Clone)]
pub(crate) struct Orphan {
    pub(crate) copy: usize,
    pub(crate) keys: Keys,
    pub(crate) etag: ETag,
}

/// The report and what a repair needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Audit {
    pub(crate) report: VerifyReport,
    pub(crate) broken: Vec<Broken>,
    pub(crate) orphans: Vec<Orphan>,
}

struct Expected<'a> {
    copy: usize,
    primary: usize,
    props: &'a Properties,
}

/// Compares the rows read from one partition. `primaries` are the rows of the primary copy;
/// `copies[i]` are the rows of secondary copy `i + 1`. Rows that are not copies (see
/// [`IndexSpec::value_in`]) are ignored.
///
/// # Errors
/// [`tablekit_core::Error::Decode`] when a primary does not fit `T`.
pub(crate) fn audit<T: Serialize + DeserializeOwned>(
    spec: &IndexSpec<T>,
    layout: Layout,
    partition: &str,
    primaries: Vec<Stored<Properties>>,
    copies: &[Vec<Stored<Properties>>],
) -> Result<Audit> {
    let primaries: Vec<Stored<Properties>> = primaries
        .into_iter()
        .filter(|p| spec.value_in(layout, 0, &p.keys).is_some())
        .collect();
    let families = primaries
        .iter()
        .map(|p| spec.family(layout, &from_properties::<T>(&p.value)?))
        .collect::<Result<Vec<Family>>>()?;
    let mut expected: HashMap<&Keys, Vec<Expected<'_>>> = HashMap::new();
    for (primary, family) in families.iter().enumerate() {
        for (copy, row) in family.copies.iter().enumerate().skip(1) {
            expected.entry(&row.keys).or_default().push(Expected {
                copy,
                primary,
                props: &row.props,
            });
        }
    }
    let name = |copy: usize| spec.copies()[copy].name().to_owned();
    let issue = |copy: usize, keys: &Keys, primary: Option<usize>| CopyIssue {
        index: name(copy),
        keys: keys.clone(),
        primary: primary.map(|p| primaries[p].keys.clone()),
    };
    let mut report = VerifyReport {
        partition: partition.to_owned(),
        primaries: primaries.len(),
        ..VerifyReport::default()
    };
    let mut orphans = Vec::new();
    let mut broken = vec![false; primaries.len()];
    for (i, rows) in copies.iter().enumerate() {
        let copy = i + 1;
        for row in rows {
            if spec.value_in(layout, copy, &row.keys).is_none() {
                continue;
            }
            report.checked += 1;
            match expected.remove(&row.keys) {
                None => {
                    report.orphaned.push(issue(copy, &row.keys, None));
                    orphans.push(Orphan {
                        copy,
                        keys: row.keys.clone(),
                        etag: row.etag.clone(),
                    });
                }
                Some(claims) if claims.len() > 1 => {
                    for claim in claims {
                        report
                            .contested
                            .push(issue(claim.copy, &row.keys, Some(claim.primary)));
                    }
                }
                Some(claims) => {
                    let claim = &claims[0];
                    if *claim.props != row.value {
                        report
                            .stale
                            .push(issue(claim.copy, &row.keys, Some(claim.primary)));
                        broken[claim.primary] = true;
                    }
                }
            }
        }
    }
    let mut missing: Vec<(&Keys, Vec<Expected<'_>>)> = expected.into_iter().collect();
    missing.sort_by(|a, b| a.0.cmp(b.0));
    for (keys, claims) in missing {
        if claims.len() > 1 {
            for claim in claims {
                report
                    .contested
                    .push(issue(claim.copy, keys, Some(claim.primary)));
            }
            continue;
        }
        report
            .missing
            .push(issue(claims[0].copy, keys, Some(claims[0].primary)));
        broken[claims[0].primary] = true;
    }
    let broken = primaries
        .into_iter()
        .zip(families)
        .zip(broken)
        .filter(|(_, b)| *b)
        .map(|((primary, family), _)| Broken { primary, family })
        .collect();
    Ok(Audit {
        report,
        broken,
        orphans,
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use tablekit_core::Entity;

    use super::*;
    use crate::spec::CopySpec;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Emp {
        id: String,
        email: String,
    }

    fn spec() -> IndexSpec<Emp> {
        let mut spec = IndexSpec::builder(|_: &Emp| "Sales");
        spec.primary(CopySpec::new("empid", |e: &Emp| e.id.clone()));
        spec.secondary(CopySpec::new("email", |e: &Emp| e.email.clone()));
        spec.build().unwrap()
    }

    fn stored(entity: Entity<Properties>) -> Stored<Properties> {
        Stored {
            keys: entity.keys,
            etag: ETag::new("e"),
            timestamp: None,
            value: entity.value,
        }
    }

    fn rows(emps: &[Emp]) -> (Vec<Stored<Properties>>, Vec<Stored<Properties>>) {
        let spec = spec();
        let mut primaries = Vec::new();
        let mut emails = Vec::new();
        for e in emps {
            let f = spec.family(Layout::Intra, e).unwrap();
            primaries.push(stored(Entity::new(
                f.copies[0].keys.clone(),
                f.copies[0].props.clone(),
            )));
            emails.push(stored(Entity::new(
                f.copies[1].keys.clone(),
                f.copies[1].props.clone(),
            )));
        }
        (primaries, emails)
    }

    fn emp(id: &str, email: &str) -> Emp {
        Emp {
            id: id.into(),
            email: email.into(),
        }
    }

    #[test]
    fn consistent_copies_report_nothing() {
        let (p, e) = rows(&[emp("1", "a@x"), emp("2", "b@x")]);
        let audit = audit(&spec(), Layout::Intra, "Sales", p, &[e]).unwrap();
        assert!(audit.report.is_consistent(), "{:?}", audit.report);
        assert_eq!((audit.report.primaries, audit.report.checked), (2, 2));
    }

    #[test]
    fn missing_stale_orphaned_and_contested_copies_are_told_apart() {
        let (p, _) = rows(&[emp("1", "a@x"), emp("2", "b@x"), emp("3", "c@x")]);
        // 1: copy missing. 2: copy holds an old email property. Plus an orphan.
        let (_, mut e) = rows(&[emp("2", "b@x"), emp("9", "z@x")]);
        e[0].value.insert("Email", "old@x");
        let (_, e3) = rows(&[emp("3", "c@x")]);
        e.extend(e3);
        let audit = audit(&spec(), Layout::Intra, "Sales", p.clone(), &[e]).unwrap();
        let r = &audit.report;
        assert_eq!(r.missing.len(), 1);
        assert_eq!(r.missing[0].keys.rk(), "email_a@x");
        assert_eq!(r.stale.len(), 1);
        assert_eq!(r.stale[0].keys.rk(), "email_b@x");
        assert_eq!(r.orphaned.len(), 1);
        assert_eq!(r.orphaned[0].keys.rk(), "email_z@x");
        assert_eq!(audit.broken.len(), 2);
        assert_eq!(audit.orphans.len(), 1);
        // Two entities with one email: contested, not repaired.
        let (p2, e2) = rows(&[emp("1", "a@x"), emp("2", "a@x")]);
        let audit = super::audit(&spec(), Layout::Intra, "Sales", p2, &[e2[..1].to_vec()]).unwrap();
        assert_eq!(audit.report.contested.len(), 2);
        assert!(audit.broken.is_empty());
    }
}
