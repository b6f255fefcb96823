//! The HTTP transport under every SDK pipeline of an account: one pooled rustls `reqwest`
//! client (keep-alive, TCP_NODELAY), per-attempt metrics, and no logging of URLs or headers
//! (they carry SAS signatures, SharedKey signatures and bearer tokens).

use std::sync::Arc;
use std::time::Duration;

use azure_core::error::ErrorKind as AzureErrorKind;
use azure_core::headers::{HeaderName, HeaderValue, Headers};
use azure_core::{Body, Context, Policy, PolicyResult, Request, Response, StatusCode};
use tablekit_core::{ConnectionFailure, Error, Result};

use crate::account::Bearer;
use crate::metrics::{Metrics, RequestKind};
use crate::send::{ResponseNotes, SendBy};

/// A new client with tablekit's connection settings: keep-alive pool, TCP_NODELAY (Nagle off:
/// checklist item 16), rustls, no redirects (the storage services never redirect).
///
/// Each account gets its own: pooled connections are served by tasks of the tokio runtime
/// that opened them, so a client shared across runtimes (one per `#[tokio::test]`, say) would
/// hand out connections whose runtime is gone.
#[cfg(any(feature = "identity", feature = "azure-core-1"))]
pub(crate) fn new_client() -> reqwest::Client {
    builder(IDLE_TIMEOUT).build().unwrap_or_default()
}

/// [`new_client`] for an account whose services are at `endpoint`, trusting `roots` (PEM)
/// besides the public web roots (see [`client_trusting`]).
///
/// An emulator (its endpoints are path-style, `http://127.0.0.1:10002/devstoreaccount1`) is a
/// Node.js server, which closes a keep-alive connection idle for 5 s. A pooled connection kept
/// longer can be closed by the server just as a request is written on it, and that request
/// fails with its outcome unknown; so against an emulator the pool drops connections idle
/// for [`EMULATOR_IDLE_TIMEOUT`]. The storage front ends keep idle connections far longer.
pub(crate) fn client_for(endpoint: &azure_core::Url, roots: &[Vec<u8>]) -> Result<reqwest::Client> {
    let idle = if is_path_style(endpoint) {
        EMULATOR_IDLE_TIMEOUT
    } else {
        IDLE_TIMEOUT
    };
    if roots.is_empty() {
        return Ok(builder(idle).build().unwrap_or_default());
    }
    trusting(builder(idle), roots)
}

/// How long a pooled connection may stay idle before the pool drops it.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// [`IDLE_TIMEOUT`] against an emulator: under Node.js's 5 s keep-alive timeout.
pub(crate) const EMULATOR_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Whether the account is in the URL's path (an emulator's endpoints), not in its host name.
fn is_path_style(endpoint: &azure_core::Url) -> bool {
    endpoint
        .path_segments()
        .and_then(|mut segments| segments.next())
        .is_some_and(|first| !first.is_empty())
}

/// [`new_client`] that also trusts `roots` (PEM), besides the public web roots: an emulator's
/// own certificate authority, a private CA of Azure Stack Hub or a TLS-inspecting proxy.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `root certificate` for PEM text without a certificate, or
/// one rustls cannot use.
#[cfg(feature = "azure-core-1")]
pub(crate) fn client_trusting(roots: &[Vec<u8>]) -> Result<reqwest::Client> {
    trusting(builder(IDLE_TIMEOUT), roots)
}

fn trusting(mut builder: reqwest::ClientBuilder, roots: &[Vec<u8>]) -> Result<reqwest::Client> {
    let invalid = |reason: String| Error::InvalidConfig {
        part: "root certificate".into(),
        reason,
    };
    for pem in roots {
        if !String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----") {
            return Err(invalid(
                "no `BEGIN CERTIFICATE` block in the PEM text".into(),
            ));
        }
        for certificate in reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| invalid(format!("not a PEM certificate ({e})")))?
        {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder
        .build()
        .map_err(|e| invalid(format!("the TLS client refused it ({e})")))
}

fn builder(idle: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .tcp_keepalive(Duration::from_secs(30))
        .pool_idle_timeout(idle)
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .use_rustls_tls()
}

/// The last policy of every pipeline: sends the request with `reqwest` and collects the body.
/// On token accounts it also adds the bearer token, to the outgoing HTTP request only, so no
/// policy before it ever holds (or logs) the token.
#[derive(Debug)]
pub(crate) struct Transport {
    pub(crate) client: reqwest::Client,
    pub(crate) metrics: Metrics,
    pub(crate) timeout: Duration,
    pub(crate) bearer: Option<Bearer>,
}

