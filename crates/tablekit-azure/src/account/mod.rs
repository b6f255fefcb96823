//! [`Account`]: credentials, endpoints, settings, metrics and the HTTP stack, shared by every
//! table, queue and container handle made from it.

mod builder;
mod connection_string;
#[cfg(feature = "azure-core-1")]
mod core1;
pub mod identity;
pub(crate) mod sas_token;
mod token;

use std::fmt;
use std::sync::Arc;

use azure_core::auth::Secret;
use azure_core::{ClientOptions, Pipeline, RetryOptions, TransportOptions, Url};
use azure_storage::StorageCredentials;
use azure_storage::clients::ServiceType;
use tablekit_core::{Error, Result};

pub use builder::{
    ACCOUNT_NAME_ENV, AccountBuilder, BLOB_ENDPOINT_ENV, ENDPOINT_SUFFIX_ENV, QUEUE_ENDPOINT_ENV,
    ROOT_CERTIFICATE_ENV, TABLE_ENDPOINT_ENV, TOKEN_SCOPE_ENV,
};
pub use sas_token::SasToken;
pub use token::TokenScope;

use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::transport::{Transport, client_for};
pub(crate) use token::Bearer;
use token::{ServiceScopes, TokenCache};

pub(crate) const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
pub(crate) const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The environment variable with the connection string [`Account::from_env`] reads first.
pub const CONNECTION_STRING_ENV: &str = "AZURE_STORAGE_CONNECTION_STRING";

/// How requests are authorized.
#[derive(Clone)]
pub(crate) enum Credentials {
    /// SharedKey with the account key (base64).
    Key { key: String },
    /// A shared access signature.
    Sas { token: SasToken },
    /// Microsoft Entra ID bearer tokens, cached per scope.
    Token {
        cache: Arc<TokenCache>,
        scopes: ServiceScopes,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Key { .. } => f.write_str("SharedKey(<redacted>)"),
            Credentials::Sas { token } => write!(f, "Sas({token:?})"),
            Credentials::Token { scopes, .. } => {
                if scopes.table == scopes.queue && scopes.queue == scopes.blob {
                    write!(f, "Token({})", scopes.table)
                } else {
                    write!(
                        f,
                        "Token({}, {}, {})",
                        scopes.table, scopes.queue, scopes.blob
                    )
                }
            }
        }
    }
}

/// The service endpoints of an account, built with [`Endpoints::new`] (a service the
/// account gains later is a field added behind a setter, so the struct is not built as a
/// literal).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Endpoints {
    /// Table service, e.g. `https://acct.table.core.windows.net/`.
    pub table: Url,
    /// Queue service.
    pub queue: Url,
    /// Blob service.
    pub blob: Url,
}

impl Endpoints {
    /// The endpoints of the blob, queue and table services (in the order of the emulator's
    /// ports, 10000, 10001, 10002), e.g. `https://acct.blob.core.windows.net/`.
    pub fn new(blob: Url, queue: Url, table: Url) -> Self {
        Self { table, queue, blob }
    }

    /// The same endpoints with another blob service endpoint.
    #[must_use]
    pub fn with_blob(mut self, blob: Url) -> Self {
        self.blob = blob;
        self
    }

    /// The same endpoints with another queue service endpoint.
    #[must_use]
    pub fn with_queue(mut self, queue: Url) -> Self {
        self.queue = queue;
        self
    }

    /// The same endpoints with another table service endpoint.
    #[must_use]
    pub fn with_table(mut self, table: Url) -> Self {
        self.table = table;
        self
    }
}

struct Inner {
    name: String,
    credentials: Credentials,
    endpoints: Endpoints,
    settings: Settings,
    metrics: Metrics,
    table_pipeline: Pipeline,
    queue_pipeline: Pipeline,
    blob_pipeline: Pipeline,
    storage_credentials: StorageCredentials,
    client_options: ClientOptions,
    http: reqwest::Client,
}

