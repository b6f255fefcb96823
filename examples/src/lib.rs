//! Shared plumbing for the example binaries: where to connect, and how to report what an
//! example did.

use tablekit::azure::{ACCOUNT_NAME_ENV, Account, CONNECTION_STRING_ENV, Metrics, MetricsSnapshot};

/// The connection string given as `--connection-string <cs>` (or `--connection-string=<cs>`).
fn connection_string_arg() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--connection-string" {
            if let Some(value) = args.next() {
                return Some(value);
            }
        } else if let Some(value) = arg.strip_prefix("--connection-string=") {
            return Some(value.to_owned());
        }
    }
    None
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

/// The account an example runs against: `--connection-string <cs>` on the command line;
/// else the environment as [`Account::from_env`] reads it — `$AZURE_STORAGE_CONNECTION_STRING`,
/// or `$AZURE_STORAGE_ACCOUNT_NAME` with a Microsoft Entra ID identity (managed identity,
/// workload identity, a service principal in the environment, `az login`); else Azurite on its
/// standard ports.
///
/// # Errors
/// A malformed connection string or environment.
pub fn account() -> tablekit::Result<Account> {
    if let Some(cs) = connection_string_arg() {
        return Account::from_connection_string(&cs);
    }
    if env_set(CONNECTION_STRING_ENV) || env_set(ACCOUNT_NAME_ENV) {
        return Account::from_env();
    }
    Account::from_connection_string("UseDevelopmentStorage=true")
}

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
