//! From the command line's connection options to an [`Account`]: the one place that knows
//! how the tool authenticates.

use std::path::PathBuf;
use std::time::Duration;

use tablekit::azure::identity::TokenScope;
use tablekit::azure::{
    ACCOUNT_NAME_ENV, Account, AccountBuilder, BLOB_ENDPOINT_ENV, CONNECTION_STRING_ENV,
    ENDPOINT_SUFFIX_ENV, Endpoints, QUEUE_ENDPOINT_ENV, ROOT_CERTIFICATE_ENV, RetryPolicy,
    ScanPolicy, Settings, TABLE_ENDPOINT_ENV, TOKEN_SCOPE_ENV, TableService,
};

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
    /// `--account`: Microsoft Entra ID with the default credential chain.
    pub(crate) account: Option<String>,
    /// `--endpoint-suffix` (Entra ID).
    pub(crate) endpoint_suffix: Option<String>,
    /// `--queue-endpoint` (Entra ID).
    pub(crate) queue_endpoint: Option<String>,
    /// `--blob-endpoint` (Entra ID).
    pub(crate) blob_endpoint: Option<String>,
    /// `--token-scope` (Entra ID): `storage`, `account`, `cosmos` or a scope URI.
    pub(crate) token_scope: Option<String>,
    /// `--root-certificate`: a PEM file of extra root certificates, for any connection.
    pub(crate) root_certificate: Option<PathBuf>,
    /// Whether the environment applies (`$AZURE_STORAGE_CONNECTION_STRING`,
    /// `$AZURE_STORAGE_ACCOUNT_NAME` and the variables that go with it); not to a copy's
    /// destination.
    pub(crate) use_env: bool,
    /// `--retries`: transient-failure retries (`None`: tablekit's default schedule).
    pub(crate) retries: Option<usize>,
    /// `--max-rate`: entities per second the account's budget admits at most.
    pub(crate) max_rate: Option<f64>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("connection_string", &self.connection_string.is_some())
            .field("sas", &self.sas.is_some())
            .field("account", &self.account)
            .field("use_env", &self.use_env)
            .finish_non_exhaustive()
    }
}

/// The settings the tool runs with: the ones tablekit derives for the account's table
/// endpoint (Azure Table storage, or the Cosmos DB Table API with its limits and budgets),
/// with table scans refused unless the command opts in for that query (`query --allow-scan`,
/// whole-table transfers) and `--retries` applied to the retry schedule.
pub(crate) fn settings(base: &Settings, retries: Option<usize>, max_rate: Option<f64>) -> Settings {
    let mut settings = base.clone();
    settings.scan_policy = ScanPolicy::deny_table_scans();
    if let Some(n) = retries {
        settings.retry = retry_schedule(&settings.retry, n);
    }
    if let Some(rate) = max_rate {
        // The governor admits `utilization` of a budget: this budget admits `rate`, and never
        // more than the profile's own.
        let throughput = &mut settings.throughput;
        let budget = rate / throughput.utilization;
        throughput.per_account = throughput.per_account.min(budget);
    }
    settings
}

/// Checks `--max-rate` before anything is sent.
///
/// # Errors
/// A usage error for a rate that is not a positive number.
pub(crate) fn check_max_rate(rate: Option<f64>) -> CliResult<()> {
    match rate {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(CliError::usage(
            "--max-rate must be a positive number of entities per second",
        )),
        _ => Ok(()),
    }
}

/// `base` with `retries` scheduled delays: its first `retries`, or all of them followed by
/// its longest delay repeated. `0` is no retry at all (not even the immediate one after a
/// broken connection).
pub(crate) fn retry_schedule(base: &RetryPolicy, retries: usize) -> RetryPolicy {
    if retries == 0 {
        return RetryPolicy::none();
    }
    let longest = base
        .schedule
        .iter()
        .max()
        .copied()
        .unwrap_or(Duration::from_secs(30));
    let mut retry = base.clone();
    retry.schedule.truncate(retries);
    retry.schedule.resize(retries, longest);
    retry
}

