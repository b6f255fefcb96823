//! Bearer-token authentication: which scope to ask for, a cache that refreshes tokens before
//! they expire (one refresh shared by concurrent requests), and the authorization tablekit's
//! transport puts on each request.
//!
//! The 0.21 SDK asks every credential for `https://storage.azure.com/.default` whatever the
//! account, which rules out account-scoped audiences and the Cosmos DB Table API. tablekit
//! asks for the configured scope of each service instead, and the SDK's own authorization
//! policy is given no credential to act on.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use azure_core::Context;
use azure_core::auth::{AccessToken, Secret, TokenCredential};
use azure_core::error::ErrorKind as AzureErrorKind;
use azure_storage::clients::ServiceType;
use tablekit_core::{Error, Result};
use time::OffsetDateTime;

/// How long before a token's expiry it is replaced, by default.
pub const DEFAULT_REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// The scope (audience) tablekit asks the token credential for.
///
/// The token's audience must be one the service accepts: Azure Storage accepts
/// `https://storage.azure.com` for every account and service, and
/// `https://<account>.<service>.<suffix>` for one account's service; the Cosmos DB Table API
/// accepts `https://cosmos.azure.com`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TokenScope {
    /// `https://storage.azure.com/.default`: one token for every service of every account.
    #[default]
    Storage,
    /// `https://<account>.<service>.<endpoint suffix>/.default` for each service: a token
    /// valid only for this account's table, queue or blob service (three tokens).
    Account,
    /// `https://cosmos.azure.com/.default`: the Cosmos DB Table API.
    CosmosTable,
    /// A scope of your own, e.g. `api://<app id>/.default` behind a gateway.
    Custom(String),
}

impl TokenScope {
    /// The scope requested for `service` (`table`, `queue` or `blob`) of `account`, whose
    /// endpoints end in `suffix` (`core.windows.net`).
    pub fn scope_for(&self, account: &str, service: &str, suffix: &str) -> String {
        match self {
            TokenScope::Storage => "https://storage.azure.com/.default".to_owned(),
            TokenScope::Account => format!("https://{account}.{service}.{suffix}/.default"),
            TokenScope::CosmosTable => "https://cosmos.azure.com/.default".to_owned(),
            TokenScope::Custom(scope) => scope.clone(),
        }
    }

    /// Parses `storage`, `account`, `cosmos`, or a scope URI (`https://…/.default`,
    /// `api://…/.default`), as `AZURE_STORAGE_TOKEN_SCOPE` is read.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `part` for anything else.
    pub fn parse(text: &str, part: &str) -> Result<Self> {
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "storage" => Ok(TokenScope::Storage),
            "account" => Ok(TokenScope::Account),
            "cosmos" => Ok(TokenScope::CosmosTable),
            _ => {
                let scope = TokenScope::Custom(text.to_owned());
                scope.validate(part)?;
                Ok(scope)
            }
        }
    }

    pub(crate) fn validate(&self, part: &str) -> Result<()> {
        if let TokenScope::Custom(scope) = self {
            if scope.is_empty() || scope.chars().any(char::is_whitespace) || !scope.contains("://")
            {
                return Err(Error::InvalidConfig {
                    part: part.to_owned(),
                    reason: "expected `storage`, `account`, `cosmos` or a scope URI such as \
                             `https://storage.azure.com/.default`"
                        .into(),
                });
            }
        }
        Ok(())
    }
}

/// The scope of each service of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceScopes {
    pub(crate) table: String,
    pub(crate) queue: String,
    pub(crate) blob: String,
}

impl ServiceScopes {
    pub(crate) fn new(scope: &TokenScope, account: &str, suffix: &str) -> Self {
        Self {
            table: scope.scope_for(account, "table", suffix),
            queue: scope.scope_for(account, "queue", suffix),
            blob: scope.scope_for(account, "blob", suffix),
        }
    }

    fn of(&self, service: ServiceType) -> &str {
        match service {
            ServiceType::Table => &self.table,
            ServiceType::Queue => &self.queue,
            ServiceType::Blob | ServiceType::DataLake => &self.blob,
        }
    }
}

/// A token and when this cache obtained it.
struct Cached {
    token: AccessToken,
    fetched: Instant,
}

/// Tokens per scope from one credential, replaced `margin` before they expire.
///
/// Each scope has its own lock: readers share it while the token is fresh; a request that
/// finds it stale takes it exclusively and asks the credential, and requests that queued
/// behind it meanwhile use the token it obtained instead of asking again.
pub(crate) struct TokenCache {
    credential: Arc<dyn TokenCredential>,
    margin: Duration,
    slots: Mutex<HashMap<String, Arc<tokio::sync::RwLock<Option<Cached>>>>>,
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("margin", &self.margin)
            .finish_non_exhaustive()
    }
}

