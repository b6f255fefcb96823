//! Deadlines on when a write may land, and the horizon of writes that may still land.
//!
//! A request attempt the client gave up on can still be applied by the service: it may
//! reach the service as late as the client's request timeout, and the service finishes it
//! within the server timeout the request carries (`timeout=`). So an attempt sent at `t`
//! lands, if ever, by `t + Settings::late_landing()`. Code that must know when nothing it
//! sent can land any more — a queued job about to decide that its write never will, a worker
//! whose lease on a message ends, a sweeper of orphaned blobs — uses the two tools here:
//!
//! - [`Deadline::scope`]: every attempt sent inside it is sent only if it lands by the
//!   deadline; otherwise it is refused unsent with
//!   [`Error::DeadlineExceeded`](tablekit_core::Error::DeadlineExceeded). Every request also
//!   has a deadline of its own: [`Settings::write_settles_within`](crate::Settings::write_settles_within)
//!   from its start, so waits before an attempt (for throughput budget, for a token) can
//!   never make a write land later than that bound says.
//! - [`track_landing`]: runs a future and returns, with its output, the instant by which
//!   every attempt it sent that did not get a definite answer has landed or never will.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A moment by which every request attempt sent in its [`scope`](Deadline::scope) must be
/// able to land. Cheap to clone; clones share the moment, which
/// [`set`](Deadline::set) moves (a lease that was extended).
///
/// ```
/// use std::time::Duration;
/// use tablekit_azure::Deadline;
///
/// # async fn f(table: tablekit_azure::Table) -> tablekit_core::Result<()> {
/// let deadline = Deadline::after(Duration::from_secs(120));
/// // Every attempt of this write is sent only if it lands within the two minutes;
/// // otherwise it fails with `Error::DeadlineExceeded`, unsent.
/// deadline.scope(table.delete_if_exists(("Sales", "000223"))).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Deadline {
    at: Arc<Mutex<Instant>>,
}

impl Deadline {
    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Self {
            at: Arc::new(Mutex::new(at)),
        }
    }

    /// A deadline `after` from now.
    pub fn after(after: Duration) -> Self {
        Self::at(Instant::now() + after)
    }

    /// The moment, as it is now.
    pub fn instant(&self) -> Instant {
        *self.at.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the moment (for every clone, and for scopes already running).
    pub fn set(&self, at: Instant) {
        *self.at.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }

    /// How long is left, zero once passed.
    pub fn remaining(&self) -> Duration {
        self.instant().saturating_duration_since(Instant::now())
    }

    /// Runs `future` with this deadline on every request it sends (on this task; a task it
    /// spawns does not inherit it). Scopes nest: the earliest deadline of the enclosing
    /// scopes applies.
    pub async fn scope<F: Future>(&self, future: F) -> F::Output {
        let mut scope = current_scope();
        scope.deadlines.push(self.clone());
        SCOPE.scope(scope, future).await
    }
}

/// What the scopes around the running code hold.
#[derive(Clone, Default)]
struct Scope {
    deadlines: Vec<Deadline>,
    trackers: Vec<Arc<Mutex<Option<Instant>>>>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

fn current_scope() -> Scope {
    SCOPE.try_with(Clone::clone).unwrap_or_default()
}

/// The earliest deadline of the scopes around the running code.
pub(crate) fn current() -> Option<Instant> {
    SCOPE
        .try_with(|s| s.deadlines.iter().map(Deadline::instant).min())
        .ok()
        .flatten()
}

/// Records that an attempt may land until `until`, for the trackers around the running code.
pub(crate) fn may_land_until(until: Instant) {
    let _ = SCOPE.try_with(|s| {
        for tracker in &s.trackers {
            let mut horizon = tracker.lock().unwrap_or_else(PoisonError::into_inner);
            *horizon = Some(horizon.map_or(until, |h| h.max(until)));
        }
    });
}

/// Runs `future` and returns its output with the instant by which every request attempt it
/// sent (on this task) that got no definite answer — a timeout, a broken connection, a lost
/// response, a 5xx other than 503 — has landed or never will; `None` when every attempt got
/// one. Sleeping until that instant and then reading gives a read no late attempt of
/// `future` can change afterwards.
pub async fn track_landing<F: Future>(future: F) -> (F::Output, Option<Instant>) {
    let tracker = Arc::new(Mutex::new(None));
    let mut scope = current_scope();
    scope.trackers.push(tracker.clone());
    let output = SCOPE.scope(scope, future).await;
    let horizon = *tracker.lock().unwrap_or_else(PoisonError::into_inner);
    (output, horizon)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scopes_nest_to_the_earliest_deadline_and_trackers_see_every_landing() {
        assert_eq!(current(), None);
        let now = Instant::now();
        let outer = Deadline::at(now + Duration::from_secs(10));
        let inner = Deadline::at(now + Duration::from_secs(5));
        let seen = outer
            .scope(async {
                let outer_only = current();
                let both = inner.scope(async { current() }).await;
                inner.set(now + Duration::from_secs(1));
                (outer_only, both)
            })
            .await;
        assert_eq!(
            seen,
            (
                Some(now + Duration::from_secs(10)),
                Some(now + Duration::from_secs(5))
            )
        );
        assert_eq!(
            inner.instant(),
            now + Duration::from_secs(1),
            "clones share the moment"
        );

        let (_, none) = track_landing(async {}).await;
        assert_eq!(none, None);
        let (inner_horizon, outer_horizon) = track_landing(async {
            may_land_until(now + Duration::from_secs(3));
            let ((), inner) = track_landing(async {
                may_land_until(now + Duration::from_secs(2));
            })
            .await;
            inner
        })
        .await;
        assert_eq!(inner_horizon, Some(now + Duration::from_secs(2)));
        assert_eq!(
            outer_horizon,
            Some(now + Duration::from_secs(3)),
            "the latest, seen by both"
        );
        // Outside any tracker, nothing is recorded and nothing fails.
        may_land_until(now);
    }
}
