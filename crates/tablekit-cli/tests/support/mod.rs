//! Running the `tablekit` binary against the test storage, and test data.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::TryStreamExt as _;
use tablekit::azure::{BulkOptions, Table};
use tablekit::core::EdmValue;
use tablekit::core::batch::Operation;
use tablekit::core::edm::parse_datetime;
use tablekit::core::{Entity, Keys, Properties};
use tablekit_testkit::TestStorage;

pub use tablekit_testkit::fixtures::{account, connection_string, emulator, table};

/// What a run of the binary printed and how it ended.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the exit code, showing the output when it differs.
    #[track_caller]
    pub fn expect(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// The test storage's connection string.
pub fn storage() -> String {
    TestStorage::shared()
        .expect("test storage")
        .connection_string()
        .to_owned()
}

/// The binary with `--connection-string cs` and a clean environment.
pub fn command(cs: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tablekit"));
    command
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .arg("--connection-string")
        .arg(cs)
        .args(args)
        .stdin(Stdio::null());
    command
}

/// Runs the binary against `cs`.
pub fn run_on(cs: &str, args: &[&str]) -> Run {
    let output = command(cs, args).output().expect("run tablekit");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs the binary against the test storage.
pub fn tablekit(args: &[&str]) -> Run {
    run_on(&storage(), args)
}

/// A fresh, empty scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    // Under the target directory, so that runs leave nothing in the system temp dir.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "tablekit-cli-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A path as a `&str` argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Properties of every EDM type, varying with `i`: Int64 above 2^53, DateTime at 100 ns,
/// Guid, Binary, Double 1.0, an empty string, unicode.
pub fn every_type(i: usize) -> Properties {
    let when = parse_datetime("2026-11-22T10:00:00.1234567Z").expect("datetime")
        + chrono::Duration::nanoseconds(100 * i as i64);
    Properties::new()
        .with("Big", (1_i64 << 53) + 1 + i as i64)
        .with("Count", i as i32)
        .with("Ratio", 1.0_f64)
        .with("Share", 0.1_f64 * i as f64)
        .with("Flag", i % 2 == 0)
        .with("When", when)
        .with(
            "Id",
            uuid::Uuid::from_u128(0x6f96_19ff_8b86_d011_b42d_00c0_4fc9_6400 + i as u128),
        )
        .with("Bytes", vec![0_u8, 255, i as u8])
        .with("Empty", "")
        .with("Text", format!("it's «{i}» \"quoted\"\n日本"))
}

/// Unicode keys with a quote.
pub fn keys(partition: usize, row: usize) -> Keys {
    Keys::new(format!("pé'{partition:03}"), format!("r'ß{row:05}")).expect("keys")
}

/// Writes `partitions × per` entities of [`every_type`].
pub async fn seed(table: &Table, partitions: usize, per: usize) {
    let ops: Vec<Operation> = (0..partitions)
        .flat_map(|p| (0..per).map(move |r| (p, r)))
        .map(|(p, r)| {
            Operation::upsert_replace(&Entity::new(keys(p, r), every_type(p * per + r)))
                .expect("operation")
        })
        .collect();
    let report = table
        .bulk_write(ops, BulkOptions::default())
        .await
        .expect("seed");
    assert!(report.is_complete(), "seeding: {report:?}");
}

/// Every entity of a table as (PartitionKey, RowKey, properties), in key order.
pub async fn contents(table: &Table) -> Vec<(String, String, Properties)> {
    table
        .query::<Properties>()
        .allow_scan()
        .stream()
        .map_ok(|s| (s.keys.pk().to_owned(), s.keys.rk().to_owned(), s.value))
        .try_collect()
        .await
        .expect("read table")
}

/// The text of an export file, decompressed by its extension.
pub fn read_text(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read export");
    let mut text = String::new();
    let name = path.to_string_lossy();
    if bytes.is_empty() {
        return text;
    }
    if name.ends_with(".gz") {
        flate2::read::MultiGzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .expect("gunzip");
    } else if name.ends_with(".zst") {
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            let mut frame = ruzstd::decoding::StreamingDecoder::new(&mut rest).expect("zstd frame");
            frame.read_to_string(&mut text).expect("zstd");
        }
    } else {
        text = String::from_utf8(bytes).expect("utf-8");
    }
    text
}

/// Whether a property bag is equal to another one (all values here are comparable).
pub fn same_value(a: &EdmValue, b: &EdmValue) -> bool {
    a == b
}
