//! [`AccountBuilder`]: accounts from parts — a name, endpoints or an endpoint suffix, a token
//! credential and its scope, extra root certificates, settings — and from the environment.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use azure_core::Url;
use azure_core::auth::TokenCredential;
use tablekit_core::{Error, Result};

use super::connection_string::{self, endpoint};
use super::token::{DEFAULT_REFRESH_MARGIN, ServiceScopes, TokenCache, TokenScope};
use super::{Account, CONNECTION_STRING_ENV, Credentials, Endpoints};
use crate::settings::Settings;

/// The environment variable naming the storage account when no connection string is given;
/// the account then authenticates with the default credential chain.
pub const ACCOUNT_NAME_ENV: &str = "AZURE_STORAGE_ACCOUNT_NAME";
/// The environment variable with the endpoint suffix (default `core.windows.net`; e.g.
/// `core.chinacloudapi.cn`, `core.usgovcloudapi.net`).
pub const ENDPOINT_SUFFIX_ENV: &str = "AZURE_STORAGE_ENDPOINT_SUFFIX";
/// The environment variable with an explicit table endpoint (Azurite, a custom domain).
pub const TABLE_ENDPOINT_ENV: &str = "AZURE_STORAGE_TABLE_ENDPOINT";
/// The environment variable with an explicit queue endpoint.
pub const QUEUE_ENDPOINT_ENV: &str = "AZURE_STORAGE_QUEUE_ENDPOINT";
/// The environment variable with an explicit blob endpoint.
pub const BLOB_ENDPOINT_ENV: &str = "AZURE_STORAGE_BLOB_ENDPOINT";
/// The environment variable with the token scope: `storage` (default), `account`, `cosmos`
/// or a scope URI; see [`TokenScope`].
pub const TOKEN_SCOPE_ENV: &str = "AZURE_STORAGE_TOKEN_SCOPE";
/// The environment variable naming a PEM file of root certificates to trust besides the
/// public ones (an emulator's own authority, Azure Stack Hub, a TLS-inspecting proxy).
pub const ROOT_CERTIFICATE_ENV: &str = "TABLEKIT_ROOT_CERTIFICATE";

const DEFAULT_SUFFIX: &str = "core.windows.net";

/// How the account will authenticate.
#[derive(Clone)]
enum Auth {
    /// A key or SAS from a connection string.
    Parsed(Credentials),
    /// Bearer tokens from this credential.
    Token(Arc<dyn TokenCredential>),
    /// Bearer tokens from the default credential chain (feature `identity`).
    Default,
}

/// Builds an [`Account`] from parts. Start with [`Account::builder`] (a name and a token
/// credential), [`AccountBuilder::from_connection_string`] or [`AccountBuilder::from_env`].
///
/// Nothing is checked or sent until [`build`](AccountBuilder::build).
///
/// ```no_run
/// # fn run(credential: std::sync::Arc<dyn tablekit_azure::identity::TokenCredential>) -> tablekit_core::Result<()> {
/// use tablekit_azure::{Account, TokenScope};
///
/// let account = Account::builder("contosodata")
///     .with_token_credential(credential)
///     .with_endpoint_suffix("core.usgovcloudapi.net")
///     .with_token_scope(TokenScope::Account)
///     .build()?;
/// # let _ = account; Ok(()) }
/// ```
#[derive(Clone)]
pub struct AccountBuilder {
    name: String,
    suffix: String,
    table: Option<Url>,
    queue: Option<Url>,
    blob: Option<Url>,
    auth: Auth,
    scope: TokenScope,
    margin: Duration,
    roots: Vec<Vec<u8>>,
    /// `None`: chosen by the table endpoint (see [`Settings::for_table_endpoint`]).
    settings: Option<Settings>,
    client: Option<reqwest::Client>,
}

