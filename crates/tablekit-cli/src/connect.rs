//! From the command line's connection options to an [`Account`]: the one place that knows
//! how the tool authenticates.

use std::time::Duration;

use tablekit::azure::{Account, CONNECTION_STRING_ENV, RetryPolicy, ScanPolicy, Settings};

use crate::exit::{CliError, CliResult};

/// Where to connect, as given on the command line. `Debug` shows no secret.
#[derive(Clone, Default)]
pub(crate) struct ConnectOptions {
    /// `--connection-string`.
    pub(crate) connection_string: Option<String>,
    /// `--sas`.
    pub(crate) sas: Option<String>,
    /// `--table-endpoint` (possibly a SAS URL).
    pub(crate) table_endpoint: Option<String>,
    /// Whether `$AZURE_STORAGE_CONNECTION_STRING` applies (not to a copy's destination).
    pub(crate) use_env: bool,
    /// `--retries`: transient-failure retries (`None`: tablekit's default schedule).
    pub(crate) retries: Option<usize>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("connection_string", &self.connection_string.is_some())
            .field("sas", &self.sas.is_some())
            .field("use_env", &self.use_env)
            .finish_non_exhaustive()
    }
}

/// The settings the tool runs with: table scans are refused unless the command opts in for
/// that query (`query --allow-scan`, whole-table transfers); `retries` replaces the default
/// retry schedule.
pub(crate) fn settings(retries: Option<usize>) -> Settings {
    let retry = match retries {
        None => RetryPolicy::default(),
        Some(0) => RetryPolicy::none(),
        Some(n) => RetryPolicy::exponential(n, Duration::from_secs(2), Duration::from_secs(30)),
    };
    Settings {
        scan_policy: ScanPolicy::deny_table_scans(),
        retry,
        ..Settings::default()
    }
}

/// Connects as the options say: a SAS with a table endpoint; else the connection string;
/// else `$AZURE_STORAGE_CONNECTION_STRING` (when `use_env`); else the local emulator.
/// No request is sent.
///
/// # Errors
/// Usage errors (exit 2) for contradictory options and malformed connection strings or
/// tokens; messages name the offending part, never a secret.
pub(crate) fn connect(options: &ConnectOptions) -> CliResult<Account> {
    let connection_string = match (&options.table_endpoint, &options.sas) {
        (Some(endpoint), sas) => {
            if options.connection_string.is_some() {
                return Err(CliError::usage(
                    "give either a connection string or --sas/--table-endpoint, not both",
                ));
            }
            let (url, query) = match endpoint.split_once('?') {
                Some((url, query)) => (url, Some(query)),
                None => (endpoint.as_str(), None),
            };
            let token = match (sas.as_deref(), query) {
                (Some(token), _) => token,
                (None, Some(query)) if !query.is_empty() => query,
                _ => {
                    return Err(CliError::usage(
                        "--table-endpoint needs a SAS: --sas TOKEN, or the token in the URL's query",
                    ));
                }
            };
            if token.contains(';') || url.contains(';') {
                return Err(CliError::usage(
                    "the SAS token and the endpoint may not contain `;`",
                ));
            }
            format!(
                "TableEndpoint={url};SharedAccessSignature={}",
                token.trim_start_matches('?')
            )
        }
        (None, Some(_)) => {
            return Err(CliError::usage(
                "--sas needs --table-endpoint (the table service URL)",
            ));
        }
        (None, None) => match &options.connection_string {
            Some(cs) => cs.clone(),
            None => match std::env::var(CONNECTION_STRING_ENV) {
                Ok(cs) if options.use_env && !cs.trim().is_empty() => cs,
                _ => "UseDevelopmentStorage=true".to_owned(),
            },
        },
    };
    let account = Account::from_connection_string(&connection_string)
        .map_err(|e| CliError::context("connection", &e))?;
    account
        .with_settings(settings(options.retries))
        .map_err(|e| CliError::context("connection", &e))
}

/// One line describing an account for `--verbose`: its name and table endpoint (the
/// endpoint never carries the SAS, which is kept apart from it).
pub(crate) fn describe(account: &Account) -> String {
    format!(
        "account {} at {}",
        account.name(),
        account.endpoints().table.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(cs: Option<&str>, sas: Option<&str>, endpoint: Option<&str>) -> ConnectOptions {
        ConnectOptions {
            connection_string: cs.map(str::to_owned),
            sas: sas.map(str::to_owned),
            table_endpoint: endpoint.map(str::to_owned),
            use_env: false,
            retries: None,
        }
    }

    #[test]
    fn a_sas_url_or_a_token_with_an_endpoint_connect_and_never_show_the_signature() {
        let secret = "c2VjcmV0LXNpZ25hdHVyZQ%3D%3D";
        let url = format!("https://acct.table.core.windows.net/?sv=2019-02-02&sp=r&sig={secret}");
        let account = connect(&options(None, None, Some(&url))).unwrap();
        assert_eq!(account.name(), "acct");
        assert!(!format!("{account:?} {}", describe(&account)).contains("c2VjcmV0"));
        let token = format!("sv=2019-02-02&sp=r&sig={secret}");
        let account = connect(&options(
            None,
            Some(&token),
            Some("https://acct.table.core.windows.net"),
        ))
        .unwrap();
        assert!(!describe(&account).contains("c2VjcmV0"));
    }

    #[test]
    fn contradictory_or_incomplete_options_are_usage_errors() {
        for bad in [
            options(None, Some("sv=1&sig=x"), None),
            options(None, None, Some("https://acct.table.core.windows.net")),
            options(
                Some("UseDevelopmentStorage=true"),
                Some("sv=1&sig=x"),
                Some("https://a.table.core.windows.net"),
            ),
            options(Some("AccountName=a;AccountKey=%%%"), None, None),
        ] {
            let e = connect(&bad).unwrap_err();
            assert_eq!(e.exit, crate::exit::Exit::Usage, "{e}");
            assert!(!e.message.contains("%%%"), "{e}");
        }
        let emulator = connect(&options(None, None, None)).unwrap();
        assert_eq!(emulator.name(), "devstoreaccount1");
    }
}
