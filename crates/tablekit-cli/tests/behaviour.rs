//! What operators rely on: dry runs, checkpoints removed after success, `tables create
//! --if-not-exists`, completions and the man page. (SIGTERM: `resume.rs`; the exit code of
//! differences: `copy.rs`.)

mod support;

use support::*;

#[tokio::test]
async fn an_import_dry_run_checks_and_counts_and_writes_nothing() {
    let dir = scratch("import-dry");
    let file = dir.join("rows.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"PartitionKey\":\"p\",\"RowKey\":\"1\",\"N\":1}\n",
            "{\"PartitionKey\":\"p\",\"RowKey\":\"2\",\"N@odata.type\":\"Edm.Int64\",\"N\":\"x\"}\n",
            "{\"PartitionKey\":\"p/bad\",\"RowKey\":\"3\"}\n",
            "{\"PartitionKey\":\"q\",\"RowKey\":\"4\"}\n",
        ),
    )
    .unwrap();
    let name = tablekit_testkit::unique_table_name("CliImportDry");
    let run = tablekit(&["import", &name, "--in", arg(&file), "--dry-run"]).expect(3);
    assert!(
        run.stderr
            .contains("dry run: would import 2 rows; 2 would be refused; nothing written"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("rows.jsonl:2") && run.stderr.contains("rows.jsonl:3"));
    assert!(!dir.join("rows.jsonl.import-checkpoint").exists());
    let listed = tablekit(&["tables", "list", "--prefix", &name]).expect(0);
    assert_eq!(listed.stdout, "", "no table was created");
    // --dry-run with --create is a contradiction, refused.
    tablekit(&["import", &name, "--in", arg(&file), "--dry-run", "--create"]).expect(2);
}

#[tokio::test]
async fn checkpoints_are_removed_after_success() {
    let src = table("CliCpGone").await;
    seed(&src, 4, 20).await;
    let dir = scratch("cp-gone");
    let out = dir.join("t.jsonl");
    tablekit(&["export", src.name(), "--out", arg(&out)]).expect(0);
    assert!(out.exists() && !dir.join("t.jsonl.checkpoint").exists());
    let parts = dir.join("parts");
    tablekit(&["export", src.name(), "--out", arg(&parts), "--split", "2"]).expect(0);
    let names: Vec<String> = std::fs::read_dir(&parts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n.ends_with(".jsonl")),
        "only the parts are left: {names:?}"
    );
    let dst = table("CliCpGoneDst").await;
    tablekit(&["import", dst.name(), "--in", arg(&out)]).expect(0);
    assert!(!dir.join("t.jsonl.import-checkpoint").exists());
    let cp = dir.join("copy.checkpoint");
    let copy_dst = tablekit_testkit::unique_table_name("CliCpGoneCopy");
    tablekit(&[
        "copy",
        src.name(),
        &copy_dst,
        "--create",
        "--checkpoint",
        arg(&cp),
    ])
    .expect(0);
    assert!(!cp.exists());
    // Kept after an interruption (resume.rs resumes from such checkpoints).
    tablekit(&[
        "copy",
        src.name(),
        &copy_dst,
        "--page-size",
        "10",
        "--checkpoint",
        arg(&cp),
        "--interrupt-after",
        "1",
    ])
    .expect(130);
    assert!(cp.exists());
}

#[tokio::test]
async fn tables_create_if_not_exists_succeeds_twice() {
    let name = tablekit_testkit::unique_table_name("CliCreate");
    let first = tablekit(&["tables", "create", &name, "--if-not-exists"]).expect(0);
    assert!(first.stderr.contains("created"), "{}", first.stderr);
    let second = tablekit(&["tables", "create", &name, "--if-not-exists"]).expect(0);
    assert!(
        second.stderr.contains("exists already"),
        "{}",
        second.stderr
    );
    tablekit(&["tables", "create", &name]).expect(1);
    tablekit(&["tables", "delete", &name, "--yes"]).expect(0);
}

#[test]
fn completions_and_the_man_page_come_from_the_command_tree() {
    for (shell, marker) in [
        ("bash", "complete -F _tablekit"),
        ("zsh", "#compdef tablekit"),
        ("fish", "complete -c tablekit"),
    ] {
        // No storage is reached: any connection string does.
        let run = run_on("AccountName=x;AccountKey=%%%", &["completions", shell]).expect(0);
        assert!(run.stdout.contains(marker), "{shell}: {}", run.stdout);
        for command in ["export", "purge", "entity", "delete-extra"] {
            assert!(run.stdout.contains(command), "{shell}: {command}");
        }
    }
    let man = run_on("AccountName=x;AccountKey=%%%", &["man"]).expect(0);
    assert!(man.stdout.contains(".TH tablekit 1"), "{}", man.stdout);
    assert!(man.stdout.contains("purge"));
    run_on("AccountName=x;AccountKey=%%%", &["completions", "tcsh"]).expect(2);
}
