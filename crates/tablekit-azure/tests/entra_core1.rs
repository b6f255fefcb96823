//! An `azure_identity` 1.x credential of the official SDK (feature `azure-core-1`) against
//! Azurite over HTTPS with `--oauth basic`: the 1.x `AzureCliCredential`, running a stand-in
//! `az` that prints tokens the test minted and records each call, authorizes table, queue and
//! blob requests; its tokens are cached by tablekit, and a token for another audience is
//! refused. The 1.x `ClientSecretCredential` asks a stand-in token endpoint over HTTPS through
//! tablekit's HTTP client (`AzureCore1Http`), with no HTTP client of azure_core 1.x's own.
//!
//! The credential runs `/bin/sh -c "cd /bin && az account get-access-token …"` as it would on
//! a developer machine; only the `PATH` of that shell is the test's (through the credential's
//! own `executor` option, since a test cannot change its own environment safely).
#![cfg(all(unix, feature = "azure-core-1"))]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use azure_identity_1::{AzureCliCredential, AzureCliCredentialOptions, Executor};
use futures::future::join_all;
use tablekit_azure::identity::{AzureCore1Http, azure_core_1};
use tablekit_azure::{Account, SendOptions, TokenScope, UploadOptions};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, Keys, Properties, ResourceKind};
use tablekit_testkit::fixtures::{oauth_key_account, token_account_builder};
use tablekit_testkit::{
    Claims, MintingCredential, unique_container_name, unique_queue_name, unique_table_name,
};

const STORAGE: &str = "https://storage.azure.com/.default";
const COSMOS: &str = "https://cosmos.azure.com/.default";

/// A directory with a stand-in `az`: `az account get-access-token -o json --scope S` prints
/// the token file written for `S` (see [`StandInAz::answer`]) and appends its arguments to
/// `calls`.
struct StandInAz {
    bin: PathBuf,
    calls: PathBuf,
}

/// A scope as a file name: every character but letters and digits becomes `_` (what the
/// script's `tr` does).
fn file_name(scope: &str) -> String {
    scope
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

impl StandInAz {
    fn new(label: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!(
            "tablekit-az-{label}-{}-{}",
            std::process::id(),
            unique_table_name("d")
        ));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let calls = dir.join("calls");
        let script = format!(
            r#"#!/bin/sh
echo "$@" >> '{calls}'
scope=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--scope" ]; then scope="$2"; fi
  shift
done
file='{bin}/'"$(printf %s "$scope" | tr -c 'A-Za-z0-9' '_')"
if [ ! -f "$file" ]; then
  echo "ERROR: no token for scope $scope (run 'az login')" >&2
  exit 1
fi
cat "$file"
"#,
            calls = calls.display(),
            bin = bin.display(),
        );
        let az = bin.join("az");
        std::fs::write(&az, script).unwrap();
        std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { bin, calls }
    }

    /// From now on, `az` answers `scope` with a token `credential` minted for it.
    fn answer(&self, scope: &str, credential: &MintingCredential) {
        let (token, expires) = credential.mint(scope);
        let json = serde_json::json!({
            "accessToken": token,
            "expiresOn": "2030-01-01 00:00:00.000000",
            "expires_on": expires.unix_timestamp(),
            "subscription": "00000000-0000-0000-0000-000000000000",
            "tenant": "72f988bf-86f1-41af-91ab-2d7cd011db47",
            "tokenType": "Bearer",
        });
        std::fs::write(self.bin.join(file_name(scope)), json.to_string()).unwrap();
    }

    /// The arguments of each `az` run so far.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The 1.x `AzureCliCredential`, its shell finding this `az` first on `PATH`.
    fn credential(&self) -> Arc<AzureCliCredential> {
        let executor = Arc::new(PathFirst(self.bin.clone()));
        AzureCliCredential::new(Some(AzureCliCredentialOptions {
            executor: Some(executor),
            ..Default::default()
        }))
        .unwrap()
    }
}

/// Runs the credential's command as its own tokio executor does, with `.0` first on `PATH`.
#[derive(Debug)]
struct PathFirst(PathBuf);

#[async_trait::async_trait]
impl Executor for PathFirst {
    async fn run(&self, program: &OsStr, args: &[&OsStr]) -> std::io::Result<std::process::Output> {
        let path = format!(
            "{}:{}",
            self.0.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        tokio::process::Command::new(program)
            .args(args)
            .env("PATH", path)
            .output()
            .await
    }
}

fn cli_account(az: &StandInAz, scope: TokenScope) -> Account {
    // The builder's 0.21 credential is replaced by the 1.x one.
    let unused = Arc::new(MintingCredential::new(Claims::valid()));
    token_account_builder(unused.clone())
        .with_azure_core_1_credential(az.credential())
        .with_token_scope(scope)
        .build()
        .unwrap()
}

fn az_ran_for(az: &StandInAz, scope: &str) -> usize {
    let asked = format!("account get-access-token -o json --scope {scope}");
    let calls = az.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.starts_with("account get-access-token")),
        "{calls:?}"
    );
    calls.iter().filter(|c| **c == asked).count()
}

