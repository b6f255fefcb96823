//! Retry policies: transient failures (backoff with jitter) and ETag conflicts.

use std::time::Duration;

use tablekit_core::{Error, ErrorKind};

/// Retries of transient failures: 408, 429, 500, 502, 503, 504, timeouts and connection
/// errors. Never 400, 401, 403, 404, 409 or 412.
///
/// The default schedule is the one the design guide recommends — wait 2 s, 4 s, 10 s, 30 s,
/// then give up — each delay with ±20 % jitter so that clients throttled together do not
/// retry together. A connection error is first retried at once (it is not throttling).
///
/// A throttling answer's retry hint (`x-ms-retry-after-ms`, `Retry-After`) lengthens its
/// delay: the delay is the larger of the schedule's and the hint, the hint capped at
/// [`max_retry_after`](Self::max_retry_after).
///
/// Built from [`RetryPolicy::default`], [`RetryPolicy::none`] or
/// [`RetryPolicy::exponential`] and the `with_*` setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Delays before each retry; the number of entries is the number of retries.
    pub schedule: Vec<Duration>,
    /// Relative jitter applied to each delay (0.2 = ±20 %).
    pub jitter: f64,
    /// Retry a connection error once immediately before following the schedule.
    pub immediate_first_retry_on_connection_error: bool,
    /// The longest server retry hint honoured; a longer one is cut to this, so that
    /// [`max_total_delay`](Self::max_total_delay) stays a bound. Default 2 s (below the
    /// default schedule's shortest delay, which the hint therefore never lengthens past its
    /// jitter).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            schedule: [2, 4, 10, 30].map(Duration::from_secs).to_vec(),
            jitter: 0.2,
            immediate_first_retry_on_connection_error: true,
            max_retry_after: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Sets the delays before each retry (their number is the number of retries).
    #[must_use]
    pub fn with_schedule(mut self, schedule: impl Into<Vec<Duration>>) -> Self {
        self.schedule = schedule.into();
        self
    }

    /// Sets the relative jitter applied to each delay (0.2 = ±20 %).
    #[must_use]
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets whether a connection error is retried once at once, before the schedule.
    #[must_use]
    pub fn with_immediate_first_retry_on_connection_error(mut self, immediate: bool) -> Self {
        self.immediate_first_retry_on_connection_error = immediate;
        self
    }

    /// Sets the longest server retry hint honoured.
    #[must_use]
    pub fn with_max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }

    /// No retries at all.
    pub fn none() -> Self {
        Self {
            schedule: Vec::new(),
            jitter: 0.0,
            immediate_first_retry_on_connection_error: false,
            max_retry_after: Duration::ZERO,
        }
    }

    /// An exponential schedule: `retries` delays starting at `initial`, doubling, capped at
    /// `max`.
    pub fn exponential(retries: usize, initial: Duration, max: Duration) -> Self {
        let schedule = (0..retries)
            .map(|i| initial.saturating_mul(1u32 << i.min(20)).min(max))
            .collect();
        Self {
            schedule,
            ..Self::default()
        }
    }

    /// Attempts a request gets at most: the first, one per scheduled delay, and the immediate
    /// retry of a connection error when enabled.
    pub fn max_attempts(&self) -> u32 {
        let immediate = u32::from(self.immediate_first_retry_on_connection_error);
        u32::try_from(self.schedule.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1 + immediate)
    }

    /// The longest the retry delays add up to, every delay at the top of its jitter or
    /// lengthened to [`max_retry_after`](Self::max_retry_after) by a hint.
    pub fn max_total_delay(&self) -> Duration {
        let jitter = 1.0 + self.jitter.max(0.0);
        self.schedule.iter().fold(Duration::ZERO, |sum, d| {
            sum.saturating_add(d.mul_f64(jitter).max(self.max_retry_after))
        })
    }

    /// The delay before retry number `retry` (1-based) after `error`, or `None` when the error
    /// is not transient or the schedule is exhausted.
    pub fn delay(&self, retry: u32, error: &Error) -> Option<Duration> {
        if !error.is_retryable() {
            return None;
        }
        let immediate =
            self.immediate_first_retry_on_connection_error && error.kind() == ErrorKind::Transport;
        let index = if immediate {
            if retry == 1 {
                return Some(Duration::ZERO);
            }
            retry as usize - 2
        } else {
            retry as usize - 1
        };
        let base = *self.schedule.get(index)?;
        let delay = jittered(base, self.jitter);
        let hint = match error {
            Error::Throttled {
                retry_after: Some(hint),
                ..
            } => (*hint).min(self.max_retry_after),
            _ => Duration::ZERO,
        };
        Some(delay.max(hint))
    }
}

/// Retries of optimistic-concurrency conflicts (412, or 409 when two writers insert the same
/// new entity): re-read, re-apply, re-write, with jittered exponential backoff.
///
/// Built from [`ConflictRetry::default`] and the `with_*` setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ConflictRetry {
    /// Attempts in total (the first one included). Default 30.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles each time. Default 5 ms.
    pub initial_backoff: Duration,
    /// Largest backoff. Default 500 ms.
    pub max_backoff: Duration,
}

