//! Interrupted exports, imports and copies resume to exactly what an uninterrupted run gives;
//! Ctrl-C (SIGINT) ends with 130 and a checkpoint that resumes.

mod support;

use std::time::Duration;

use support::*;
use tablekit_testkit::fixtures::proxied;
use tablekit_testkit::{Fault, Matcher, Occurrences, Rule};

fn checkpoint(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("checkpoint")).expect("checkpoint json")
}

#[tokio::test]
async fn an_interrupted_export_resumes_to_the_same_bytes() {
    let src = table("CliResumeExport").await;
    seed(&src, 5, 100).await;
    let dir = scratch("resume-export");
    for name in ["t.jsonl", "t.jsonl.zst", "t.jsonl.gz"] {
        let whole = dir.join(format!("whole-{name}"));
        tablekit(&[
            "export",
            src.name(),
            "--out",
            arg(&whole),
            "--page-size",
            "100",
        ])
        .expect(0);
        let part = dir.join(format!("resumed-{name}"));
        let args = [
            "export",
            src.name(),
            "--out",
            arg(&part),
            "--page-size",
            "100",
        ];
        let stopped = tablekit(&[&args[..], &["--interrupt-after", "2"]].concat()).expect(130);
        assert!(stopped.stderr.contains("--resume"), "{}", stopped.stderr);
        let cp = checkpoint(&dir.join(format!("resumed-{name}.checkpoint")));
        assert_eq!(cp["entities"], 200, "{cp}");
        assert_eq!(cp["complete"], false);
        assert_eq!(read_text(&part).lines().count(), 200);
        // Bytes written after the checkpoint (a crash mid-page) are cut off on resume.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&part)
            .unwrap();
        std::io::Write::write_all(&mut file, b"half a page").unwrap();
        drop(file);
        // Resuming with other options is refused.
        let other = tablekit(&[&args[..4], &["--page-size", "50", "--resume"]].concat()).expect(2);
        assert!(other.stderr.contains("other options"), "{}", other.stderr);
        tablekit(&[&args[..], &["--resume"]].concat()).expect(0);
        assert_eq!(
            std::fs::read(&part).unwrap(),
            std::fs::read(&whole).unwrap(),
            "{name}: resumed export differs"
        );
        // A complete export has no checkpoint left: resuming it is refused and changes
        // nothing.
        assert!(!dir.join(format!("resumed-{name}.checkpoint")).exists());
        let again = tablekit(&[&args[..], &["--resume"]].concat()).expect(2);
        assert!(again.stderr.contains("--overwrite"), "{}", again.stderr);
        assert_eq!(
            std::fs::read(&part).unwrap(),
            std::fs::read(&whole).unwrap()
        );
    }
}

#[tokio::test]
async fn an_interrupted_split_export_resumes_its_parts() {
    let src = table("CliResumeSplit").await;
    seed(&src, 20, 30).await;
    let dir = scratch("resume-split");
    let whole = dir.join("whole");
    let args = |out: &std::path::Path| {
        vec![
            "export".to_owned(),
            src.name().to_owned(),
            "--out".into(),
            arg(out).into(),
            "--split".into(),
            "3".into(),
            "--page-size".into(),
            "50".into(),
            "--parallel".into(),
            "1".into(),
        ]
    };
    let run_args = |v: Vec<String>| tablekit(&v.iter().map(String::as_str).collect::<Vec<_>>());
    run_args(args(&whole)).expect(0);
    let resumed = dir.join("resumed");
    let mut stop = args(&resumed);
    stop.extend(["--interrupt-after".into(), "3".into()]);
    run_args(stop).expect(130);
    let mut again = args(&resumed);
    again.push("--resume".into());
    run_args(again).expect(0);
    let mut names: Vec<_> = std::fs::read_dir(&whole)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names
        .iter()
        .filter(|n| n.to_string_lossy().ends_with(".jsonl"))
    {
        assert_eq!(
            std::fs::read(whole.join(name)).unwrap(),
            std::fs::read(resumed.join(name)).unwrap(),
            "{name:?}"
        );
    }
}

#[tokio::test]
async fn an_interrupted_import_resumes_to_the_same_table() {
    let src = table("CliResumeImport").await;
    seed(&src, 5, 100).await;
    let dir = scratch("resume-import");
    let file = dir.join("in.jsonl");
    tablekit(&["export", src.name(), "--out", arg(&file)]).expect(0);
    let dst = tablekit_testkit::unique_table_name("CliResumeImportDst");
    let rejects = dir.join("rejects.jsonl");
    let args = [
        "import",
        &dst,
        "--in",
        arg(&file),
        "--create",
        "--chunk",
        "150",
        "--mode",
        "insert",
        "--rejects",
        arg(&rejects),
    ];
    tablekit(&[&args[..], &["--interrupt-after", "2"]].concat()).expect(130);
    let cp = checkpoint(&dir.join("in.jsonl.import-checkpoint"));
    assert_eq!(
        (cp["line"].as_u64(), cp["imported"].as_u64()),
        (Some(300), Some(300)),
        "{cp}"
    );
    let dst_table = account().table(&dst).unwrap();
    assert_eq!(contents(&dst_table).await.len(), 300);
    let run = tablekit(&[&args[..], &["--resume"]].concat()).expect(0);
    assert!(
        run.stderr.contains("imported 500 rows; refused 0"),
        "{}",
        run.stderr
    );
    assert_eq!(contents(&dst_table).await, contents(&src).await);
    assert_eq!(
        std::fs::read_to_string(&rejects).unwrap(),
        "",
        "no row refused"
    );
}

