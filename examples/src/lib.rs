//! Shared plumbing for the example binaries: where to connect, and how to report what an
//! example did.

use tablekit_azure::{ACCOUNT_NAME_ENV, Account, CONNECTION_STRING_ENV, MetricsSnapshot};

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
pub fn account() -> tablekit_azure::core::Result<Account> {
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