/// Connects as the options say, in this order: a SAS (`--sas`, or a SAS URL as
/// `--table-endpoint`); `--connection-string`; `--account` (Microsoft Entra ID); then, from the
/// environment (when `use_env`), `$AZURE_STORAGE_CONNECTION_STRING`, else
/// `$AZURE_STORAGE_ACCOUNT_NAME` (Entra ID); else the local emulator. `--root-certificate`
/// (or `$TABLEKIT_ROOT_CERTIFICATE`) adds trusted roots to any of them. No request is sent,
/// and the credential chain is not asked for a token yet.
///
/// # Errors
/// Usage errors (exit 2) for contradictory options, malformed connection strings, tokens,
/// endpoints or scopes, and an unreadable certificate file; messages name the offending
/// part, never a secret.
pub(crate) fn connect(options: &ConnectOptions) -> CliResult<Account> {
    let entra_only = [
        ("--endpoint-suffix", options.endpoint_suffix.is_some()),
        ("--queue-endpoint", options.queue_endpoint.is_some()),
        ("--blob-endpoint", options.blob_endpoint.is_some()),
        ("--token-scope", options.token_scope.is_some()),
    ];
    let env = |name: &str| {
        options
            .use_env
            .then(|| std::env::var(name).ok())
            .flatten()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let sas_url = options
        .table_endpoint
        .as_deref()
        .and_then(|e| e.split_once('?'))
        .is_some_and(|(_, query)| !query.is_empty());
    let builder = if options.sas.is_some() || sas_url {
        if options.connection_string.is_some() || options.account.is_some() {
            return Err(CliError::usage(
                "give one of a connection string, --sas/--table-endpoint, or --account",
            ));
        }
        refuse_entra_only(&entra_only, "SAS")?;
        from_connection_string(&sas_connection_string(options)?)?
    } else if let Some(cs) = &options.connection_string {
        if options.account.is_some() {
            return Err(CliError::usage(
                "give either --connection-string or --account, not both",
            ));
        }
        if options.table_endpoint.is_some() {
            return Err(CliError::usage(
                "give either a connection string or --sas/--table-endpoint, not both",
            ));
        }
        refuse_entra_only(&entra_only, "a connection string")?;
        from_connection_string(cs)?
    } else if let Some(name) = &options.account {
        entra(options, name, &|_| None)?
    } else if let Some(cs) = env(CONNECTION_STRING_ENV) {
        refuse_entra_only(&entra_only, "a connection string")?;
        if options.table_endpoint.is_some() {
            return Err(CliError::usage(format!(
                "--table-endpoint needs --sas TOKEN (or the token in the URL's query), or --account NAME for Microsoft Entra ID; ${CONNECTION_STRING_ENV} is set"
            )));
        }
        from_connection_string(&cs)?
    } else if let Some(name) = env(ACCOUNT_NAME_ENV) {
        entra(options, &name, &env)?
    } else if options.table_endpoint.is_some() {
        return Err(CliError::usage(
            "--table-endpoint needs a SAS: --sas TOKEN, or the token in the URL's query (or --account NAME for Microsoft Entra ID)",
        ));
    } else {
        refuse_entra_only(&entra_only, "the local emulator (no --account)")?;
        from_connection_string("UseDevelopmentStorage=true")?
    };
    let root = options
        .root_certificate
        .clone()
        .or_else(|| env(ROOT_CERTIFICATE_ENV).map(PathBuf::from));
    let builder = match root {
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| {
                CliError::usage(format!(
                    "--root-certificate {}: cannot read it: {e}",
                    path.display()
                ))
            })?;
            builder.with_root_certificate(pem)
        }
        None => builder,
    };
    // Built with the settings tablekit derives for the endpoint, then adjusted: a Cosmos DB
    // endpoint keeps its limits and budgets.
    let account = builder
        .build()
        .map_err(|e| CliError::context("connection", &e))?;
    check_max_rate(options.max_rate)?;
    let adjusted = settings(account.settings(), options.retries, options.max_rate);
    account
        .with_settings(adjusted)
        .map_err(|e| CliError::context("connection", &e))
}

fn from_connection_string(cs: &str) -> CliResult<AccountBuilder> {
    AccountBuilder::from_connection_string(cs).map_err(|e| CliError::context("connection", &e))
}

