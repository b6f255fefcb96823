//! Connections that cannot be made fail with a named reason: each refused TLS certificate
//! against a local TLS listener (not retried: one connection), a host name that does not
//! resolve and a refused connection (named, and retried as transport errors are).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tablekit_azure::{Account, AccountBuilder};
use tablekit_core::{ConnectionFailure, Error, ErrorKind};
use tablekit_testkit::fixtures::fast_retries;
use tablekit_testkit::{ACCOUNT, ACCOUNT_KEY};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate authority: its certificate (PEM) and what signs with it.
struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn authority(name: &str) -> Authority {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).unwrap();
    Authority {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A server certificate for `names`, signed by `ca`, valid until `not_after` (year).
fn leaf(ca: &Authority, names: &[&str], not_after: i32) -> (CertificateDer<'static>, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.not_before = rcgen::date_time_ymd(2019, 1, 1);
    params.not_after = rcgen::date_time_ymd(not_after, 1, 1);
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.der().clone(), key)
}

/// A TLS listener on loopback serving `cert`; counts the TCP connections it accepts.
async fn listener(cert: CertificateDer<'static>, key: &KeyPair) -> (SocketAddr, Arc<AtomicUsize>) {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = tcp.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            // The client refuses the certificate: the handshake fails, nothing is served.
            tokio::spawn(async move {
                let _ = acceptor.accept(stream).await;
            });
        }
    });
    (addr, accepted)
}

/// An account whose services are at `host:port` over HTTPS, trusting `root` (PEM).
fn account_at(host: &str, port: u16, root: &str) -> Account {
    let endpoint = format!("https://{host}:{port}/{ACCOUNT}");
    let cs = format!(
        "DefaultEndpointsProtocol=https;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};\
         TableEndpoint={endpoint};QueueEndpoint={endpoint};BlobEndpoint={endpoint}"
    );
    AccountBuilder::from_connection_string(&cs)
        .unwrap()
        .with_root_certificate(root.as_bytes().to_vec())
        .with_settings(fast_retries())
        .build()
        .unwrap()
}

async fn refused_certificate(account: &Account) -> (ConnectionFailure, Error) {
    let error = account
        .table("Refused")
        .unwrap()
        .get::<tablekit_core::Properties>(("p", "r"))
        .await
        .unwrap_err();
    match &error {
        Error::Connection { failure, .. } => (*failure, error),
        other => panic!("not a connection error: {other:?}"),
    }
}

#[tokio::test]
async fn each_refused_certificate_is_named_and_not_retried() {
    let trusted = authority("tablekit trusted authority");
    let stranger = authority("an authority nobody trusts");

    // A self-signed authority certificate (CA:TRUE) presented as the server's — what
    // `openssl req -x509` makes — trusted as a root.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_as_server = ca_params.self_signed(&ca_key).unwrap();

    let cases: Vec<(
        &str,
        CertificateDer<'static>,
        KeyPair,
        String,
        ConnectionFailure,
    )> = vec![
        {
            let (cert, key) = leaf(&stranger, &["127.0.0.1"], 2099);
            (
                "untrusted",
                cert,
                key,
                trusted.pem.clone(),
                ConnectionFailure::UntrustedCertificate,
            )
        },
        (
            "authority as server",
            ca_as_server.der().clone(),
            ca_key,
            ca_as_server.pem(),
            ConnectionFailure::CaCertificateAsServer,
        ),
        {
            let (cert, key) = leaf(&trusted, &["other.example"], 2099);
            (
                "other name",
                cert,
                key,
                trusted.pem.clone(),
                ConnectionFailure::NameMismatch,
            )
        },
        {
            let (cert, key) = leaf(&trusted, &["127.0.0.1"], 2020);
            (
                "expired",
                cert,
                key,
                trusted.pem.clone(),
                ConnectionFailure::ExpiredCertificate,
            )
        },
    ];
    for (case, cert, key, root, expected) in cases {
        let (addr, accepted) = listener(cert, &key).await;
        let account = account_at("127.0.0.1", addr.port(), &root);
        let (failure, error) = refused_certificate(&account).await;
        assert_eq!(failure, expected, "{case}: {error}");
        assert_eq!(error.kind(), ErrorKind::Tls, "{case}");
        assert!(!error.is_retryable(), "{case}");
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "{case}: not retried");
        assert_eq!(account.metrics().snapshot().retries, 0, "{case}");
        let text = error.to_string();
        assert!(
            text.starts_with("cannot connect to the service ("),
            "{case}: {text}"
        );
    }
}

#[tokio::test]
async fn an_unknown_host_and_a_refused_connection_are_named_and_retried() {
    let ca = authority("tablekit trusted authority");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let account = account_at("127.0.0.1", port, &ca.pem);
    let (failure, error) = refused_certificate(&account).await;
    assert_eq!(failure, ConnectionFailure::Refused, "{error}");
    assert_eq!(error.kind(), ErrorKind::Transport);
    assert!(error.is_retryable());
    assert!(account.metrics().snapshot().retries > 0, "retried");

    let account = account_at("tablekit-nowhere.invalid", 443, &ca.pem);
    let (failure, error) = refused_certificate(&account).await;
    assert_eq!(failure, ConnectionFailure::Dns, "{error}");
    assert_eq!(error.kind(), ErrorKind::Transport);
}
