//! Credentials of the official Azure SDK 1.x line (feature `azure-core-1`): any
//! `azure_core` 1.x [`TokenCredential`](azure_core_1::credentials::TokenCredential) —
//! `ManagedIdentityCredential`, `WorkloadIdentityCredential`, `ClientSecretCredential`,
//! `AzureCliCredential` of `azure_identity` 1.x, or one of your own — authorizes an
//! [`Account`](crate::Account)'s table, queue and blob requests.
//!
//! The credential is asked through the same cache as a 0.21 credential: one token per scope,
//! shared by concurrent requests, replaced the refresh margin before it expires, forgotten
//! when the service refuses it; and with the same scope rules ([`TokenScope`]). The 1.x
//! credentials cache nothing themselves (`AzureCliCredential` runs `az` on every call), so
//! the cache is what keeps the identity endpoint out of the request path.
//!
//! [`TokenScope`]: super::token::TokenScope

use std::fmt;
use std::sync::Arc;

use azure_core::auth::{AccessToken, TokenCredential};
use azure_core::error::ErrorKind as AzureErrorKind;

/// The `azure_core` 1.x crate this feature was built against, for naming its types in
/// signatures without a dependency of your own (they are the same types as your own
/// `azure_core` 1.x's when the versions agree).
pub use azure_core_1;

/// An `azure_core` 1.x token credential, usable wherever tablekit takes a credential
/// ([`AccountBuilder::with_token_credential`](crate::AccountBuilder::with_token_credential)).
/// [`AccountBuilder::with_azure_core_1_credential`](crate::AccountBuilder::with_azure_core_1_credential)
/// wraps one for you.
///
/// Each token request asks the 1.x credential for the one scope tablekit needs, without
/// options (no tenant, no claims challenge). Its errors become credential errors of the
/// account's requests, with the 1.x message (for `AzureCliCredential`, what `az` printed).
///
/// `Debug` shows the wrapped credential's `Debug`, which the 1.x credentials keep free of
/// secrets.
#[derive(Clone)]
pub struct AzureCore1Credential {
    inner: Arc<dyn azure_core_1::credentials::TokenCredential>,
}

impl fmt::Debug for AzureCore1Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AzureCore1Credential")
            .field(&self.inner)
            .finish()
    }
}

impl AzureCore1Credential {
    /// Wraps `credential`. Nothing is asked yet.
    pub fn new(credential: Arc<dyn azure_core_1::credentials::TokenCredential>) -> Self {
        Self { inner: credential }
    }

    /// The wrapped credential.
    pub fn inner(&self) -> &Arc<dyn azure_core_1::credentials::TokenCredential> {
        &self.inner
    }
}

#[async_trait::async_trait]
impl TokenCredential for AzureCore1Credential {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        match self.inner.get_token(scopes, None).await {
            Ok(token) => Ok(AccessToken::new(
                token.token.secret().to_owned(),
                token.expires_on,
            )),
            Err(error) => Err(azure_core::Error::new(AzureErrorKind::Credential, error)),
        }
    }

    /// The 1.x credentials have no cache to clear; tablekit's own is per account.
    async fn clear_cache(&self) -> azure_core::Result<()> {
        Ok(())
    }
}

/// tablekit's HTTP client — reqwest 0.12 with rustls on `ring`, the one the accounts use — as
/// an `azure_core` 1.x [`HttpClient`](azure_core_1::http::HttpClient), for the 1.x credentials
/// that call Microsoft Entra ID over HTTP (managed identity, workload identity, client
/// secret): give [`transport`](Self::transport) to their `ClientOptions`. With it they need
/// neither `azure_core`'s `reqwest` feature nor `azure_identity`'s default features, which
/// bring reqwest 0.13 and `aws-lc-rs` beside tablekit's stack.
///
/// Requests are sent as given (no retries of its own: the 1.x pipeline retries); a response
/// body is read whole before it is handed over. A request body that is a stream is refused
/// (the credentials send forms and JSON).
///
/// ```no_run
/// # use azure_identity_1 as azure_identity;
/// # fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use azure_identity::{ManagedIdentityCredential, ManagedIdentityCredentialOptions};
/// use tablekit_azure::Account;
/// use tablekit_azure::identity::AzureCore1Http;
///
/// let mut options = ManagedIdentityCredentialOptions::default();
/// options.client_options.transport = Some(AzureCore1Http::new().transport());
/// let credential = ManagedIdentityCredential::new(Some(options))?;
/// let account = Account::builder("contosodata")
///     .with_azure_core_1_credential(credential)
///     .build()?;
/// # let _ = account; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AzureCore1Http {
    client: reqwest::Client,
}

impl Default for AzureCore1Http {
    fn default() -> Self {
        Self::new()
    }
}

impl AzureCore1Http {
    /// A client with tablekit's connection settings, trusting the public web roots.
    pub fn new() -> Self {
        Self::with_client(crate::transport::new_client())
    }

