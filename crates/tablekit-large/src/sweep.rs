//! The sweeper: deletes payload blobs no entity references.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tablekit_core::Properties;
use tablekit_core::{Error, Keys, Result};
use tracing::Instrument as _;

use crate::reference::{PK_METADATA, Payload, RK_METADATA, decode_grace, decode_key};
use crate::store::LargeEntities;

/// Options of [`LargeEntities::sweep`]: [`SweepOptions::default`] (or
/// [`SweepOptions::immediate`]) and the `with_*` setters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepOptions {
    /// Blobs younger than this, by the service's clock, are left alone: a write may still
    /// come to reference them. `None` (the default) is the store's
    /// [`LargeEntities::grace`]; a shorter period is refused unless `allow_unsafe_grace` is
    /// set. A blob whose writer recorded a longer grace ([`GRACE_METADATA`](crate::GRACE_METADATA))
    /// is left alone for that long.
    pub grace: Option<Duration>,
    /// Report what would be deleted without deleting it.
    pub dry_run: bool,
    /// Accept a `grace` shorter than [`LargeEntities::grace`], and apply it to every blob,
    /// ignoring the grace its writer recorded. **Unsafe while writers of the store run**: the
    /// sweep can delete a blob whose entity write is still in flight, and the entity then
    /// references a missing blob. Only for maintenance windows in which no `upsert` or `insert`
    /// of the store has started for at least the grace period, and for tests.
    pub allow_unsafe_grace: bool,
}

impl SweepOptions {
    /// Sets the grace period: blobs younger than this are left alone.
    #[must_use]
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Sets whether the sweep only reports what it would delete.
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Sets whether a grace shorter than the store's is accepted (unsafe while writers run;
    /// see [`SweepOptions::allow_unsafe_grace`]).
    #[must_use]
    pub fn with_allow_unsafe_grace(mut self, allow: bool) -> Self {
        self.allow_unsafe_grace = allow;
        self
    }

    /// Sweeps blobs of any age, without the grace-period check. **Unsafe while writers of
    /// the store run** (see [`SweepOptions::allow_unsafe_grace`]): for maintenance windows
    /// with every writer stopped, and tests.
    pub fn immediate() -> Self {
        Self {
            grace: Some(Duration::ZERO),
            dry_run: false,
            allow_unsafe_grace: true,
        }
    }
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Blobs listed under the store's prefix.
    pub listed: usize,
    /// Blobs skipped because they are younger than the grace period: the sweep's, or the
    /// longer one their writer recorded (a blob whose recorded grace cannot be read is
    /// counted here too, and never swept).
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
    /// The grace period applied (at least; a blob's writer may have recorded a longer one).
    pub grace: Duration,
    /// The service's clock when it listed the blobs (the listing response's `Date`): ages
    /// are this minus each blob's `Last-Modified`.
    pub service_time: Option<DateTime<Utc>>,
}