impl TokenCache {
    pub(crate) fn new(credential: Arc<dyn TokenCredential>, margin: Duration) -> Self {
        Self {
            credential,
            margin,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn slot(&self, scope: &str) -> Arc<tokio::sync::RwLock<Option<Cached>>> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.entry(scope.to_owned()).or_default().clone()
    }

    fn fresh(&self, cached: &Cached) -> bool {
        cached.token.expires_on - self.margin > OffsetDateTime::now_utc()
    }

    /// A token for `scope`: the cached one while it is more than the margin away from
    /// expiring, else a new one from the credential.
    pub(crate) async fn token(&self, scope: &str) -> azure_core::Result<Secret> {
        let slot = self.slot(scope);
        let asked = Instant::now();
        if let Some(cached) = slot.read().await.as_ref().filter(|c| self.fresh(c)) {
            return Ok(cached.token.token.clone());
        }
        let mut guard = slot.write().await;
        if let Some(cached) = guard.as_ref() {
            // Obtained while this request waited for the lock: the refresh it needed.
            let shared =
                cached.fetched >= asked && cached.token.expires_on > OffsetDateTime::now_utc();
            if shared || self.fresh(cached) {
                return Ok(cached.token.token.clone());
            }
        }
        match self.credential.get_token(&[scope]).await {
            Ok(token) => {
                tracing::debug!(target: "tablekit", scope, expires_on = %token.expires_on, "token obtained");
                let secret = token.token.clone();
                *guard = Some(Cached {
                    token,
                    fetched: Instant::now(),
                });
                Ok(secret)
            }
            // A failed refresh inside the margin keeps using the token while it is valid: the
            // credential's endpoint may be back before the token runs out.
            Err(error) => match guard
                .as_ref()
                .filter(|c| c.token.expires_on > OffsetDateTime::now_utc())
            {
                Some(cached) => {
                    tracing::warn!(target: "tablekit", scope, error = %error, "token refresh failed; using the current token until it expires");
                    Ok(cached.token.token.clone())
                }
                None => Err(azure_core::Error::message(
                    AzureErrorKind::Credential,
                    format!("no token for `{scope}`: {}", chain(&error)),
                )),
            },
        }
    }

    /// Forgets `used` for `scope` after the service refused it, so the next request asks the
    /// credential again. A newer token obtained meanwhile is kept.
    pub(crate) async fn forget(&self, scope: &str, used: &Secret) {
        let slot = self.slot(scope);
        let mut guard = slot.write().await;
        if guard.as_ref().is_some_and(|c| c.token.token == *used) {
            *guard = None;
        }
    }
}

/// An error and its causes on one line (the credential chains nest theirs).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// Bearer authorization of a token account's requests: a token with the scope of the
/// request's service (tablekit's requests and the SDK clients' both name it in the context).
///
/// tablekit's transport applies it to the outgoing HTTP request itself, after every pipeline
/// policy: the SDK's transport policy logs whole requests at DEBUG level, and azure_core 0.21
/// redacts every header in that log but `Authorization`.
#[derive(Debug)]
pub(crate) struct Bearer {
    pub(crate) cache: Arc<TokenCache>,
    pub(crate) scopes: ServiceScopes,
}

impl Bearer {
    /// The scope and token for a request to the service named in `ctx`.
    pub(crate) async fn token(&self, ctx: &Context) -> azure_core::Result<(&str, Secret)> {
        let service = ctx.get::<ServiceType>().copied().ok_or_else(|| {
            azure_core::Error::message(
                AzureErrorKind::Other,
                "no service in the request context to choose a token scope",
            )
        })?;
        let scope = self.scopes.of(service);
        Ok((scope, self.cache.token(scope).await?))
    }

