//! Shared plumbing for the example binaries: where to connect.

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