#[async_trait::async_trait]
impl Policy for Transport {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        _next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let kind = ctx
            .get::<RequestKind>()
            .copied()
            .unwrap_or(RequestKind::Other);
        let body = match request.body() {
            Body::Bytes(bytes) => bytes.clone(),
            Body::SeekableStream(_) => {
                return Err(azure_core::Error::message(
                    AzureErrorKind::Other,
                    "streaming request bodies are not used",
                ));
            }
        };
        // Before the request is counted: without a token nothing is sent.
        let authorization = match &self.bearer {
            Some(bearer) => Some(bearer.token(ctx).await?),
            None => None,
        };
        self.metrics.request(kind, body.len());
        let method =
            reqwest::Method::from_bytes(request.method().as_ref().as_bytes()).map_err(|e| {
                azure_core::Error::full(AzureErrorKind::Other, e, "invalid HTTP method")
            })?;
        let mut builder = self
            .client
            .request(method, request.url().clone())
            .timeout(self.timeout);
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some((_, token)) = &authorization {
            let mut value =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.secret()))
                    .map_err(|_| {
                        azure_core::Error::message(
                            AzureErrorKind::Credential,
                            "the token is not a valid header value",
                        )
                    })?;
            // hyper leaves sensitive values out of its own logs.
            value.set_sensitive(true);
            builder = builder.header(reqwest::header::AUTHORIZATION, value);
        }
        // `without_url`: reqwest errors otherwise quote the URL, SAS signature included.
        let io = |e: reqwest::Error| match connection_failure(&e) {
            Some(problem) => azure_core::Error::new(
                AzureErrorKind::Io,
                ConnectionProblem {
                    problem,
                    source: e.without_url(),
                },
            ),
            None => azure_core::Error::full(AzureErrorKind::Io, e.without_url(), "request failed"),
        };
        // The last check before the wire: waits for a token (or anything else) may have
        // taken the attempt past the instant after which it could land too late.
        let notes = ctx.get::<Arc<ResponseNotes>>();
        if let Some(SendBy(by)) = ctx.get::<SendBy>() {
            if std::time::Instant::now() > *by {
                if let Some(notes) = notes {
                    notes.refuse();
                }
                return Err(azure_core::Error::message(
                    AzureErrorKind::Other,
                    "not sent: it could land after its deadline",
                ));
            }
        }
        if let Some(notes) = notes {
            notes.sent();
        }
        let response = builder.body(body).send().await.map_err(io)?;
        if let (Some(bearer), Some((scope, token))) = (&self.bearer, &authorization) {
            let code = response
                .headers()
                .get("x-ms-error-code")
                .and_then(|v| v.to_str().ok());
            bearer
                .answered(scope, token, response.status().as_u16(), code)
                .await;
        }
        let status = StatusCode::try_from(response.status().as_u16()).map_err(|_| {
            azure_core::Error::message(AzureErrorKind::DataConversion, "unknown HTTP status")
        })?;
        let mut headers = Headers::new();
        for (name, value) in response.headers() {
            if let Ok(value) = value.to_str() {
                headers.insert(
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(value.to_owned()),
                );
            }
        }
        let header = |name: &str| headers.get_optional_string(&HeaderName::from(name.to_owned()));
        if let Some(notes) = ctx.get::<Arc<ResponseNotes>>() {
            notes.answered_as(header("x-ms-request-id"));
        }
        if let Some(charge) =
            header("x-ms-request-charge").and_then(|v| v.trim().parse::<f64>().ok())
        {
            self.metrics.request_charge(charge);
        }
        if status == StatusCode::TooManyRequests || status == StatusCode::ServiceUnavailable {
            if let Some(notes) = ctx.get::<Arc<ResponseNotes>>() {
                notes.record(header);
            }
        }
        let bytes = response.bytes().await.map_err(io)?;
        self.metrics.received(bytes.len());
        if matches!(u16::from(status), 429 | 500 | 503) {
            if let Some(notes) = ctx.get::<Arc<ResponseNotes>>() {
                notes.record_message(tablekit_core::wire::error_message(&bytes));
            }
        }
        let stream = futures::stream::once(async move { Ok::<_, azure_core::Error>(bytes) });
        Ok(Response::new(status, headers, Box::pin(stream)))
    }
}

/// A connection that could not be made, and why: carried inside the SDK's error so that the
/// error mapping can name it ([`Error::Connection`]).
#[derive(Debug)]
pub(crate) struct ConnectionProblem {
    pub(crate) problem: (ConnectionFailure, String),
    source: reqwest::Error,
}

impl std::fmt::Display for ConnectionProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.problem.0, self.problem.1)
    }
}

impl std::error::Error for ConnectionProblem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Why `error` could not connect, when it says: a TLS certificate the client refused, a host
/// name that did not resolve, a refused connection. Other failures (a reset, a timeout) are
/// not connection failures: the request may have been sent.
fn connection_failure(error: &reqwest::Error) -> Option<(ConnectionFailure, String)> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut dns = false;
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some((tls_failure(tls), tls.to_string()));
        }
        // hyper's connector names a failed lookup "dns error" and wraps the resolver's.
        dns |= e.to_string().contains("dns error");
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => {
                if io.kind() == std::io::ErrorKind::ConnectionRefused {
                    return Some((ConnectionFailure::Refused, io.to_string()));
                }
                // An I/O error's `source` skips what it wraps (the TLS stack's error, or
                // another I/O error around it): look inside instead.
                match io.get_ref() {
                    Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                    None => e.source(),
                }
            }
            None => e.source(),
        };
    }
    (dns && error.is_connect()).then(|| {
        (
            ConnectionFailure::Dns,
            "the host name did not resolve".to_owned(),
        )
    })
}

fn tls_failure(error: &rustls::Error) -> ConnectionFailure {
    use rustls::CertificateError as C;
    match error {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => ConnectionFailure::UntrustedCertificate,
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                ConnectionFailure::NameMismatch
            }
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => ConnectionFailure::ExpiredCertificate,
            // webpki's refusal of an authority's certificate presented as a server's reaches
            // rustls as an opaque "other" error.
            other if format!("{other:?}").contains("CaUsedAsEndEntity") => {
                ConnectionFailure::CaCertificateAsServer
            }
            _ => ConnectionFailure::Tls,
        },
        _ => ConnectionFailure::Tls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_path_style_endpoints_are_an_emulators() {
        for (url, emulator) in [
            ("http://127.0.0.1:10002/devstoreaccount1", true),
            ("http://azurite:10002/devstoreaccount1/", true),
            ("https://acct.table.core.windows.net", false),
            ("https://acct.table.core.windows.net/", false),
            ("https://acct.table.cosmos.azure.com:443/", false),
        ] {
            let url = azure_core::Url::parse(url).unwrap();
            assert_eq!(is_path_style(&url), emulator, "{url}");
        }
    }
}
