//! `tablekit entity get | put | merge | delete` and `tablekit purge`.

mod support;

use std::io::Write as _;
use std::process::Stdio;

use support::*;
use tablekit::core::EdmValue;
use tablekit::core::{Keys, Properties};

/// Runs the binary with `input` on stdin.
fn with_stdin(args: &[&str], input: &str) -> Run {
    let mut child = command(&storage(), args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test]
async fn one_entity_is_put_read_merged_conditionally_and_deleted() {
    let t = table("CliEntity").await;
    let (pk, rk) = ("c'42", "r é\"x");
    let json = r#"{"Big@odata.type":"Edm.Int64","Big":"9007199254740993","When@odata.type":"Edm.DateTime","When":"2026-11-22T10:00:00.1234567Z","Name":"x"}"#;
    let put = tablekit(&["entity", "put", t.name(), pk, rk, "--json", json]).expect(0);
    assert!(put.stderr.contains("etag"), "{}", put.stderr);
    let stored = t
        .get::<Properties>(&Keys::new(pk, rk).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.value.get("Big"),
        Some(&EdmValue::Int64((1 << 53) + 1))
    );

    // get prints the export format with the ETag; it reads back as put input.
    let got = tablekit(&["entity", "get", t.name(), pk, rk]).expect(0);
    let v: serde_json::Value = serde_json::from_str(got.stdout.trim()).unwrap();
    assert_eq!(v["odata.etag"], stored.etag.as_str());
    assert_eq!(v["Big@odata.type"], "Edm.Int64");
    assert_eq!(v["When"], "2026-11-22T10:00:00.1234567Z");
    let etag = stored.etag.as_str().to_owned();

    // merge from stdin, conditional on the current ETag.
    with_stdin(
        &[
            "entity",
            "merge",
            t.name(),
            pk,
            rk,
            "--in",
            "-",
            "--if-match",
            &etag,
        ],
        r#"{"Status":"paid"}"#,
    )
    .expect(0);
    let after = t
        .get::<Properties>(&Keys::new(pk, rk).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.value.get("Status"), Some(&EdmValue::from("paid")));
    assert_eq!(after.value.len(), 4, "merged, not replaced");

    // A stale ETag writes nothing (exit 1); keys that contradict the arguments exit 2.
    let stale = tablekit(&[
        "entity",
        "put",
        t.name(),
        pk,
        rk,
        "--json",
        r#"{"N":1}"#,
        "--if-match",
        &etag,
    ])
    .expect(1);
    assert!(
        stale.stderr.contains("changed by another writer"),
        "{}",
        stale.stderr
    );
    tablekit(&[
        "entity",
        "put",
        t.name(),
        pk,
        rk,
        "--json",
        r#"{"PartitionKey":"other","N":1}"#,
    ])
    .expect(2);
    tablekit(&["entity", "put", t.name(), pk, rk, "--json", "{"]).expect(2);
    assert_eq!(
        t.get::<Properties>(&Keys::new(pk, rk).unwrap())
            .await
            .unwrap()
            .unwrap()
            .value,
        after.value
    );

    // delete asks; without a terminal it needs --yes.
    tablekit(&["entity", "delete", t.name(), pk, rk]).expect(2);
    assert!(
        t.get::<Properties>(&Keys::new(pk, rk).unwrap())
            .await
            .unwrap()
            .is_some()
    );
    tablekit(&["entity", "delete", t.name(), pk, rk, "--yes"]).expect(0);
    let missing = tablekit(&["entity", "get", t.name(), pk, rk]).expect(1);
    assert!(
        missing.stderr.contains("no such entity"),
        "{}",
        missing.stderr
    );

    // The service's own limits apply before anything is sent (a Cosmos DB host that does not
    // resolve: a request would fail with exit 1).
    let cosmos = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=https://acct.table.cosmos.azure.invalid/";
    let long = "r".repeat(256);
    run_on(
        cosmos,
        &["entity", "put", "Orders", "p", &long, "--json", "{}"],
    )
    .expect(2);
    run_on(
        cosmos,
        &["entity", "put", "Orders", "p", "r", "--json", r#"{"Id":1}"#],
    )
    .expect(2);
    // Operations that rely on key order refuse there, before any request.
    for flag in ["--verify-only", "--delete-extra"] {
        let run = run_on(cosmos, &["copy", "Orders", "Copy", flag]).expect(2);
        assert!(run.stderr.contains("sorted"), "{flag}: {}", run.stderr);
    }
}

#[tokio::test]
async fn purge_deletes_partitions_or_what_a_filter_matches_after_a_dry_run() {
    let t = table("CliPurge").await;
    seed(&t, 3, 150).await;
    let p = |i: usize| keys(i, 0).pk().to_owned();
    let dry = tablekit(&[
        "--output",
        "json",
        "purge",
        t.name(),
        "--partition",
        &p(0),
        "--dry-run",
    ])
    .expect(0);
    let v: serde_json::Value = serde_json::from_str(dry.stdout.trim()).unwrap();
    assert_eq!(v["would_delete"], 150);
    assert_eq!(contents(&t).await.len(), 450, "a dry run deletes nothing");
    tablekit(&["purge", t.name(), "--partition", &p(0)]).expect(2);
    assert_eq!(contents(&t).await.len(), 450, "not confirmed");

    let run = tablekit(&[
        "--output",
        "json",
        "purge",
        t.name(),
        "--partition",
        &p(0),
        "--partition",
        &p(1),
        "--yes",
    ])
    .expect(0);
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(v["deleted"], 300, "{}", run.stdout);
    let left = contents(&t).await;
    assert_eq!(left.len(), 150);
    assert!(left.iter().all(|(pk, _, _)| *pk == p(2)));

    // A filter over every partition needs --allow-scan.
    tablekit(&["purge", t.name(), "--filter", "Count ge 400", "--yes"]).expect(2);
    assert_eq!(contents(&t).await.len(), 150);
    tablekit(&[
        "purge",
        t.name(),
        "--filter",
        "Count ge 400",
        "--allow-scan",
        "--yes",
    ])
    .expect(0);
    let left = contents(&t).await;
    // Partition 2 holds Count 300..=449.
    assert_eq!(left.len(), 100);
    assert!(
        left.iter().all(
            |(_, _, props)| matches!(props.get("Count"), Some(EdmValue::Int32(n)) if *n < 400)
        )
    );
    // Running it again finds nothing left to delete.
    tablekit(&[
        "purge",
        t.name(),
        "--filter",
        "Count ge 400",
        "--allow-scan",
        "--yes",
    ])
    .expect(0);
}
