//! Connecting with Microsoft Entra ID: the default credential chain against the HTTPS+OAuth
//! emulator.
//!
//! The tool is a separate process, so it cannot be handed a Rust credential. It gets its token
//! the way it would on a developer machine: from the Azure CLI credential of the default chain
//! (`AZURE_CREDENTIAL_KIND=azurecli`), here a stand-in `az` on `PATH` that prints a token the
//! test minted and records each call. No test-only path exists in the tool.
#![cfg(unix)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::*;
use tablekit::core::{Entity, Properties};
use tablekit_testkit::fixtures::{oauth_emulator, oauth_key_account, table_on};
use tablekit_testkit::{Claims, MintingCredential};

/// A directory with an `az` that answers `account get-access-token` with `token` and appends
/// its arguments to `calls`.
fn stand_in_az(dir: &Path, token: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = dir.join("az-calls");
    let expires = chrono::Utc::now().timestamp() + 3600;
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> '{}'\ncat <<'JSON'\n{{\"accessToken\":\"{token}\",\"expires_on\":{expires},\"subscription\":\"s\",\"tenant\":\"t\",\"tokenType\":\"Bearer\"}}\nJSON\n",
        calls.display()
    );
    let az = bin.join("az");
    std::fs::write(&az, script).unwrap();
    std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, calls)
}

/// The binary with only the stand-in credential and `env` to connect with.
fn entra_run(bin: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_tablekit"));
    for var in [
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_TABLE_ENDPOINT",
        "AZURE_STORAGE_QUEUE_ENDPOINT",
        "AZURE_STORAGE_BLOB_ENDPOINT",
        "AZURE_STORAGE_TOKEN_SCOPE",
        "AZURE_STORAGE_ENDPOINT_SUFFIX",
        "TABLEKIT_ROOT_CERTIFICATE",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
    ] {
        command.env_remove(var);
    }
    command
        .env("PATH", path)
        .env("AZURE_CREDENTIAL_KIND", "azurecli")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null());
    let output = command.output().expect("run tablekit");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test]
async fn entra_id_through_the_default_chain_lists_and_queries() {
    let azurite = oauth_emulator();
    let t = table_on(&oauth_key_account(), "CliEntra").await;
    for (pk, rk) in [("p1", "a"), ("p1", "b"), ("p2", "a")] {
        t.upsert_replace(&Entity::try_new(pk, rk, Properties::new().with("N", 7_i64)).unwrap())
            .await
            .unwrap();
    }
    let dir = scratch("entra");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, azurite.ca_certificate_pem().unwrap()).unwrap();
    let (token, _) =
        MintingCredential::new(Claims::valid()).mint("https://storage.azure.com/.default");
    let (bin, calls) = stand_in_az(&dir, &token);
    let e = azurite.endpoints();

    // --account with explicit endpoints.
    let flags = [
        "--account",
        "devstoreaccount1",
        "--table-endpoint",
        &e.table,
        "--queue-endpoint",
        &e.queue,
        "--blob-endpoint",
        &e.blob,
        "--root-certificate",
        arg(&ca),
        "--retries",
        "0",
    ];
    let listed = entra_run(
        &bin,
        &[],
        &[
            &flags[..],
            &["--verbose", "tables", "list", "--prefix", t.name()],
        ]
        .concat(),
    )
    .expect(0);
    assert_eq!(listed.stdout.trim(), t.name());
    assert!(
        listed.stderr.contains("(Microsoft Entra ID)"),
        "{}",
        listed.stderr
    );
    assert!(
        !listed.stderr.contains(&token),
        "the token is never printed"
    );
    let asked = std::fs::read_to_string(&calls).unwrap();
    assert!(
        asked.contains("get-access-token") && asked.contains("https://storage.azure.com/.default"),
        "{asked}"
    );

    // $AZURE_STORAGE_ACCOUNT_NAME and the variables that go with it.
    let env = [
        ("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1"),
        ("AZURE_STORAGE_TABLE_ENDPOINT", e.table.as_str()),
        ("TABLEKIT_ROOT_CERTIFICATE", arg(&ca)),
    ];
    let queried = entra_run(
        &bin,
        &env,
        &[
            "query",
            t.name(),
            "--filter",
            "PartitionKey eq 'p1'",
            "--format",
            "jsonl",
        ],
    )
    .expect(0);
    let rows: Vec<serde_json::Value> = queried
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{}", queried.stdout);
    assert_eq!(
        (rows[0]["RowKey"].as_str(), rows[1]["RowKey"].as_str()),
        (Some("a"), Some("b"))
    );

    // Without the emulator's certificate authority the TLS handshake fails: the option is
    // what made the connection trusted.
    entra_run(
        &bin,
        &[],
        &[&flags[..8], &["--retries", "0", "tables", "list"]].concat(),
    )
    .expect(1);

    // A token the service refuses ends the command with exit 1, and is not printed.
    let expired_dir = scratch("entra-expired");
    let (expired, _) =
        MintingCredential::new(Claims::expired()).mint("https://storage.azure.com/.default");
    let (expired_bin, _) = stand_in_az(&expired_dir, &expired);
    let refused = entra_run(
        &expired_bin,
        &[],
        &[&flags[..], &["tables", "list"]].concat(),
    )
    .expect(1);
    assert!(!refused.stderr.contains(&expired), "{}", refused.stderr);
}

