//! [`JobQueue`]: a typed queue of jobs and its poison queue.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use tablekit_azure::{MessageTtl, Queue, SendOptions};
use tablekit_core::Result;

use crate::job::{Job, encode};
use crate::poison::{PoisonRecord, Poisoned};

/// The suffix of a job queue's poison queue.
pub const POISON_SUFFIX: &str = "-poison";

/// The poison queue's name for `name`: `<name>-poison`, with `name` cut so the result stays
/// within the 63-character limit.
pub(crate) fn poison_name(name: &str) -> String {
    let keep = 63 - POISON_SUFFIX.len();
    let base = if name.len() > keep {
        name[..keep].trim_end_matches('-')
    } else {
        name
    };
    format!("{base}{POISON_SUFFIX}")
}

/// A queue of jobs of type `J`, and its poison queue (`<name>-poison`) where messages that
/// keep failing are moved with their payload intact. Cheap to clone.
///
/// | Operation | Requests |
/// |-----------|----------|
/// | [`create`](JobQueue::create), [`delete_queues`](JobQueue::delete_queues) | 2 |
/// | [`enqueue`](JobQueue::enqueue), [`enqueue_after`](JobQueue::enqueue_after) | 1 |
/// | [`approximate_len`](JobQueue::approximate_len) | 1 |
/// | [`peek_poisoned`](JobQueue::peek_poisoned), [`take_poisoned`](JobQueue::take_poisoned) | 1 |
/// | [`requeue`](JobQueue::requeue) | 2 |
/// | [`discard`](JobQueue::discard) | 1 |
pub struct JobQueue<J> {
    queue: Queue,
    poison: Queue,
    job: PhantomData<fn() -> J>,
}

impl<J> Clone for JobQueue<J> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            poison: self.poison.clone(),
            job: PhantomData,
        }
    }
}

impl<J> fmt::Debug for JobQueue<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobQueue")
            .field("queue", &self.queue.name())
            .field("poison", &self.poison.name())
            .finish()
    }
}

impl<J> JobQueue<J> {
    /// The queue jobs are sent to.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The poison queue.
    pub fn poison(&self) -> &Queue {
        &self.poison
    }
}

impl<J: Job> JobQueue<J> {
    /// Jobs on `queue`; its poison queue is `<name>-poison` on the same account (names longer
    /// than 56 characters are cut first, so two long names sharing their first 56 characters
    /// would share a poison queue: name another with [`JobQueue::with_poison`] then). No
    /// request is sent.
    ///
    /// # Examples
    /// ```no_run
    /// use serde::{Deserialize, Serialize};
    /// use tablekit_azure::Account;
    /// use tablekit_eventual::{Job, JobQueue};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct ArchiveEmployee {
    ///     department: String,
    ///     employee_id: String,
    /// }
    ///
    /// impl Job for ArchiveEmployee {
    ///     const KIND: &'static str = "archive-employee";
    /// }
    ///
    /// # async fn run() -> tablekit_core::Result<()> {
    /// let jobs: JobQueue<ArchiveEmployee> = JobQueue::new(Account::emulator().queue("archive-jobs")?);
    /// jobs.create().await?; // 2 requests: archive-jobs, archive-jobs-poison
    /// let job = ArchiveEmployee { department: "Sales".into(), employee_id: "000456".into() };
    /// jobs.enqueue(&job).await?; // 1 request; a worker runs it at least once
    /// # Ok(()) }
    /// ```
    pub fn new(queue: Queue) -> Self {
        let name = poison_name(queue.name());
        #[allow(clippy::expect_used)]
        // A valid queue name, cut at most to 56 characters without a trailing hyphen, plus
        // `-poison`, is a valid queue name.
        let poison = queue
            .account()
            .queue(&name)
            .expect("the poison name of a valid queue name is valid");
        Self {
            queue,
            poison,
            job: PhantomData,
        }
    }

    /// These jobs with `poison` as their poison queue (any queue, on any account) instead of
    /// `<name>-poison`. No request is sent.
    #[must_use]
    pub fn with_poison(mut self, poison: Queue) -> Self {
        self.poison = poison;
        self
    }

    /// Creates the queue and its poison queue; succeeds if they exist.
    ///
    /// **Requests: 2.**
    ///
    /// **Errors:** transport and service errors (e.g. a queue being deleted).
    pub async fn create(&self) -> Result<()> {
        self.queue.create().await?;
        self.poison.create().await
    }

    /// Deletes the queue and its poison queue, with every message on them.
    ///
    /// **Requests: 2.**
    ///
    /// **Errors:** [`tablekit_core::Error::NotFound`] if the queue does not exist (the
    /// poison queue is then not deleted).
    pub async fn delete_queues(&self) -> Result<()> {
        self.queue.delete_queue().await?;
        self.poison.delete_queue().await
    }

    /// Sends `job`: a worker will run it at least once. The message never expires
    /// ([`MessageTtl::Never`]): it stays on the queue until a worker completes it or moves it
    /// to the poison queue, however long no worker runs.
    ///
    /// **Requests: 1.** **Consistency:** the message is durable when this returns; it
    /// becomes visible to workers at once. Not idempotent: if the response is lost and the
    /// put retried, the job may be enqueued twice — harmless, since handlers are idempotent.
    ///
    /// **Errors:** before any request, [`tablekit_core::Error::LimitExceeded`] when the
    /// encoded job exceeds [`crate::MAX_JOB_BYTES`] and
    /// [`tablekit_core::Error::Encode`] when it does not serialize;
    /// [`tablekit_core::Error::NotFound`] if the queue does not exist.
    pub async fn enqueue(&self, job: &J) -> Result<()> {
        self.put(encode(job)?, None).await
    }

