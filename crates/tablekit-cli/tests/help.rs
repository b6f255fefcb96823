//! Every command's `--help` exits 0 and shows examples; usage errors exit 2.

mod support;

use support::run_on;

#[test]
fn every_command_has_help_with_examples() {
    for command in [
        &[][..],
        &["tables"],
        &["tables", "list"],
        &["tables", "create"],
        &["tables", "delete"],
        &["query"],
        &["export"],
        &["import"],
        &["copy"],
    ] {
        let args = [command, &["--help"]].concat();
        let run = run_on("UseDevelopmentStorage=true", &args).expect(0);
        assert!(
            run.stdout.contains("Examples:\n  tablekit"),
            "{command:?}: {}",
            run.stdout
        );
    }
    let top = run_on("UseDevelopmentStorage=true", &["--help"]).expect(0);
    for documented in [
        "Exit codes",
        "130 interrupted",
        "AZURE_STORAGE_CONNECTION_STRING",
    ] {
        assert!(
            top.stdout.contains(documented),
            "{documented}: {}",
            top.stdout
        );
    }
}

#[test]
fn usage_errors_exit_2_before_connecting() {
    // Port 9 (discard) on loopback: a request would fail with exit 1, not 2.
    let nowhere = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=http://127.0.0.1:9/devstoreaccount1";
    for args in [
        &["query"][..],
        &["query", "T1x", "--format", "xml"],
        &[
            "export",
            "T1x",
            "--out",
            "x",
            "--split",
            "2",
            "--partitions-from",
            "y",
        ],
        &["frobnicate"],
        &["query", "bad-name", "--filter", "PartitionKey eq 'p'"],
        &[
            "query",
            "Table1",
            "--filter",
            "PartitionKey eq 'p'",
            "--select",
            "a b",
        ],
        &["export", "Table1", "--out", "x.jsonl", "--page-size", "0"],
        &["import", "Table1", "--in", "/nonexistent/file.jsonl"],
        &["copy", "Table1", "--sas", "sv=1&sig=x"],
    ] {
        let run = run_on(nowhere, args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
    }
    let bad = run_on(
        "AccountName=a;AccountKey=c2VjcmV0LWtleQ==;Bogus=1",
        &["tables", "list"],
    )
    .expect(2);
    assert!(!bad.stderr.contains("c2VjcmV0"), "{}", bad.stderr);
}