    /// A client that also trusts the certificates of this PEM text as roots (a private
    /// authority in front of the identity endpoint, an emulator's).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](tablekit_core::Error::InvalidConfig) naming
    /// `root certificate` for PEM text without a usable certificate.
    pub fn trusting(pem: impl Into<Vec<u8>>) -> tablekit_core::Result<Self> {
        crate::transport::client_trusting(&[pem.into()]).map(Self::with_client)
    }

    /// Sends with `client` (one with a proxy, say).
    pub fn with_client(client: reqwest::Client) -> Self {
        Self { client }
    }

    /// The `Transport` of a 1.x `ClientOptions` that sends with this client.
    pub fn transport(&self) -> azure_core_1::http::Transport {
        azure_core_1::http::Transport::new(Arc::new(self.clone()))
    }
}

#[async_trait::async_trait]
impl azure_core_1::http::HttpClient for AzureCore1Http {
    async fn execute_request(
        &self,
        request: &azure_core_1::http::Request,
    ) -> azure_core_1::Result<azure_core_1::http::AsyncRawResponse> {
        use azure_core_1::error::{Error as Error1, ErrorKind as Kind1};
        use azure_core_1::http::headers::{HeaderName, HeaderValue, Headers};
        let method = reqwest::Method::from_bytes(request.method().as_ref().as_bytes())
            .map_err(|e| Error1::with_error(Kind1::Other, e, "an HTTP method reqwest refuses"))?;
        let mut builder = self.client.request(method, request.url().clone());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        match request.body() {
            azure_core_1::http::Body::Bytes(bytes) => builder = builder.body(bytes.clone()),
            _ => {
                return Err(Error1::with_message(
                    Kind1::Other,
                    "a streamed request body: tablekit's HTTP client sends whole bodies only",
                ));
            }
        }
        let response = builder.send().await.map_err(|e| {
            let kind = if e.is_connect() {
                Kind1::Connection
            } else {
                Kind1::Io
            };
            Error1::with_error(kind, e, "the request did not complete")
        })?;
        let status = response.status().as_u16();
        let headers: std::collections::HashMap<HeaderName, HeaderValue> = response
            .headers()
            .iter()
            .filter_map(|(name, value)| {
                let value = value.to_str().ok()?;
                Some((
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(value.to_owned()),
                ))
            })
            .collect();
        let body = response
            .bytes()
            .await
            .map_err(|e| Error1::with_error(Kind1::Io, e, "the response body did not arrive"))?;
        Ok(azure_core_1::http::AsyncRawResponse::from_bytes(
            status.into(),
            Headers::from(headers),
            body,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_core_1::credentials::{
        AccessToken as AccessToken1, TokenCredential as TokenCredential1, TokenRequestOptions,
    };
    use std::sync::Mutex;
    use time::OffsetDateTime;

    /// Hands out one token, or fails, recording the scopes it was asked for.
    #[derive(Debug, Default)]
    struct Fixed {
        fail: bool,
        asked: Mutex<Vec<Vec<String>>>,
    }

    #[async_trait::async_trait]
    impl TokenCredential1 for Fixed {
        async fn get_token(
            &self,
            scopes: &[&str],
            _: Option<TokenRequestOptions<'_>>,
        ) -> azure_core_1::Result<AccessToken1> {
            self.asked
                .lock()
                .unwrap()
                .push(scopes.iter().map(|s| (*s).to_owned()).collect());
            if self.fail {
                return Err(azure_core_1::Error::with_message(
                    azure_core_1::error::ErrorKind::Credential,
                    "ManagedIdentityCredential: no identity endpoint",
                ));
            }
            Ok(AccessToken1::new(
                "secret-token",
                OffsetDateTime::from_unix_timestamp(4_102_444_800).unwrap(),
            ))
        }
    }

    #[tokio::test]
    async fn tokens_and_errors_cross_over_unchanged() {
        let fixed = Arc::new(Fixed::default());
        let credential = AzureCore1Credential::new(fixed.clone());
        let token = credential
            .get_token(&["https://storage.azure.com/.default"])
            .await
            .unwrap();
        assert_eq!(token.token.secret(), "secret-token");
        assert_eq!(token.expires_on.unix_timestamp(), 4_102_444_800);
        assert_eq!(
            *fixed.asked.lock().unwrap(),
            vec![vec!["https://storage.azure.com/.default".to_owned()]]
        );
        assert!(!format!("{credential:?}").contains("secret-token"));

        let failing = AzureCore1Credential::new(Arc::new(Fixed {
            fail: true,
            ..Fixed::default()
        }));
        let err = failing.get_token(&["s"]).await.unwrap_err();
        assert_eq!(*err.kind(), AzureErrorKind::Credential);
        assert!(
            format!("{err}").contains("no identity endpoint"),
            "{err} / {err:?}"
        );
    }
}