/// Refuses the Entra ID options when another way of connecting was chosen: they would be
/// silently ignored.
fn refuse_entra_only(given: &[(&str, bool)], chosen: &str) -> CliResult<()> {
    match given.iter().find(|(_, is_given)| *is_given) {
        Some((flag, _)) => Err(CliError::usage(format!(
            "{flag} applies to Microsoft Entra ID connections (--account NAME or ${ACCOUNT_NAME_ENV}), not to {chosen}"
        ))),
        None => Ok(()),
    }
}

/// The connection string of a SAS with a table endpoint.
fn sas_connection_string(options: &ConnectOptions) -> CliResult<String> {
    let Some(endpoint) = &options.table_endpoint else {
        return Err(CliError::usage(
            "--sas needs --table-endpoint (the table service URL)",
        ));
    };
    let (url, query) = match endpoint.split_once('?') {
        Some((url, query)) => (url, Some(query)),
        None => (endpoint.as_str(), None),
    };
    let token = match (options.sas.as_deref(), query) {
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
    Ok(format!(
        "TableEndpoint={url};SharedAccessSignature={}",
        token.trim_start_matches('?')
    ))
}

/// A Microsoft Entra ID account `name` with the default credential chain: the options, else
/// the environment variables `env` gives (only when the name came from the environment too,
/// so that `--account` never mixes with another account's settings).
fn entra(
    options: &ConnectOptions,
    name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> CliResult<AccountBuilder> {
    let mut builder = Account::builder(name);
    let suffix = options
        .endpoint_suffix
        .clone()
        .or_else(|| env(ENDPOINT_SUFFIX_ENV));
    if let Some(suffix) = &suffix {
        builder = builder.with_endpoint_suffix(suffix);
    }
    let scope = match &options.token_scope {
        Some(scope) => Some(TokenScope::parse(scope, "--token-scope")),
        None => env(TOKEN_SCOPE_ENV).map(|scope| TokenScope::parse(&scope, TOKEN_SCOPE_ENV)),
    };
    if let Some(scope) = scope {
        builder = builder.with_token_scope(scope.map_err(|e| CliError::context("connection", &e))?);
    }
    let explicit = [
        (
            "--table-endpoint",
            options
                .table_endpoint
                .clone()
                .or_else(|| env(TABLE_ENDPOINT_ENV)),
        ),
        (
            "--queue-endpoint",
            options
                .queue_endpoint
                .clone()
                .or_else(|| env(QUEUE_ENDPOINT_ENV)),
        ),
        (
            "--blob-endpoint",
            options
                .blob_endpoint
                .clone()
                .or_else(|| env(BLOB_ENDPOINT_ENV)),
        ),
    ];
    if explicit.iter().any(|(_, url)| url.is_some()) {
        // The builder takes the three endpoints together: the ones not given are derived
        // here as the builder would derive them.
        let suffix = suffix.as_deref().unwrap_or("core.windows.net");
        let url = |(flag, given): &(&str, Option<String>), service: &str| {
            let text = given
                .clone()
                .unwrap_or_else(|| format!("https://{name}.{service}.{suffix}"));
            text.parse()
                .map_err(|e| CliError::usage(format!("{flag} {text:?}: not a URL ({e})")))
        };
        builder = builder.with_endpoints(Endpoints::new(
            url(&explicit[2], "blob")?,
            url(&explicit[1], "queue")?,
            url(&explicit[0], "table")?,
        ));
    }
    Ok(builder)
}

/// One line describing an account for `--verbose`: its name and table endpoint (the
/// endpoint never carries the SAS, which is kept apart from it).
pub(crate) fn describe(account: &Account) -> String {
    let auth = if account.uses_token() {
        "Microsoft Entra ID"
    } else if account.has_key() {
        "account key"
    } else {
        "SAS"
    };
    let service = if account.settings().table_service == TableService::Cosmos {
        ", Cosmos DB Table API"
    } else {
        ""
    };
    format!(
        "account {} at {} ({auth}{service})",
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
            ..ConnectOptions::default()
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
    fn retries_cut_or_extend_the_schedule_of_the_profile() {
        let base = RetryPolicy::default();
        let secs = |p: &RetryPolicy| p.schedule.iter().map(Duration::as_secs).collect::<Vec<_>>();
        assert_eq!(secs(&retry_schedule(&base, 2)), [2, 4]);
        assert_eq!(secs(&retry_schedule(&base, 6)), [2, 4, 10, 30, 30, 30]);
        assert_eq!(retry_schedule(&base, 2).jitter, base.jitter);
        assert_eq!(retry_schedule(&base, 0), RetryPolicy::none());
        let cosmos = settings(&Settings::cosmos(), Some(1), None);
        assert_eq!(cosmos.table_service, TableService::Cosmos);
        assert_eq!(cosmos.throughput, Settings::cosmos().throughput);
        assert_eq!(secs(&cosmos.retry), [2]);
        assert_eq!(settings(&Settings::default(), None, None).retry, base);
        // --max-rate lowers the account budget to admit that rate, never raises it.
        let limited = settings(&Settings::default(), None, Some(95.0));
        assert!((limited.throughput.per_account - 100.0).abs() < 1e-9);
        assert_eq!(
            settings(&Settings::default(), None, Some(1e9)).throughput,
            Settings::default().throughput
        );
        assert!(
            settings(&Settings::cosmos(), None, Some(95.0))
                .throughput
                .per_account
                < 101.0
        );
        assert!(check_max_rate(Some(0.0)).is_err() && check_max_rate(Some(f64::NAN)).is_err());
    }

    #[test]
    fn a_cosmos_endpoint_keeps_its_profile() {
        let account = connect(&options(
            Some("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=https://acct.table.cosmos.azure.com:443/"),
            None,
            None,
        ))
        .unwrap();
        assert_eq!(account.settings().table_service, TableService::Cosmos);
        assert!(describe(&account).contains("Cosmos DB"));
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

    #[test]
    fn an_account_name_connects_with_entra_id_at_derived_or_given_endpoints() {
        let account = connect(&ConnectOptions {
            account: Some("contoso".into()),
            endpoint_suffix: Some("core.chinacloudapi.cn".into()),
            token_scope: Some("account".into()),
            ..ConnectOptions::default()
        })
        .unwrap();
        assert!(account.uses_token());
        assert_eq!(
            account.endpoints().table.as_str(),
            "https://contoso.table.core.chinacloudapi.cn/"
        );
        assert!(describe(&account).ends_with("(Microsoft Entra ID)"));
        let account = connect(&ConnectOptions {
            account: Some("devstoreaccount1".into()),
            table_endpoint: Some("https://127.0.0.1:5001/devstoreaccount1".into()),
            ..ConnectOptions::default()
        })
        .unwrap();
        assert_eq!(
            account.endpoints().table.as_str(),
            "https://127.0.0.1:5001/devstoreaccount1"
        );
        assert_eq!(
            account.endpoints().queue.as_str(),
            "https://devstoreaccount1.queue.core.windows.net/"
        );
    }

    #[test]
    fn entra_id_options_elsewhere_or_malformed_are_usage_errors() {
        let entra = |f: fn(&mut ConnectOptions)| {
            let mut o = ConnectOptions {
                account: Some("contoso".into()),
                ..ConnectOptions::default()
            };
            f(&mut o);
            connect(&o).unwrap_err()
        };
        for e in [
            // A bearer token never travels in clear text.
            entra(|o| o.table_endpoint = Some("http://127.0.0.1:10002/devstoreaccount1".into())),
            entra(|o| o.token_scope = Some("everything".into())),
            entra(|o| o.account = Some("Not_Valid".into())),
            entra(|o| o.connection_string = Some("UseDevelopmentStorage=true".into())),
            entra(|o| o.root_certificate = Some("/nonexistent/ca.pem".into())),
            connect(&ConnectOptions {
                token_scope: Some("storage".into()),
                ..ConnectOptions::default()
            })
            .unwrap_err(),
            connect(&ConnectOptions {
                connection_string: Some("UseDevelopmentStorage=true".into()),
                endpoint_suffix: Some("core.windows.net".into()),
                ..ConnectOptions::default()
            })
            .unwrap_err(),
        ] {
            assert_eq!(e.exit, crate::exit::Exit::Usage, "{e}");
        }
    }
}
