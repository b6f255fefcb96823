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
        &["entity"],
        &["entity", "get"],
        &["entity", "put"],
        &["entity", "merge"],
        &["entity", "delete"],
        &["purge"],
        &["completions"],
        &["man"],
        &["index"],
        &["index", "verify"],
        &["index", "repair"],
        &["index", "backfill"],
        &["queue"],
        &["queue", "peek"],
        &["queue", "poison"],
        &["queue", "poison", "list"],
        &["queue", "poison", "replay"],
        &["queue", "poison", "purge"],
        &["retention"],
        &["retention", "list"],
        &["retention", "drop-older-than"],
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
        "AZURE_STORAGE_ACCOUNT_NAME",
        "Microsoft Entra ID",
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
        &["tables", "list", "--account", "contoso"],
        &["tables", "list", "--token-scope", "account"],
        &["queue", "peek", "jobs", "--max", "0"],
        &["queue", "peek", "Bad_Queue"],
        &["queue", "poison", "replay", "jobs"],
        &["queue", "poison", "replay", "jobs", "--id", "x", "--all"],
        &[
            "queue",
            "poison",
            "purge",
            "jobs",
            "--older-than",
            "soon",
            "--yes",
        ],
        &["retention", "list", "Signins", "--period", "week"],
        &["retention", "list", "Signins1", "--period", "day"],
        &[
            "index",
            "verify",
            "Table1",
            "--spec",
            "/nonexistent/spec.json",
        ],
        &["index", "verify", "Table1", "--spec", "x.json"],
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
