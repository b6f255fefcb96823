//! Shared plumbing for the example binaries: where to connect, and how to report what an
//! example did.

use tablekit_azure::{Account, MetricsSnapshot};

/// The connection string an example uses: `--connection-string <cs>` on the command line, else
/// `$AZURE_STORAGE_CONNECTION_STRING`, else `UseDevelopmentStorage=true` (Azurite on its
/// standard ports).
pub fn connection_string() -> String {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--connection-string" {
            if let Some(value) = args.next() {
                return value;
            }
        } else if let Some(value) = arg.strip_prefix("--connection-string=") {
            return value.to_owned();
        }
    }
    std::env::var("AZURE_STORAGE_CONNECTION_STRING")
        .ok()
        .filter(|cs| !cs.trim().is_empty())
        .unwrap_or_else(|| "UseDevelopmentStorage=true".to_owned())
}

/// The account an example runs against (see [`connection_string`]).
///
/// # Errors
/// A malformed connection string.
pub fn account() -> tablekit_azure::core::Result<Account> {
    Account::from_connection_string(&connection_string())
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