/// A copy whose destination is reached with Microsoft Entra ID only (`--dst-account`, an
/// https endpoint, its own root certificate): the destination equals the source and verifies;
/// the source keeps its connection string. Destination options without a destination account,
/// or Entra ID options next to a destination connection string, exit 2 before any request.
#[tokio::test]
async fn a_copy_reaches_its_destination_with_entra_id() {
    let azurite = oauth_emulator();
    let src = table("CliEntraSrc").await;
    seed(&src, 3, 20).await;
    let dst_name = tablekit_testkit::unique_table_name("CliEntraDst");
    let dir = scratch("entra-copy");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, azurite.ca_certificate_pem().unwrap()).unwrap();
    let (token, _) =
        MintingCredential::new(Claims::valid()).mint("https://storage.azure.com/.default");
    let (bin, calls) = stand_in_az(&dir, &token);
    let storage = storage();
    let dst_flags = [
        "--dst-account",
        "devstoreaccount1",
        "--dst-table-endpoint",
        &azurite.endpoints().table,
        "--dst-root-certificate",
        arg(&ca),
    ];
    let cp = dir.join("copy.checkpoint");
    let run = entra_run(
        &bin,
        &[],
        &[
            &[
                "--connection-string",
                &storage,
                "--verbose",
                "copy",
                src.name(),
                &dst_name,
                "--create",
                "--verify",
                "--checkpoint",
                arg(&cp),
            ][..],
            &dst_flags[..],
        ]
        .concat(),
    )
    .expect(0);
    assert!(
        run.stderr.contains("destination: account devstoreaccount1")
            && run.stderr.contains("(Microsoft Entra ID)"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("copied 60 entities"), "{}", run.stderr);
    assert!(run.stderr.contains("0 differ"), "{}", run.stderr);
    assert!(!run.stderr.contains(&token), "the token is never printed");
    let asked = std::fs::read_to_string(&calls).unwrap();
    assert!(
        asked.contains("https://storage.azure.com/.default"),
        "{asked}"
    );
    let dst = table_on(&oauth_key_account(), "unused")
        .await
        .account()
        .table(&dst_name)
        .unwrap();
    assert_eq!(contents(&dst).await, contents(&src).await);

    for bad in [
        // A destination option without a destination account.
        vec!["--dst-token-scope", "storage"],
        // Entra ID options next to a destination connection string.
        vec![
            "--dst-connection-string",
            "UseDevelopmentStorage=true",
            "--dst-token-scope",
            "storage",
        ],
        // A bearer token never travels in clear text.
        vec![
            "--dst-account",
            "devstoreaccount1",
            "--dst-table-endpoint",
            "http://127.0.0.1:1/devstoreaccount1",
        ],
    ] {
        let run = entra_run(
            &bin,
            &[],
            &[
                &[
                    "--connection-string",
                    &storage,
                    "copy",
                    src.name(),
                    &dst_name,
                    "--checkpoint",
                    arg(&dir.join("bad.checkpoint")),
                ][..],
                &bad[..],
            ]
            .concat(),
        )
        .expect(2);
        assert!(
            run.stderr.contains("destination") || run.stderr.contains("--dst-"),
            "{bad:?}: {}",
            run.stderr
        );
    }
}
