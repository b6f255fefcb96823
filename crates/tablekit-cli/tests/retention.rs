//! `tablekit retention list | drop-older-than` against Azurite, with requests counted at a
//! proxy in front of the table service.

mod support;

use chrono::{TimeZone as _, Utc};
use support::*;
use tablekit::core::{Entity, Properties};
use tablekit::retention::{Period, PeriodTables};
use tablekit_testkit::fixtures::{fast_retries, proxied};

#[tokio::test]
async fn period_tables_are_listed_and_dropped_after_a_dry_run() {
    let p = proxied(fast_retries());
    let cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    let prefix = format!("CliRet{}x", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let set = PeriodTables::new(&p.account, &prefix, Period::Day).unwrap();
    for day in 1..=3 {
        let t = Utc.with_ymd_and_hms(2026, 1, day, 12, 0, 0).unwrap();
        set.insert(
            t,
            &Entity::try_new(
                "alice",
                format!("{day}"),
                Properties::new().with("Day", day as i32),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    }
    let requests = || p.table.stats().requests_seen;
    let names: Vec<String> = (1..=3).map(|d| format!("{prefix}2026010{d}")).collect();

    let before = requests();
    let listed = run_on(&cs, &["retention", "list", &prefix, "--period", "day"]).expect(0);
    assert_eq!(requests() - before, 1, "one listing");
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", listed.stdout);
    assert_eq!(
        lines[0],
        format!("{}\t2026-01-01T00:00:00Z\t2026-01-02T00:00:00Z", names[0])
    );

    let drop = [
        "retention",
        "drop-older-than",
        &prefix,
        "--period",
        "day",
        "--cutoff",
        "2026-01-03",
    ];
    // The dry run lists the two days that ended by the cutoff and drops nothing.
    let before = requests();
    let dry = run_on(&cs, &[&drop[..], &["--dry-run"]].concat()).expect(0);
    assert_eq!(requests() - before, 1);
    let would: Vec<&str> = dry
        .stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(would, [names[0].as_str(), names[1].as_str()]);
    assert_eq!(set.list().await.unwrap().len(), 3);

    // Without a terminal, --yes is required; refused before any request.
    let before = requests();
    let refused = run_on(&cs, &drop).expect(2);
    assert!(refused.stderr.contains("--yes"), "{}", refused.stderr);
    assert_eq!(requests() - before, 0);

    // Listing to show what goes, the drop's own listing, one delete per table.
    let before = requests();
    let dropped = run_on(&cs, &[&drop[..], &["--yes"]].concat()).expect(0);
    assert_eq!(requests() - before, 4);
    assert_eq!(dropped.stdout.lines().collect::<Vec<_>>(), would);
    let left: Vec<String> = set
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(left, [names[2].clone()]);

    // Bad input: exit 2, nothing sent.
    let before = requests();
    run_on(
        &cs,
        &[
            "retention",
            "drop-older-than",
            &prefix,
            "--period",
            "day",
            "--cutoff",
            "soon",
            "--yes",
        ],
    )
    .expect(2);
    run_on(&cs, &["retention", "list", "Bad1", "--period", "day"]).expect(2);
    assert_eq!(requests() - before, 0);
    set.drop_older_than(Utc::now()).await.unwrap();
}
