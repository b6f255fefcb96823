//! Compatibility with the legacy format: entities written to Azurite by the legacy Python
//! table client (`azure-cosmosdb-table` 1.0.6, in a virtual environment under
//! `target/py-legacy`, set up here when missing) with an AES key-wrap key, an RSA-OAEP key
//! and in Java's first-release variant are read with tablekit and decrypted exactly, also
//! through an encrypting table; altered copies of them are decryption failures naming the
//! entity.
//!
//! The interpreter is `TABLEKIT_PYTHON` when set, else `python3`; the test installs the rest
//! (the virtual environment and the pinned package, with pip). Without the interpreter the
//! tests are skipped, with a message, only outside CI: when the `CI` variable is set (to
//! anything but `false` or `0`, as CI services set it) a missing interpreter fails them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use tablekit_azure::{Account, Table};
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Keys, Target};
use tablekit_encryption::{
    AesKeyWrap, EncryptionPolicy, KeyRing, LEGACY_METADATA_1, LEGACY_METADATA_2, RsaOaepKey,
};
use tablekit_testkit::fixtures;

/// The pinned legacy client.
const PACKAGE: &str = "azure-cosmosdb-table==1.0.6";
const AES_KID: &str = "legacy-aes";
const AES_KEY: [u8; 32] = [0x5c; 32];
const RSA_KID: &str = "legacy-rsa";
const ENCRYPTED: [&str; 4] = ["Email", "HomeAddress", "Notes", "Empty"];

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(command: &mut Command) {
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(status.success(), "{command:?} failed ({status})");
}

/// The variable naming the interpreter the virtual environment is made with.
const PYTHON_VARIABLE: &str = "TABLEKIT_PYTHON";

/// Whether the tests run under CI: `CI` set to anything but empty, `false` or `0`.
fn under_ci(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "false" | "0"))
}

/// `Some(interpreter)` when it runs; when it does not, `None` (skipped, with a message)
/// outside CI, and a panic under CI, so that a CI run without it fails instead of passing
/// without having run.
fn interpreter_or_skip(interpreter: &str, ci: bool) -> Option<&str> {
    if Command::new(interpreter).arg("--version").output().is_ok() {
        return Some(interpreter);
    }
    assert!(
        !ci,
        "{interpreter} cannot be run, and the legacy-format compatibility tests need it under \
         CI (the CI variable is set): install Python 3 with venv, or name the interpreter in \
         {PYTHON_VARIABLE}"
    );
    eprintln!(
        "SKIPPED: {interpreter} cannot be run; the legacy-format compatibility test needs it \
         (under CI, with the CI variable set, this is a failure)"
    );
    None
}

/// The virtual environment's interpreter, set up once (idempotent: a marker names the
/// installed package); `None` outside CI when no Python is installed.
fn legacy_python() -> Option<PathBuf> {
    static SETUP: Mutex<()> = Mutex::new(());
    let _one_at_a_time = SETUP.lock().unwrap_or_else(|e| e.into_inner());
    let interpreter = std::env::var(PYTHON_VARIABLE).unwrap_or_else(|_| "python3".to_owned());
    let ci = under_ci(std::env::var("CI").ok().as_deref());
    let interpreter = interpreter_or_skip(&interpreter, ci)?;
    let dir = manifest_dir().join("../../target/py-legacy");
    let python = dir.join("bin/python");
    if !python.exists() {
        run(Command::new(interpreter).args(["-m", "venv"]).arg(&dir));
    }
    let marker = dir.join(".installed");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(PACKAGE) {
        run(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PACKAGE,
        ]));
        std::fs::write(&marker, PACKAGE).unwrap();
    }
    Some(python)
}

fn pem_path() -> PathBuf {
    manifest_dir().join("tests/keys/rsa-2048.pkcs8.pem")
}

/// The entities to write: (keys, which key wraps, Java variant, properties).
fn entities() -> Vec<(Keys, &'static str, bool, Properties)> {
    let base = |email: &str| {
        Properties::new()
            .with("FirstName", "Jun")
            .with("Email", email)
            .with("HomeAddress", "Zoë Ångström, 東京都港区 1-2-3 🏠")
            .with("Notes", "x".repeat(30_000) + "ü end")
            .with("Empty", "")
            // The library writes Python integers as Edm.Int64.
            .with("Age", 38i64)
            .with("Active", true)
    };
    vec![
        (
            Keys::new("Sales", "000223").unwrap(),
            "aes",
            false,
            base("jun@contoso.example"),
        ),
        (
            Keys::new("Sales", "000224").unwrap(),
            "rsa",
            false,
            base("cao@contoso.example"),
        ),
        (
            Keys::new("Ventes-été", "000225-ü").unwrap(),
            "aes",
            false,
            base("été@contoso.example"),
        ),
        (
            Keys::new("Sales", "000226").unwrap(),
            "aes",
            true,
            base("java@contoso.example"),
        ),
    ]
}

