//! [`WorkerOptions`] and [`HandlerRetry`].

use std::time::Duration;

use tablekit_azure::MAX_VISIBILITY;
use tablekit_core::{Error, ErrorKind, Result};

/// How a [`crate::Worker`] consumes its queue: [`WorkerOptions::default`] and the `with_*`
/// setters.
///
/// ```
/// use std::time::Duration;
/// use tablekit_eventual::WorkerOptions;
///
/// let options = WorkerOptions::default()
///     .with_visibility_timeout(Duration::from_secs(90))
///     .with_concurrency(16);
/// assert_eq!(options.concurrency, 16);
/// ```
///
/// Values are checked when the worker starts ([`crate::Worker::run_until`],
/// [`crate::Worker::drain`]), before any request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// How long a dequeued message stays invisible to other consumers: the worker's hold on
    /// it. While a handler runs, the worker extends it (every half timeout, or more often:
    /// see below), so this bounds how long a *crashed* worker delays its messages, not how
    /// long a handler may take. 1 s to 7 days; default 2 minutes.
    ///
    /// The handler's writes are bound to the hold: a write is sent only if it lands before
    /// the hold can end ([`tablekit_azure::Deadline`]), so a later delivery of the message
    /// never races a write of this one. It must therefore exceed the queue account's
    /// [`Settings::late_landing`](tablekit_azure::Settings::late_landing) (60 s with the
    /// default request timeout), and the worker extends the hold whenever less than that
    /// would be left before the next extension.
    pub visibility_timeout: Duration,
    /// After this many dequeues a failing message is moved to the poison queue: the handler
    /// runs at most this many times per message. A message that arrives with a higher count
    /// (earlier attempts crashed or were cut off) is moved without running. At least 1;
    /// default 5.
    pub max_dequeue_count: u64,
    /// Handlers running at once (each on its own tokio task). At least 1; default 8.
    pub concurrency: usize,
    /// Messages per dequeue request, at most 32; the worker never takes more than it has
    /// free handler slots for, so no message waits invisibly in memory. Default 32.
    pub batch_size: u8,
    /// The first wait after a dequeue found nothing (or failed). Default 200 ms.
    pub poll_interval: Duration,
    /// Consecutive empty dequeues double the wait up to this. Default 5 s.
    pub idle_backoff_max: Duration,
    /// Re-runs of the handler within one dequeue after a transient failure or a conflict.
    pub handler_retry: HandlerRetry,
    /// `None` (the default, the design guide's behaviour): a failed message reappears when
    /// its visibility timeout ends. `Some(base)`: the worker makes it reappear after
    /// `base × 2^(dequeue count − 1)` (one extra request), capped at 7 days.
    pub failure_backoff: Option<Duration>,
    /// Give up on a handler run after this long (the attempt fails and the message is
    /// treated as any failure). Default `None`: no limit — visibility is extended for as long
    /// as the handler runs.
    pub handler_timeout: Option<Duration>,
    /// On shutdown, how long running handlers may continue before they are cancelled and
    /// their messages released (made visible at once, for another worker). `Duration::ZERO`
    /// releases at once. Default 30 s.
    pub shutdown_grace: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            visibility_timeout: Duration::from_secs(120),
            max_dequeue_count: 5,
            concurrency: 8,
            batch_size: 32,
            poll_interval: Duration::from_millis(200),
            idle_backoff_max: Duration::from_secs(5),
            handler_retry: HandlerRetry::default(),
            failure_backoff: None,
            handler_timeout: None,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

fn invalid(part: &str, reason: &str) -> Error {
    Error::InvalidConfig {
        part: format!("WorkerOptions::{part}"),
        reason: reason.into(),
    }
}

impl WorkerOptions {
    /// Sets how long a dequeued message stays invisible to other consumers.
    #[must_use]
    pub fn with_visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// Sets after how many dequeues a failing message is moved to the poison queue.
    #[must_use]
    pub fn with_max_dequeue_count(mut self, count: u64) -> Self {
        self.max_dequeue_count = count;
        self
    }

