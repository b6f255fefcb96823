//! Jobs that follow a write: what a queued job must see on the primary before it may bring
//! the copies in line, and how long it waits for it.
//!
//! A job is enqueued *before* the write it follows (so no acknowledged write is without its
//! job), so a worker can run it before that write has landed — or after the write's client
//! gave up on it, while an attempt the service received is still to be applied. Converging
//! then would copy the old primary, complete the job, and leave the write, once it lands,
//! without one. So every write stamps the primary with a unique write id, and its job carries
//! the id, the primary's ETag before the write and a deadline; a delivery classifies what it
//! reads ([`Followed`]) and, while the write may still land, defers the job (the message
//! reappears later) instead of holding a worker's handler slot.

use std::time::{Duration, Instant};

use tablekit_azure::{Deadline, track_landing};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tablekit_azure::{Queue, Table};
use tablekit_core::Properties;
use tablekit_core::{ETag, Error, ErrorKind, Keys, Result, Stored};

use crate::effects::Effects;

/// The property in which the inter-partition index and [`EventualList`](crate::EventualList)
/// stamp the primary entity with the id of the write that stored it, so the write's queued
/// job can tell whether the write has landed.
///
/// Entity types must not have a field of this name (writing one is refused before any
/// request), and must ignore it when read: serde does for a struct unless it is marked
/// `#[serde(deny_unknown_fields)]`. The stamp is not copied into secondary copies or lists.
pub const WRITE_ID_PROPERTY: &str = "IndexWriteId";

/// The default allowance for clock skew between a writer and the workers running its jobs,
/// added to each job's deadline: 1 minute.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The first deferral of a job whose write has not landed yet; deferrals double up to
/// [`MAX_PAUSE`]. A queue message's visibility is set in whole seconds.
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// The longest deferral while a job waits for its write.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// What a delivery does about the write its job follows.
#[derive(Debug)]
pub(crate) enum Settled {
    /// The write landed or can no longer land: converge on this read of the primary.
    Ready(Option<Stored<Properties>>),
    /// The write may still land: defer the job this long.
    Wait(Duration),
}

/// The write a queued job follows, as the job carries it: part of the queued message's
/// format, hidden and outside semantic versioning.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowedWrite {
    /// The primary's ETag before the write (`None`: it did not exist, the write is an
    /// insert). The write is conditioned on it, and ETags never recur, so once the primary
    /// has another ETag without the write's stamp, the write can no longer land.
    pub previous: Option<ETag>,
    /// The id the write stamps on the primary in [`WRITE_ID_PROPERTY`]; `None` for a
    /// delete, whose effect is the primary being gone.
    pub write_id: Option<String>,
    /// After this instant (by the writer's clock, plus an allowance for skew) a write that
    /// has not landed never will.
    pub deadline: DateTime<Utc>,
}

/// What a read of the primary says about the write a job follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Followed {
    /// The write landed (the primary carries its stamp, or is gone after a delete). The
    /// primary may be newer still; a newer write has its own job.
    Landed,
    /// The write can never land: the ETag it is conditioned on is gone, or the entity an
    /// insert needed absent exists.
    Moot,
    /// The primary is as it was before the write: it may still land.
    Pending,
}

impl FollowedWrite {
    /// Classifies `current`, a read of the primary.
    pub(crate) fn classify(&self, current: Option<&Stored<Properties>>) -> Followed {
        let landed = match (&self.write_id, current) {
            (None, None) => true,
            (Some(id), Some(stored)) => {
                stored.value.get_str(WRITE_ID_PROPERTY).ok().flatten() == Some(id)
            }
            _ => false,
        };
        if landed {
            return Followed::Landed;
        }
        match (&self.previous, current) {
            (Some(previous), Some(stored)) if stored.etag == *previous => Followed::Pending,
            (None, None) => Followed::Pending,
            // The condition is gone for good (ETags never recur), or an insert met an entity
            // it did not write.
            _ => Followed::Moot,
        }
    }