fn policy() -> EncryptionPolicy {
    let aes = Arc::new(AesKeyWrap::new(AES_KID, &AES_KEY).unwrap());
    let rsa = RsaOaepKey::from_pem(RSA_KID, &std::fs::read_to_string(pem_path()).unwrap());
    EncryptionPolicy::builder(aes)
        .properties(ENCRYPTED)
        .resolver(Arc::new(KeyRing::new().with(Arc::new(rsa.unwrap()))))
        .read_legacy_format([AES_KID, RSA_KID])
        .build()
        .unwrap()
}

/// A table on the emulator holding [`entities`] written by the legacy client; `None` when
/// Python is absent.
async fn written_by_the_legacy_client() -> Option<Table> {
    let python = legacy_python()?;
    let connection_string = fixtures::connection_string(&fixtures::emulator());
    let account = Account::from_connection_string(&connection_string)
        .unwrap()
        .with_settings(fixtures::fast_retries())
        .unwrap();
    let table = fixtures::table_on(&account, "legacy").await;
    let spec = json!({
        "aes": {"kid": AES_KID, "key_hex": AES_KEY.iter().map(|b| format!("{b:02x}")).collect::<String>()},
        "rsa": {"kid": RSA_KID, "pem_path": pem_path()},
        "entities": entities().into_iter().map(|(keys, kek, java_v1, properties)| {
            let mut body = serde_json::to_value(&properties).unwrap();
            body["PartitionKey"] = keys.pk().into();
            body["RowKey"] = keys.rk().into();
            json!({"kek": kek, "java_v1": java_v1, "encrypt": ENCRYPTED, "properties": body})
        }).collect::<Vec<_>>(),
    });
    let spec_path = manifest_dir().join(format!("../../target/tmp/{}.json", table.name()));
    std::fs::create_dir_all(spec_path.parent().unwrap()).unwrap();
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let name = table.name().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(manifest_dir().join("tests/legacy/write_legacy.py"))
            .arg(&connection_string)
            .arg(&name)
            .arg(&spec_path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the legacy client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["written"], entities().len());
    Some(table)
}

async fn stored(table: &Table, keys: &Keys) -> Properties {
    table.get::<Properties>(keys).await.unwrap().unwrap().value
}

#[tokio::test]
async fn entities_written_by_the_legacy_python_client_decrypt_exactly() {
    let Some(table) = written_by_the_legacy_client().await else {
        return;
    };
    let policy = policy();
    for (keys, kek, java_v1, expected) in entities() {
        let stored = stored(&table, &keys).await;
        for name in ENCRYPTED {
            assert!(
                matches!(stored.get(name), Some(EdmValue::Binary(_))),
                "{keys}: {name} is stored encrypted"
            );
        }
        let metadata = stored
            .get_str(LEGACY_METADATA_1)
            .unwrap()
            .unwrap()
            .to_owned();
        assert!(metadata.contains(if kek == "aes" { "A256KW" } else { "RSA-OAEP" }));
        assert_eq!(metadata.contains("Java"), java_v1);
        let without_library = java_v1.then(|| {
            // Java's first release wrote no KeyWrappingMetadata at all: the same variant.
            let mut copy = stored.clone();
            let mut data: Value = serde_json::from_str(&metadata).unwrap();
            data.as_object_mut().unwrap().remove("KeyWrappingMetadata");
            copy.insert(LEGACY_METADATA_1, data.to_string());
            copy
        });
        let read = policy.decrypt(table.name(), &keys, stored).await.unwrap();
        if let Some(copy) = without_library {
            let also = policy.decrypt(table.name(), &keys, copy).await.unwrap();
            assert!(also == read, "{keys}: without KeyWrappingMetadata");
        }
        let names = |p: &Properties| p.iter().map(|(n, _)| n.to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&read), names(&expected), "{keys}");
        for (name, value) in expected.iter() {
            // Compared one by one: the long value would flood the report.
            assert!(
                read.get(name) == Some(value),
                "{keys} ({kek}, Java variant: {java_v1}): {name} differs"
            );
        }
    }
}