    /// Sets how many handlers run at once.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the messages per dequeue request (at most 32).
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: u8) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the first wait after a dequeue found nothing (or failed).
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the longest wait between empty dequeues.
    #[must_use]
    pub fn with_idle_backoff_max(mut self, max: Duration) -> Self {
        self.idle_backoff_max = max;
        self
    }

    /// Sets the re-runs of the handler within one dequeue.
    #[must_use]
    pub fn with_handler_retry(mut self, retry: HandlerRetry) -> Self {
        self.handler_retry = retry;
        self
    }

    /// Makes a failed message reappear after `base × 2^(dequeue count − 1)` instead of at the
    /// end of its visibility timeout.
    #[must_use]
    pub fn with_failure_backoff(mut self, base: Duration) -> Self {
        self.failure_backoff = Some(base);
        self
    }

    /// Sets how long a handler run may take before the attempt fails.
    #[must_use]
    pub fn with_handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = Some(timeout);
        self
    }

    /// Sets how long running handlers may continue on shutdown before they are cancelled.
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Checks every value.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        if self.visibility_timeout < Duration::from_secs(1)
            || self.visibility_timeout > MAX_VISIBILITY
        {
            return Err(invalid("visibility_timeout", "between 1 second and 7 days"));
        }
        if self.max_dequeue_count == 0 {
            return Err(invalid("max_dequeue_count", "at least 1"));
        }
        if self.concurrency == 0 {
            return Err(invalid("concurrency", "at least 1"));
        }
        if !(1..=32).contains(&self.batch_size) {
            return Err(invalid("batch_size", "1 to 32 messages per dequeue"));
        }
        if self.poll_interval.is_zero() {
            return Err(invalid("poll_interval", "more than zero"));
        }
        if self.idle_backoff_max < self.poll_interval {
            return Err(invalid("idle_backoff_max", "at least poll_interval"));
        }
        if self.failure_backoff.is_some_and(|d| d > MAX_VISIBILITY) {
            return Err(invalid("failure_backoff", "at most 7 days"));
        }
        if self.handler_timeout.is_some_and(|d| d.is_zero()) {
            return Err(invalid("handler_timeout", "more than zero"));
        }
        if self.handler_retry.max_backoff < self.handler_retry.initial_backoff {
            return Err(invalid(
                "handler_retry",
                "max_backoff must be at least initial_backoff",
            ));
        }
        Ok(())
    }

    /// How long a failed message stays hidden, if the worker shortens its timeout.
    pub(crate) fn failure_delay(&self, dequeue_count: u64) -> Option<Duration> {
        let base = self.failure_backoff?;
        let exp = dequeue_count.saturating_sub(1).min(20) as u32;
        Some(base.saturating_mul(1u32 << exp).min(MAX_VISIBILITY))
    }

    /// How often a running handler's message is extended: every half timeout, and often
    /// enough that at least `late` (how long after it is sent a write can land) is always
    /// left of the hold, so the handler can go on sending.
    pub(crate) fn extend_every(&self, late: Duration) -> Duration {
        let half = self.visibility_timeout / 2;
        let spare = self.visibility_timeout.saturating_sub(late) / 2;
        half.min(spare).max(Duration::from_millis(100))
    }

    /// Refuses a visibility timeout within which no write of the handler could be sent:
    /// one not longer than `settings`' late landing.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `visibility_timeout`.
    pub(crate) fn check_lease(&self, settings: &tablekit_azure::Settings) -> Result<()> {
        let late = settings.late_landing();
        if self.visibility_timeout > late {
            return Ok(());
        }
        Err(invalid(
            "visibility_timeout",
            &format!(
                "{:?} is not longer than the queue account's late landing ({late:?}: the \
                 twice the server timeout): a handler's writes are sent only \
                 if they land while the worker holds the message, so none could be",
                self.visibility_timeout
            ),
        ))
    }
}

/// Re-runs of a handler within one dequeue, for failures a prompt re-run may fix. The
/// handler runs from its start each time, which is safe because it is idempotent.
///
/// Each request a step sends is already retried on transient failures by its account's
/// [`tablekit_azure::RetryPolicy`]; these retries come on top, and also cover ETag
/// conflicts (a re-run re-reads) and writes whose outcome was unknown.
///
/// Built from [`HandlerRetry::default`] or [`HandlerRetry::none`] and the `with_*` setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerRetry {
    /// Re-runs after the first run. Default 3.
    pub max_retries: u32,
    /// Backoff before the first re-run; doubles each time, with jitter. Default 100 ms.
    pub initial_backoff: Duration,
    /// Largest backoff. Default 2 s.
    pub max_backoff: Duration,
}