#[tokio::test]
async fn an_interrupted_copy_resumes_to_the_same_table() {
    let src = table("CliResumeCopy").await;
    seed(&src, 6, 60).await;
    let dir = scratch("resume-copy");
    let dst = tablekit_testkit::unique_table_name("CliResumeCopyDst");
    let cp_path = dir.join("copy.checkpoint");
    let args = [
        "copy",
        src.name(),
        &dst,
        "--create",
        "--page-size",
        "50",
        "--split",
        "2",
        "--checkpoint",
        arg(&cp_path),
    ];
    tablekit(&[&args[..], &["--interrupt-after", "3"]].concat()).expect(130);
    let cp = checkpoint(&cp_path);
    let copied: u64 = cp["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["copied"].as_u64().unwrap())
        .sum();
    assert!(copied > 0 && copied < 360, "{cp}");
    tablekit(&[&args[..], &["--resume", "--verify"]].concat()).expect(0);
    assert_eq!(
        contents(&account().table(&dst).unwrap()).await,
        contents(&src).await
    );
}

#[tokio::test]
async fn sigint_mid_export_exits_130_with_a_checkpoint_that_resumes() {
    signal_mid_export_exits_130_with_a_checkpoint_that_resumes("-INT").await;
}

/// SIGTERM (what containers and Kubernetes Jobs get) is handled as Ctrl-C is.
#[tokio::test]
async fn sigterm_mid_export_exits_130_with_a_checkpoint_that_resumes() {
    signal_mid_export_exits_130_with_a_checkpoint_that_resumes("-TERM").await;
}

async fn signal_mid_export_exits_130_with_a_checkpoint_that_resumes(signal: &str) {
    let src = table("CliSigint").await;
    seed(&src, 3, 100).await;
    let dir = scratch("sigint");
    let whole = dir.join("whole.jsonl");
    tablekit(&[
        "export",
        src.name(),
        "--out",
        arg(&whole),
        "--page-size",
        "100",
    ])
    .expect(0);

    // Hold every page after the first at the proxy, so the signal arrives mid-export.
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    p.table.add_rule(Rule::new(
        Matcher::any().with_query_contains("NextPartitionKey"),
        Occurrences::All,
        Fault::Delay(Duration::from_secs(120)),
    ));
    let out = dir.join("t.jsonl");
    let cp_path = dir.join("t.jsonl.checkpoint");
    let child = command(
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
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // Wait (bounded) for the first page's checkpoint.
    let mut waited = 0;
    while !cp_path.exists() {
        assert!(waited < 600, "no checkpoint appeared");
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let cp = checkpoint(&cp_path);
    assert_eq!(
        (cp["entities"].as_u64(), cp["complete"].as_bool()),
        (Some(100), Some(false)),
        "{cp}"
    );

    p.table.clear();
    run_on(
        &cs,
        &[
            "export",
            src.name(),
            "--out",
            arg(&out),
            "--page-size",
            "100",
            "--resume",
        ],
    )
    .expect(0);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&whole).unwrap());
}

#[tokio::test]
async fn a_second_sigint_aborts_an_import_whose_transaction_is_held_and_resume_completes_it() {
    use std::io::BufRead as _;
    let src = table("CliAbort").await;
    seed(&src, 2, 50).await;
    let dir = scratch("abort");
    let file = dir.join("in.jsonl");
    tablekit(&["export", src.name(), "--out", arg(&file)]).expect(0);
    let dst = table("CliAbortDst").await;

    // Hold every transaction at the proxy: the first SIGINT waits for the one in flight.
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    p.table.add_rule(Rule::new(
        Matcher::any().with_path_contains("$batch"),
        Occurrences::All,
        Fault::Delay(Duration::from_secs(120)),
    ));
    let mut child = command(&cs, &["import", dst.name(), "--in", arg(&file)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = 0;
    while p.table.stats().requests_seen == 0 {
        assert!(waited < 600, "no transaction was sent");
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let sigint = |pid: u32| {
        assert!(
            std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    };
    sigint(child.id());
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the first SIGINT is acknowledged");
        let seen = line.contains("interrupted");
        lines.push(line);
        if seen {
            break;
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the held transaction is waited for: {lines:?}"
    );
    sigint(child.id());
    let status = child.wait().unwrap();
    lines.extend(rx.iter());
    assert_eq!(status.code(), Some(130), "{lines:?}");
    assert!(lines.iter().any(|l| l == "aborted"), "{lines:?}");
    assert!(
        !dir.join("in.jsonl.import-checkpoint").exists(),
        "no chunk finished, so no checkpoint claims one"
    );
    drop(p);

    tablekit(&["import", dst.name(), "--in", arg(&file), "--resume"]).expect(0);
    assert_eq!(contents(&dst).await, contents(&src).await);
}