impl LargeEntities {
    /// Finds payload blobs that no entity references — left by a write that failed after its
    /// upload, or whose old blob could not be deleted — and deletes those older than the
    /// grace period.
    ///
    /// Each blob names, in its metadata, the entity it was uploaded for; the sweeper reads
    /// that entity (once per entity, however many of its blobs are listed) and deletes the
    /// blob unless the entity references it. A blob's age is the service's clock at the
    /// listing (the response's `Date`) minus the blob's `Last-Modified`, both stamped by the
    /// service, so a wrong clock on this machine cannot make a young blob look old. Past the
    /// store's [`LargeEntities::grace`] — and past the grace its writer recorded in the blob,
    /// when that is longer — no write can still come to reference a blob, so one the entity
    /// does not reference is garbage for good. The settings of this handle play no part: a
    /// sweeper with short timeouts is as safe as one with long ones.
    ///
    /// **Requests:** 1 per 5,000 blobs listed + 1 point read per entity with a blob past the
    /// grace period + 1 delete per orphan; none when the options are refused.
    /// **Consistency:** a blob is deleted only after a read, made once every write that could
    /// reference it has landed, showed it unreferenced.
    ///
    /// # Errors
    /// Before any request: [`Error::InvalidConfig`] when `options.grace` is shorter than
    /// [`LargeEntities::grace`] and `options.allow_unsafe_grace` is not set. Then
    /// transport and service errors of the listing and the reads, and [`Error::Transport`]
    /// when the listing response carries no `Date` (ages cannot be measured); a failed delete
    /// of one orphan is an error too (the next sweep retries it).
    pub async fn sweep(&self, options: SweepOptions) -> Result<SweepReport> {
        let store = self.grace();
        let grace = options.grace.unwrap_or(store);
        if grace < store && !options.allow_unsafe_grace {
            return Err(Error::InvalidConfig {
                part: "SweepOptions::grace".into(),
                reason: format!(
                    "{grace:?} is shorter than this store's grace period of {store:?}: an entity write in flight could still reference a blob that old. Use SweepOptions::immediate() only while no writer runs"
                ),
            });
        }
        let span = tablekit_azure::step_span("blob sweep", self.container.name());
        async {
            let (blobs, service_time) = self.container.list_with_service_time(&self.prefix).await?;
            if service_time.is_none() && !grace.is_zero() {
                return Err(Error::Transport {
                    message: "the blob listing carried no Date: blob ages cannot be measured on the service's clock".into(),
                    source: None,
                });
            }
            let mut report = SweepReport {
                listed: blobs.len(),
                grace,
                service_time,
                ..SweepReport::default()
            };
            let mut references: HashMap<Keys, Reference> = HashMap::new();
            for blob in blobs {
                let applies = if options.allow_unsafe_grace {
                    Some(grace)
                } else {
                    blob_grace(&blob.metadata, grace)
                };
                let old_enough = applies
                    .is_some_and(|grace| past_grace(blob.last_modified, service_time, grace));
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

/// The grace period a blob gets: the sweep's, or the longer one its writer recorded; the
/// sweep's alone when the writer recorded none (a blob written before graces were recorded).
/// `None` when the record is malformed: the blob is then never old enough.
fn blob_grace(
    metadata: &std::collections::BTreeMap<String, String>,
    sweep: Duration,
) -> Option<Duration> {
    match decode_grace(metadata) {
        None => Some(sweep),
        Some(Some(writer)) => Some(sweep.max(writer)),
        Some(None) => None,
    }
}

/// The entity a blob was uploaded for, from its metadata.
fn owner(metadata: &std::collections::BTreeMap<String, String>) -> Option<Keys> {
    let pk = decode_key(metadata.get(PK_METADATA)?)?;
    let rk = decode_key(metadata.get(RK_METADATA)?)?;
    Keys::new(pk, rk).ok()
}

/// Whether a blob stamped `last_modified` is at least `grace` old at `listed_at`, both
/// readings of the service's clock. A blob without a readable `Last-Modified`, or stamped
/// after the listing, is young; with no grace period every other blob is old enough.
fn past_grace(
    last_modified: Option<DateTime<Utc>>,
    listed_at: Option<DateTime<Utc>>,
    grace: Duration,
) -> bool {
    let Some(written) = last_modified else {
        return false;
    };
    grace.is_zero()
        || listed_at.is_some_and(|now| (now - written).to_std().is_ok_and(|age| age >= grace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_measured_on_the_service_clock_whatever_this_machine_says() {
        let grace = Duration::from_secs(60);
        let this_machine = Utc::now();
        for service_offset in [chrono::Duration::days(-1), chrono::Duration::days(1)] {
            let listed_at = this_machine + service_offset;
            let young = listed_at - chrono::Duration::seconds(10);
            let old = listed_at - chrono::Duration::seconds(61);
            assert!(
                !past_grace(Some(young), Some(listed_at), grace),
                "{service_offset}: young"
            );
            assert!(
                past_grace(Some(old), Some(listed_at), grace),
                "{service_offset}: old"
            );
        }
    }

    #[test]
    fn a_blob_gets_the_longer_of_the_sweep_grace_and_its_writer_grace() {
        use crate::reference::GRACE_METADATA;
        let sweep = Duration::from_secs(60);
        let recorded =
            |v: &str| std::collections::BTreeMap::from([(GRACE_METADATA.to_owned(), v.to_owned())]);
        assert_eq!(
            blob_grace(&recorded("3600"), sweep),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(blob_grace(&recorded("10"), sweep), Some(sweep));
        assert_eq!(blob_grace(&Default::default(), sweep), Some(sweep));
        assert_eq!(blob_grace(&recorded("an hour"), sweep), None, "never swept");
    }

    #[test]
    fn unknown_or_later_stamps_are_young_and_no_grace_takes_every_stamped_blob() {
        let listed_at = Utc::now();
        let later = listed_at + chrono::Duration::seconds(5);
        let grace = Duration::from_secs(1);
        assert!(!past_grace(None, Some(listed_at), grace));
        assert!(!past_grace(Some(later), Some(listed_at), grace));
        assert!(!past_grace(Some(listed_at), None, grace));
        assert!(past_grace(Some(later), None, Duration::ZERO));
        assert!(!past_grace(None, None, Duration::ZERO));
    }
}
