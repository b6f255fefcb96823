//! The sweeper: deletes payload blobs no entity references.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use tablekit_core::edm::Properties;
use tablekit_core::{Keys, Result};
use tracing::Instrument as _;

use crate::reference::{PK_METADATA, Payload, RK_METADATA, decode_key};
use crate::store::LargeEntities;

/// Options of [`LargeEntities::sweep`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepOptions {
    /// Blobs younger than this are left alone: they may belong to a write in progress. Must
    /// exceed the store's commit deadline plus any clock difference between this machine
    /// and the service. Default 1 hour.
    pub grace: Duration,
    /// Report what would be deleted without deleting it.
    pub dry_run: bool,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(3600),
            dry_run: false,
        }
    }
}

impl SweepOptions {
    /// Sweep blobs of any age. Only safe when no write to the store is in progress (tests,
    /// maintenance windows).
    pub fn immediate() -> Self {
        Self {
            grace: Duration::ZERO,
            dry_run: false,
        }
    }
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Blobs listed under the store's prefix.
    pub listed: usize,
    /// Blobs skipped because they are younger than the grace period.
    pub young: usize,
    /// Blobs skipped because their metadata names no entity (not written by this store).
    pub foreign: usize,
    /// Blobs the entity they belong to references.
    pub referenced: usize,
    /// Blobs kept because their entity exists but its reference could not be read (a
    /// malformed entity is never taken as "references nothing").
    pub undecided: usize,
    /// Unreferenced blobs deleted (or, in a dry run, that would be).
    pub deleted: Vec<String>,
    /// Entities read to decide.
    pub entities_read: usize,
}

impl LargeEntities {
    /// Finds payload blobs that no entity references — left by a write that failed after its
    /// upload, or whose old blob could not be deleted — and deletes those older than the
    /// grace period.
    ///
    /// Each blob names, in its metadata, the entity it was uploaded for; the sweeper reads
    /// that entity (once per entity, however many of its blobs are listed) and deletes the
    /// blob unless the entity references it. A blob that is unreferenced and past the grace
    /// period can never become referenced: writers only commit references to blobs they
    /// uploaded within their commit deadline.
    ///
    /// **Requests:** 1 per 5,000 blobs listed + 1 point read per entity with a blob past the
    /// grace period + 1 delete per orphan. **Consistency:** a blob is deleted only after a
    /// read showed it unreferenced.
    ///
    /// # Errors
    /// Transport and service errors of the listing and the reads; a failed delete of one
    /// orphan is an error too (the next sweep retries it).
    pub async fn sweep(&self, options: &SweepOptions) -> Result<SweepReport> {
        let span = tracing::debug_span!("tablekit.large.sweep", container = %self.container.name(), prefix = %self.prefix);
        async {
            let blobs = self.container.list(&self.prefix).await?;
            let now = Utc::now();
            let mut report = SweepReport {
                listed: blobs.len(),
                ..SweepReport::default()
            };
            let mut references: HashMap<Keys, Reference> = HashMap::new();
            for blob in blobs {
                let old_enough = blob
                    .last_modified
                    .is_some_and(|at| (now - at).to_std().is_ok_and(|age| age >= options.grace));
                if !old_enough {
                    report.young += 1;
                    continue;
                }
                let Some(keys) = owner(&blob.metadata) else {
                    report.foreign += 1;
                    continue;
                };
                if !references.contains_key(&keys) {
                    report.entities_read += 1;
                    let current = self.current_blob(&keys).await?;
                    references.insert(keys.clone(), current);
                }
                match &references[&keys] {
                    Reference::Unreadable => {
                        report.undecided += 1;
                        continue;
                    }
                    Reference::Blob(name) if *name == blob.name => {
                        report.referenced += 1;
                        continue;
                    }
                    Reference::Blob(_) | Reference::None => {}
                }
                if !options.dry_run {
                    self.container.delete_blob_if_exists(&blob.name).await?;
                }
                report.deleted.push(blob.name);
            }
            tracing::debug!(target: "tablekit", ?report, "sweep done");
            Ok(report)
        }
        .instrument(span)
        .await
    }

    /// What the entity at `keys` references now.
    async fn current_blob(&self, keys: &Keys) -> Result<Reference> {
        let Some(mut stored) = self.table.get::<Properties>(keys).await? else {
            return Ok(Reference::None);
        };
        Ok(match self.names.take(keys, &mut stored.value) {
            Ok(Payload::Blob(r)) => Reference::Blob(r.name),
            Ok(Payload::Inline(_)) => Reference::None,
            Err(_) => Reference::Unreadable,
        })
    }
}

/// What an entity references, as far as the sweeper can tell.
enum Reference {
    /// This blob.
    Blob(String),
    /// No blob (absent entity, or an inline payload).
    None,
    /// Unknown: the entity exists but its reference is malformed.
    Unreadable,
}

/// The entity a blob was uploaded for, from its metadata.
fn owner(metadata: &std::collections::BTreeMap<String, String>) -> Option<Keys> {
    let pk = decode_key(metadata.get(PK_METADATA)?)?;
    let rk = decode_key(metadata.get(RK_METADATA)?)?;
    Keys::new(pk, rk).ok()
}
