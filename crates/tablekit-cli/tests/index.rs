//! `tablekit index verify | repair | backfill` against Azurite, for indexes declared in spec
//! files; the test writes and tampers with the index through tablekit's own API.

mod support;

use std::path::{Path, PathBuf};

use support::*;
use tablekit::azure::Table;
use tablekit::core::filter::Property;
use tablekit::core::{Entity, Keys, Properties};
use tablekit::index::{CopySpec, IndexSpec, InterPartitionIndex, IntraPartitionIndex};
use tablekit_testkit::fixtures::{fast_retries, proxied, table_on};
use tablekit_testkit::unique_queue_name;

const DEPARTMENT: Property<String> = Property::new("Department");
const ID: Property<i32> = Property::new("Id");
const EMAIL: Property<String> = Property::new("Email");

fn employee(department: &str, id: i32) -> Properties {
    Properties::new()
        .with("Department", department)
        .with("Id", id)
        .with("Email", format!("e{id}@contoso.com"))
        .with("Name", format!("Employee {id}"))
}

/// The application's declaration, with or without the email copy.
fn spec(with_email: bool) -> IndexSpec<Properties> {
    let mut spec = IndexSpec::<Properties>::builder(DEPARTMENT);
    spec.primary(CopySpec::new("empid", ID).with_width(6));
    if with_email {
        spec.secondary(CopySpec::new("email", EMAIL));
    }
    spec.build().unwrap()
}

/// The same declaration as a spec file.
fn spec_file(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("employees.index.json");
    std::fs::write(
        &path,
        format!(
            r#"{{"layout": "{}", "partition": "Department",
               "primary": {{"name": "empid", "property": "Id", "width": 6}},
               "secondaries": [{{"name": "email", "property": "Email"}}]{}}}"#,
            if extra.is_empty() { "intra" } else { "inter" },
            extra
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn an_intra_partition_index_is_verified_repaired_and_verified_clean() {
    let t = table("CliIndex").await;
    let index = IntraPartitionIndex::new(t.clone(), spec(true));
    for id in 1..=5 {
        index.insert(&employee("Sales", id)).await.unwrap();
    }
    // A missing copy, a stale one and an orphan.
    let email = |id: &str| Keys::new("Sales", format!("email_{id}@contoso.com")).unwrap();
    t.delete_if_exists(&email("e2")).await.unwrap();
    t.upsert_replace(&Entity::new(
        email("e3"),
        employee("Sales", 3).with("Name", "Someone Else"),
    ))
    .await
    .unwrap();
    t.upsert_replace(&Entity::new(email("ghost"), employee("Sales", 99)))
        .await
        .unwrap();
    let dir = scratch("index-repair");
    let spec = spec_file(&dir, "");
    let args = |cmd: &'static str| {
        vec![
            "index",
            cmd,
            t.name(),
            "--spec",
            arg(&spec),
            "--partition",
            "Sales",
        ]
    };

    let found = tablekit(&args("verify")).expect(1);
    let lines: Vec<&str> = found.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "Sales\tmissing\temail\tSales/email_e2@contoso.com\tSales/empid_000002",
            "Sales\tstale\temail\tSales/email_e3@contoso.com\tSales/empid_000003",
            "Sales\torphaned\temail\tSales/email_ghost@contoso.com\t-",
        ],
        "{}",
        found.stderr
    );
    assert!(
        found.stderr.contains("Sales: 5 entities"),
        "{}",
        found.stderr
    );

    tablekit(&args("repair")).expect(2); // no terminal, no --yes
    let repaired = tablekit(&[&args("repair")[..], &["--yes"]].concat()).expect(0);
    assert!(
        repaired
            .stderr
            .contains("2 entities' copies rewritten, 1 orphans deleted"),
        "{}",
        repaired.stderr
    );
    let clean = tablekit(&args("verify")).expect(0);
    assert_eq!(clean.stdout, "");
    assert!(clean.stderr.contains("0 issue(s)"), "{}", clean.stderr);
}

