//! A token credential for tests (feature `azure`): it mints JWT-shaped bearer tokens with the
//! claims a test chooses, unsigned, and counts how often it was asked. An emulator started
//! with [`AzuriteBuilder::with_oauth`](crate::AzuriteBuilder::with_oauth) accepts them when
//! the claims are valid; Azure never does.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tablekit_azure::identity::{
    AccessToken, CredentialError, OffsetDateTime, TokenCredential, async_trait,
};

/// The claims of minted tokens. Times are relative to the moment a token is minted.
///
/// [`Claims::valid`], [`Claims::expired`] or [`Claims::expiring_in`] and the `with_*` setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claims {
    /// `aud`. `None`: the requested scope without its `/.default`, as Microsoft Entra ID
    /// issues it (`https://storage.azure.com/.default` → `https://storage.azure.com`).
    pub audience: Option<String>,
    /// `iss`. `None`: `https://sts.windows.net/<tenant_id>/`.
    pub issuer: Option<String>,
    /// `tid`.
    pub tenant_id: String,
    /// `oid` and `sub`: the principal.
    pub object_id: String,
    /// `iat` and `nbf`: seconds before minting (default 300).
    pub issued_ago: Duration,
    /// `exp`: seconds after minting (default one hour); see [`Claims::expired`].
    pub lifetime: Duration,
    /// Whether `exp` lies in the past by [`lifetime`](Self::lifetime) instead.
    pub expired: bool,
}

impl Default for Claims {
    fn default() -> Self {
        Self {
            audience: None,
            issuer: None,
            tenant_id: "72f988bf-86f1-41af-91ab-2d7cd011db47".into(),
            object_id: "3c1e5f4a-7b2d-4e8f-9a6c-0d1b2c3e4f50".into(),
            issued_ago: Duration::from_secs(300),
            lifetime: Duration::from_secs(3600),
            expired: false,
        }
    }
}

impl Claims {
    /// Valid for an hour, for the requested scope's audience.
    pub fn valid() -> Self {
        Self::default()
    }

    /// Expired an hour ago (issued two hours ago).
    pub fn expired() -> Self {
        Self {
            issued_ago: Duration::from_secs(7200),
            lifetime: Duration::from_secs(3600),
            expired: true,
            ..Self::default()
        }
    }

    /// Valid, expiring `lifetime` after minting.
    pub fn expiring_in(lifetime: Duration) -> Self {
        Self {
            lifetime,
            ..Self::default()
        }
    }

    /// With this `aud` whatever scope is requested.
    #[must_use]
    pub fn with_audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// With this `iss`.
    #[must_use]
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// With this `tid`.
    #[must_use]
    pub fn with_tenant_id(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = tenant_id.into();
        self
    }

    /// With this `oid` and `sub`.
    #[must_use]
    pub fn with_object_id(mut self, object_id: impl Into<String>) -> Self {
        self.object_id = object_id.into();
        self
    }

    /// With `iat` and `nbf` this long before minting.
    #[must_use]
    pub fn with_issued_ago(mut self, issued_ago: Duration) -> Self {
        self.issued_ago = issued_ago;
        self
    }

    /// With `exp` this long after minting (or before it, when expired).
    #[must_use]
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// With `exp` in the past by the lifetime, when `expired`.
    #[must_use]
    pub fn with_expired(mut self, expired: bool) -> Self {
        self.expired = expired;
        self
    }
}

/// A [`TokenCredential`] that mints a new JWT-shaped token (`header.claims.signature`,
/// base64url, not signed by any key) for every request it gets, with [`Claims`], and records
/// the scopes it was asked for and the tokens it gave.
///
/// `Debug` shows the claims and counts, never a token.
pub struct MintingCredential {
    claims: Claims,
    delay: Duration,
    calls: AtomicU64,
    scopes: Mutex<Vec<String>>,
    minted: Mutex<Vec<String>>,
}