impl fmt::Debug for AccountBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            Auth::Parsed(credentials) => format!("{credentials:?}"),
            Auth::Token(_) => "TokenCredential".into(),
            Auth::Default => "DefaultCredentialChain".into(),
        };
        f.debug_struct("AccountBuilder")
            .field("name", &self.name)
            .field("suffix", &self.suffix)
            .field("auth", &auth)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Account {
    /// A builder for the account `name`, authenticating with the default credential chain
    /// (feature `identity`) unless given a credential, at `https://{name}.{service}.core.windows.net`
    /// unless given endpoints or a suffix.
    pub fn builder(name: impl Into<String>) -> AccountBuilder {
        AccountBuilder {
            name: name.into(),
            suffix: DEFAULT_SUFFIX.to_owned(),
            table: None,
            queue: None,
            blob: None,
            auth: Auth::Default,
            scope: TokenScope::default(),
            margin: DEFAULT_REFRESH_MARGIN,
            roots: Vec::new(),
            settings: None,
            client: None,
        }
    }

    /// An account that authenticates with Microsoft Entra ID: every request carries a bearer
    /// token from `credential` (asked for `https://storage.azure.com/.default`, cached, and
    /// replaced 5 minutes before it expires). For other scopes, refresh margins or root
    /// certificates use [`Account::builder`].
    ///
    /// No request is sent, and the credential is not asked yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid account name or an endpoint that is not
    /// `https` (a bearer token must never travel in clear text).
    pub fn from_token_credential(
        name: impl Into<String>,
        endpoints: Endpoints,
        credential: Arc<dyn TokenCredential>,
    ) -> Result<Self> {
        Self::builder(name)
            .with_endpoints(endpoints)
            .with_token_credential(credential)
            .build()
    }

    /// The account the environment describes: `$AZURE_STORAGE_CONNECTION_STRING` when set;
    /// otherwise `$AZURE_STORAGE_ACCOUNT_NAME` with the default credential chain (feature
    /// `identity`), at endpoints derived from `$AZURE_STORAGE_ENDPOINT_SUFFIX` or given by
    /// `$AZURE_STORAGE_{TABLE,QUEUE,BLOB}_ENDPOINT`, with the scope `$AZURE_STORAGE_TOKEN_SCOPE`.
    /// `$TABLEKIT_ROOT_CERTIFICATE` names a PEM file of extra root certificates for either.
    /// See [`AccountBuilder::from_env`].
    ///
    /// No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the variable that is missing or malformed (never a
    /// secret's value), or `credentials` when no credential is available.
    pub fn from_env() -> Result<Self> {
        AccountBuilder::from_env()?.build()
    }

    /// The account the environment describes, as [`Account::from_env`] reads it, when
    /// `$AZURE_STORAGE_CONNECTION_STRING` or `$AZURE_STORAGE_ACCOUNT_NAME` is set (to anything
    /// but blanks); otherwise [`Account::emulator`]: Azurite on its standard ports with the
    /// well-known development account. For programs that run against Azure when deployed and
    /// against a local Azurite on a workstation or in CI without configuration.
    ///
    /// No request is sent, so an emulator that is not running shows at the first request:
    /// an [`Error::Connection`] whose failure is `ConnectionFailure::Refused`.
    ///
    /// # Errors
    /// As [`Account::from_env`] when one of the two variables is set: a malformed variable is
    /// an error, never a silent fallback to the emulator.
    ///
    /// ```
    /// # fn main() -> tablekit_core::Result<()> {
    /// let account = tablekit_azure::Account::from_env_or_emulator()?;
    /// let orders = account.table("Orders")?;
    /// # let _ = orders; Ok(()) }
    /// ```
    pub fn from_env_or_emulator() -> Result<Self> {
        Self::from_lookup_or_emulator(|name| std::env::var(name).ok())
    }

    /// [`Account::from_env_or_emulator`] over any source of variables.
    pub(crate) fn from_lookup_or_emulator(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
        if set(CONNECTION_STRING_ENV) || set(ACCOUNT_NAME_ENV) {
            AccountBuilder::from_lookup(var)?.build()
        } else {
            Ok(Self::emulator())
        }
    }
}