#[tokio::test]
async fn an_azure_cli_credential_of_the_1x_sdk_serves_tables_queues_and_blobs_from_one_cached_token()
 {
    let az = StandInAz::new("ok");
    let minting = MintingCredential::new(Claims::valid());
    az.answer(STORAGE, &minting);
    let account = cli_account(&az, TokenScope::Storage);
    assert!(account.uses_token() && !account.has_key());

    let table = account.table(&unique_table_name("core1")).unwrap();
    table.create().await.unwrap();
    let keys = Keys::new("Sales", "000223").unwrap();
    table
        .insert(&Entity::new(
            keys.clone(),
            Properties::new().with("Age", 34),
        ))
        .await
        .unwrap();
    let rows = table
        .query::<Properties>()
        .filter(Filter::partition("Sales"))
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);

    let queue = account.queue(&unique_queue_name("core1")).unwrap();
    queue.create().await.unwrap();
    queue.send(b"job", SendOptions::default()).await.unwrap();
    let got = queue.receive(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got[0].payload, b"job");
    queue.delete_queue().await.unwrap();

    let container = account.container(&unique_container_name("core1")).unwrap();
    container.create().await.unwrap();
    container
        .upload("a.txt", &b"hello"[..], UploadOptions::default())
        .await
        .unwrap();
    let blob = container.download("a.txt").await.unwrap().unwrap();
    assert_eq!(&blob.data[..], b"hello");
    container.delete_container().await.unwrap();

    // Sixteen reads at once, then the clean-up: still the one token.
    let reads = (0..16).map(|i| {
        let table = table.clone();
        async move {
            table
                .get::<Properties>(&Keys::new("Sales", format!("{i}")).unwrap())
                .await
        }
    });
    for read in join_all(reads).await {
        assert!(read.unwrap().is_none());
    }
    table.delete_table().await.unwrap();

    let requests = account.metrics().snapshot().requests();
    assert!(requests >= 28, "{requests} requests");
    assert_eq!(
        az_ran_for(&az, STORAGE),
        1,
        "one `az` run for {requests} requests"
    );
    assert_eq!(az.calls().len(), 1);
}