#[tokio::test]
async fn an_inter_partition_index_with_unrun_jobs_is_repaired_without_the_queue() {
    let t = table("CliInter").await;
    let queue = t.account().queue(&unique_queue_name("cli-index")).unwrap();
    let index = InterPartitionIndex::new(t.clone(), spec(true), queue.clone());
    index.create().await.unwrap();
    for id in 1..=3 {
        index.insert(&employee("HR", id)).await.unwrap();
    }
    let dir = scratch("index-inter");
    let spec = spec_file(&dir, &format!(r#", "queue": "{}""#, queue.name()));
    let args = |cmd: &'static str| {
        vec![
            "index",
            cmd,
            t.name(),
            "--spec",
            arg(&spec),
            "--partition",
            "HR",
        ]
    };
    // No worker ran: every email copy is missing.
    let found = tablekit(&args("verify")).expect(1);
    assert_eq!(
        found.stdout.matches("\tmissing\temail\t").count(),
        3,
        "{}",
        found.stdout
    );
    tablekit(&[&args("repair")[..], &["--yes"]].concat()).expect(0);
    tablekit(&args("verify")).expect(0);
    index.jobs().delete_queues().await.unwrap();
}

#[tokio::test]
async fn an_interrupted_backfill_resumes_from_its_checkpoint() {
    let t = table("CliBackfill").await;
    // The index had no email copy when these were written.
    let before = IntraPartitionIndex::new(t.clone(), spec(false));
    for id in 1..=7 {
        before.insert(&employee("Sales", id)).await.unwrap();
    }
    for id in 8..=10 {
        before.insert(&employee("HR", id)).await.unwrap();
    }
    let dir = scratch("index-backfill");
    let spec = spec_file(&dir, "");
    let checkpoint = dir.join("backfill.checkpoint");
    let backfill = [
        "index",
        "backfill",
        t.name(),
        "--spec",
        arg(&spec),
        "--checkpoint",
        arg(&checkpoint),
        "--page-size",
        "2",
    ];
    let verify = |partition: &'static str| {
        tablekit(&[
            "index",
            "verify",
            t.name(),
            "--spec",
            arg(&spec),
            "--partition",
            partition,
        ])
    };

    // Stopped after two pages of two: four entities have their copies.
    tablekit(&[&backfill[..], &["--interrupt-after", "2"]].concat()).expect(130);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).unwrap()).unwrap();
    assert_eq!(saved["state"]["pages"], 2, "{saved}");
    assert_eq!(saved["state"]["written"], 4, "{saved}");
    assert_eq!(saved["state"]["done"], false, "{saved}");
    let missing = verify("Sales").stdout.matches("\tmissing\t").count()
        + verify("HR").stdout.matches("\tmissing\t").count();
    assert_eq!(missing, 6);

    // A run without --resume does not start over by accident.
    let refused = tablekit(&backfill).expect(2);
    assert!(refused.stderr.contains("--resume"), "{}", refused.stderr);

    let resumed = tablekit(&[&backfill[..], &["--resume", "--verbose"]].concat()).expect(0);
    assert!(
        resumed.stderr.contains("resuming after 2 page(s)"),
        "{}",
        resumed.stderr
    );
    // From the checkpoint's continuation: the 3 pages left (a restart reads all 5).
    let queries: u64 = resumed
        .stderr
        .split("entity.query=")
        .nth(1)
        .and_then(|rest| rest.split([' ', ']']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", resumed.stderr));
    assert!((3..=4).contains(&queries), "{queries}: {}", resumed.stderr);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).unwrap()).unwrap();
    assert_eq!(saved["state"]["done"], true, "{saved}");
    assert_eq!(saved["state"]["written"], 10, "each entity once: {saved}");
    verify("Sales").expect(0);
    verify("HR").expect(0);
    assert_eq!(contents(&t).await.len(), 20, "10 entities, 10 email copies");
}

#[tokio::test]
async fn a_bad_spec_file_is_refused_with_its_problem_and_nothing_is_sent() {
    let p = proxied(fast_retries());
    let t: Table = table_on(&p.account, "CliBadSpec").await;
    let cs = connection_string(
        &emulator()
            .with_queue(p.queue.endpoint_for(&emulator().queue))
            .with_table(p.table.endpoint_for(&emulator().table)),
    );
    let before = p.table.stats().requests_seen + p.queue.stats().requests_seen;
    let dir = scratch("index-bad-spec");
    let primary = r#""primary": {"name": "empid", "property": "Id", "width": 6}"#;
    for (text, problem) in [
        ("{".to_owned(), "EOF"),
        (
            format!(
                r#"{{"layout": "intra", "partition": "Department", {primary}, "secondary": []}}"#
            ),
            "unknown field `secondary`",
        ),
        (
            format!(r#"{{"layout": "inter", "partition": "Department", {primary}}}"#),
            "needs \"queue\"",
        ),
        (
            format!(r#"{{"layout": "sideways", "partition": "Department", {primary}}}"#),
            "unknown variant `sideways`",
        ),
        (
            format!(
                r#"{{"layout": "intra", "partition": "Department", {primary},
                    "secondaries": [{{"name": "e", "property": "Email", "prefix": "empid_x"}}]}}"#
            ),
            "overlap",
        ),
        (
            format!(
                r#"{{"layout": "inter", "partition": "Department", {primary}, "queue": "jobs",
                    "tables": {{"mail": "Mails"}}}}"#
            ),
            "\"mail\", which is not a secondary copy",
        ),
        (
            format!(r#"{{"layout": "intra", "partition": "", {primary}}}"#),
            "partition is empty",
        ),
    ] {
        let path = dir.join("bad.json");
        std::fs::write(&path, &text).unwrap();
        let run = run_on(
            &cs,
            &[
                "index",
                "verify",
                t.name(),
                "--spec",
                arg(&path),
                "--partition",
                "Sales",
            ],
        )
        .expect(2);
        assert!(
            run.stderr.contains("spec ") && run.stderr.contains(problem),
            "{problem}: {}",
            run.stderr
        );
    }
    let missing = run_on(
        &cs,
        &[
            "index",
            "backfill",
            t.name(),
            "--spec",
            arg(&dir.join("none.json")),
        ],
    )
    .expect(2);
    assert!(
        missing.stderr.contains("cannot read it"),
        "{}",
        missing.stderr
    );
    let good = spec_file(&dir, "");
    let unknown_copy = run_on(
        &cs,
        &[
            "index",
            "backfill",
            t.name(),
            "--spec",
            arg(&good),
            "--copy",
            "phone",
        ],
    )
    .expect(2);
    assert!(
        unknown_copy
            .stderr
            .contains("no secondary copy of that name (it has: email)"),
        "{}",
        unknown_copy.stderr
    );
    assert_eq!(
        p.table.stats().requests_seen + p.queue.stats().requests_seen,
        before,
        "nothing was sent"
    );
}
