//! `tablekit tables …` and `tablekit query` against Azurite.

mod support;

use chrono::Utc;
use support::*;
use tablekit::azure::{SasProtocol, TablePermissions, TableSas};
use tablekit::core::{Entity, Properties};
use tablekit_testkit::fixtures::proxied;

async fn three_in_p1() -> tablekit::azure::Table {
    let t = table("CliQuery").await;
    for (pk, rk, text) in [
        ("p1", "a", "short"),
        ("p1", "b", &"long value ".repeat(10) as &str),
        ("p1", "c", "x,\"y\""),
        ("p2", "a", "other partition"),
    ] {
        t.upsert_replace(
            &Entity::try_new(
                pk,
                rk,
                Properties::new().with("Text", text).with("N", 7_i64),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    }
    t
}

#[tokio::test]
async fn query_writes_each_format() {
    let t = three_in_p1().await;
    let filter = "PartitionKey eq 'p1'";
    let base = ["query", t.name(), "--filter", filter];

    let jsonl = tablekit(&[&base[..], &["--format", "jsonl"]].concat()).expect(0);
    assert!(jsonl.stderr.contains("range query"), "{}", jsonl.stderr);
    let lines: Vec<serde_json::Value> = jsonl
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["RowKey"], "a");
    assert_eq!(lines[0]["N@odata.type"], "Edm.Int64");
    assert_eq!(lines[0]["N"], "7");

    let json = tablekit(&[&base[..], &["--format", "json"]].concat()).expect(0);
    let array: Vec<serde_json::Value> = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(array, lines, "json is the array of the jsonl objects");

    let csv = tablekit(&[&base[..], &["--format", "csv", "--select", "Text"]].concat()).expect(0);
    let rows: Vec<&str> = csv.stdout.split("\r\n").filter(|r| !r.is_empty()).collect();
    assert_eq!(rows[0], "PartitionKey,RowKey,Timestamp,Text");
    assert_eq!(rows.len(), 4, "{}", csv.stdout);
    assert!(
        rows[3].starts_with("p1,c,") && rows[3].ends_with(",\"x,\"\"y\"\"\""),
        "{}",
        rows[3]
    );

    let table_format = tablekit(&[&base[..], &["--format", "table"]].concat()).expect(0);
    let out: Vec<&str> = table_format.stdout.lines().collect();
    assert!(
        out[0].starts_with("PartitionKey  RowKey  Timestamp"),
        "{}",
        out[0]
    );
    assert!(out[1].starts_with("------------"), "{}", out[1]);
    assert_eq!(out.len(), 5, "header, rule, three rows");
    assert!(
        out[3].contains("long value long value") && out[3].contains('…'),
        "{}",
        out[3]
    );
    let width = |l: &str| l.find("short").or(l.find("long")).or(l.find("x,"));
    assert_eq!(
        width(out[2]),
        width(out[3]),
        "aligned:\n{}",
        table_format.stdout
    );

    let top = tablekit(&[
        "query",
        t.name(),
        "--filter",
        filter,
        "--top",
        "2",
        "--format",
        "jsonl",
    ])
    .expect(0);
    assert_eq!(top.stdout.lines().count(), 2);
}

#[tokio::test]
async fn a_bad_filter_is_refused_with_its_position_and_nothing_is_sent() {
    let t = three_in_p1().await;
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    let run = run_on(
        &cs,
        &[
            "query",
            t.name(),
            "--filter",
            "PartitionKey eq 'p1' and RowKey gt",
        ],
    )
    .expect(2);
    assert!(run.stderr.contains("at byte"), "{}", run.stderr);
    let run = run_on(
        &cs,
        &["query", t.name(), "--filter", "PartitionKey eq \"p1\""],
    )
    .expect(2);
    assert!(run.stderr.contains("at byte 16"), "{}", run.stderr);
    assert_eq!(p.table.stats().requests_seen, 0, "nothing was sent");

    // A good filter through the same proxy: one page, one request.
    let ok = run_on(
        &cs,
        &[
            "query",
            t.name(),
            "--filter",
            "PartitionKey eq 'p2'",
            "--format",
            "jsonl",
        ],
    )
    .expect(0);
    assert_eq!(ok.stdout.lines().count(), 1);
    assert_eq!(p.table.stats().requests_seen, 1);
}

#[tokio::test]
async fn a_table_scan_needs_allow_scan() {
    let t = three_in_p1().await;
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    for filter in [None, Some("RowKey eq 'a'"), Some("PartitionKey ge 'p1'")] {
        let mut args = vec!["query", t.name()];
        if let Some(f) = filter {
            args.extend(["--filter", f]);
        }
        let run = run_on(&cs, &args).expect(2);
        assert!(run.stderr.contains("table scan"), "{}", run.stderr);
        assert!(run.stderr.contains("--allow-scan"), "{}", run.stderr);
    }
    assert_eq!(p.table.stats().requests_seen, 0, "refused before sending");
    let all = run_on(
        &cs,
        &["query", t.name(), "--allow-scan", "--format", "jsonl"],
    )
    .expect(0);
    assert_eq!(all.stdout.lines().count(), 4);
}

#[tokio::test]
async fn tables_are_listed_created_and_deleted() {
    let name = tablekit_testkit::unique_table_name("CliTables");
    tablekit(&["tables", "create", &name]).expect(0);
    tablekit(&["tables", "create", &name]).expect(1);
    let listed = tablekit(&["tables", "list", "--prefix", &name]).expect(0);
    assert_eq!(listed.stdout.trim(), name);
    let refused = tablekit(&["tables", "delete", &name]).expect(2);
    assert!(refused.stderr.contains("--yes"), "{}", refused.stderr);
    tablekit(&["tables", "delete", &name, "--yes"]).expect(0);
    let listed = tablekit(&["tables", "list", "--prefix", &name]).expect(0);
    assert_eq!(listed.stdout.trim(), "");
    let bad = tablekit(&["tables", "create", "1-bad"]).expect(2);
    assert!(bad.stderr.contains("invalid table name"), "{}", bad.stderr);
}

#[tokio::test]
async fn a_sas_connects_and_no_secret_is_printed_even_verbose() {
    let t = three_in_p1().await;
    let token = TableSas::new(
        t.name(),
        TablePermissions::READ,
        Utc::now() + chrono::Duration::hours(1),
    )
    .with_protocol(SasProtocol::HttpsAndHttp)
    .sign(t.account())
    .unwrap();
    let sig = token.get("sig").unwrap().to_owned();
    let endpoint = t.account().endpoints().table.as_str().to_owned();
    let query = token.to_query();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tablekit"));
    let output = command
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .args(["--verbose", "--sas", &query, "--table-endpoint", &endpoint])
        .args([
            "query",
            t.name(),
            "--filter",
            "PartitionKey eq 'p2'",
            "--format",
            "jsonl",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 1);
    assert!(
        stderr.contains("requests (source): 1 [entity.query=1]"),
        "{stderr}"
    );
    // A write with a read-only SAS fails: the error is shown, the signature is not.
    let url = format!("{endpoint}?{query}");
    let denied = std::process::Command::new(env!("CARGO_BIN_EXE_tablekit"))
        .env_remove("AZURE_STORAGE_CONNECTION_STRING")
        .args([
            "--verbose",
            "--table-endpoint",
            &url,
            "tables",
            "create",
            "CliDenied",
        ])
        .output()
        .unwrap();
    let denied_err = String::from_utf8_lossy(&denied.stderr);
    assert_eq!(denied.status.code(), Some(1), "{denied_err}");
    for text in [stdout.as_ref(), stderr.as_ref(), denied_err.as_ref()] {
        assert!(!text.contains(&sig), "signature printed: {text}");
        assert!(!text.contains(&query), "token printed: {text}");
    }
}
