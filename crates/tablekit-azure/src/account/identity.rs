//! Microsoft Entra ID (OAuth) credentials for [`Account`](crate::Account)s that authenticate
//! with bearer tokens instead of an account key or a SAS.
//!
//! Any [`TokenCredential`] works: give one to [`Account::from_token_credential`] or
//! [`AccountBuilder::with_token_credential`]. With the `identity` feature,
//! `default_credential` offers the usual chain of `azure_identity` 0.21 — environment
//! (service principal secret, workload identity), App Service and virtual machine managed
//! identity, Azure CLI — and [`AccountBuilder::build`] uses it when no credential is given.
//!
//! With the `azure-core-1` feature, an `azure_core` 1.x credential of the official SDK
//! (`azure_identity` 1.x: managed identity, workload identity, client secret, Azure CLI)
//! works too: give it to `AccountBuilder::with_azure_core_1_credential`, or wrap it in an
//! `AzureCore1Credential`. It needs Rust 1.88, as the 1.x crates do.
//!
//! The types a credential of your own implements are re-exported here, so it needs no
//! dependency on the SDK crates:
//!
//! ```
//! use tablekit_azure::identity::{AccessToken, CredentialError, OffsetDateTime, TokenCredential, async_trait};
//!
//! /// A token handed over by another part of the service.
//! #[derive(Debug)]
//! struct Handed(String);
//!
//! #[async_trait]
//! impl TokenCredential for Handed {
//!     async fn get_token(&self, _scopes: &[&str]) -> Result<AccessToken, CredentialError> {
//!         Ok(AccessToken::new(self.0.clone(), OffsetDateTime::now_utc() + std::time::Duration::from_secs(600)))
//!     }
//!     async fn clear_cache(&self) -> Result<(), CredentialError> {
//!         Ok(())
//!     }
//! }
//! ```
//!
//! [`Account::from_token_credential`]: crate::Account::from_token_credential
//! [`AccountBuilder::with_token_credential`]: crate::AccountBuilder::with_token_credential
//! [`AccountBuilder::build`]: crate::AccountBuilder::build

pub use async_trait::async_trait;
pub use azure_core::auth::{AccessToken, Secret, TokenCredential};
pub use azure_core::error::{Error as CredentialError, ErrorKind as CredentialErrorKind};
pub use time::OffsetDateTime;

pub use super::token::{DEFAULT_REFRESH_MARGIN, TokenScope};

#[cfg(feature = "azure-core-1")]
pub use super::core1::{AzureCore1Credential, AzureCore1Http, azure_core_1};

#[cfg(feature = "identity")]
use std::sync::Arc;

/// The environment variable that picks one credential of the chain instead of trying each
/// (`environment`, `appservice`, `virtualmachine`, `azurecli`, `clientsecret`,
/// `workloadidentity`).
#[cfg(feature = "identity")]
pub const CREDENTIAL_KIND_ENV: &str = "AZURE_CREDENTIAL_KIND";

/// The default credential chain of `azure_identity` 0.21, tried in order: environment
/// (`AZURE_TENANT_ID` + `AZURE_CLIENT_ID` + `AZURE_CLIENT_SECRET`, or workload identity with
/// `AZURE_FEDERATED_TOKEN_FILE`), App Service managed identity, virtual machine managed
/// identity (system-assigned), Azure CLI (2.54 or newer, `az login`). With
/// `$AZURE_CREDENTIAL_KIND` set, only that one. `$AZURE_AUTHORITY_HOST` selects a sovereign
/// cloud's Entra endpoint (e.g. `https://login.chinacloudapi.cn`).
///
/// No request is sent until a token is needed. Its token requests use a connection pool of
/// their own; an [`AccountBuilder`](crate::AccountBuilder) without a credential builds the
/// chain on the account's HTTP client instead.
///
/// # Errors
/// [`Error::InvalidConfig`](tablekit_core::Error::InvalidConfig) naming `credentials` when
/// `$AZURE_CREDENTIAL_KIND` names a credential that cannot be built.
#[cfg(feature = "identity")]
pub fn default_credential() -> tablekit_core::Result<Arc<dyn TokenCredential>> {
    default_credential_with(crate::transport::new_client())
}

#[cfg(feature = "identity")]
pub(crate) fn default_credential_with(
    client: reqwest::Client,
) -> tablekit_core::Result<Arc<dyn TokenCredential>> {
    use azure_identity::{
        DefaultAzureCredentialBuilder, SpecificAzureCredential, TokenCredentialOptions,
    };
    let options = TokenCredentialOptions::from(Arc::new(client) as Arc<dyn azure_core::HttpClient>);
    let invalid = |e: CredentialError| tablekit_core::Error::InvalidConfig {
        part: "credentials".into(),
        reason: format!("the default credential chain cannot be built: {e}"),
    };
    if std::env::var_os(CREDENTIAL_KIND_ENV).is_some() {
        let credential = SpecificAzureCredential::create(options).map_err(invalid)?;
        return Ok(Arc::new(credential));
    }
    let credential = DefaultAzureCredentialBuilder::new()
        .with_options(options)
        .build()
        .map_err(invalid)?;
    Ok(Arc::new(credential))
}
