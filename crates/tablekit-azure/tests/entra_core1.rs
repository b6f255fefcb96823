//! An `azure_identity` 1.x credential of the official SDK (feature `azure-core-1`) against
//! Azurite over HTTPS with `--oauth basic`: the 1.x `AzureCliCredential`, running a stand-in
//! `az` that prints tokens the test minted and records each call, authorizes table, queue and
//! blob requests; its tokens are cached by tablekit, and a token for another audience is
//! refused.
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
use tablekit_azure::{Account, PutBlob, PutOptions, TokenScope};
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
    queue.put(b"job", PutOptions::default()).await.unwrap();
    let got = queue.get(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(got[0].payload, b"job");
    queue.delete().await.unwrap();

    let container = account.container(&unique_container_name("core1")).unwrap();
    container.create().await.unwrap();
    container
        .put("a.txt", &b"hello"[..], PutBlob::default())
        .await
        .unwrap();
    let blob = container.get("a.txt").await.unwrap().unwrap();
    assert_eq!(&blob.data[..], b"hello");
    container.delete().await.unwrap();

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
            q.put(b"x", PutOptions::default()).await.unwrap_err(),
            ResourceKind::Queue,
        ),
        (
            c.put("b", &b"x"[..], PutBlob::default()).await.unwrap_err(),
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
    queue.delete().await.unwrap();
    container.delete().await.unwrap();
}

#[test]
fn scope_file_names_match_the_script() {
    assert_eq!(file_name(STORAGE), "https___storage_azure_com__default");
    assert!(Path::new(&file_name(COSMOS)).components().count() == 1);
}
