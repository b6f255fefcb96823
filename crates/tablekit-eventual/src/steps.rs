//! [`Steps`]: the idempotent primitives a [`crate::Handler`] writes with.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use tablekit_azure::{Blob, Container, Table, UploadOptions};
use tablekit_core::batch::{BatchPlan, OperationKind};
use tablekit_core::{AsEntity, ETag, Error, IfMatch, IntoKeys, Result, Stored};

/// What a handler may do: reads, and writes that are safe to repeat.
///
/// A handler can run more than once for one message — after a crash between any two of its
/// requests, after a lost response, or concurrently with a late duplicate — so every write
/// it makes must leave the same state whether it runs once or several times. `Steps` offers
/// exactly such writes; each is one request (plus the transient-failure retries of the
/// table's or container's account) and is a thin, documented wrapper over the
/// `tablekit_azure` operation of the same name.
///
/// | Step | Repeated | Requests |
/// |------|----------|----------|
/// | [`get`](Steps::get), [`download_blob`](Steps::download_blob) | reads only | 1 |
/// | [`upsert_replace`](Steps::upsert_replace) | same entity, whole | 1 |
/// | [`upsert_merge`](Steps::upsert_merge) | same properties | 1 |
/// | [`delete_if_exists`](Steps::delete_if_exists) | absent is success | 1 |
/// | [`delete`](Steps::delete) with an ETag | absent is success; changed is an error | 1 |
/// | [`delete`](Steps::delete) with [`IfMatch::Any`] | absent is success | 1 |
/// | [`replace`](Steps::replace), [`merge`](Steps::merge) with an ETag | fails with 412: re-read | 1 |
/// | [`replace`](Steps::replace), [`merge`](Steps::merge) with [`IfMatch::Any`] | same value again; 404 once deleted | 1 |
/// | [`submit`](Steps::submit): one transaction of upserts and ETag-conditioned writes | upserts: same state; conditioned: fails as a lost race (412, or 404 once deleted), re-read | 1 |
/// | [`upload_blob`](Steps::upload_blob) | overwrites | 1 |
/// | [`delete_blob_if_exists`](Steps::delete_blob_if_exists) | absent is success | 1 |
///
/// There is deliberately no `insert`: an insert that ran before a crash fails the retry with
/// 409. Use an upsert, or read first and decide. The conditional steps
/// ([`delete`](Steps::delete), [`replace`](Steps::replace), [`merge`](Steps::merge)) take an
/// [`IfMatch`] as every conditional write does: pass the ETag the handler read when a change
/// made since the read must not be overwritten (a move, a read-modify-write); with
/// [`IfMatch::Any`] a change made since the read is overwritten, and a `replace` or `merge`
/// repeated after a later step deleted the entity fails with 404. The operations of
/// [`submit`](Steps::submit) must be upserts or ETag-conditioned: a wildcard delete in a
/// transaction that already took effect would fail the whole transaction on every repeat.
///
/// Entities are addressed as everywhere in tablekit: keys as [`IntoKeys`] (a
/// `(PartitionKey, RowKey)` pair, [`Keys`](tablekit_core::Keys), a `TableEntity`), whole
/// entities as [`AsEntity`] (a `TableEntity`, or an [`Entity`](tablekit_core::Entity) with
/// explicit keys).
///
/// **Consistency:** none between steps. Each step is atomic and strongly consistent on its
/// own; readers may observe the state between two steps (e.g. the entity in both tables)
/// until the handler finishes. Group writes to one partition in one step where you can.
#[derive(Debug, Clone)]
pub struct Steps {
    message_id: String,
    attempt: u64,
    retry: u32,
    kind: &'static str,
    deferrals: u64,
    deferred: std::sync::Arc<std::sync::Mutex<Option<std::time::Duration>>>,
}

impl Steps {
    pub(crate) fn new(
        message_id: String,
        attempt: u64,
        retry: u32,
        kind: &'static str,
        deferrals: u64,
    ) -> Self {
        Self {
            message_id,
            attempt,
            retry,
            kind,
            deferrals,
            deferred: std::sync::Arc::default(),
        }
    }

    /// Steps outside a worker, as for a first delivery (attempt 1, no message id): to call a
    /// handler directly — in a unit test of its idempotency (run it twice), or to perform a
    /// job synchronously instead of enqueueing it. Sends no request.
    pub fn detached() -> Self {
        Self::new(String::new(), 1, 0, "", 0)
    }

