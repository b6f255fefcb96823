//! Scenario 2: every pattern crate's main write path under scenario 1's fault mix — 10 % of
//! requests reset before forwarding, answered 503, or forwarded with the response dropped —
//! on every proxy the pattern uses; the patterns kept by queued jobs also meet slow primary
//! writes and lost dequeue responses, with a worker running meanwhile (`index.rs`). After the faults are cleared and the pattern has
//! recovered (workers drained, sweeps run), everything is read back: nothing lost, nothing
//! duplicated, no stale or missing index copy, no dangling blob reference, no lost increment.
//!
//! Each test prints one line with its figures: operations, requests, faults by kind, lost and
//! duplicated (both asserted to be 0).

#[path = "../common/mod.rs"]
mod common;

mod data;
mod eventual;
mod index;
mod logs;

use std::time::Duration;

use common::Proxied;
use tablekit_eventual::WorkerOptions;
use tablekit_testkit::{Fault, FaultCounts};

/// Scenario 1's fault mix at scenario 1's rate.
pub(crate) fn arm(p: &Proxied, seed: u64) {
    for proxy in [&p.table, &p.queue, &p.blob] {
        proxy.set_random(
            0.10,
            vec![Fault::Reset, Fault::Status(503), Fault::DropResponse],
            seed,
        );
    }
}

/// Stops injecting and returns what was injected on all three proxies.
pub(crate) fn disarm(p: &Proxied) -> FaultCounts {
    let mut total = FaultCounts::default();
    for proxy in [&p.table, &p.queue, &p.blob] {
        proxy.clear();
        let f = proxy.stats().faults_injected;
        total.reset += f.reset;
        total.delay += f.delay;
        total.status += f.status;
        total.drop_response += f.drop_response;
    }
    total
}

/// What one pattern's run did and found.
pub(crate) struct Figures {
    pub(crate) pattern: &'static str,
    pub(crate) operations: usize,
    pub(crate) faults: FaultCounts,
    pub(crate) lost: usize,
    pub(crate) duplicated: usize,
}

impl Figures {
    /// Prints the closing-note line, then asserts that the whole mix landed and that nothing
    /// was lost or duplicated.
    pub(crate) fn report(self, p: &Proxied) {
        let requests = p.account.metrics().snapshot().requests();
        let f = self.faults;
        println!(
            "scenario 2 {:<22} {:>5} operations, {:>5} requests; faults: {:>3} resets, {:>3} 503s, {:>3} lost responses, {:>2} slow writes; lost {}, duplicated {}",
            self.pattern,
            self.operations,
            requests,
            f.reset,
            f.status,
            f.drop_response,
            f.delay,
            self.lost,
            self.duplicated
        );
        assert!(
            f.reset > 0 && f.status > 0 && f.drop_response > 0,
            "{}: the whole fault mix landed: {f:?}",
            self.pattern
        );
        assert_eq!(
            (self.lost, self.duplicated),
            (0, 0),
            "{}: lost, duplicated",
            self.pattern
        );
    }
}

/// A worker that notices redelivered messages quickly: messages whose dequeue response was
/// lost stay invisible only 1 s, failed ones come back after 20 ms.
pub(crate) fn fast_worker() -> WorkerOptions {
    WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(3))
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(100))
        .with_failure_backoff(Duration::from_millis(20))
}

/// `expected` (distinct) against what was found (`found` may hold repeats): how many of the
/// expected are missing, and how many found items are extra (repeats or unexpected).
pub(crate) fn lost_and_duplicated<T: Ord + Clone>(expected: &[T], found: &[T]) -> (usize, usize) {
    use std::collections::BTreeSet;
    let want: BTreeSet<T> = expected.iter().cloned().collect();
    let got: BTreeSet<T> = found.iter().cloned().collect();
    let lost = want.difference(&got).count();
    let extra = found.len() - got.len() + got.difference(&want).count();
    (lost, extra)
}