#[tokio::test]
async fn a_1x_token_for_another_audience_is_refused_once_per_service() {
    // The resources exist: only the token is wrong.
    let setup = oauth_key_account();
    let table = setup.table(&unique_table_name("core1aud")).unwrap();
    table.create().await.unwrap();
    let queue = setup.queue(&unique_queue_name("core1aud")).unwrap();
    queue.create().await.unwrap();
    let container = setup.container(&unique_container_name("core1aud")).unwrap();
    container.create().await.unwrap();

    // Asked for Cosmos DB's audience, `az` answers with a token for it, which Azure Storage
    // refuses.
    let az = StandInAz::new("aud");
    az.answer(COSMOS, &MintingCredential::new(Claims::valid()));
    let account = cli_account(&az, TokenScope::CosmosTable);
    let t = account.table(table.name()).unwrap();
    let q = account.queue(queue.name()).unwrap();
    let c = account.container(container.name()).unwrap();
    let keys = Keys::new("p", "r").unwrap();
    let before = account.metrics().snapshot();
    let errors = [
        (
            t.insert(&Entity::new(keys, Properties::new()))
                .await
                .unwrap_err(),
            ResourceKind::Table,
        ),
        (
            q.send(b"x", SendOptions::default()).await.unwrap_err(),
            ResourceKind::Queue,
        ),
        (
            c.upload("b", &b"x"[..], UploadOptions::default())
                .await
                .unwrap_err(),
            ResourceKind::Blob,
        ),
    ];
    for (err, kind) in errors {
        assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
        assert!(!err.is_retryable());
        match &err {
            Error::Unauthorized { target, .. } => assert_eq!(target.kind, kind),
            other => panic!("{other:?}"),
        }
    }
    let spent = account.metrics().snapshot().since(&before);
    assert_eq!(
        (spent.requests(), spent.retries),
        (3, 0),
        "refused once each"
    );
    // Each refused token was forgotten: every request asked `az` again.
    assert_eq!(az_ran_for(&az, COSMOS), 3);

    // A scope `az` has no token for fails before any request, with what `az` said.
    let az = StandInAz::new("none");
    let account = cli_account(&az, TokenScope::Storage);
    let err = account
        .table(table.name())
        .unwrap()
        .insert(&Entity::new(
            Keys::new("p", "r").unwrap(),
            Properties::new(),
        ))
        .await
        .unwrap_err();
    match &err {
        Error::InvalidConfig { part, reason } => {
            assert_eq!(part, "credentials");
            assert!(reason.contains("AzureCliCredential"), "{reason}");
            assert!(reason.contains("run 'az login'"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(account.metrics().snapshot().requests(), 0);

    assert!(
        table
            .query::<Properties>()
            .allow_scan()
            .collect()
            .await
            .unwrap()
            .is_empty(),
        "nothing was written"
    );
    table.delete_table().await.unwrap();
    queue.delete_queue().await.unwrap();
    container.delete_container().await.unwrap();
}

/// A stand-in for Microsoft Entra ID's token endpoint over HTTPS on loopback, with a
/// certificate authority of its own: each `POST /{tenant}/oauth2/v2.0/token` with a client
/// secret form gets a token `minting` mints for the form's scope. Records each form.
struct TokenEndpoint {
    authority: String,
    ca_pem: String,
    forms: Arc<std::sync::Mutex<Vec<String>>>,
}

impl TokenEndpoint {
    async fn start(minting: Arc<MintingCredential>) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.distinguished_name
            .push(DnType::CommonName, "stand-in identity authority");
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        let forms = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = forms.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = tcp.accept().await {
                let (acceptor, minting, seen) = (acceptor.clone(), minting.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    // One request per connection: its head, then `Content-Length` bytes.
                    let mut data = Vec::new();
                    let mut buf = [0_u8; 4096];
                    let body_at = loop {
                        let n = tls.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&data[..body_at]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while data.len() < body_at + length {
                        let n = tls.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                    }
                    let form =
                        String::from_utf8_lossy(&data[body_at..body_at + length]).into_owned();
                    let scope = form
                        .split('&')
                        .find_map(|pair| pair.strip_prefix("scope="))
                        .map(|s| s.replace("%3A", ":").replace("%2F", "/"))
                        .unwrap_or_default();
                    seen.lock().unwrap().push(form);
                    let (token, _) = minting.mint(&scope);
                    let body = serde_json::json!({
                        "token_type": "Bearer",
                        "expires_in": 3600,
                        "ext_expires_in": 3600,
                        "access_token": token,
                    })
                    .to_string();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(response.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self {
            authority: format!("https://127.0.0.1:{port}"),
            ca_pem,
            forms,
        }
    }

    fn forms(&self) -> Vec<String> {
        self.forms.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn a_1x_client_secret_credential_calls_entra_through_tablekit_s_http_client() {
    let minting = Arc::new(MintingCredential::new(Claims::valid()));
    let endpoint = TokenEndpoint::start(minting.clone()).await;
    let mut cloud = azure_core_1::cloud::CustomConfiguration::default();
    cloud.authority_host = endpoint.authority.clone();
    let mut options = azure_identity_1::ClientSecretCredentialOptions::default();
    options.client_options.cloud = Some(Arc::new(cloud.into()));
    // No `reqwest` feature of azure_core 1.x is on in this build: without this transport the
    // credential has no HTTP client at all.
    options.client_options.transport = Some(
        AzureCore1Http::trusting(endpoint.ca_pem.clone())
            .unwrap()
            .transport(),
    );
    let credential = azure_identity_1::ClientSecretCredential::new(
        "72f988bf-86f1-41af-91ab-2d7cd011db47",
        "3c1e5f4a-7b2d-4e8f-9a6c-0d1b2c3e4f50".to_owned(),
        "stand-in-secret".into(),
        Some(options),
    )
    .unwrap();
    let unused = Arc::new(MintingCredential::new(Claims::valid()));
    let account = token_account_builder(unused)
        .with_azure_core_1_credential(credential)
        .build()
        .unwrap();

    let table = account.table(&unique_table_name("core1http")).unwrap();
    table.create().await.unwrap();
    let queue = account.queue(&unique_queue_name("core1http")).unwrap();
    queue.create().await.unwrap();
    let container = account
        .container(&unique_container_name("core1http"))
        .unwrap();
    container.create().await.unwrap();
    table.delete_table().await.unwrap();
    queue.delete_queue().await.unwrap();
    container.delete_container().await.unwrap();

    let forms = endpoint.forms();
    assert_eq!(
        forms.len(),
        1,
        "one token request for six requests: {forms:?}"
    );
    assert!(
        forms[0].contains("grant_type=client_credentials"),
        "{forms:?}"
    );
    assert!(forms[0].contains("client_secret=stand-in-secret"));
    assert!(
        forms[0].contains("scope=https%3A%2F%2Fstorage.azure.com%2F.default"),
        "{forms:?}"
    );
    assert_eq!(minting.calls(), 1);
}

#[test]
fn scope_file_names_match_the_script() {
    assert_eq!(file_name(STORAGE), "https___storage_azure_com__default");
    assert!(Path::new(&file_name(COSMOS)).components().count() == 1);
}