    /// Ends this delivery without completing the job and without counting it as an
    /// attempt: return what this returns from the handler, and the worker makes the message
    /// reappear after `delay` (one queue request), with its deferral count
    /// ([`deferrals`](Steps::deferrals)) one higher. For a job that must wait for something
    /// outside it — a write it follows that has not landed yet — without holding a worker's
    /// handler slot meanwhile. A deferral does not count toward
    /// [`WorkerOptions::max_dequeue_count`](crate::WorkerOptions::max_dequeue_count); the
    /// handler decides when waiting is over. Sends no request itself.
    ///
    /// # Errors
    /// None: it returns `Ok(())` for the handler to return.
    pub fn defer(&self, delay: std::time::Duration) -> Result<()> {
        *self
            .deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(delay);
        Ok(())
    }

    /// The delay [`defer`](Steps::defer) asked for, if the handler deferred the job. For
    /// code that calls a handler itself ([`Steps::detached`]).
    pub fn deferred(&self) -> Option<std::time::Duration> {
        *self
            .deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many times this job was deferred before this delivery ([`Steps::defer`]). Sends
    /// no request.
    pub fn deferrals(&self) -> u64 {
        self.deferrals
    }

    /// The message's dequeue count: 1 on the first delivery, higher when an earlier attempt
    /// failed, crashed, timed out or was deferred. Sends no request.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// How many times the worker has already re-run the handler within this dequeue after a
    /// transient failure or conflict (0 on the first run). Sends no request.
    pub fn retry(&self) -> u32 {
        self.retry
    }

    /// The queue message's id (stable across deliveries): useful as an idempotency key or in
    /// logs. Sends no request.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The job kind being handled ([`crate::Job::KIND`]). Sends no request.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    fn trace(&self, step: &'static str, target: &str) {
        tracing::debug!(target: "tablekit", job = self.kind, messaging.message.id = %self.message_id, attempt = self.attempt, step, target, "job step");
    }

    /// Reads one entity (a point query); `None` if it does not exist.
    ///
    /// **Requests: 1.** **Consistency:** strong; sees every write acknowledged before it,
    /// including this handler's earlier steps.
    ///
    /// **Errors:** as [`Table::get`]: invalid keys before any request, a missing *table* is
    /// [`Error::NotFound`], stored data that does not fit `T` is [`Error::Decode`].
    pub async fn get<T: DeserializeOwned>(
        &self,
        table: &Table,
        keys: impl IntoKeys,
    ) -> Result<Option<Stored<T>>> {
        self.trace("get", table.name());
        table.get(keys).await
    }

    /// Inserts the entity or replaces it whole. Repeating it leaves the same entity.
    ///
    /// **Requests: 1.** **Consistency:** last writer wins: a concurrent duplicate writes the
    /// same value, so it converges; another writer's change to the entity is overwritten.
    ///
    /// **Errors:** as [`Table::upsert_replace`]: invalid entities before any request, a
    /// missing table.
    pub async fn upsert_replace(&self, table: &Table, entity: &impl AsEntity) -> Result<ETag> {
        self.trace("upsert_replace", table.name());
        table.upsert_replace(entity).await
    }

    /// Inserts the entity or merges its properties into the existing one. Repeating it
    /// leaves the same properties.
    ///
    /// **Requests: 1.** **Consistency:** last writer wins per property.
    ///
    /// **Errors:** as [`Table::upsert_merge`].
    pub async fn upsert_merge(&self, table: &Table, entity: &impl AsEntity) -> Result<ETag> {
        self.trace("upsert_merge", table.name());
        table.upsert_merge(entity).await
    }

    /// Deletes the entity whatever its ETag; absent is success. Returns whether it existed.
    ///
    /// **Requests: 1.** **Consistency:** unconditional: a change made to the entity since the
    /// handler read it is deleted too. Prefer [`Steps::delete`] with the ETag read when you
    /// move data you read.
    ///
    /// **Errors:** as [`Table::delete_if_exists`]; invalid keys before any request; a missing
    /// table is an error.
    pub async fn delete_if_exists(&self, table: &Table, keys: impl IntoKeys) -> Result<bool> {
        self.trace("delete_if_exists", table.name());
        table.delete_if_exists(keys).await
    }