    /// Sends `job`, invisible to workers for `delay` (at most 7 days); like
    /// [`enqueue`](JobQueue::enqueue), it never expires.
    ///
    /// **Requests: 1.** **Consistency and errors:** as [`JobQueue::enqueue`], plus
    /// [`tablekit_core::Error::InvalidConfig`] for a delay over 7 days, before any request.
    pub async fn enqueue_after(&self, job: &J, delay: Duration) -> Result<()> {
        self.put(encode(job)?, Some(delay)).await
    }

    /// Puts a job message that stays until it is deleted: a job or a poison record that
    /// expired would vanish without a trace.
    async fn put(&self, payload: Vec<u8>, delay: Option<Duration>) -> Result<()> {
        let mut options = SendOptions::default().with_ttl(MessageTtl::Never);
        if let Some(delay) = delay {
            options = options.with_visibility_delay(delay);
        }
        self.queue.send(&payload, options).await?;
        Ok(())
    }

    /// How many messages the queue holds: visible, in flight (invisible) and delayed.
    ///
    /// **Requests: 1.** **Consistency:** approximate on Azure (exact on Azurite).
    ///
    /// **Errors:** [`tablekit_core::Error::NotFound`] if the queue does not exist.
    pub async fn approximate_len(&self) -> Result<usize> {
        self.queue.approximate_len().await
    }

    /// Up to `max` (1–32) poison records, without taking them off the poison queue.
    ///
    /// **Requests: 1.**
    ///
    /// **Errors:** [`tablekit_core::Error::InvalidConfig`] for `max` outside 1–32 before any
    /// request. Messages that are not poison records are returned as in
    /// [`JobQueue::take_poisoned`].
    pub async fn peek_poisoned(&self, max: u8) -> Result<Vec<PoisonRecord>> {
        let payloads = self.poison.peek(max).await?;
        Ok(payloads
            .into_iter()
            .map(|p| parse_or_foreign(&self.poison, p))
            .collect())
    }

    /// Dequeues up to `max` (1–32) poison records, hiding them for `visibility_timeout`,
    /// to [re-enqueue](JobQueue::requeue) or [discard](JobQueue::discard) them. A message
    /// someone put on the poison queue by hand comes back as a record with an empty
    /// `source_queue`, a `dequeue_count` of 0 and its bytes as the payload.
    ///
    /// **Requests: 1.**
    ///
    /// **Errors:** [`tablekit_core::Error::InvalidConfig`] for `max` outside 1–32 or a
    /// timeout over 7 days, before any request.
    pub async fn take_poisoned(
        &self,
        max: u8,
        visibility_timeout: Duration,
    ) -> Result<Vec<Poisoned>> {
        let messages = self.poison.receive(max, visibility_timeout).await?;
        Ok(messages
            .into_iter()
            .map(|message| Poisoned {
                record: parse_or_foreign(&self.poison, message.payload.clone()),
                message,
            })
            .collect())
    }

    /// Puts a poisoned job's original payload back on the job queue (as a new message, with
    /// a fresh dequeue count, that never expires) and deletes it from the poison queue — after
    /// you fixed what made it fail. Re-queuing a poisoned job is always safe for the
    /// patterns' jobs: they read the current state when they run, so a job whose cause is
    /// gone converges, and one whose cause is still there fails again and returns here,
    /// changing nothing. The job's deferral count starts again from zero (a job never deferred
    /// is put back byte for byte).
    ///
    /// **Requests: 2** (put, then delete). **Consistency:** if the delete fails after the
    /// put, the job is on both queues; re-enqueueing it again later runs it twice, which an
    /// idempotent handler tolerates.
    ///
    /// **Errors:** [`tablekit_core::Error::PreconditionFailed`] when the poison message's
    /// receipt expired (it was taken again meanwhile); queue errors.
    pub async fn requeue(&self, poisoned: &Poisoned) -> Result<()> {
        let payload = &poisoned.record.payload;
        let payload = match crate::job::deferrals_of(payload) {
            0 => payload.clone(),
            _ => crate::job::with_deferrals(payload, 0).unwrap_or_else(|| payload.clone()),
        };
        self.put(payload, None).await?;
        self.poison.delete_message(&poisoned.message).await
    }

    /// Deletes a poisoned message for good.
    ///
    /// **Requests: 1.**
    ///
    /// **Errors:** [`tablekit_core::Error::PreconditionFailed`] when its receipt expired,
    /// [`tablekit_core::Error::NotFound`] when it is already gone.
    pub async fn discard(&self, poisoned: &Poisoned) -> Result<()> {
        self.poison.delete_message(&poisoned.message).await
    }
}

fn parse_or_foreign(poison: &Queue, payload: Vec<u8>) -> PoisonRecord {
    PoisonRecord::parse(&payload).unwrap_or_else(|e| {
        tracing::warn!(target: "tablekit", queue = poison.name(), error = %e, "a message on the poison queue is not a poison record");
        PoisonRecord {
            source_queue: String::new(),
            message_id: String::new(),
            dequeue_count: 0,
            kind: crate::job::kind_of(&payload),
            inserted: None,
            poisoned_at: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            reason: e.to_string(),
            payload,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit_core::limits::validate_dns_name;

    #[test]
    fn poison_names_stay_valid_queue_names() {
        assert_eq!(poison_name("jobs"), "jobs-poison");
        let long = format!("{}-b{}", "a".repeat(55), "c".repeat(6));
        assert_eq!(long.len(), 63);
        let name = poison_name(&long);
        assert_eq!(name, format!("{}-poison", "a".repeat(55)));
        for n in [long.as_str(), "abc", &"x".repeat(56), &"y".repeat(57)] {
            validate_dns_name(tablekit_core::NameKind::Queue, &poison_name(n)).unwrap();
            assert!(poison_name(n).len() <= 63);
        }
    }
}
