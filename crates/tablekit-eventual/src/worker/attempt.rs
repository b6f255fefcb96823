//! One delivery of one message: decode, run the handler while keeping the message hidden,
//! then delete, poison, delay or release it.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tablekit_azure::{Deadline, Message, MessageTtl, Queue, SendOptions, track_landing};
use tablekit_core::ErrorKind;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::Inner;
use super::report::bump;
use crate::job::{Handler, Job, Refused, decode, deferrals_of, with_deferrals};
use crate::options::HandlerRetry;
use crate::poison::PoisonRecord;
use crate::steps::Steps;

/// How the handler's runs for this delivery ended.
enum Outcome {
    Done,
    Failed(Failure),
    /// The handler deferred the job ([`Steps::defer`]): the message reappears after the
    /// delay, the delivery not counted as an attempt.
    Deferred(Duration),
    Cancelled,
}

/// Why a delivery failed: a short stable kind for telemetry (`error.type`), and the whole
/// text for the poison record, which may name keys and values (a handler's errors name the
/// entity they met).
struct Failure {
    kind: String,
    reason: String,
}

impl Failure {
    fn new(kind: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            reason: reason.into(),
        }
    }

    fn of(error: &tablekit_core::Error) -> Self {
        Self::new(format!("{:?}", error.kind()), error.to_string())
    }
}

/// What a log event may show of a failure's text: all of it only when the account's
/// [`Telemetry::record_keys`](tablekit_azure::Telemetry::record_keys) allows key values in
/// telemetry, since handler errors name the keys they met; else a note saying where it is.
fn shown<'a, J, H>(inner: &Inner<J, H>, text: &'a str) -> &'a str {
    if inner
        .queue
        .queue()
        .account()
        .settings()
        .telemetry
        .record_keys
    {
        text
    } else {
        "(not recorded: it may name keys; see Telemetry::record_keys, and the poison record)"
    }
}

/// Whether a queue error means the message is no longer ours: its visibility ended and
/// another consumer took it (stale receipt), or it was deleted.
fn is_lost(error: &tablekit_core::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::PreconditionFailed | ErrorKind::NotFound
    )
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// Resolves when the worker cancels running handlers (at the end of the shutdown grace).
async fn cancelled(mut cancel: watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        // The worker is gone without cancelling: never resolve.
        std::future::pending::<()>().await;
    }
}

/// Handles one delivery of `message`, dequeued by a request sent at or after `taken_at`.
///
/// The handler runs under a [`Deadline`] at the end of the worker's hold on the message (the
/// dequeue's, then each extension's send instant plus the visibility timeout): none of its
/// writes can land after another consumer may have taken the message, so a later delivery
/// never races a write of this one — even when this one is cut off or its process stops.
pub(super) async fn process<J: Job, H: Handler<J>>(
    inner: Arc<Inner<J, H>>,
    message: Message,
    cancel: watch::Receiver<bool>,
    taken_at: Instant,
) {
    let queue = inner.queue.queue().name();
    let span = tracing::info_span!(target: "tablekit", "tablekit.step", otel.name = %format_args!("worker attempt {queue}"), otel.kind = "internal", tablekit.step = "worker attempt", tablekit.job.kind = J::KIND, db.collection.name = queue, messaging.message.id = %message.id, dequeue_count = message.dequeue_count);
    async move {
        let max = inner.options.max_dequeue_count;
        // Deliveries the handler deferred are not attempts.
        let deferrals = deferrals_of(&message.payload);
        let attempts = message.dequeue_count.saturating_sub(deferrals);
        if attempts > max {
            let deferred = if deferrals > 0 {
                format!(", {deferrals} of them deferred")
            } else {
                String::new()
            };
            let reason = format!(
                "dequeued {} times (max {max}{deferred}) without completing: earlier attempts crashed, timed out or lost the message",
                message.dequeue_count
            );
            return poison(&inner, &message, &Failure::new("MaxDequeueCount", reason)).await;
        }
        if let Err(Refused::Foreign(why)) = decode::<J>(&message.payload) {
            return poison(&inner, &message, &Failure::new("ForeignMessage", why)).await;
        }
        let lease = Deadline::at((taken_at + inner.options.visibility_timeout).into_std());
        let (stop_tx, stop_rx) = oneshot::channel();
        let run = async {
            let (outcome, lands_by) = run_handler(&inner, &message, cancel, &lease, deferrals).await;
            // Whatever comes next may make the message visible before the hold ends: not
            // before every write of this delivery has landed (always within the hold, which
            // bounded them).
            if !matches!(outcome, Outcome::Done) {
                if let Some(lands_by) = lands_by {
                    tokio::time::sleep_until(lands_by.into()).await;
                }
            }
            let _ = stop_tx.send(());
            outcome
        };
        let keep = keep_hidden(&inner, message.clone(), stop_rx, &lease);
        let (outcome, held) = tokio::join!(run, keep);
        let Some(held) = held else {
            // Another consumer holds the message now; it will finish or retry it.
            if let Outcome::Done = outcome {
                bump(&inner.counters.processed);
            }
            if let Outcome::Failed(_) = outcome {
                bump(&inner.counters.failed_attempts);
            }
            return;
        };
        let queue = inner.queue.queue();
        match outcome {
            Outcome::Done => {
                bump(&inner.counters.processed);
                match queue.delete_message(&held).await {
                    Ok(()) => bump(&inner.counters.deleted),
                    Err(e) => queue_failure(&inner, "delete", &e),
                }
            }
            Outcome::Deferred(delay) => {
                let payload = with_deferrals(&held.payload, deferrals + 1)
                    .unwrap_or_else(|| held.payload.clone());
                let delay = delay.clamp(Duration::from_secs(1), tablekit_azure::MAX_VISIBILITY);
                match queue.update_payload(&held, &payload, delay).await {
                    Ok(_) => bump(&inner.counters.deferred),
                    Err(e) => queue_failure(&inner, "defer", &e),
                }
            }
            Outcome::Failed(failure) => {
                bump(&inner.counters.failed_attempts);
                let reason = shown(&inner, &failure.reason);
                tracing::warn!(target: "tablekit", kind = J::KIND, messaging.message.id = %held.id, dequeue_count = held.dequeue_count, error.type = %failure.kind, reason, "job attempt failed");
                if attempts >= max {
                    poison(&inner, &held, &failure).await;
                } else if let Some(delay) = inner.options.failure_delay(attempts) {
                    if let Err(e) = queue.update(&held, delay).await {
                        queue_failure(&inner, "delay", &e);
                    }
                }
            }
            Outcome::Cancelled => match queue.update(&held, Duration::ZERO).await {
                Ok(_) => bump(&inner.counters.released),
                Err(e) => queue_failure(&inner, "release", &e),
            },
        }
    }
    .instrument(span)
    .await;
}