impl Default for ConflictRetry {
    fn default() -> Self {
        Self {
            max_attempts: 30,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(500),
        }
    }
}

impl ConflictRetry {
    /// Sets the attempts in total, the first one included.
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets the backoff before the second attempt (it doubles each time).
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

    /// The backoff before attempt `attempt` (2-based: the first retry), full jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(2).min(16))
            .min(self.max_backoff);
        exp.mul_f64(random_unit())
    }
}

/// `base` ± `jitter` × `base`.
fn jittered(base: Duration, jitter: f64) -> Duration {
    if jitter <= 0.0 || base.is_zero() {
        return base;
    }
    let factor = 1.0 + jitter * (2.0 * random_unit() - 1.0);
    base.mul_f64(factor.max(0.0))
}

/// A uniform number in [0, 1) from a per-thread xorshift generator seeded by the clock; good
/// enough to decorrelate retries, and free of a dependency.
fn random_unit() -> f64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
            (nanos ^ 0x9E37_79B9_7F4A_7C15) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablekit_core::Target;

    fn status(code: u16) -> Error {
        tablekit_core::wire::error_from_response(
            code,
            None,
            String::new(),
            Target::table("t"),
            None,
        )
    }

    #[test]
    fn the_default_schedule_is_2_4_10_30_seconds_with_jitter_then_stop() {
        let p = RetryPolicy::default();
        for (retry, secs) in [(1, 2.0), (2, 4.0), (3, 10.0), (4, 30.0)] {
            for e in [status(503), status(500), status(408), status(429)] {
                let d = p.delay(retry, &e).unwrap().as_secs_f64();
                assert!((secs * 0.8..=secs * 1.2).contains(&d), "retry {retry}: {d}");
            }
        }
        assert_eq!(p.delay(5, &status(503)), None, "four retries, then give up");
    }

    #[test]
    fn connection_errors_are_retried_at_once_first() {
        let p = RetryPolicy::default();
        let e = Error::Transport {
            message: "reset".into(),
            source: None,
        };
        assert_eq!(p.delay(1, &e), Some(Duration::ZERO));
        let second = p.delay(2, &e).unwrap().as_secs_f64();
        assert!((1.6..=2.4).contains(&second));
        assert_eq!(p.delay(6, &e), None);
    }

    #[test]
    fn permanent_errors_are_never_retried() {
        let p = RetryPolicy::default();
        for code in [400, 401, 403, 404, 409, 412, 413] {
            assert_eq!(p.delay(1, &status(code)), None, "{code}");
        }
        let invalid = Error::InvalidFilter { reason: "x".into() };
        assert_eq!(p.delay(1, &invalid), None);
    }

    #[test]
    fn the_worst_case_schedule_counts_every_attempt_and_the_top_of_the_jitter() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_attempts(), 6, "first + 4 scheduled + 1 immediate");
        let total = p.max_total_delay().as_secs_f64();
        assert!((total - 46.0 * 1.2).abs() < 1e-6, "{total}");
        assert_eq!(RetryPolicy::none().max_attempts(), 1);
        assert_eq!(RetryPolicy::none().max_total_delay(), Duration::ZERO);
    }

    #[test]
    fn a_retry_hint_lengthens_the_delay_up_to_its_cap() {
        let p = RetryPolicy::exponential(3, Duration::from_millis(10), Duration::from_secs(1))
            .with_max_retry_after(Duration::from_secs(5));
        let hinted = |ms: u64| Error::Throttled {
            status: 429,
            code: None,
            message: String::new(),
            scope: tablekit_core::ThrottleScope::Unspecified,
            retry_after: Some(Duration::from_millis(ms)),
            ids: tablekit_core::RequestIds::default(),
        };
        assert!(p.delay(1, &hinted(300)).unwrap() >= Duration::from_millis(300));
        assert_eq!(p.delay(1, &hinted(60_000)).unwrap(), Duration::from_secs(5));
        // A hint shorter than the schedule's delay does not shorten it.
        let d = p.delay(3, &hinted(1)).unwrap();
        assert!(d >= Duration::from_millis(32), "{d:?}");
        assert_eq!(p.delay(4, &hinted(300)), None, "the schedule still ends");
        // Each delay may reach the cap: the bound says so.
        assert_eq!(p.max_total_delay(), Duration::from_secs(15));
        // The default cap is below the default schedule's delays: its bound is unchanged.
        let d = RetryPolicy::default();
        assert!((d.max_total_delay().as_secs_f64() - 46.0 * 1.2).abs() < 1e-6);
    }

    #[test]
    fn conflict_backoff_grows_and_is_capped() {
        let c = ConflictRetry::default();
        for attempt in 2..40 {
            assert!(c.backoff(attempt) <= c.max_backoff);
        }
        assert!(c.backoff(2) <= c.initial_backoff);
    }
}