    /// Reads the primary at `keys` once and says what the delivery does: converge when the
    /// write has landed or can no longer land; otherwise, before the deadline, wait — the
    /// caller defers the job for the returned time (1 s doubling to 30 s with `deferrals`,
    /// never past the deadline) — and after it, fail. Past the deadline a write that has not
    /// landed never will: no attempt of it can be sent that would land later.
    ///
    /// Requests: 1 read.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the job (a permanent failure: the worker does not
    /// re-run it at once, and moves the job to the poison queue after its last delivery)
    /// when the write did not land by the deadline — an insert finding no entity included:
    /// the insert never landed, or it landed and the entity was deleted since, and the two
    /// cannot be told apart; transport and service errors of the read.
    pub(crate) async fn settle<E: Effects>(
        &self,
        fx: &E,
        table: &Table,
        keys: &Keys,
        deferrals: u64,
    ) -> Result<Settled> {
        let read_at = Utc::now();
        let current = fx.get(table, keys).await?;
        match self.classify(current.as_ref()) {
            Followed::Landed | Followed::Moot => return Ok(Settled::Ready(current)),
            Followed::Pending => {}
        }
        let pause = FIRST_PAUSE
            .saturating_mul(1u32 << deferrals.min(16))
            .min(MAX_PAUSE);
        match (self.deadline - Utc::now()).to_std() {
            Ok(left) => {
                tracing::debug!(target: "tablekit", table = table.name(), ?pause, "the write this job follows has not landed yet; deferring");
                // Just past the deadline, so that the next delivery decides for good.
                Ok(Settled::Wait(
                    pause.min(left + FIRST_PAUSE).max(FIRST_PAUSE),
                ))
            }
            // The deadline passed during the read: a read begun after it decides.
            Err(_) if read_at < self.deadline => Ok(Settled::Wait(FIRST_PAUSE)),
            Err(_) => Err(self.did_not_land(table, keys)),
        }
    }

    fn did_not_land(&self, table: &Table, keys: &Keys) -> Error {
        Error::invalid_argument(
            "job",
            format!(
                "the write this job follows did not land by {} (entity {keys} in `{}`): its \
                 writer failed, gave up or stopped — or, for an insert, the entity was deleted \
                 since — so the job leaves the index as it is. Re-queuing it is always safe: \
                 if the write is there by then it converges, otherwise it returns here",
                self.deadline.to_rfc3339(),
                table.name()
            ),
        )
    }
}

/// A write about to be made: the [`FollowedWrite`] its job carries, and the deadline it
/// must land by.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) write: FollowedWrite,
    /// The job's deadline on this machine's monotonic clock, without the skew allowance.
    landing: Deadline,
}

