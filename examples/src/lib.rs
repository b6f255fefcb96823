//! Shared plumbing for the example binaries: unique table names, and how to report what an
//! example did. Every example connects with `Account::from_env_or_emulator()`.

use tablekit::azure::{Account, Metrics, MetricsSnapshot};

/// A table name unique to this run, so examples can run concurrently and against real accounts.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}{}x{nanos:x}", std::process::id())
}

/// Prints one line: what a step did and the requests it took.
pub fn report(step: &str, requests: &MetricsSnapshot) {
    println!("  {step:<58} {:>4} request(s)", requests.requests());
}

/// Counts the requests an example sends, step by step: [`Meter::report`] prints the requests
/// since the previous report. Examples call it between the regions the book includes, so the
/// book shows the pattern and the terminal shows what it cost.
#[derive(Debug)]
pub struct Meter {
    metrics: Metrics,
    last: MetricsSnapshot,
}

impl Meter {
    /// Starts counting the requests of `account`.
    pub fn new(account: &Account) -> Self {
        let metrics = account.metrics().clone();
        let last = metrics.snapshot();
        Self { metrics, last }
    }

    /// Prints `step` with the requests sent since the previous report (or since [`Meter::new`]).
    pub fn report(&mut self, step: &str) {
        let now = self.metrics.snapshot();
        report(step, &now.since(&self.last));
        self.last = now;
    }

    /// Forgets the requests since the previous report: the example's own checks, which the
    /// next report should not count.
    pub fn skip(&mut self) {
        self.last = self.metrics.snapshot();
    }

    /// The requests the account has sent, in total.
    pub fn total(&self) -> u64 {
        self.metrics.snapshot().requests()
    }
}
