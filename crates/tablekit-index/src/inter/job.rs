//! [`CopyJob`]: bringing one entity's copies in line with its primary copy, idempotently.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use tablekit_core::Properties;
use tablekit_core::edm::from_properties;
use tablekit_core::{Entity, Error, Result, Stored, Target};
use tablekit_eventual::{Handler, Job, Steps};

use tablekit_azure::track_landing;

use crate::effects::{Effects, check_index};
use crate::follow::{FollowedWrite, Settled};
use crate::read::Placement;
use crate::spec::Layout;

/// How many times a job re-reads and re-writes when the primary copy keeps changing under it
/// before it gives up (the queue brings it back later).
const ROUNDS: usize = 4;

/// The queued job of an [`InterPartitionIndex`](crate::InterPartitionIndex): make the copies
/// of one entity match its primary copy as it is when the job runs, once the write the job
/// follows has landed (or can no longer land).
///
/// The job never carries the entity's data, only where it is, which copies it held before
/// the write and how to recognise the write, so it can run any number of times, late, or out
/// of order: every run reads the primary, waits while the write may still land, upserts the
/// copies the primary calls for, and deletes the stale ones that differ.
///
/// Applications name the type (a [`JobQueue`](tablekit_eventual::JobQueue) or
/// [`Worker`](tablekit_eventual::Worker) of it) but never build or read one: its fields are
/// the format of the queued message, hidden and outside semantic versioning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyJob {
    /// The index (`<table>/<primary copy>`): a handler refuses jobs of another index.
    #[doc(hidden)]
    pub index: String,
    /// The entity's partition (`Sales`).
    #[doc(hidden)]
    pub partition: String,
    /// Its primary value (`000223`).
    #[doc(hidden)]
    pub id: String,
    /// The copies it held before the write, as (copy name, value): removed unless the
    /// primary still calls for them.
    #[doc(hidden)]
    pub stale: Vec<(String, String)>,
    /// The copies the write gives it, as (copy name, value): removed too unless the primary
    /// still calls for them — a delivery cut off after writing one, run again once the
    /// primary has changed, must not leave it behind. Empty in jobs enqueued before it was
    /// added (version 1).
    #[doc(hidden)]
    #[serde(default)]
    pub fresh: Vec<(String, String)>,
    /// The write the job follows: the job converges only once the primary shows it landed or
    /// can no longer land, and fails (to end in the poison queue) if an update or a delete
    /// is still pending at its deadline.
    #[doc(hidden)]
    pub write: FollowedWrite,
}

impl Job for CopyJob {
    const KIND: &'static str = "tablekit-index.copies";
    /// 2: the job carries `fresh`, and a delivery defers instead of waiting.
    const VERSION: u32 = 2;
}

/// What a job needs to run: the index's name, and where its copies live.
pub(crate) struct Context<T> {
    pub(crate) name: String,
    pub(crate) placement: Placement<T>,
}

fn etag_of<V>(stored: Option<&Stored<V>>) -> Option<&tablekit_core::ETag> {
    stored.map(|s| &s.etag)
}

impl<T: Serialize + DeserializeOwned + Send + Sync> Context<T> {
    /// Makes the copies of entity `id` of `partition` match its primary, `current` being a
    /// read of the primary the caller just made; `stale` are the copies it held, or may hold,
    /// that the primary may no longer call for (see the job's `stale` and `fresh`).
    ///
    /// The copy writes are unconditional, so each round waits, before it reads the primary
    /// again, until none of them can still land ([`track_landing`]): a copy write held in the
    /// network cannot land after the round that checks it, undoing a later job's work.
    ///
    /// Requests: 1 more read of the primary, one upsert per secondary copy, one delete per
    /// stale copy; again, with a first read, per round while the primary keeps changing.
    pub(crate) async fn converge<E: Effects>(
        &self,
        fx: &E,
        partition: &str,
        id: &str,
        stale_copies: &[(String, String)],
        mut current: Option<Stored<Properties>>,
    ) -> Result<()> {
        let spec = &self.placement.spec;
        let primary = spec.copy_keys(Layout::Inter, 0, partition, id)?;
        let mut stale: Vec<(usize, String)> = Vec::new();
        for (name, value) in stale_copies {
            match spec.position_named(name) {
                Some(i) if i > 0 => {
                    if !stale.contains(&(i, value.clone())) {
                        stale.push((i, value.clone()));
                    }
                }
                _ => {
                    tracing::warn!(target: "tablekit", index = %self.name, copy = %name, "stale copy of an undeclared index ignored")
                }
            }
        }
        for round in 0..ROUNDS {
            if round > 0 {
                current = fx.get(&self.placement.tables[0], &primary).await?;
            }
            let desired = match &current {
                Some(s) => Some(spec.family(Layout::Inter, &from_properties::<T>(&s.value)?)?),
                None => None,
            };
            let writes = async {
                if let Some(family) = &desired {
                    for (i, row) in family.copies.iter().enumerate().skip(1) {
                        let entity = Entity::new(row.keys.clone(), row.props.clone());
                        fx.upsert_replace(&self.placement.tables[i], &entity)
                            .await?;
                    }
                }
                for (i, value) in &stale {
                    if desired
                        .as_ref()
                        .is_some_and(|f| f.copies[*i].value == *value)
                    {
                        continue;
                    }
                    let keys = spec.copy_keys(Layout::Inter, *i, partition, value)?;
                    fx.delete_if_exists(&self.placement.tables[*i], &keys)
                        .await?;
                }
                Ok::<_, Error>(())
            };
            let (written, lands_by) = track_landing(writes).await;
            written?;
            if let Some(lands_by) = lands_by {
                tokio::time::sleep_until(lands_by.into()).await;
            }
            let after = fx.get(&self.placement.tables[0], &primary).await?;
            if etag_of(after.as_ref()) == etag_of(current.as_ref()) {
                return Ok(());
            }
            // The primary changed while the copies were written: what was just written may
            // be stale now, so the next round removes it unless still called for.
            if let Some(family) = desired {
                for (i, row) in family.copies.into_iter().enumerate().skip(1) {
                    if !stale.contains(&(i, row.value.clone())) {
                        stale.push((i, row.value));
                    }
                }
            }
        }
        Err(Error::Indeterminate {
            target: Target::entity(self.placement.tables[0].name(), primary),
            reason: format!("the primary copy changed during {ROUNDS} rounds; the job runs again"),
        })
    }
}

