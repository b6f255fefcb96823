//! `tablekit export` and `tablekit import` against Azurite: exact round trips, compression,
//! parallel parts, refused rows.

mod support;

use std::collections::BTreeSet;

use support::*;
use tablekit::core::{Entity, Properties};
use tablekit_testkit::fixtures::proxied;

#[tokio::test]
async fn an_export_imported_into_another_table_is_exact_for_every_edm_type() {
    let src = table("CliRound").await;
    seed(&src, 3, 40).await;
    let dir = scratch("round");
    let expected = contents(&src).await;
    for (i, name) in ["plain.jsonl", "packed.jsonl.gz", "packed.jsonl.zst"]
        .iter()
        .enumerate()
    {
        let out = dir.join(name);
        tablekit(&["export", src.name(), "--out", arg(&out)]).expect(0);
        let text = read_text(&out);
        assert_eq!(text.lines().count(), 120, "{name}");
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["PartitionKey"], "pé'000");
        assert_eq!(first["Big@odata.type"], "Edm.Int64");
        assert_eq!(
            first["Big"], "9007199254740993",
            "Int64 above 2^53 as a string"
        );
        assert_eq!(first["When"], "2026-11-22T10:00:00.1234567Z", "100 ns");
        assert_eq!(first["Ratio@odata.type"], "Edm.Double");
        assert!(
            text.lines().next().unwrap().contains(r#""Ratio":1.0"#),
            "Double 1.0 stays a Double"
        );

        let dst = tablekit_testkit::unique_table_name(&format!("CliRoundDst{i}"));
        let run = tablekit(&["import", &dst, "--in", arg(&out), "--create"]).expect(0);
        assert!(
            run.stderr
                .contains("imported 120 rows; refused 0; unknown 0"),
            "{}",
            run.stderr
        );
        let copied = contents(&account().table(&dst).unwrap()).await;
        assert_eq!(
            copied, expected,
            "{name}: the imported table equals the source"
        );
    }
    let explicit = dir.join("explicit.zstd-data");
    tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&explicit),
        "--compress",
        "zstd",
    ])
    .expect(0);
    assert_ne!(
        std::fs::read(&explicit).unwrap()[..4],
        *b"{\"Pa",
        "compressed by --compress"
    );
    let contradicts = dir.join("x.jsonl.gz");
    tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&contradicts),
        "--compress",
        "zstd",
    ])
    .expect(2);
    // An existing output is not replaced without --overwrite.
    let again = tablekit(&["export", src.name(), "--out", arg(&dir.join("plain.jsonl"))]).expect(2);
    assert!(again.stderr.contains("--overwrite"), "{}", again.stderr);
    tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&dir.join("plain.jsonl")),
        "--overwrite",
    ])
    .expect(0);
}

#[tokio::test]
async fn an_export_sends_one_request_per_page() {
    let src = table("CliPages").await;
    seed(&src, 5, 50).await;
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    let dir = scratch("pages");
    let out = dir.join("t.jsonl");
    run_on(
        &cs,
        &[
            "export",
            src.name(),
            "--out",
            arg(&out),
            "--page-size",
            "100",
        ],
    )
    .expect(0);
    assert_eq!(read_text(&out).lines().count(), 250);
    // 250 entities in pages of 100: three pages, three requests.
    assert_eq!(p.table.stats().requests_seen, 3);
    p.table.reset_stats();
    // 250 rows of 5 partitions of 50, chunks of 1,000: one transaction per partition.
    let dst = tablekit_testkit::unique_table_name("CliPagesDst");
    tablekit(&["tables", "create", &dst]).expect(0);
    run_on(&cs, &["import", &dst, "--in", arg(&out)]).expect(0);
    assert_eq!(p.table.stats().requests_seen, 5);
}