#[tokio::test]
async fn legacy_entities_decrypt_through_an_encrypting_table() {
    let Some(raw) = written_by_the_legacy_client().await else {
        return;
    };
    let table = policy().table(&raw);
    for (keys, _, _, expected) in entities() {
        let read = table.get::<Properties>(&keys).await.unwrap().unwrap().value;
        assert!(read == expected, "{keys}: read through the table");
    }
    // A projection asks for the legacy metadata too, so the selected values decrypt, and for
    // every property the policy encrypts, so that the entity it returns is whole.
    let projected = table
        .query::<Properties>()
        .filter(tablekit_core::filter::Filter::partition("Sales"))
        .select(["Email", "Age"])
        .collect()
        .await
        .unwrap();
    let mut emails: Vec<_> = projected
        .iter()
        .map(|s| {
            (
                s.value.get_str("Email").unwrap().unwrap().to_owned(),
                s.value.len(),
            )
        })
        .collect();
    emails.sort();
    let expected: Vec<_> = ["cao", "java", "jun"]
        .iter()
        .map(|n| (format!("{n}@contoso.example"), 2 + ENCRYPTED.len() - 1))
        .collect();
    assert_eq!(emails, expected);
}

/// Asserts a decryption failure naming the entity, the property and the cause.
#[track_caller]
fn assert_failure(error: Error, table: &str, keys: &Keys, property: &str, cause: &str) {
    let entity = Target::entity(table, keys.clone());
    match &error {
        Error::Corrupt { target, reason }
            if *target == entity
                && reason.contains("decryption")
                && reason.contains(&format!("`{property}`"))
                && reason.contains(cause) => {}
        other => panic!("expected a decryption failure of {property} ({cause}), got {other}"),
    }
}

#[tokio::test]
async fn altered_legacy_entities_fail_with_the_entity_named() {
    let Some(table) = written_by_the_legacy_client().await else {
        return;
    };
    let policy = policy();
    let keys = Keys::new("Sales", "000223").unwrap();
    let original = stored(&table, &keys).await;
    let edit_json = |edit: &dyn Fn(&mut Value)| {
        let mut stored = original.clone();
        let mut data: Value =
            serde_json::from_str(stored.get_str(LEGACY_METADATA_1).unwrap().unwrap()).unwrap();
        edit(&mut data);
        stored.insert(LEGACY_METADATA_1, data.to_string());
        stored
    };
    let flipped_key = edit_json(&|data| {
        let key = &mut data["WrappedContentKey"]["EncryptedKey"];
        let mut bytes = BASE64.decode(key.as_str().unwrap()).unwrap();
        bytes[3] ^= 1;
        *key = BASE64.encode(bytes).into();
    });
    let mut without_list = original.clone();
    without_list.remove(LEGACY_METADATA_2);
    let mut without_metadata = original.clone();
    without_metadata.remove(LEGACY_METADATA_1);
    without_metadata.remove(LEGACY_METADATA_2);
    let mut truncated = original.clone();
    let email = original.get("Email").unwrap().as_bytes().unwrap();
    truncated.insert("Email", email[..email.len() - 1].to_vec());

    // Every failure of the legacy format is one error, whatever broke.
    let cases = [
        (flipped_key, LEGACY_METADATA_1, "does not decrypt"),
        (
            edit_json(&|data| data["WrappedContentKey"]["KeyId"] = "gone".into()),
            LEGACY_METADATA_1,
            "does not decrypt",
        ),
        (
            edit_json(&|data| data["EncryptionAgent"]["Protocol"] = "2.0".into()),
            LEGACY_METADATA_1,
            "does not decrypt",
        ),
        (
            edit_json(&|data| data["ContentEncryptionIV"] = "AAAA".into()),
            LEGACY_METADATA_1,
            "does not decrypt",
        ),
        (without_list, LEGACY_METADATA_1, "does not decrypt"),
        (without_metadata, "Email", "stored without encryption"),
        (truncated, LEGACY_METADATA_1, "does not decrypt"),
    ];
    for (stored, property, cause) in cases {
        let error = policy
            .decrypt(table.name(), &keys, stored)
            .await
            .unwrap_err();
        assert_failure(error, table.name(), &keys, property, cause);
    }
}

#[test]
fn a_missing_interpreter_fails_the_legacy_tests_under_ci_and_skips_them_elsewhere() {
    let missing = "/nonexistent/tablekit-python3";
    assert_eq!(interpreter_or_skip(missing, false), None);
    let outcome = std::panic::catch_unwind(|| interpreter_or_skip(missing, true));
    let message = outcome.expect_err("under CI a missing interpreter is a failure");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("under CI"), "{message}");
    for (value, ci) in [
        (None, false),
        (Some(""), false),
        (Some("false"), false),
        (Some("0"), false),
        (Some("true"), true),
        (Some("1"), true),
        (Some("True"), true),
    ] {
        assert_eq!(under_ci(value), ci, "CI={value:?}");
    }
}
