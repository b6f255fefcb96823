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