/// Entities another client wrote with values that do not read as their own types are
/// reported with their keys, left out, and the export goes on: exit 3, or 0 with
/// `--skip-unreadable`; in JSON Lines, CSV, and to stdout, with the requests of a clean
/// export.
#[tokio::test]
async fn an_unreadable_entity_is_reported_and_left_out_and_the_export_goes_on() {
    let src = table("CliUnreadable").await;
    seed(&src, 2, 30).await;
    for (pk, rk, json) in [
        ("p0", "bad-int", r#""N@odata.type":"Edm.Int64","N":"abc""#),
        (
            "p1",
            "bad-time",
            r#""W@odata.type":"Edm.DateTime","W":"not a time""#,
        ),
    ] {
        tablekit_testkit::fixtures::insert_raw_entity(
            &src,
            &format!(r#"{{"PartitionKey":"{pk}","RowKey":"{rk}",{json}}}"#),
        )
        .await;
    }
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    let dir = scratch("unreadable");
    let reported = |stderr: &str| {
        let mut lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("unreadable, left out of the export:"))
            .collect();
        lines.sort_unstable();
        assert_eq!(lines.len(), 2, "{stderr}");
        assert!(
            lines[0].contains("bad-int") && lines[0].contains('N'),
            "{stderr}"
        );
        assert!(
            lines[1].contains("bad-time") && lines[1].contains('W'),
            "{stderr}"
        );
    };

    // Without the flag: everything else is exported, and the exit says it is partial.
    let out = dir.join("t.jsonl");
    let run = run_on(
        &cs,
        &[
            "export",
            src.name(),
            "--out",
            arg(&out),
            "--page-size",
            "25",
        ],
    )
    .expect(3);
    reported(&run.stderr);
    assert!(
        run.stderr.contains("exported 60 entities") && run.stderr.contains("--skip-unreadable"),
        "{}",
        run.stderr
    );
    let text = read_text(&out);
    assert_eq!(text.lines().count(), 60);
    assert!(!text.contains("bad-int") && !text.contains("bad-time"));
    // 62 entities in pages of 25: three pages, three requests, as a clean export.
    assert_eq!(p.table.stats().requests_seen, 3);
    assert!(
        !out.with_extension("jsonl.checkpoint").exists(),
        "the export is complete"
    );

    // With it: the same output, exit 0, and the JSON summary counts them.
    let out = dir.join("skip.jsonl");
    let run = run_on(
        &cs,
        &[
            "--output",
            "json",
            "export",
            src.name(),
            "--out",
            arg(&out),
            "--skip-unreadable",
        ],
    )
    .expect(0);
    reported(&run.stderr);
    assert_eq!(read_text(&out).lines().count(), 60);
    let summary: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        (summary["entities"].as_u64(), summary["unreadable"].as_u64()),
        (Some(60), Some(2))
    );

    // CSV and stdout take the same path.
    let csv = dir.join("t.csv");
    let run = tablekit(&["export", src.name(), "--out", arg(&csv)]).expect(3);
    reported(&run.stderr);
    let csv = read_text(&csv);
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("pé'")).count(),
        60,
        "{csv}"
    );
    assert!(!csv.contains("bad-int") && !csv.contains("bad-time"));
    let run = tablekit(&["export", src.name(), "--out", "-", "--skip-unreadable"]).expect(0);
    reported(&run.stderr);
    assert_eq!(run.stdout.lines().count(), 60);
}

#[tokio::test]
async fn a_split_export_in_parallel_parts_equals_the_serial_one_as_a_set() {
    let src = table("CliSplit").await;
    seed(&src, 40, 5).await;
    let dir = scratch("split");
    let serial = dir.join("serial.jsonl");
    tablekit(&["export", src.name(), "--out", arg(&serial)]).expect(0);
    let parts = dir.join("parts");
    let run = tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&parts),
        "--split",
        "4",
        "--compress",
        "zstd",
    ])
    .expect(0);
    assert!(run.stderr.contains("into 4 key ranges"), "{}", run.stderr);
    let mut files: Vec<_> = std::fs::read_dir(&parts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".jsonl.zst"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    let mut union = BTreeSet::new();
    for f in &files {
        let text = read_text(f);
        assert!(
            text.lines().count() > 0,
            "{f:?} is empty: the split spreads the keys"
        );
        for line in text.lines() {
            assert!(union.insert(line.to_owned()), "a line in two parts: {line}");
        }
    }
    let serial: BTreeSet<String> = read_text(&serial).lines().map(str::to_owned).collect();
    assert_eq!(union, serial);
    // The directory imports as a whole.
    let dst = tablekit_testkit::unique_table_name("CliSplitDst");
    tablekit(&["import", &dst, "--in", arg(&parts), "--create"]).expect(0);
    assert_eq!(
        contents(&account().table(&dst).unwrap()).await,
        contents(&src).await
    );
    // Listed partitions and ranges, each its own part.
    let list = dir.join("partitions.txt");
    std::fs::write(&list, "pé'003\npé'010\tpé'012\n").unwrap();
    let listed = dir.join("listed");
    tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&listed),
        "--partitions-from",
        arg(&list),
    ])
    .expect(0);
    assert_eq!(
        read_text(&listed.join("part-00001.jsonl")).lines().count(),
        5
    );
    assert_eq!(
        read_text(&listed.join("part-00002.jsonl")).lines().count(),
        10
    );
}