impl fmt::Debug for MintingCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintingCredential")
            .field("claims", &self.claims)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl MintingCredential {
    /// A credential minting tokens with `claims`.
    pub fn new(claims: Claims) -> Self {
        Self {
            claims,
            delay: Duration::ZERO,
            calls: AtomicU64::new(0),
            scopes: Mutex::new(Vec::new()),
            minted: Mutex::new(Vec::new()),
        }
    }

    /// Takes `delay` to answer, like a real identity endpoint (so that concurrent requests
    /// overlap with a refresh).
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// How many tokens were asked for.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// The scopes of every request, in order.
    pub fn scopes(&self) -> Vec<String> {
        self.scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every token minted, in order (to check that none leaks into logs or messages).
    pub fn minted(&self) -> Vec<String> {
        self.minted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A new token for `scope` and its expiry.
    pub fn mint(&self, scope: &str) -> (String, OffsetDateTime) {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let now = OffsetDateTime::now_utc();
        let issued = now - self.claims.issued_ago;
        let expires = if self.claims.expired {
            now - self.claims.lifetime
        } else {
            now + self.claims.lifetime
        };
        let audience = self
            .claims
            .audience
            .clone()
            .unwrap_or_else(|| scope.trim_end_matches("/.default").to_owned());
        let issuer = self
            .claims
            .issuer
            .clone()
            .unwrap_or_else(|| format!("https://sts.windows.net/{}/", self.claims.tenant_id));
        let header = serde_json::json!({ "typ": "JWT", "alg": "RS256", "kid": "tablekit-test" });
        let claims = serde_json::json!({
            "aud": audience,
            "iss": issuer,
            "iat": issued.unix_timestamp(),
            "nbf": issued.unix_timestamp(),
            "exp": expires.unix_timestamp(),
            "oid": self.claims.object_id,
            "sub": self.claims.object_id,
            "tid": self.claims.tenant_id,
            "uti": format!("tablekit-{}-{n}", std::process::id()),
            "ver": "1.0",
        });
        let token = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string()),
            URL_SAFE_NO_PAD.encode(format!("unsigned-{n}")),
        );
        self.scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(scope.to_owned());
        self.minted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(token.clone());
        (token, expires)
    }
}

#[async_trait]
impl TokenCredential for MintingCredential {
    async fn get_token(&self, scopes: &[&str]) -> Result<AccessToken, CredentialError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let (token, expires) = self.mint(&scopes.join(" "));
        Ok(AccessToken::new(token, expires))
    }

    async fn clear_cache(&self) -> Result<(), CredentialError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims_of(token: &str) -> serde_json::Value {
        let part = token.split('.').nth(1).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn tokens_carry_the_chosen_claims() {
        let credential = MintingCredential::new(Claims::valid());
        let (token, expires) = credential.mint("https://storage.azure.com/.default");
        assert_eq!(token.split('.').count(), 3);
        let claims = claims_of(&token);
        assert_eq!(claims["aud"], "https://storage.azure.com");
        assert!(
            claims["iss"]
                .as_str()
                .unwrap()
                .starts_with("https://sts.windows.net/")
        );
        let now = OffsetDateTime::now_utc().unix_timestamp();
        assert!(claims["nbf"].as_i64().unwrap() < now);
        assert_eq!(claims["exp"].as_i64().unwrap(), expires.unix_timestamp());
        assert!(expires.unix_timestamp() > now + 3000);

        let expired = MintingCredential::new(Claims::expired().with_audience("https://elsewhere"));
        let (token, expires) = expired.mint("https://storage.azure.com/.default");
        assert_eq!(claims_of(&token)["aud"], "https://elsewhere");
        assert!(expires.unix_timestamp() < now);
        assert_eq!((expired.calls(), credential.calls()), (1, 1));
        assert_ne!(credential.minted(), expired.minted());
        assert!(!format!("{credential:?}").contains(&credential.minted()[0]));
    }
}