impl AccountBuilder {
    /// A builder for the account a connection string describes (its key or SAS), to add root
    /// certificates, settings or an HTTP client. A token credential given afterwards replaces
    /// the key or SAS.
    ///
    /// # Errors
    /// As [`Account::from_connection_string`].
    pub fn from_connection_string(connection_string: &str) -> Result<Self> {
        let parsed = connection_string::parse(connection_string)?;
        let mut builder = Account::builder(parsed.account);
        builder.suffix = parsed.suffix;
        builder.table = Some(parsed.endpoints.table);
        builder.queue = Some(parsed.endpoints.queue);
        builder.blob = Some(parsed.endpoints.blob);
        builder.auth = Auth::Parsed(parsed.credentials);
        Ok(builder)
    }

    /// A builder from the environment variables [`Account::from_env`] reads. Build it as is,
    /// or add a credential, settings or root certificates first.
    ///
    /// | Variable | Meaning |
    /// |----------|---------|
    /// | `AZURE_STORAGE_CONNECTION_STRING` | a connection string; when set, the variables below but the last are ignored |
    /// | `AZURE_STORAGE_ACCOUNT_NAME` | the account; authenticates with the default credential chain |
    /// | `AZURE_STORAGE_ENDPOINT_SUFFIX` | `core.windows.net` (default), `core.chinacloudapi.cn`, `core.usgovcloudapi.net`, … |
    /// | `AZURE_STORAGE_TABLE_ENDPOINT`, `…_QUEUE_ENDPOINT`, `…_BLOB_ENDPOINT` | explicit `https` endpoints (each optional) |
    /// | `AZURE_STORAGE_TOKEN_SCOPE` | `storage` (default), `account`, `cosmos` or a scope URI |
    /// | `TABLEKIT_ROOT_CERTIFICATE` | a PEM file of root certificates to trust besides the public ones |
    ///
    /// The credential chain reads its own variables (`AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
    /// `AZURE_CLIENT_SECRET`, `AZURE_FEDERATED_TOKEN_FILE`, `AZURE_AUTHORITY_HOST`,
    /// `AZURE_CREDENTIAL_KIND`; see `identity::default_credential`, feature `identity`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the variable that is missing, unreadable or malformed.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`AccountBuilder::from_env`] over any source of variables.
    pub(crate) fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let mut builder = if let Some(cs) = var(CONNECTION_STRING_ENV) {
            Self::from_connection_string(&cs)?
        } else if let Some(name) = var(ACCOUNT_NAME_ENV) {
            let mut builder = Account::builder(name.trim());
            if let Some(suffix) = var(ENDPOINT_SUFFIX_ENV) {
                builder = builder.with_endpoint_suffix(suffix.trim());
            }
            for (name, slot) in [
                (TABLE_ENDPOINT_ENV, &mut builder.table),
                (QUEUE_ENDPOINT_ENV, &mut builder.queue),
                (BLOB_ENDPOINT_ENV, &mut builder.blob),
            ] {
                if let Some(url) = var(name) {
                    *slot = Some(endpoint(name, url.trim())?);
                }
            }
            if let Some(scope) = var(TOKEN_SCOPE_ENV) {
                builder.scope = TokenScope::parse(&scope, TOKEN_SCOPE_ENV)?;
            }
            builder
        } else {
            return Err(Error::InvalidConfig {
                part: CONNECTION_STRING_ENV.into(),
                reason: format!("not set, and neither is {ACCOUNT_NAME_ENV}"),
            });
        };
        if let Some(path) = var(ROOT_CERTIFICATE_ENV) {
            let pem = std::fs::read(path.trim()).map_err(|e| Error::InvalidConfig {
                part: ROOT_CERTIFICATE_ENV.into(),
                reason: format!("cannot read {}: {e}", path.trim()),
            })?;
            builder = builder.with_root_certificate(pem);
        }
        Ok(builder)
    }

    /// Authenticate with bearer tokens from `credential`, replacing any key or SAS.
    #[must_use]
    pub fn with_token_credential(mut self, credential: Arc<dyn TokenCredential>) -> Self {
        self.auth = Auth::Token(credential);
        self
    }

    /// Authenticate with bearer tokens from an `azure_core` 1.x credential of the official
    /// SDK (feature `azure-core-1`, Rust 1.88), replacing any key or SAS: e.g.
    /// `azure_identity::ManagedIdentityCredential::new(None)?` of `azure_identity` 1.x. Its
    /// tokens are cached, refreshed and scoped exactly as a 0.21 credential's; see
    /// [`AzureCore1Credential`](crate::identity::AzureCore1Credential).
    #[cfg(feature = "azure-core-1")]
    #[must_use]
    pub fn with_azure_core_1_credential(
        self,
        credential: Arc<dyn azure_core_1::credentials::TokenCredential>,
    ) -> Self {
        self.with_token_credential(Arc::new(super::core1::AzureCore1Credential::new(
            credential,
        )))
    }

    /// The scope tokens are requested for (default [`TokenScope::Storage`]).
    #[must_use]
    pub fn with_token_scope(mut self, scope: TokenScope) -> Self {
        self.scope = scope;
        self
    }

    /// How long before its expiry a cached token is replaced (default 5 minutes). Requests
    /// waiting meanwhile share the one refresh.
    #[must_use]
    pub fn with_token_refresh_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Explicit endpoints for the three services (Azurite, custom domains, private
    /// endpoints).
    #[must_use]
    pub fn with_endpoints(mut self, endpoints: Endpoints) -> Self {
        self.table = Some(endpoints.table);
        self.queue = Some(endpoints.queue);
        self.blob = Some(endpoints.blob);
        self
    }

    /// The DNS suffix of the account's endpoints (default `core.windows.net`): a sovereign
    /// cloud's, such as `core.chinacloudapi.cn` or `core.usgovcloudapi.net`. Endpoints not
    /// given explicitly are `https://{account}.{service}.{suffix}`, and [`TokenScope::Account`]
    /// names this suffix.
    #[must_use]
    pub fn with_endpoint_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = suffix.into();
        self
    }

    /// Trust the certificates of this PEM text as roots, besides the public ones: an
    /// emulator's own certificate authority, Azure Stack Hub's, or a TLS-inspecting proxy's.
    /// Ignored when an HTTP client is given with [`with_http_client`](Self::with_http_client).
    #[must_use]
    pub fn with_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots.push(pem.into());
        self
    }

    /// Retry, scan, concurrency and throughput settings (default [`Settings::default`], or
    /// [`Settings::cosmos`] for a table endpoint under `table.cosmos.azure.com`).
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// Send with this client instead of a new one of tablekit's (which keeps connections
    /// alive, disables Nagle's algorithm and never follows redirects).
    #[must_use]
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// The account. No request is sent, and a token credential is not asked yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the part at fault: `AccountName` (empty, or not
    /// lowercase letters, digits and hyphens), `EndpointSuffix`, an endpoint that is not
    /// `https` on a token account (a bearer token must never travel in clear text), a
    /// custom token scope that is not a URI, `root certificate` for PEM text without a usable
    /// certificate, `credentials` when no credential is given and the `identity` feature is
    /// off, `concurrency` for zero concurrency.
    pub fn build(self) -> Result<Account> {
        let invalid = |part: &str, reason: String| Error::InvalidConfig {
            part: part.to_owned(),
            reason,
        };
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(invalid(
                "AccountName",
                "lowercase letters, digits and hyphens".into(),
            ));
        }
        if self.suffix.is_empty() || self.suffix.contains(['/', ':', ' ']) {
            return Err(invalid(
                "EndpointSuffix",
                "a DNS suffix such as `core.windows.net`".into(),
            ));
        }
        self.scope.validate(TOKEN_SCOPE_ENV)?;
        let derive = |explicit: Option<Url>, service: &str, part: &str| match explicit {
            Some(url) => Ok(url),
            None => endpoint(
                part,
                &format!("https://{}.{service}.{}", self.name, self.suffix),
            ),
        };
        let endpoints = Endpoints {
            table: derive(self.table.clone(), "table", "TableEndpoint")?,
            queue: derive(self.queue.clone(), "queue", "QueueEndpoint")?,
            blob: derive(self.blob.clone(), "blob", "BlobEndpoint")?,
        };
        let settings = self
            .settings
            .unwrap_or_else(|| Settings::for_table_endpoint(&endpoints.table));
        let client = match self.client {
            Some(client) => client,
            None => crate::transport::client_for(&endpoints.table, &self.roots)?,
        };
        let credential = match self.auth {
            Auth::Parsed(credentials) => {
                return Account::build(self.name, credentials, endpoints, settings, client);
            }
            Auth::Token(credential) => credential,
            Auth::Default => default_chain(&client)?,
        };
        for (part, url) in [
            ("TableEndpoint", &endpoints.table),
            ("QueueEndpoint", &endpoints.queue),
            ("BlobEndpoint", &endpoints.blob),
        ] {
            if url.scheme() != "https" {
                return Err(invalid(
                    part,
                    "bearer tokens are sent over https only".into(),
                ));
            }
        }
        let credentials = Credentials::Token {
            cache: Arc::new(TokenCache::new(credential, self.margin)),
            scopes: ServiceScopes::new(&self.scope, &self.name, &self.suffix),
        };
        Account::build(self.name, credentials, endpoints, settings, client)
    }
}