fn queue_failure<J, H>(inner: &Inner<J, H>, what: &str, error: &tablekit_core::Error) {
    if is_lost(error) {
        bump(&inner.counters.lost_receipts);
        tracing::info!(target: "tablekit", what, %error, "the message was taken by another consumer or deleted meanwhile");
    } else {
        bump(&inner.counters.queue_errors);
        tracing::warn!(target: "tablekit", what, %error, "queue request failed; the message reappears after its visibility timeout");
    }
}

/// Runs the handler, re-running it on transient failures and conflicts, until it succeeds,
/// defers, fails for good, times out or is cancelled. Every run is bound to `lease`. Returns
/// the outcome with the instant by which every write the runs sent has landed or never will
/// (`None`: every write got an answer): a re-run waits for it, and so must whatever makes
/// the message visible before the hold ends — another delivery must not race these writes.
async fn run_handler<J: Job, H: Handler<J>>(
    inner: &Inner<J, H>,
    message: &Message,
    cancel: watch::Receiver<bool>,
    lease: &Deadline,
    deferrals: u64,
) -> (Outcome, Option<std::time::Instant>) {
    let options = &inner.options;
    // A run cut off (a timeout, a cancellation) may have left any write in flight.
    let cut_off = || {
        let late = inner.queue.queue().account().settings().late_landing();
        Some(std::time::Instant::now() + late)
    };
    let mut lands_by: Option<std::time::Instant> = None;
    let later = |a: Option<std::time::Instant>, b: Option<std::time::Instant>| a.max(b);
    let mut retry = 0;
    loop {
        let job = match decode::<J>(&message.payload) {
            Ok(job) => job,
            Err(refused) => {
                let failure = Failure::new("UndecodableJob", refused.reason());
                return (Outcome::Failed(failure), lands_by);
            }
        };
        let steps = Steps::new(
            message.id.clone(),
            message.dequeue_count,
            retry,
            J::KIND,
            deferrals,
        );
        // The handler's future (a pattern's job, often large) lives on the heap: moved
        // through these wrappers on the stack, it overflowed a worker thread's 2 MiB in
        // debug builds.
        let run = AssertUnwindSafe(Box::pin(track_landing(
            lease.scope(Box::pin(inner.handler.handle(job, &steps))),
        )))
        .catch_unwind();
        let timed = async {
            match options.handler_timeout {
                Some(limit) => tokio::time::timeout(limit, run).await.ok(),
                None => Some(run.await),
            }
        };
        let result = tokio::select! {
            result = timed => result,
            () = cancelled(cancel.clone()) => return (Outcome::Cancelled, later(lands_by, cut_off())),
        };
        let error = match result {
            Some(Ok((Ok(()), landed))) => {
                let lands_by = later(lands_by, landed);
                let outcome = match steps.deferred() {
                    Some(delay) => Outcome::Deferred(delay),
                    None => Outcome::Done,
                };
                return (outcome, lands_by);
            }
            Some(Ok((Err(error), landed))) => {
                lands_by = later(lands_by, landed);
                error
            }
            Some(Err(panic)) => {
                let reason = format!("the handler panicked: {}", panic_text(&*panic));
                let failure = Failure::new("Panic", reason);
                return (Outcome::Failed(failure), later(lands_by, cut_off()));
            }
            None => {
                let reason = format!(
                    "the handler ran longer than handler_timeout ({:?})",
                    options.handler_timeout.unwrap_or_default()
                );
                let failure = Failure::new("HandlerTimeout", reason);
                return (Outcome::Failed(failure), later(lands_by, cut_off()));
            }
        };
        let delay = HandlerRetry::retries(&error)
            .then(|| options.handler_retry.delay(retry + 1))
            .flatten();
        let Some(delay) = delay else {
            return (Outcome::Failed(Failure::of(&error)), lands_by);
        };
        let text = error.to_string();
        tracing::debug!(target: "tablekit", kind = J::KIND, retry = retry + 1, error.type = ?error.kind(), error = shown(inner, &text), ?delay, "re-running the handler");
        bump(&inner.counters.retries);
        // The next run must not race this one's writes that may still land.
        let resume = lands_by
            .map_or(tokio::time::Instant::now(), Into::into)
            .max(tokio::time::Instant::now() + delay);
        tokio::select! {
            () = tokio::time::sleep_until(resume) => {}
            () = cancelled(cancel.clone()) => return (Outcome::Cancelled, lands_by),
        }
        retry += 1;
    }
}

