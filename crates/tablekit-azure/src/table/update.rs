//! Optimistic concurrency: read → modify → conditional write, retried on conflict.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::{Entity, Error, IntoKeys, Result, Stored};
use tracing::Instrument as _;

use super::Table;
use crate::account::Account;

/// Drives an optimistic-concurrency loop: runs an attempt — read, decide, write under the
/// ETag read — and, when it fails with a conflict ([`Error::is_conflict`]: someone else wrote
/// first), waits a jittered, growing backoff and runs it again from the read, up to the
/// account's [`crate::ConflictRetry`] limit. Each retry is counted in the account's metrics
/// ([`crate::MetricsSnapshot::conflict_retries`]).
///
/// [`ConflictLoop::run`] is the loop. [`ConflictLoop::retry`] is its step, for loops that
/// need more control (clean-up between attempts, state kept across them).
///
/// # Examples
/// ```no_run
/// use tablekit_core::{Entity, Keys, Properties};
///
/// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
/// let keys = Keys::new("Sales", "Counter")?;
/// // Increment a counter; another writer's increment is never overwritten.
/// let etag = table
///     .account()
///     .conflict_loop()
///     .run(|_attempt| async {
///         let current = table.get::<Properties>(&keys).await?;
///         let n = current.as_ref().and_then(|c| c.value.get_i64("N").unwrap()).unwrap_or(0);
///         let next = Entity::new(keys.clone(), Properties::new().with("N", n + 1));
///         match current {
///             Some(c) => table.replace(&next, c.if_match()).await, // 412 → run again
///             None => table.insert(&next).await,                   // 409 → run again
///         }
///     })
///     .await?;
/// # let _ = etag; Ok(()) }
/// ```
#[derive(Debug)]
pub struct ConflictLoop {
    account: Account,
    attempt: u32,
}

impl Account {
    /// A new optimistic-concurrency loop using this account's conflict retry settings.
    pub fn conflict_loop(&self) -> ConflictLoop {
        ConflictLoop {
            account: self.clone(),
            attempt: 1,
        }
    }
}

impl ConflictLoop {
    /// Runs `attempt` until it succeeds, or fails with an error that is not a conflict, or
    /// the attempts are used up; before each new attempt, waits the account's conflict
    /// backoff. `attempt` gets the attempt number (1 for the first).
    ///
    /// An attempt should read what it decides on, so that the next one starts from the new
    /// state. A conflict that is an answer rather than a lost race (a 412 on the caller's own
    /// ETag, a 409 meaning "already exists") must not be retried: return it inside `Ok`, as
    /// `Ok(Err(error))`, and unwrap both levels after the loop.
    ///
    /// Requests: those of each attempt. Consistency: as the attempt's conditional write.
    ///
    /// # Errors
    /// The last attempt's error: a conflict when conflicts outlast
    /// [`crate::ConflictRetry::max_attempts`], any other error at once.
    pub async fn run<T, F, Fut>(mut self, mut attempt: F) -> Result<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        loop {
            match attempt(self.attempt).await {
                Ok(value) => return Ok(value),
                Err(e) => self.retry(e).await?,
            }
        }
    }

    /// Decides what to do after `error`: for a conflict with attempts left, waits and
    /// returns `Ok(())` (try again); otherwise returns the error.
    ///
    /// # Errors
    /// `error` itself when it is not a conflict or the attempts are exhausted.
    pub async fn retry(&mut self, error: Error) -> Result<()> {
        let policy = &self.account.settings().conflict_retry;
        if !error.is_conflict() || self.attempt >= policy.max_attempts {
            return Err(error);
        }
        self.attempt += 1;
        self.account.metrics().conflict_retry();
        tokio::time::sleep(policy.backoff(self.attempt)).await;
        Ok(())
    }

    /// The attempt number the caller is about to make (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

impl Table {
    /// Reads an entity, lets `change` compute its new value from the current one (`None` if
    /// it does not exist), and writes it back only if nobody wrote in between; on a conflict
    /// it starts again from the read, so a writer racing another never overwrites the
    /// other's update.
    ///
    /// Requests: 2 per attempt (a point read, then a conditional replace or an insert).
    /// Consistency: linearizable per entity. `change` may run several times; it must be a
    /// pure function of its input.
    ///
    /// **What holds:** with one writer per entity, or among several writers as long as every
    /// failed attempt was refused outright (503, 429) or got a response, each update is
    /// applied exactly once. **What does not:** when a write's outcome is unknown (its
    /// response was lost, the connection broke mid-request, the client timed out) *and*
    /// another writer updates the entity before the retry, the retry cannot tell whose write
    /// the stored value is. It accepts a value equal to its own (one update lost if the other
    /// writer stored the same value) and otherwise starts again from the read (one update
    /// applied twice if its own write had landed). Counters that must be exact under lost
    /// responses with several writers record a write id with each update, as
    /// `tablekit_series::Series::add` does (see the book's Guarantees chapter).
    ///
    /// # Errors
    /// Key errors before any request; [`Error::PreconditionFailed`] or
    /// [`Error::AlreadyExists`] when conflicts outlast the account's [`crate::ConflictRetry`]
    /// attempts; [`Error::Decode`] when the stored entity does not fit `T`; encoding,
    /// transport and service errors.
    ///
    /// # Examples
    /// ```no_run
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Default, Serialize, Deserialize)]
    /// #[serde(rename_all = "PascalCase")]
    /// struct Department {
    ///     employee_count: i64,
    /// }
    ///
    /// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
    /// // Concurrent callers each add one; none overwrites another's increment.
    /// let stored = table
    ///     .update_with(("Sales", "Department"), |d: Option<Department>| Department {
    ///         employee_count: d.unwrap_or_default().employee_count + 1,
    ///     })
    ///     .await?;
    /// println!("{} employees", stored.value.employee_count);
    /// # Ok(()) }
    /// ```
    pub async fn update_with<T, F>(&self, keys: impl IntoKeys, change: F) -> Result<Stored<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> T,
    {
        let keys = keys.into_keys()?;
        let span = crate::telemetry::step_span("update_with", self.name());
        // `change` is called from each attempt in turn; the lock is never held across an
        // await.
        let change = Mutex::new(change);
        let (change, keys) = (&change, &keys);
        self.account()
            .conflict_loop()
            .run(move |_| async move {
                let current = self.get::<T>(keys).await?;
                let apply = |old: Option<T>| {
                    let mut change = change.lock().unwrap_or_else(PoisonError::into_inner);
                    (*change)(old)
                };
                let (value, if_match) = match current {
                    Some(stored) => {
                        let if_match = stored.if_match();
                        (apply(Some(stored.value)), Some(if_match))
                    }
                    None => (apply(None), None),
                };
                let entity = Entity::new(keys.clone(), value);
                let etag = match if_match {
                    Some(if_match) => self.replace(&entity, if_match).await?,
                    None => self.insert(&entity).await?,
                };
                Ok(Stored {
                    keys: entity.keys,
                    timestamp: etag.timestamp(),
                    etag,
                    value: entity.value,
                })
            })
            .instrument(span)
            .await
    }
}