    /// Deletes the entity if the condition holds; absent is success. Returns whether it was
    /// deleted.
    ///
    /// With the ETag read ([`Stored::if_match`]) this is the safe way to remove the source of
    /// a move: if someone changed the entity after the handler read it, the delete fails and
    /// the worker re-runs the handler, which copies the new version before deleting it. With
    /// [`IfMatch::Any`] it deletes whatever is stored, as [`Steps::delete_if_exists`] does. A
    /// repeat after success finds the entity gone and returns `Ok(false)` — unlike
    /// [`Table::delete`], for which a missing entity is [`Error::NotFound`]: a step must
    /// succeed when it runs again.
    ///
    /// **Requests: 1** (0 when refused). **Consistency:** optimistic with an ETag;
    /// unconditional with [`IfMatch::Any`].
    ///
    /// **Errors:** invalid keys before any request; [`Error::PreconditionFailed`] if the
    /// entity changed (the worker retries the handler at once, see
    /// [`crate::WorkerOptions::handler_retry`]); a missing table.
    pub async fn delete(
        &self,
        table: &Table,
        keys: impl IntoKeys,
        if_match: IfMatch,
    ) -> Result<bool> {
        let keys = keys.into_keys()?;
        self.trace("delete", table.name());
        match table.delete(&keys, if_match).await {
            Ok(()) => Ok(true),
            Err(Error::NotFound { target }) if target.keys.is_some() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Replaces the entity whole if the condition holds: with the ETag read, only if it is
    /// still at that version; with [`IfMatch::Any`], whatever version is stored (it must
    /// exist).
    ///
    /// With an ETag it is not idempotent on its own — a repeat after success fails with 412
    /// because the write changed the ETag — but safe: a handler that reads, computes the new
    /// value from what it read, and writes with the read ETag converges, because a re-run
    /// re-reads. Make the computation notice work already done (e.g. "the id is already in
    /// the list"). With [`IfMatch::Any`] a repeat writes the same value again, and a change
    /// another writer made since the handler read is overwritten.
    ///
    /// **Requests: 1** (0 when refused). **Consistency:** optimistic with an ETag (no lost
    /// updates); last writer wins with [`IfMatch::Any`].
    ///
    /// **Errors:** encoding errors before any request; [`Error::PreconditionFailed`] if the
    /// entity changed, [`Error::NotFound`] if it is gone.
    pub async fn replace(
        &self,
        table: &Table,
        entity: &impl AsEntity,
        if_match: IfMatch,
    ) -> Result<ETag> {
        self.trace("replace", table.name());
        table.replace(entity, if_match).await
    }

    /// Merges properties into the entity if the condition holds (as [`Steps::replace`]). See
    /// [`Steps::replace`] for how to stay idempotent.
    ///
    /// **Requests: 1** (0 when refused). **Consistency:** optimistic with an ETag; last
    /// writer wins with [`IfMatch::Any`].
    ///
    /// **Errors:** as [`Steps::replace`] ([`Steps::upsert_merge`] is the unconditional form).
    pub async fn merge(
        &self,
        table: &Table,
        entity: &impl AsEntity,
        if_match: IfMatch,
    ) -> Result<ETag> {
        self.trace("merge", table.name());
        table.merge(entity, if_match).await
    }

    /// Runs an atomic plan — one entity group transaction in one partition — whose every
    /// operation is an upsert or is conditioned on a specific ETag.
    ///
    /// This is how a handler changes several rows of one partition together (a list row and
    /// the row that counts it, say) so that no reader and no competing handler ever sees one
    /// without the other. A repeat after success either writes the same state (upserts only)
    /// or fails on the ETag the first run changed, after which the handler re-reads, as with
    /// [`Steps::replace`]. The service refuses such a repeat with 412 when the
    /// conditioned entity was rewritten and with 404 when it was deleted (a conditioned delete
    /// that took effect, or another writer's delete); both are reported as the lost race they
    /// are, [`ErrorKind::PreconditionFailed`](tablekit_core::ErrorKind), which the worker
    /// re-runs at once so the handler reads again. Inserts and `IfMatch::Any` conditions are
    /// refused: a repeat of those fails with 409 or 404 although nothing is wrong.
    ///
    /// **Requests: 1.** **Consistency:** all-or-nothing; optimistic (ETag) for the
    /// conditioned operations.
    ///
    /// **Errors:** before any request, [`Error::InvalidArgument`] for a best-effort plan or an
    /// insert or `IfMatch::Any` operation; then as [`Table::submit`]:
    /// [`Error::BatchFailed`] with the refused operation's index and cause (its
    /// [`kind`](Error::kind) is [`ErrorKind::PreconditionFailed`](tablekit_core::ErrorKind)
    /// when an ETag no longer matches or the entity an ETag condition names is gone), and
    /// nothing of the transaction is written.
    pub async fn submit(&self, table: &Table, plan: &BatchPlan) -> Result<()> {
        if !plan.is_atomic() {
            return Err(Error::invalid_argument(
                "plan",
                "a step's transaction must be an atomic plan (BatchPlan::atomic)",
            ));
        }
        for index in 0..plan.len() {
            let Some(op) = plan.operation(index) else {
                continue;
            };
            let repeatable = match op.kind() {
                OperationKind::UpsertReplace | OperationKind::UpsertMerge => true,
                OperationKind::Insert => false,
                OperationKind::Replace | OperationKind::Merge | OperationKind::Delete => {
                    matches!(op.if_match(), Some(IfMatch::ETag(_)))
                }
            };
            if !repeatable {
                return Err(Error::invalid_argument(
                    "plan",
                    format!(
                        "operation {index} ({:?} of {}) is not safe to repeat: use an upsert or \
                         an ETag condition",
                        op.kind(),
                        op.keys()
                    ),
                ));
            }
        }
        self.trace("submit", table.name());
        table
            .submit(plan)
            .await
            .map(|_| ())
            .map_err(|e| as_lost_race(plan, e))
    }

    /// Reads a blob; `None` if it does not exist.
    ///
    /// **Requests: 1.** **Consistency:** strong.
    ///
    /// **Errors:** as [`Container::download`].
    pub async fn download_blob(&self, container: &Container, name: &str) -> Result<Option<Blob>> {
        self.trace("get_blob", container.name());
        container.download(name).await
    }

    /// Writes a blob, overwriting it (with the default [`UploadOptions`] condition). Repeating it
    /// leaves the same content. A [`tablekit_azure::BlobCondition::IfMatch`] condition makes
    /// it ETag-conditioned (see [`Steps::replace`] for the idempotency rule); a
    /// create-only condition is not idempotent and should not be used in a handler.
    ///
    /// **Requests: 1.** **Consistency:** strong; last writer wins.
    ///
    /// **Errors:** as [`Container::upload`]: invalid names and metadata before any request, a
    /// missing container, a failed condition.
    pub async fn upload_blob(
        &self,
        container: &Container,
        name: &str,
        data: Bytes,
        options: UploadOptions,
    ) -> Result<ETag> {
        self.trace("put_blob", container.name());
        container.upload(name, data, options).await
    }

    /// Deletes a blob; absent is success. Returns whether it existed.
    ///
    /// **Requests: 1.** **Consistency:** strong.
    ///
    /// **Errors:** as [`Container::delete_blob_if_exists`].
    pub async fn delete_blob_if_exists(&self, container: &Container, name: &str) -> Result<bool> {
        self.trace("delete_blob_if_exists", container.name());
        container.delete_blob_if_exists(name).await
    }
}

/// A transaction refused because the entity an ETag-conditioned operation names is gone
/// (404) lost a race exactly as one refused with 412: the entity changed — here, was
/// deleted, possibly by an earlier run of the same transaction — since the handler read it.
/// Reporting it as a precondition failure makes the worker re-run the handler, which reads
/// again, instead of failing the attempt for good.
fn as_lost_race(plan: &BatchPlan, error: Error) -> Error {
    let Error::BatchFailed { index, source } = error else {
        return error;
    };
    let conditioned = plan
        .operation(index)
        .is_some_and(|op| matches!(op.if_match(), Some(IfMatch::ETag(_))));
    match *source {
        Error::NotFound { target } if conditioned && target.keys.is_some() => Error::BatchFailed {
            index,
            source: Box::new(Error::PreconditionFailed { target }),
        },
        source => Error::BatchFailed {
            index,
            source: Box::new(source),
        },
    }
}