/// Keeps `message` hidden while the handler runs, extending its visibility as often as
/// [`WorkerOptions::extend_every`](crate::WorkerOptions) says, until `stop`; each extension
/// moves `lease` to its send instant plus the visibility timeout. Returns the message with
/// its latest receipt, or `None` when the message was lost to another consumer (or deleted)
/// meanwhile.
///
/// An extension in flight when `stop` arrives is completed, not dropped, so the receipt the
/// caller deletes with is the one the service last issued.
async fn keep_hidden<J, H>(
    inner: &Inner<J, H>,
    mut message: Message,
    mut stop: oneshot::Receiver<()>,
    lease: &Deadline,
) -> Option<Message> {
    let queue: &Queue = inner.queue.queue();
    let timeout = inner.options.visibility_timeout;
    let every = inner
        .options
        .extend_every(queue.account().settings().late_landing());
    let mut next = Instant::now() + every;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return Some(message),
            () = tokio::time::sleep_until(next) => {}
        }
        let sent = std::time::Instant::now();
        match queue.update(&message, timeout).await {
            Ok(extended) => {
                message = extended;
                // The service set the new visibility after this request was sent.
                lease.set(sent + timeout);
                bump(&inner.counters.extensions);
                next = Instant::now() + every;
            }
            Err(error) if is_lost(&error) => {
                bump(&inner.counters.lost_receipts);
                tracing::warn!(target: "tablekit", %error, messaging.message.id = %message.id, "lost the message while its handler was running");
                let _ = stop.await;
                return None;
            }
            Err(error) => {
                // The extension may still land before the timeout: try again sooner.
                bump(&inner.counters.queue_errors);
                tracing::warn!(target: "tablekit", %error, messaging.message.id = %message.id, "could not extend the message's visibility");
                next = Instant::now() + every / 4;
            }
        }
    }
}

/// Moves `message` to the poison queue (put, then delete). A failure leaves it on the job
/// queue, where it reappears and is moved again.
async fn poison<J, H>(inner: &Inner<J, H>, message: &Message, failure: &Failure) {
    let record = PoisonRecord::new(inner.queue.queue().name(), message, &failure.reason);
    let put = match record.encode() {
        // A poison record must outlive the service's default 7 days: it is the only trace
        // of a job that did not complete.
        Ok(bytes) => {
            let options = SendOptions::default().with_ttl(MessageTtl::Never);
            inner.queue.poison().send(&bytes, options).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = put {
        queue_failure(inner, "poison", &e);
        return;
    }
    bump(&inner.counters.poisoned);
    let reason = shown(inner, &failure.reason);
    tracing::warn!(target: "tablekit", dequeue_count = message.dequeue_count, messaging.message.id = %message.id, error.type = %failure.kind, reason, poison = inner.queue.poison().name(), "moved a message to the poison queue");
    if let Err(e) = inner.queue.queue().delete_message(message).await {
        // The record is on the poison queue; if the message comes back it is moved again.
        queue_failure(inner, "delete after poisoning", &e);
    }
}