#[cfg(feature = "identity")]
fn default_chain(client: &reqwest::Client) -> Result<Arc<dyn TokenCredential>> {
    crate::identity::default_credential_with(client.clone())
}

#[cfg(not(feature = "identity"))]
fn default_chain(_: &reqwest::Client) -> Result<Arc<dyn TokenCredential>> {
    Err(Error::InvalidConfig {
        part: "credentials".into(),
        reason: "no credential given: pass one with `with_token_credential`, or enable the \
                 `identity` feature of tablekit-azure for the default credential chain"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::identity::{AccessToken, CredentialError};

    #[derive(Debug)]
    struct Never;

    #[async_trait::async_trait]
    impl TokenCredential for Never {
        async fn get_token(&self, _: &[&str]) -> Result<AccessToken, CredentialError> {
            panic!("building an account asked for a token")
        }
        async fn clear_cache(&self) -> Result<(), CredentialError> {
            Ok(())
        }
    }

    fn never() -> Arc<dyn TokenCredential> {
        Arc::new(Never)
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn part(result: Result<Account>) -> String {
        match result {
            Err(Error::InvalidConfig { part, .. }) => part,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_account_name_alone_derives_https_endpoints_in_the_chosen_cloud() {
        let account = AccountBuilder::from_lookup(env(&[
            (ACCOUNT_NAME_ENV, "contoso"),
            (ENDPOINT_SUFFIX_ENV, "core.chinacloudapi.cn"),
            (TOKEN_SCOPE_ENV, "account"),
        ]))
        .unwrap()
        .with_token_credential(never())
        .build()
        .unwrap();
        assert!(account.uses_token());
        assert_eq!(
            account.endpoints().table.as_str(),
            "https://contoso.table.core.chinacloudapi.cn/"
        );
        assert_eq!(
            account.endpoints().blob.as_str(),
            "https://contoso.blob.core.chinacloudapi.cn/"
        );
        let debug = format!("{account:?}");
        assert!(
            debug.contains("https://contoso.queue.core.chinacloudapi.cn/.default"),
            "{debug}"
        );
    }

    #[test]
    fn explicit_endpoints_override_derived_ones_and_a_connection_string_wins() {
        let account = AccountBuilder::from_lookup(env(&[
            (ACCOUNT_NAME_ENV, "devstoreaccount1"),
            (
                TABLE_ENDPOINT_ENV,
                "https://127.0.0.1:5001/devstoreaccount1",
            ),
        ]))
        .unwrap()
        .with_token_credential(never())
        .build()
        .unwrap();
        assert_eq!(
            account.endpoints().table.as_str(),
            "https://127.0.0.1:5001/devstoreaccount1"
        );
        assert_eq!(
            account.endpoints().queue.as_str(),
            "https://devstoreaccount1.queue.core.windows.net/"
        );
        let account = AccountBuilder::from_lookup(env(&[
            (CONNECTION_STRING_ENV, "UseDevelopmentStorage=true"),
            (ACCOUNT_NAME_ENV, "ignored"),
        ]))
        .unwrap()
        .build()
        .unwrap();
        assert!(account.has_key());
        assert_eq!(account.name(), "devstoreaccount1");
    }

    #[test]
    fn the_environment_wins_over_the_emulator_and_blanks_count_as_unset() {
        let emulator = Account::emulator();
        for unset in [
            env(&[]),
            env(&[(CONNECTION_STRING_ENV, "  "), (ACCOUNT_NAME_ENV, "")]),
        ] {
            let account = Account::from_lookup_or_emulator(unset).unwrap();
            assert_eq!(account.name(), "devstoreaccount1");
            assert_eq!(account.endpoints(), emulator.endpoints());
            assert!(account.has_key());
        }
        let account = Account::from_lookup_or_emulator(env(&[(
            CONNECTION_STRING_ENV,
            "AccountName=acme;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:5000/acme",
        )]))
        .unwrap();
        assert_eq!(account.name(), "acme");
        assert_eq!(
            account.endpoints().table.as_str(),
            "http://127.0.0.1:5000/acme"
        );
        // A malformed variable is an error, not a silent switch to the emulator.
        assert_eq!(
            part(Account::from_lookup_or_emulator(env(&[(
                CONNECTION_STRING_ENV,
                "AccountName=acme;AccountKey=not base64!!"
            )]))),
            "AccountKey"
        );
        assert_eq!(
            part(Account::from_lookup_or_emulator(env(&[
                (ACCOUNT_NAME_ENV, "contoso"),
                (TOKEN_SCOPE_ENV, "everything")
            ]))),
            TOKEN_SCOPE_ENV
        );
    }

    #[test]
    fn bad_configuration_is_refused_before_anything_is_sent() {
        assert_eq!(
            part(AccountBuilder::from_lookup(env(&[])).and_then(AccountBuilder::build)),
            CONNECTION_STRING_ENV
        );
        let from = |pairs: &[(&str, &str)]| {
            part(
                AccountBuilder::from_lookup(env(pairs))
                    .map(|b| b.with_token_credential(never()))
                    .and_then(AccountBuilder::build),
            )
        };
        assert_eq!(
            from(&[(ACCOUNT_NAME_ENV, "a"), (TOKEN_SCOPE_ENV, "everything")]),
            TOKEN_SCOPE_ENV
        );
        assert_eq!(
            from(&[(ACCOUNT_NAME_ENV, "a"), (QUEUE_ENDPOINT_ENV, "ftp://x")]),
            QUEUE_ENDPOINT_ENV
        );
        assert_eq!(
            from(&[
                (ACCOUNT_NAME_ENV, "a"),
                (ROOT_CERTIFICATE_ENV, "/nonexistent/ca.pem")
            ]),
            ROOT_CERTIFICATE_ENV
        );
        assert_eq!(from(&[(ACCOUNT_NAME_ENV, "Bad_Name")]), "AccountName");
        assert_eq!(
            from(&[
                (ACCOUNT_NAME_ENV, "a"),
                (ENDPOINT_SUFFIX_ENV, "https://core.windows.net")
            ]),
            "EndpointSuffix"
        );
        // A bearer token never travels over plain HTTP.
        assert_eq!(
            from(&[
                (ACCOUNT_NAME_ENV, "a"),
                (BLOB_ENDPOINT_ENV, "http://127.0.0.1:10000/a")
            ]),
            "BlobEndpoint"
        );
        let not_pem = Account::builder("a")
            .with_token_credential(never())
            .with_root_certificate("not a certificate")
            .build();
        assert_eq!(part(not_pem), "root certificate");
        let garbled = Account::builder("a")
            .with_token_credential(never())
            .with_root_certificate("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .build();
        assert_eq!(part(garbled), "root certificate");
    }

    #[cfg(not(feature = "identity"))]
    #[test]
    fn without_the_identity_feature_a_credential_must_be_given() {
        let result = Account::builder("contoso").build();
        match result {
            Err(Error::InvalidConfig { part, reason }) => {
                assert_eq!(part, "credentials");
                assert!(reason.contains("identity"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[cfg(feature = "identity")]
    #[test]
    fn with_the_identity_feature_the_default_chain_is_used() {
        let account = AccountBuilder::from_lookup(env(&[(ACCOUNT_NAME_ENV, "contoso")]))
            .unwrap()
            .build()
            .unwrap();
        assert!(account.uses_token());
        assert!(format!("{account:?}").contains("https://storage.azure.com/.default"));
    }
}