/// Runs [`CopyJob`]s for one [`InterPartitionIndex`](crate::InterPartitionIndex): give it to
/// a [`tablekit_eventual::Worker`] (or use
/// [`InterPartitionIndex::worker`](crate::InterPartitionIndex::worker)).
pub struct CopyHandler<T> {
    pub(crate) context: Arc<Context<T>>,
}

impl<T> Clone for CopyHandler<T> {
    fn clone(&self) -> Self {
        Self {
            context: Arc::clone(&self.context),
        }
    }
}

impl<T> fmt::Debug for CopyHandler<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyHandler")
            .field("index", &self.context.name)
            .finish_non_exhaustive()
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Handler<CopyJob> for CopyHandler<T> {
    /// Makes the job's entity's copies match its primary copy, once the write the job
    /// follows has landed or can no longer land.
    ///
    /// A delivery reads the primary and classifies it: it carries the write's stamp
    /// ([`WRITE_ID_PROPERTY`](crate::WRITE_ID_PROPERTY)), or is gone after a delete — the
    /// write landed; it has another ETag than before the write (or, for an insert, exists
    /// without the stamp) — the write can never land; either way the copies are made to match
    /// the primary as it is now. Otherwise the primary is still as before the write, and the
    /// delivery defers the job ([`Steps::defer`]: the message reappears after 1 s, doubling
    /// to 30 s) without holding a handler slot, until the write shows or the job's
    /// deadline has passed.
    ///
    /// **Requests:** 2 point reads of the primary, 1 upsert per secondary copy, 1 delete per
    /// stale copy; a deferred delivery, 1 read (and the worker's 1 queue update).
    ///
    /// **Errors:** [`Error::Decode`] for a job of another index or a primary that does
    /// not fit `T`, and — permanent, so the job ends in the poison queue after its last
    /// delivery, each delivery checking again — when the write did not land by the job's
    /// deadline (for an insert: no entity found then); [`Error::Indeterminate`] when the
    /// primary keeps changing (the worker runs it again).
    async fn handle(&self, job: CopyJob, steps: &Steps) -> Result<()> {
        // The index job of one write: its reads and writes nest under this span, which
        // names the table, never the keys.
        let span = tablekit_azure::step_span("index job", self.context.placement.tables[0].name());
        let job = async move {
            check_index(&job.index, &self.context.name)?;
            let context = &self.context;
            let primary =
                context
                    .placement
                    .spec
                    .copy_keys(Layout::Inter, 0, &job.partition, &job.id)?;
            // Each step's future lives on the heap: together they overflowed a 2 MiB
            // worker stack in debug builds.
            let settled = Box::pin(job.write.settle(
                steps,
                &context.placement.tables[0],
                &primary,
                steps.deferrals(),
            ))
            .await?;
            let current = match settled {
                Settled::Ready(current) => current,
                Settled::Wait(delay) => return steps.defer(delay),
            };
            let mut stale = job.stale.clone();
            stale.extend(job.fresh.iter().cloned());
            Box::pin(context.converge(steps, &job.partition, &job.id, &stale, current)).await
        };
        tracing::Instrument::instrument(Box::pin(job), span).await
    }
}