    /// Called with each response: a token the service refused is not used again (it may
    /// have been revoked, or its clock may be ahead of ours). The request itself is not
    /// retried.
    pub(crate) async fn answered(
        &self,
        scope: &str,
        token: &Secret,
        status: u16,
        code: Option<&str>,
    ) {
        let refused = status == 401
            || (status == 403
                && matches!(
                    code,
                    Some("AuthenticationFailed" | "InvalidAuthenticationInfo")
                ));
        if refused {
            self.cache.forget(scope, token).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens valid for `lifetime`, counted; fails when `fail` is set.
    #[derive(Debug)]
    struct Counting {
        lifetime: Duration,
        calls: AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    impl Counting {
        fn new(lifetime: Duration) -> Arc<Self> {
            Arc::new(Self {
                lifetime,
                calls: AtomicUsize::new(0),
                fail: Default::default(),
            })
        }
        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait::async_trait]
    impl TokenCredential for Counting {
        async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            // Let concurrent callers pile up behind the one refreshing.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.fail.load(Ordering::SeqCst) {
                return Err(azure_core::Error::message(
                    AzureErrorKind::Credential,
                    "unavailable",
                ));
            }
            Ok(AccessToken::new(
                format!("{}-{n}", scopes.join(",")),
                OffsetDateTime::now_utc() + self.lifetime,
            ))
        }
        async fn clear_cache(&self) -> azure_core::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_token_is_reused_until_the_margin_then_replaced() {
        let long = Counting::new(Duration::from_secs(3600));
        let cache = TokenCache::new(long.clone(), DEFAULT_REFRESH_MARGIN);
        for _ in 0..5 {
            cache.token("s").await.unwrap();
        }
        assert_eq!(long.calls(), 1, "one token for five requests");
        cache.token("other").await.unwrap();
        assert_eq!(long.calls(), 2, "one token per scope");

        // Four minutes left is inside the five-minute margin: every request refreshes.
        let short = Counting::new(Duration::from_secs(240));
        let cache = TokenCache::new(short.clone(), DEFAULT_REFRESH_MARGIN);
        let first = cache.token("s").await.unwrap();
        let second = cache.token("s").await.unwrap();
        assert_eq!(short.calls(), 2);
        assert_ne!(first.secret(), second.secret());
        // With a three-minute margin the same token lasts.
        let short = Counting::new(Duration::from_secs(240));
        let cache = TokenCache::new(short.clone(), Duration::from_secs(180));
        cache.token("s").await.unwrap();
        cache.token("s").await.unwrap();
        assert_eq!(short.calls(), 1);
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_refresh() {
        // Even tokens already inside the margin are shared by the requests that waited for
        // them.
        for lifetime in [3600, 240] {
            let credential = Counting::new(Duration::from_secs(lifetime));
            let cache = Arc::new(TokenCache::new(credential.clone(), DEFAULT_REFRESH_MARGIN));
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let cache = cache.clone();
                    tokio::spawn(async move { cache.token("s").await.unwrap() })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            assert_eq!(credential.calls(), 1, "lifetime {lifetime} s");
        }
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_a_valid_token_and_a_refused_token_is_forgotten() {
        let credential = Counting::new(Duration::from_secs(240));
        let cache = TokenCache::new(credential.clone(), DEFAULT_REFRESH_MARGIN);
        let first = cache.token("s").await.unwrap();
        credential.fail.store(true, Ordering::SeqCst);
        let again = cache.token("s").await.unwrap();
        assert_eq!(first.secret(), again.secret(), "still valid: kept");
        assert_eq!(credential.calls(), 2, "the refresh was attempted");

        cache.forget("s", &first).await;
        let err = cache.token("s").await.unwrap_err();
        assert_eq!(*err.kind(), AzureErrorKind::Credential);
        assert!(!format!("{err:?}").contains(first.secret()));
        credential.fail.store(false, Ordering::SeqCst);
        let fresh = cache.token("s").await.unwrap();
        assert_ne!(fresh.secret(), first.secret());

        // Forgetting a token that was already replaced keeps the replacement.
        let long = Counting::new(Duration::from_secs(3600));
        let cache = TokenCache::new(long.clone(), DEFAULT_REFRESH_MARGIN);
        let refused = cache.token("s").await.unwrap();
        cache.forget("s", &refused).await;
        let replacement = cache.token("s").await.unwrap();
        cache.forget("s", &refused).await;
        assert_eq!(cache.token("s").await.unwrap(), replacement);
        assert_eq!(long.calls(), 2);
    }

    #[test]
    fn scopes_per_choice() {
        let s = |scope: TokenScope, service| scope.scope_for("acme", service, "core.windows.net");
        assert_eq!(
            s(TokenScope::Storage, "queue"),
            "https://storage.azure.com/.default"
        );
        assert_eq!(
            s(TokenScope::Account, "table"),
            "https://acme.table.core.windows.net/.default"
        );
        assert_eq!(
            TokenScope::Account.scope_for("acme", "blob", "core.chinacloudapi.cn"),
            "https://acme.blob.core.chinacloudapi.cn/.default"
        );
        assert_eq!(
            s(TokenScope::CosmosTable, "table"),
            "https://cosmos.azure.com/.default"
        );
        assert_eq!(
            TokenScope::parse("Cosmos", "x").unwrap(),
            TokenScope::CosmosTable
        );
        assert_eq!(
            TokenScope::parse("api://gateway/.default", "x").unwrap(),
            TokenScope::Custom("api://gateway/.default".into())
        );
        for bad in ["", "two words://x", "storage.azure.com"] {
            let err = TokenScope::parse(bad, "AZURE_STORAGE_TOKEN_SCOPE").unwrap_err();
            assert!(
                matches!(&err, Error::InvalidConfig { part, .. } if part == "AZURE_STORAGE_TOKEN_SCOPE"),
                "{bad}: {err}"
            );
        }
    }
}
