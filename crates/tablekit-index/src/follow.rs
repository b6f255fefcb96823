//! Jobs that follow a write: what a queued job must see on the primary before it may bring
//! the copies in line, and how long it waits for it.
//!
//! A job is enqueued *before* the write it follows (so no acknowledged write is without its
//! job), so a worker can run it before that write has landed — or after the write's client
//! gave up on it, while an attempt the service received is still to be applied. Converging
//! then would copy the old primary, complete the job, and leave the write, once it lands,
//! without one. So every write stamps the primary with a unique write id, and its job carries
//! the id, the primary's ETag before the write and a deadline; a delivery classifies what it
//! reads ([`Followed`]) and waits, within the delivery, while the write may still land.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tablekit_azure::{Queue, Table};
use tablekit_core::edm::Properties;
use tablekit_core::{ETag, Error, Keys, Result, Stored};

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

/// The first pause between two reads of a primary whose write has not landed yet; pauses
/// double up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two reads while a job waits for its write.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// The write a queued job follows, as the job carries it.
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
            (Some(id), Some(stored)) => stored.value.get_str(WRITE_ID_PROPERTY) == Some(id),
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

    /// Reads the primary at `keys` until the write has landed or can no longer land, and
    /// returns that read. While the primary is still as before the write, it waits within
    /// the delivery — pauses doubling from 100 ms to 5 s, never past the deadline — and reads
    /// again; a read begun after the deadline that still finds it so fails the attempt —
    /// except for an insert finding no entity, which is returned: past the deadline, the
    /// insert either never landed or was deleted since, and there is nothing to copy.
    ///
    /// Requests: 1 read, plus 1 per pause while waiting.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the job (a permanent failure: the worker does not re-run it at once,
    /// and moves the job to the poison queue after its last delivery) when an update or a
    /// delete did not land by the deadline; transport and service errors of the reads.
    pub(crate) async fn settle<E: Effects>(
        &self,
        fx: &E,
        table: &Table,
        keys: &Keys,
    ) -> Result<Option<Stored<Properties>>> {
        let mut pause = FIRST_PAUSE;
        loop {
            let read_at = Utc::now();
            let current = fx.get(table, keys).await?;
            match self.classify(current.as_ref()) {
                Followed::Landed | Followed::Moot => return Ok(current),
                Followed::Pending => {}
            }
            let Ok(left) = (self.deadline - Utc::now()).to_std() else {
                if read_at < self.deadline {
                    // The deadline passed during the read: one more, begun after it.
                    continue;
                }
                if self.previous.is_none() && current.is_none() {
                    // Absence recurs: an insert that finds no entity after its deadline either
                    // never landed or landed and was deleted since (the delete has its own
                    // job). Its effect is gone either way, and there is nothing to copy.
                    return Ok(current);
                }
                return Err(self.did_not_land(table, keys));
            };
            tracing::debug!(target: "tablekit", table = table.name(), %keys, ?pause, "the write this job follows has not landed yet; waiting");
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    fn did_not_land(&self, table: &Table, keys: &Keys) -> Error {
        Error::invalid_argument(
            "job",
            format!(
                "the write this job follows did not land by {} (entity {keys} in `{}`): its \
                 writer failed or gave up, so the job leaves the copies as they are, matching \
                 the primary; discard it, or requeue it if that write may still land",
                self.deadline.to_rfc3339(),
                table.name()
            ),
        )
    }
}

/// A write about to be made: the [`FollowedWrite`] its job carries and the bound on how
/// long its job's enqueue may take.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) write: FollowedWrite,
    started: Instant,
    enqueue_within: Duration,
}

impl Pending {
    /// A write to `table` whose job goes to `jobs`, conditioned on `previous`, stamping the
    /// primary (`stamp`) or deleting it. The deadline is now + how long the enqueue may take
    /// (by `jobs`' account settings) + how long the write may take to land once sent (by
    /// `table`'s) + `skew`.
    pub(crate) fn new(
        jobs: &Queue,
        table: &Table,
        previous: Option<ETag>,
        stamp: bool,
        skew: Duration,
    ) -> Self {
        let enqueue_within = jobs.account().settings().write_settles_within();
        let lands_within = table.account().settings().write_settles_within();
        let allowance = enqueue_within
            .saturating_add(lands_within)
            .saturating_add(skew);
        let deadline = chrono::Duration::from_std(allowance)
            .ok()
            .and_then(|d| Utc::now().checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        Self {
            write: FollowedWrite {
                previous,
                write_id: stamp.then(|| uuid::Uuid::new_v4().to_string()),
                deadline,
            },
            started: Instant::now(),
            enqueue_within,
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

    /// Checks, after the enqueue and before the write is sent, that the enqueue took no
    /// longer than the deadline allows for it — else the write could land after its job gave
    /// up on it (only a task starved of the runtime for that long gets here).
    ///
    /// # Errors
    /// [`Error::Transport`] (the write is not sent; retry the operation).
    pub(crate) fn in_time(&self) -> Result<()> {
        if self.started.elapsed() <= self.enqueue_within {
            return Ok(());
        }
        Err(Error::Transport {
            message: format!(
                "enqueueing the job took longer than its account's settings allow ({:?}); the \
                 write was not sent, so that it cannot land after its job's deadline",
                self.enqueue_within
            ),
            source: None,
        })
    }
}

/// Deletes the entity at `keys` of `table`, its job queued first: reads it (refusing another
/// ETag than `expected`, if given), lets `enqueue` put the job for the entity read and return
/// the pending delete, then deletes it under the ETag read. A lost race starts again from the
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
        enqueue(current).await?.in_time()?;
        match table.delete(keys, if_match).await {
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
        assert_eq!(stamped.get_str(WRITE_ID_PROPERTY), Some(id.as_str()));
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
        assert!(delete.in_time().is_ok());
    }
}