impl Pending {
    /// A write to `table` whose job goes to `jobs`, conditioned on `previous`, stamping the
    /// primary (`stamp`) or deleting it. The deadline is now + how long the enqueue may take
    /// (by `jobs`' account settings) + how long the write may take to land once sent (by
    /// `table`'s) + `skew`; the write itself is bound to land by the same moment without the
    /// skew, on this machine's clock.
    pub(crate) fn new(
        jobs: &Queue,
        table: &Table,
        previous: Option<ETag>,
        stamp: bool,
        skew: Duration,
    ) -> Self {
        let enqueue_within = jobs.account().settings().write_settles_within();
        let lands_within = table.account().settings().write_settles_within();
        let landing = enqueue_within.saturating_add(lands_within);
        let deadline = chrono::Duration::from_std(landing.saturating_add(skew))
            .ok()
            .and_then(|d| Utc::now().checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        Self {
            write: FollowedWrite {
                previous,
                write_id: stamp.then(|| uuid::Uuid::new_v4().to_string()),
                deadline,
            },
            landing: Deadline::at(Instant::now() + landing),
        }
    }

    /// `props` with the write id stamped in.
    ///
    /// # Errors
    /// [`Error::Encode`] when the entity has a property named [`WRITE_ID_PROPERTY`].
    pub(crate) fn stamp(&self, mut props: Properties) -> Result<Properties> {
        if props.contains(WRITE_ID_PROPERTY) {
            return Err(Error::encode(
                WRITE_ID_PROPERTY,
                "reserved for the index's write id: rename the entity's field",
            ));
        }
        if let Some(id) = &self.write.write_id {
            props.insert(WRITE_ID_PROPERTY, id.clone());
        }
        Ok(props)
    }

    /// Runs `write` (after the enqueue), which stores the primary at `keys` of `table`
    /// stamped with this write's id, bound to the job's deadline (see [`land`](Self::land)),
    /// and settles an outcome its attempts left open. Returns the primary's new ETag.
    ///
    /// # Errors
    /// As [`land`](Self::land).
    pub(crate) async fn store<F>(&self, table: &Table, keys: &Keys, write: F) -> Result<ETag>
    where
        F: std::future::Future<Output = Result<ETag>>,
    {
        let landed = self
            .land(table, keys, async { write.await.map(Some) })
            .await?;
        Ok(landed.unwrap_or_else(|| ETag::new("")))
    }

    /// Runs `write`, which deletes the primary at `keys` of `table`, as
    /// [`store`](Self::store) does.
    ///
    /// # Errors
    /// As [`land`](Self::land).
    pub(crate) async fn remove<F>(&self, table: &Table, keys: &Keys, write: F) -> Result<()>
    where
        F: std::future::Future<Output = Result<()>>,
    {
        self.land(table, keys, async { write.await.map(|()| None) })
            .await
            .map(drop)
    }

    /// Runs the write of the primary at `keys` of `table` (`write`, after the enqueue) bound
    /// to the job's deadline: an attempt that could land after the job may have decided the
    /// write never will is not sent ([`Error::DeadlineExceeded`]) — however long the
    /// enqueue, waits for throughput budget or for a token took. When the write fails after
    /// an attempt that got no answer (its response lost, a timeout), its outcome is settled
    /// as [`Table::submit`](tablekit_azure::Table::submit) settles a transaction's: once no
    /// attempt can land any more, the primary is read — carrying this write's stamp (gone,
    /// for a delete), the write is stored; otherwise the error stands, and the write is not
    /// stored and never will be. So `Ok` ⇒ stored, [`Error::Indeterminate`] ⇒ unknown, any
    /// other error ⇒ not stored. Returns the primary's new ETag (none after a delete).
    ///
    /// Requests: the write's; when its outcome was left open, 1 read.
    ///
    /// # Errors
    /// The write's; [`Error::Indeterminate`] when its outcome was left open and the read
    /// failed.
    async fn land<F>(&self, table: &Table, keys: &Keys, write: F) -> Result<Option<ETag>>
    where
        F: std::future::Future<Output = Result<Option<ETag>>>,
    {
        let (written, lands_by) = track_landing(self.landing.scope(write)).await;
        let (error, lands_by) = match (written, lands_by) {
            (Ok(etag), _) => return Ok(etag),
            // The last attempt's answer settles it (a 409, 412 or 404 after an earlier
            // attempt was already checked against what is stored), or nothing is open.
            (Err(e), Some(lands_by)) if open(&e) => (e, lands_by),
            (Err(e), _) => return Err(e),
        };
        tokio::time::sleep_until(lands_by.into()).await;
        match table.get::<Properties>(keys).await {
            Ok(current) => match self.write.classify(current.as_ref()) {
                Followed::Landed => Ok(current.map(|s| s.etag)),
                Followed::Moot | Followed::Pending => Err(error),
            },
            Err(read) => Err(Error::Indeterminate {
                target: tablekit_core::Target::entity(table.name(), keys.clone()),
                reason: format!(
                    "the write failed after an attempt that may have been applied ({error}), \
                     and the entity could not be read back ({read})"
                ),
            }),
        }
    }
}

/// Whether a write's error leaves its outcome open: no answer (a timeout, a broken
/// connection), a 5xx, or an attempt refused unsent after earlier ones that got no answer.
fn open(error: &Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Transport
            | ErrorKind::Throttled
            | ErrorKind::Service
            | ErrorKind::DeadlineExceeded
            | ErrorKind::Indeterminate
    )
}

