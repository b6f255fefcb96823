//! Optimistic concurrency: read → modify → conditional write, retried on conflict.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tablekit_core::{Entity, Error, Keys, Result, Stored};
use tracing::Instrument as _;

use super::Table;
use crate::account::Account;

/// Drives an optimistic-concurrency loop: after a conflict, [`ConflictLoop::retry`] waits a
/// jittered, growing backoff and lets the caller re-read and try again, up to the account's
/// [`crate::ConflictRetry`] limit. Conflicts are counted in the account's metrics.
///
/// ```no_run
/// # async fn f(table: &tablekit_azure::Table) -> tablekit_core::Result<()> {
/// let mut conflicts = table.account().conflict_loop();
/// loop {
///     match try_the_write(table).await {
///         Ok(()) => break,
///         Err(e) => conflicts.retry(e).await?, // returns the error if not a conflict or too many
///     }
/// }
/// # Ok(()) }
/// # async fn try_the_write(_: &tablekit_azure::Table) -> tablekit_core::Result<()> { Ok(()) }
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
    /// [`Error::PreconditionFailed`] or [`Error::AlreadyExists`] when conflicts outlast the
    /// account's [`crate::ConflictRetry`] attempts; encoding, transport and service errors.
    pub async fn update_with<T, F>(&self, keys: &Keys, mut change: F) -> Result<Stored<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> T,
    {
        let span = tracing::debug_span!("tablekit.update_with", table = %self.name(), pk = %keys.pk(), rk = %keys.rk());
        async {
            let mut conflicts = self.account().conflict_loop();
            loop {
                let attempt = async {
                    let current = self.get::<T>(keys).await?;
                    let (value, if_match) = match current {
                        Some(stored) => {
                            let if_match = stored.if_match();
                            (change(Some(stored.value)), Some(if_match))
                        }
                        None => (change(None), None),
                    };
                    let entity = Entity::new(keys.clone(), value);
                    let etag = match if_match {
                        Some(if_match) => self.replace(&entity, if_match).await?,
                        None => self.insert(&entity).await?,
                    };
                    Ok::<_, Error>(Stored {
                        keys: entity.keys,
                        timestamp: etag.timestamp(),
                        etag,
                        value: entity.value,
                    })
                };
                match attempt.await {
                    Ok(stored) => return Ok(stored),
                    Err(e) => conflicts.retry(e).await?,
                }
            }
        }
        .instrument(span)
        .await
    }
}