/// A storage account: where to connect, how to authenticate, and how to behave (retries,
/// scan policy, concurrency). Cheap to clone; every handle made from it shares one pooled HTTP
/// client and one set of [`Metrics`].
///
/// Create one `Account` per storage account and runtime, and clone it: each constructor builds
/// a new connection pool, whose connections belong to the tokio runtime that opened them.
///
/// `Debug` and `Display` never show the account key or a SAS signature.
///
/// # Examples
/// ```no_run
/// use tablekit_azure::Account;
///
/// # async fn f() -> tablekit_core::Result<()> {
/// // Azurite on its standard ports; `Account::from_env()` reads
/// // AZURE_STORAGE_CONNECTION_STRING, `from_connection_string` takes any connection string.
/// let account = Account::from_connection_string("UseDevelopmentStorage=true")?;
/// let table = account.table("Employees")?; // a handle: no request yet
/// table.create_if_not_exists().await?;
/// println!("{} requests so far", account.metrics().snapshot().requests());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Account {
    inner: Arc<Inner>,
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("name", &self.inner.name)
            .field("credentials", &self.inner.credentials)
            .field("table_endpoint", &self.inner.endpoints.table.as_str())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.inner.name, self.inner.endpoints.table)
    }
}

impl Account {
    /// Connects with a storage connection string; see the forms below.
    ///
    /// - `UseDevelopmentStorage=true` (optionally `;DevelopmentStorageProxyUri=http://host`):
    ///   Azurite on its standard ports with the well-known account.
    /// - `DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=core.windows.net`
    /// - explicit `TableEndpoint=`, `QueueEndpoint=`, `BlobEndpoint=` (Azurite on any port)
    /// - `SharedAccessSignature=…` with endpoints.
    ///
    /// No request is sent.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the malformed or missing part (never a secret's value).
    pub fn from_connection_string(connection_string: &str) -> Result<Self> {
        let parsed = connection_string::parse(connection_string)?;
        let settings = Settings::for_table_endpoint(&parsed.endpoints.table);
        let client = client_for(&parsed.endpoints.table, &[])?;
        Self::build(
            parsed.account,
            parsed.credentials,
            parsed.endpoints,
            settings,
            client,
        )
    }

    /// Azurite (or the storage emulator) on its standard ports with the well-known account.
    pub fn emulator() -> Self {
        #[allow(clippy::expect_used)] // A constant covered by unit tests.
        Self::from_connection_string("UseDevelopmentStorage=true")
            .expect("the development connection string parses")
    }

    /// An account authorized by a SAS token, at explicit endpoints (give the endpoints the
    /// token is valid for; others are never contacted).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed token.
    pub fn from_sas(account: impl Into<String>, endpoints: Endpoints, token: &str) -> Result<Self> {
        let credentials = Credentials::Sas {
            token: SasToken::parse(token)?,
        };
        let settings = Settings::for_table_endpoint(&endpoints.table);
        let client = client_for(&endpoints.table, &[])?;
        Self::build(account.into(), credentials, endpoints, settings, client)
    }

    /// The same account with other settings. Handles made from the returned account use
    /// them; the HTTP client is shared, metrics are new.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for settings out of range (zero concurrency).
    pub fn with_settings(&self, settings: Settings) -> Result<Self> {
        let inner = &self.inner;
        Self::build(
            inner.name.clone(),
            inner.credentials.clone(),
            inner.endpoints.clone(),
            settings,
            self.http_client(),
        )
    }

    /// The same account with its own HTTP client (e.g. one with a proxy). Metrics are new.
    ///
    /// # Errors
    /// As [`Account::with_settings`].
    pub fn with_http_client(&self, client: reqwest::Client) -> Result<Self> {
        let inner = &self.inner;
        Self::build(
            inner.name.clone(),
            inner.credentials.clone(),
            inner.endpoints.clone(),
            inner.settings.clone(),
            client,
        )
    }