/// Deletes the entity at `keys` of `table`, its job queued first: reads it (refusing another
/// ETag than `expected`, if given), lets `enqueue` put the job for the entity read and return
/// the pending delete, then deletes it under the ETag read, bound to the job's deadline. A lost race starts again from the
/// read, unless the caller gave the ETag: then it is the answer. `false` when the entity is
/// gone; no job is queued then.
///
/// Requests: 1 read, the enqueue, 1 delete; again per lost race. 1 when the entity is gone.
pub(crate) async fn delete_followed<F, Fut>(
    table: &Table,
    keys: &Keys,
    expected: Option<&ETag>,
    mut enqueue: F,
) -> Result<bool>
where
    F: FnMut(Stored<Properties>) -> Fut,
    Fut: std::future::Future<Output = Result<Pending>>,
{
    let mut conflicts = table.account().conflict_loop();
    loop {
        let Some(current) = table.get::<Properties>(keys).await? else {
            return Ok(false);
        };
        if expected.is_some_and(|etag| *etag != current.etag) {
            return Err(Error::PreconditionFailed {
                target: tablekit_core::Target::entity(table.name(), keys.clone()),
            });
        }
        let if_match = current.if_match();
        let pending = enqueue(current).await?;
        match pending
            .remove(table, keys, table.delete(keys, if_match))
            .await
        {
            Ok(()) => return Ok(true),
            Err(e) if expected.is_some() => return Err(e),
            Err(e) => conflicts.retry(e.not_found_as_conflict()).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(etag: &str, stamp: Option<&str>) -> Stored<Properties> {
        let mut value = Properties::new();
        if let Some(id) = stamp {
            value.insert(WRITE_ID_PROPERTY, id);
        }
        Stored {
            keys: Keys::new("empid_Sales", "000223").unwrap(),
            etag: ETag::new(etag),
            timestamp: None,
            value,
        }
    }

    fn write(previous: Option<&str>, id: Option<&str>) -> FollowedWrite {
        FollowedWrite {
            previous: previous.map(ETag::new),
            write_id: id.map(str::to_owned),
            deadline: Utc::now(),
        }
    }

    #[test]
    fn a_read_of_the_primary_says_landed_moot_or_pending() {
        use Followed::*;
        let put = write(Some("e1"), Some("w1"));
        assert_eq!(put.classify(Some(&stored("e2", Some("w1")))), Landed);
        assert_eq!(put.classify(Some(&stored("e1", Some("w0")))), Pending);
        assert_eq!(put.classify(Some(&stored("e3", Some("w2")))), Moot, "newer");
        assert_eq!(put.classify(Some(&stored("e3", None))), Moot, "outside");
        assert_eq!(put.classify(None), Moot, "deleted since");

        let insert = write(None, Some("w1"));
        assert_eq!(insert.classify(None), Pending);
        assert_eq!(insert.classify(Some(&stored("e1", Some("w1")))), Landed);
        assert_eq!(insert.classify(Some(&stored("e1", Some("w9")))), Moot);

        let delete = write(Some("e1"), None);
        assert_eq!(delete.classify(None), Landed);
        assert_eq!(delete.classify(Some(&stored("e1", Some("w0")))), Pending);
        assert_eq!(delete.classify(Some(&stored("e2", Some("w2")))), Moot);
    }

    #[test]
    fn a_stamp_is_refused_where_the_entity_has_the_property() {
        let queue = tablekit_azure::Account::emulator().queue("jobs").unwrap();
        let table = queue.account().table("Employees").unwrap();
        let skew = Duration::from_secs(7);
        let before = Utc::now();
        let pending = Pending::new(&queue, &table, None, true, skew);
        let after = Utc::now();
        let id = pending.write.write_id.clone().unwrap();
        let stamped = pending.stamp(Properties::new().with("Age", 34)).unwrap();
        assert_eq!(
            stamped.get_str(WRITE_ID_PROPERTY).unwrap(),
            Some(id.as_str())
        );
        let e = pending
            .stamp(Properties::new().with(WRITE_ID_PROPERTY, "mine"))
            .unwrap_err();
        assert!(e.to_string().contains(WRITE_ID_PROPERTY), "{e}");
        // The enqueue and the write each settle within the settings' bound, then the skew.
        let allowance = chrono::Duration::from_std(
            table.account().settings().write_settles_within() * 2 + skew,
        )
        .unwrap();
        let deadline = pending.write.deadline;
        assert!(before + allowance <= deadline && deadline <= after + allowance);
        let delete = Pending::new(&queue, &table, Some(ETag::new("e1")), false, Duration::ZERO);
        assert!(delete.write.write_id.is_none());
        // The write lands by the deadline without the skew, on the monotonic clock.
        let landing = delete.landing.remaining();
        let bound = table.account().settings().write_settles_within() * 2;
        assert!(
            landing <= bound && landing > bound - Duration::from_secs(5),
            "{landing:?}"
        );
    }
}
