//! Pipes and formats: `-` for stdout and stdin, typed CSV (Storage Explorer's `Name@type`
//! columns) exact for every EDM type and hostile keys, and `--output json` summaries.

mod support;

use std::io::Write as _;
use std::process::Stdio;

use support::*;
use tablekit::azure::{BulkOptions, Table};
use tablekit::core::EdmValue;
use tablekit::core::batch::Operation;
use tablekit::core::{Entity, Keys, Properties};

/// Runs the binary with `input` on stdin; stdout as bytes.
fn piped(args: &[&str], input: &[u8]) -> (i32, Vec<u8>, String) {
    let mut child = command(&storage(), args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        output.status.code().unwrap_or(-1),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Keys a CSV or a shell could get wrong, and values to match.
fn hostile() -> Vec<(Keys, Properties)> {
    let texts = [
        "a,b",
        "say \"hi\"",
        " padded ",
        "=1+1",
        "line\u{2028}sep",
        "日本'é",
        "",
        "trailing,",
        "\"",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let keys = Keys::new(format!("h{t}"), format!("{t}{i}")).expect("keys");
            let props = Properties::new()
                .with("Text", format!("{t}\r\n{t}\n\r{t}"))
                .with("Spaces", "  ")
                .with("Nan", f64::NAN)
                .with("Neg", f64::NEG_INFINITY)
                .with("Tiny", 5e-324_f64)
                .with("Third", 1.0_f64 / 3.0)
                .with("Min", i64::MIN)
                .with("Bytes", Vec::<u8>::new());
            (keys, props)
        })
        .collect()
}

async fn seed_all(t: &Table) {
    seed(t, 2, 5).await;
    let mut ops: Vec<Operation> = hostile()
        .into_iter()
        .map(|(k, p)| Operation::upsert_replace(&Entity::new(k, p)).unwrap())
        .collect();
    // Properties absent in some rows, and an empty string.
    ops.push(
        Operation::upsert_replace(&Entity::new(
            Keys::new("sparse", "1").unwrap(),
            Properties::new().with("Only", ""),
        ))
        .unwrap(),
    );
    ops.push(
        Operation::upsert_replace(&Entity::new(
            Keys::new("sparse", "2").unwrap(),
            Properties::new(),
        ))
        .unwrap(),
    );
    let report = t.bulk_write(ops, BulkOptions::default()).await.unwrap();
    assert!(report.is_complete(), "{report:?}");
}

/// Tables hold the same entities: keys, names, types and values (Doubles by their bits).
async fn assert_same(a: &Table, b: &Table) {
    let (x, y) = (contents(a).await, contents(b).await);
    assert_eq!(x.len(), y.len());
    for ((pk1, rk1, p1), (pk2, rk2, p2)) in x.iter().zip(&y) {
        assert_eq!((pk1, rk1), (pk2, rk2));
        assert_eq!(p1.len(), p2.len(), "{pk1:?} {rk1:?}: {p1:?} / {p2:?}");
        for ((n1, v1), (n2, v2)) in p1.iter().zip(p2.iter()) {
            assert_eq!(n1, n2);
            match (v1, v2) {
                (EdmValue::Double(d1), EdmValue::Double(d2)) => {
                    assert_eq!(d1.to_bits(), d2.to_bits(), "{pk1:?} {n1}");
                }
                _ => assert_eq!(v1, v2, "{pk1:?} {rk1:?} {n1}"),
            }
        }
    }
}

#[tokio::test]
async fn a_csv_export_imports_back_exactly_for_every_type_and_hostile_keys() {
    let src = table("CliCsv").await;
    seed_all(&src).await;
    let dir = scratch("csv");
    let csv = dir.join("all.csv");
    let run = tablekit(&["export", src.name(), "--out", arg(&csv)]).expect(0);
    assert!(
        run.stderr.contains("exported 21 entities"),
        "{}",
        run.stderr
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(
        text.starts_with("PartitionKey,RowKey,Timestamp,Big,Big@type,Bytes,Bytes@type,"),
        "{}",
        &text[..200]
    );
    assert!(text.contains(",Edm.Int64,"), "typed cells");
    assert!(
        !dir.join("all.csv.partial.jsonl").exists()
            && !dir.join("all.csv.partial.jsonl.checkpoint").exists(),
        "the staging file is removed"
    );
    let dst = table("CliCsvBack").await;
    tablekit(&["import", dst.name(), "--in", arg(&csv)]).expect(0);
    assert_same(&src, &dst).await;

    // Through pipes: CSV on stdout, into stdin, compressed.
    let (code, out, err) = piped(
        &[
            "export",
            src.name(),
            "--out",
            "-",
            "--format",
            "csv",
            "--compress",
            "gzip",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let piped_dst = table("CliCsvPipe").await;
    let (code, _, err) = piped(
        &[
            "import",
            piped_dst.name(),
            "--in",
            "-",
            "--format",
            "csv",
            "--compress",
            "gzip",
        ],
        &out,
    );
    assert_eq!(code, 0, "{err}");
    assert_same(&src, &piped_dst).await;

    // A bad cell is refused with its line; the other rows are imported.
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "PartitionKey,RowKey,N,N@type\r\np,1,7,Edm.Int32\r\np,2,x,Edm.Int32\r\np,3,\"multi\r\nline\",Edm.String\r\np,4,1,Edm.Decimal\r\n",
    )
    .unwrap();
    let partial = table("CliCsvBad").await;
    let run = tablekit(&["import", partial.name(), "--in", arg(&bad)]).expect(3);
    assert!(run.stderr.contains("bad.csv:3"), "{}", run.stderr);
    assert!(run.stderr.contains("bad.csv:6"), "{}", run.stderr);
    let rks: Vec<String> = contents(&partial)
        .await
        .into_iter()
        .map(|(_, rk, _)| rk)
        .collect();
    assert_eq!(rks, ["1", "3"]);
}

#[tokio::test]
async fn json_lines_go_through_stdout_and_stdin_with_compression() {
    let src = table("CliPipe").await;
    seed_all(&src).await;
    let (code, out, err) = piped(
        &["export", src.name(), "--out", "-", "--compress", "zstd"],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]), "a zstd frame");
    let dst = table("CliPipeDst").await;
    let (code, stdout, err) = piped(
        &[
            "--output",
            "json",
            "import",
            dst.name(),
            "--in",
            "-",
            "--compress",
            "zstd",
        ],
        &out,
    );
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(summary["command"], "import");
    assert_eq!(summary["imported"], 21);
    assert_eq!(summary["exit"], 0);
    assert_same(&src, &dst).await;
    // A pipe cannot be resumed; the refusal comes before anything is read.
    let (code, _, _) = piped(&["import", dst.name(), "--in", "-", "--resume"], b"");
    assert_eq!(code, 2);
}

#[tokio::test]
async fn every_command_can_end_with_a_json_summary() {
    let src = table("CliJson").await;
    seed(&src, 2, 3).await;
    let dir = scratch("json");
    let json = |run: Run, stream: &str| -> serde_json::Value {
        let text = if stream == "stdout" {
            &run.stdout
        } else {
            &run.stderr
        };
        let last = text.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let export = json(
        tablekit(&[
            "--output",
            "json",
            "export",
            src.name(),
            "--out",
            arg(&dir.join("e.jsonl")),
        ])
        .expect(0),
        "stdout",
    );
    assert_eq!(
        (export["command"].as_str(), export["entities"].as_u64()),
        (Some("export"), Some(6))
    );
    let dst = tablekit_testkit::unique_table_name("CliJsonDst");
    let copy = json(
        tablekit(&[
            "--output",
            "json",
            "copy",
            src.name(),
            &dst,
            "--create",
            "--verify",
            "--checkpoint",
            arg(&dir.join("cp")),
        ])
        .expect(0),
        "stdout",
    );
    assert_eq!(copy["copied"], 6);
    assert_eq!(copy["verify"]["differ"], 0);
    let list = json(
        tablekit(&["--output", "json", "tables", "list", "--prefix", src.name()]).expect(0),
        "stdout",
    );
    assert_eq!(list["tables"], serde_json::json!([src.name()]));
    // A query's stdout is its data: the summary goes to stderr.
    let query = tablekit(&[
        "--output",
        "json",
        "query",
        src.name(),
        "--allow-scan",
        "--format",
        "jsonl",
    ])
    .expect(0);
    assert_eq!(query.stdout.lines().count(), 6);
    assert_eq!(json(query, "stderr")["entities"], 6);
    // The pattern commands: their rows on stdout, the summary on stderr.
    let retention = tablekit(&[
        "--output",
        "json",
        "retention",
        "list",
        "CliJsonNone",
        "--period",
        "day",
    ])
    .expect(0);
    let summary = json(retention, "stderr");
    assert_eq!(
        (summary["command"].as_str(), summary["tables"].as_u64()),
        (Some("retention"), Some(0))
    );
    // Failures too, with the exit code and the error.
    let failed = json(
        tablekit(&[
            "--output",
            "json",
            "query",
            src.name(),
            "--filter",
            "Count gt",
        ])
        .expect(2),
        "stdout",
    );
    assert_eq!(failed["exit"], 2);
    assert!(failed["error"].as_str().unwrap().contains("--filter"));
}

/// A CSV export is staged as JSON Lines with a checkpoint: interrupted, it resumes to the
/// file an uninterrupted export writes; once complete, nothing is left to resume.
#[tokio::test]
async fn an_interrupted_csv_export_resumes_to_the_same_file() {
    let src = table("CliCsvResume").await;
    seed_all(&src).await;
    let dir = scratch("csv-resume");
    let (whole, part) = (dir.join("whole.csv"), dir.join("part.csv"));
    tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&whole),
        "--page-size",
        "5",
    ])
    .expect(0);
    let args = [
        "export",
        src.name(),
        "--out",
        arg(&part),
        "--page-size",
        "5",
    ];
    tablekit(&[&args[..], &["--interrupt-after", "2"]].concat()).expect(130);
    assert!(!part.exists(), "no CSV before the export is complete");
    assert!(dir.join("part.csv.partial.jsonl.checkpoint").exists());
    tablekit(&[&args[..], &["--resume"]].concat()).expect(0);
    let text = |p: &std::path::Path| {
        // Timestamps are the same entities' in both: the table did not change.
        std::fs::read_to_string(p).unwrap()
    };
    assert_eq!(text(&part), text(&whole));
    assert!(!dir.join("part.csv.partial.jsonl").exists());
    tablekit(&[&args[..], &["--resume"]].concat()).expect(2);
    assert_eq!(text(&part), text(&whole));
}