    fn build(
        name: String,
        credentials: Credentials,
        endpoints: Endpoints,
        settings: Settings,
        client: reqwest::Client,
    ) -> Result<Self> {
        settings.validate()?;
        let storage_credentials =
            match &credentials {
                Credentials::Key { key } => {
                    StorageCredentials::access_key(name.clone(), Secret::new(key.clone()))
                }
                Credentials::Sas { token } => StorageCredentials::sas_token(token.to_query())
                    .map_err(|_| Error::InvalidConfig {
                        part: "SharedAccessSignature".into(),
                        reason: "rejected by the SDK".into(),
                    })?,
                // tablekit's transport authorizes these requests (with the scope of each
                // service, which the SDK's own policy cannot choose), for SDK clients made
                // from the account too; the SDK's policy has nothing to add.
                Credentials::Token { .. } => StorageCredentials::anonymous(),
            };
        let metrics = Metrics::new(settings.throughput.clone());
        let bearer = match &credentials {
            Credentials::Token { cache, scopes } => Some(Bearer {
                cache: cache.clone(),
                scopes: scopes.clone(),
            }),
            Credentials::Key { .. } | Credentials::Sas { .. } => None,
        };
        let transport = Arc::new(Transport {
            client: client.clone(),
            metrics: metrics.clone(),
            timeout: settings.request_timeout,
            bearer,
        });
        // tablekit retries itself (with metrics and outcome verification); the SDK must not.
        let client_options =
            ClientOptions::new(TransportOptions::new_custom_policy(transport.clone()))
                .retry(RetryOptions::none());
        // The SDK wraps any transport in a policy that logs whole requests at DEBUG level —
        // URLs with SAS signatures included. tablekit's pipelines end in its own transport.
        let pipeline = || {
            let mut pipeline = azure_storage::clients::new_pipeline_from_options(
                client_options.clone(),
                storage_credentials.clone(),
            );
            let last = pipeline.policies().len() - 1;
            pipeline.replace_policy(transport.clone(), last);
            pipeline
        };
        Ok(Self {
            inner: Arc::new(Inner {
                table_pipeline: pipeline(),
                queue_pipeline: pipeline(),
                blob_pipeline: pipeline(),
                name,
                credentials,
                endpoints,
                settings,
                metrics,
                storage_credentials,
                client_options,
                http: client,
            }),
        })
    }

    /// The account name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The service endpoints.
    pub fn endpoints(&self) -> &Endpoints {
        &self.inner.endpoints
    }

    /// The settings handles of this account use.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// This account's request metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Refuses `operation` when it relies on query results sorted by PartitionKey and RowKey
    /// and this account's table service does not sort them (the Cosmos DB Table API); see
    /// [`Settings::require_sorted_queries`]. Pattern crates call it first thing.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the table service and `operation`, before any request.
    pub fn require_sorted_queries(&self, operation: &str) -> Result<()> {
        self.inner.settings.require_sorted_queries(operation)
    }

    /// Whether requests are signed with the account key (needed to issue SAS tokens).
    pub fn has_key(&self) -> bool {
        matches!(self.inner.credentials, Credentials::Key { .. })
    }

    /// Whether requests carry Microsoft Entra ID bearer tokens.
    pub fn uses_token(&self) -> bool {
        matches!(self.inner.credentials, Credentials::Token { .. })
    }

    pub(crate) fn key(&self) -> Option<&str> {
        match &self.inner.credentials {
            Credentials::Key { key } => Some(key),
            Credentials::Sas { .. } | Credentials::Token { .. } => None,
        }
    }

    pub(crate) fn http_client(&self) -> reqwest::Client {
        self.inner.http.clone()
    }

    pub(crate) fn pipeline(&self, service: ServiceType) -> &Pipeline {
        match service {
            ServiceType::Queue => &self.inner.queue_pipeline,
            ServiceType::Blob | ServiceType::DataLake => &self.inner.blob_pipeline,
            ServiceType::Table => &self.inner.table_pipeline,
        }
    }

    /// The SDK's view of one service endpoint, for building SDK clients.
    pub(crate) fn location(&self, service: ServiceType) -> azure_storage::CloudLocation {
        let url = match service {
            ServiceType::Queue => &self.inner.endpoints.queue,
            ServiceType::Blob | ServiceType::DataLake => &self.inner.endpoints.blob,
            ServiceType::Table => &self.inner.endpoints.table,
        };
        azure_storage::CloudLocation::Custom {
            account: self.inner.name.clone(),
            uri: url.as_str().trim_end_matches('/').to_owned(),
        }
    }

    pub(crate) fn storage_credentials(&self) -> &StorageCredentials {
        &self.inner.storage_credentials
    }

    pub(crate) fn client_options(&self) -> &ClientOptions {
        &self.inner.client_options
    }
}