#[tokio::test]
async fn refused_rows_are_reported_by_line_and_the_rest_is_imported() {
    let dst = table("CliRejects").await;
    // An entity that an insert of line 6 would collide with, with other content.
    dst.insert(&Entity::try_new("p", "taken", Properties::new().with("V", 1_i32)).unwrap())
        .await
        .unwrap();
    let dir = scratch("rejects");
    let input = dir.join("in.jsonl");
    let big = "x".repeat(40_000); // 80 KB as UTF-16: above the 64 KiB property limit
    let lines = [
        r#"{"PartitionKey":"p","RowKey":"1","V":1}"#.to_owned(),
        r#"{"PartitionKey":"p/bad","RowKey":"2","V":2}"#.to_owned(),
        format!(r#"{{"PartitionKey":"p","RowKey":"3","Big":"{big}"}}"#),
        r#"{"PartitionKey":"p","RowKey":"4","N@odata.type":"Edm.Int64","N":"four"}"#.to_owned(),
        "not json".to_owned(),
        r#"{"PartitionKey":"p","RowKey":"taken","V":2}"#.to_owned(),
        r#"{"PartitionKey":"p","RowKey":"7","V":7}"#.to_owned(),
        r#"{"PartitionKey":"q","RowKey":"8","V":8}"#.to_owned(),
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let rejects = dir.join("rejects.jsonl");
    let run = tablekit(&[
        "import",
        dst.name(),
        "--in",
        arg(&input),
        "--mode",
        "insert",
        "--rejects",
        arg(&rejects),
    ])
    .expect(3);
    assert!(
        run.stderr.contains("imported 3 rows; refused 5; unknown 0"),
        "{}",
        run.stderr
    );
    let report: Vec<serde_json::Value> = std::fs::read_to_string(&rejects)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_line: Vec<(u64, &str)> = report
        .iter()
        .map(|r| (r["line"].as_u64().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    let lines_refused: Vec<u64> = by_line.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines_refused, [2, 3, 4, 5, 6], "{report:#?}");
    assert!(
        by_line[0].1.contains("invalid PartitionKey"),
        "{}",
        by_line[0].1
    );
    assert!(
        by_line[1].1.contains("size in bytes of property `Big`"),
        "{}",
        by_line[1].1
    );
    assert!(by_line[2].1.contains("Edm.Int64"), "{}", by_line[2].1);
    assert!(by_line[3].1.contains("malformed JSON"), "{}", by_line[3].1);
    assert!(by_line[4].1.contains("already exists"), "{}", by_line[4].1);
    assert_eq!(report[4]["PartitionKey"], "p");
    assert_eq!(report[4]["RowKey"], "taken");
    assert!(report.iter().all(|r| r["outcome"] == "refused"));
    let stored: Vec<String> = contents(&dst)
        .await
        .into_iter()
        .map(|(pk, rk, _)| format!("{pk}/{rk}"))
        .collect();
    assert_eq!(stored, ["p/1", "p/7", "p/taken", "q/8"]);
    // Without --rejects, the refusals go to stderr with file and line.
    let again = tablekit(&[
        "import",
        dst.name(),
        "--in",
        arg(&input),
        "--mode",
        "insert",
    ])
    .expect(3);
    assert!(again.stderr.contains("in.jsonl:2"), "{}", again.stderr);
}

#[tokio::test]
async fn rows_of_unknown_outcome_are_retried_and_else_reported_apart() {
    use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};
    let dst = table("CliUnknown").await;
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    let dir = scratch("unknown");
    let input = dir.join("in.jsonl");
    std::fs::write(
        &input,
        (1..=3)
            .map(|i| format!(r#"{{"PartitionKey":"p","RowKey":"{i}","V":{i}}}"#))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let lose = |occurrences| {
        // The transaction is applied but its response is lost, and the read that would
        // settle it breaks: its outcome is unknown.
        p.table.add_rule(Rule::new(
            Matcher::any().with_path_contains("$batch"),
            occurrences,
            Fault::DropResponse,
        ));
        p.table.add_rule(Rule::new(
            Matcher::any().with_method("GET"),
            occurrences,
            Fault::Reset,
        ));
    };
    lose(Occurrences::Nth(1));
    let run = run_on(
        &cs,
        &["--retries", "0", "import", dst.name(), "--in", arg(&input)],
    )
    .expect(0);
    assert!(
        run.stderr.contains("imported 3 rows; refused 0; unknown 0"),
        "{}",
        run.stderr
    );
    let stats = p.table.stats();
    assert_eq!(
        (
            stats.faults_injected.drop_response,
            stats.faults_injected.reset
        ),
        (1, 1)
    );
    assert_eq!(contents(&dst).await.len(), 3);

    p.table.clear();
    lose(Occurrences::All);
    let rejects = dir.join("rejects.jsonl");
    let run = run_on(
        &cs,
        &[
            "--retries",
            "0",
            "import",
            dst.name(),
            "--in",
            arg(&input),
            "--rejects",
            arg(&rejects),
        ],
    )
    .expect(3);
    assert!(
        run.stderr.contains("imported 0 rows; refused 0; unknown 3"),
        "{}",
        run.stderr
    );
    let report: Vec<serde_json::Value> = std::fs::read_to_string(&rejects)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(report.len(), 3);
    for (i, r) in report.iter().enumerate() {
        assert_eq!(r["outcome"], "unknown", "{r}");
        assert_eq!(r["line"], i as u64 + 1, "{r}");
        assert_eq!(r["RowKey"], (i + 1).to_string(), "{r}");
    }
    // One first attempt and three rounds of retries, every one applied and unanswered.
    assert_eq!(p.table.stats().faults_injected.drop_response, 1 + 4);
}