impl Default for HandlerRetry {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl HandlerRetry {
    /// Sets the re-runs after the first run.
    #[must_use]
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets the backoff before the first re-run (it doubles each time).
    #[must_use]
    pub fn with_initial_backoff(mut self, initial_backoff: Duration) -> Self {
        self.initial_backoff = initial_backoff;
        self
    }

    /// Sets the largest backoff.
    #[must_use]
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// No re-runs: a failed run fails the attempt.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// Whether a handler that failed with `error` is worth re-running at once: transient
    /// failures ([`Error::is_retryable`]), ETag and insert conflicts (412, 409) and unknown
    /// outcomes. Validation errors, missing resources and handler-defined errors are not.
    pub fn retries(error: &Error) -> bool {
        error.is_retryable()
            || matches!(
                error.kind(),
                ErrorKind::PreconditionFailed | ErrorKind::AlreadyExists | ErrorKind::Indeterminate
            )
    }

    /// The backoff before re-run `retry` (1-based), or `None` when re-runs are exhausted.
    pub(crate) fn delay(&self, retry: u32) -> Option<Duration> {
        if retry == 0 || retry > self.max_retries {
            return None;
        }
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << (retry - 1).min(16))
            .min(self.max_backoff);
        // Half fixed, half random: duplicates that conflicted do not re-run in lockstep.
        Some(exp / 2 + exp.mul_f64(unit_noise()) / 2)
    }
}

/// A number in [0, 1) that differs between calls; enough to decorrelate retries.
fn unit_noise() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let mut x = STATE.fetch_add(nanos | 1, Ordering::Relaxed) ^ nanos;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit_core::Target;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        WorkerOptions::default().validate().unwrap();
        let cases: Vec<(WorkerOptions, &str)> = vec![
            (
                WorkerOptions::default().with_visibility_timeout(Duration::from_millis(500)),
                "visibility_timeout",
            ),
            (
                WorkerOptions::default().with_max_dequeue_count(0),
                "max_dequeue_count",
            ),
            (WorkerOptions::default().with_concurrency(0), "concurrency"),
            (WorkerOptions::default().with_batch_size(33), "batch_size"),
            (
                WorkerOptions::default().with_idle_backoff_max(Duration::from_millis(1)),
                "idle_backoff_max",
            ),
        ];
        for (options, field) in cases {
            match options.validate() {
                Err(Error::InvalidConfig { part, .. }) => assert!(part.ends_with(field), "{part}"),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn failure_backoff_doubles_per_dequeue() {
        let o = WorkerOptions::default().with_failure_backoff(Duration::from_secs(1));
        let delays: Vec<_> = (1..=4).map(|n| o.failure_delay(n).unwrap()).collect();
        assert_eq!(delays, [1, 2, 4, 8].map(Duration::from_secs));
        assert_eq!(o.failure_delay(200), Some(MAX_VISIBILITY));
        assert_eq!(WorkerOptions::default().failure_delay(3), None);
    }

    #[test]
    fn handler_retries_cover_transient_failures_and_conflicts_only() {
        let status = |s| {
            tablekit_core::wire::error_from_response(
                s,
                None,
                String::new(),
                Target::table("t"),
                None,
            )
        };
        for s in [412, 409, 503, 500, 408] {
            assert!(HandlerRetry::retries(&status(s)), "{s}");
        }
        for s in [400, 403, 404] {
            assert!(!HandlerRetry::retries(&status(s)), "{s}");
        }
        let r = HandlerRetry::default();
        assert_eq!(r.delay(4), None);
        for retry in 1..=3 {
            let d = r.delay(retry).unwrap();
            assert!(d <= r.max_backoff && d >= r.initial_backoff / 2, "{d:?}");
        }
        assert_eq!(HandlerRetry::none().delay(1), None);
    }
}
