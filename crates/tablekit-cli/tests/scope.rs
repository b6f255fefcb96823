//! Scoping what export and copy move: `--filter`, `--partition`, `--select`, `--since`; and
//! `copy --delete-extra` and `--dry-run`.

mod support;

use support::*;
use tablekit::core::EdmValue;
use tablekit::core::{Entity, IfMatch, Properties};

/// The `(PartitionKey, RowKey)` of every line of an export.
fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[tokio::test]
async fn export_takes_a_partition_a_filter_and_a_selection() {
    let t = table("CliScope").await;
    seed(&t, 3, 10).await;
    let dir = scratch("scope-export");
    let out = dir.join("p1.jsonl");
    tablekit(&[
        "export",
        t.name(),
        "--out",
        arg(&out),
        "--partition",
        keys(1, 0).pk(),
        "--filter",
        "Count ge 15 and Flag eq true",
        "--select",
        "Count,Text",
    ])
    .expect(0);
    let rows = lines(&read_text(&out));
    // Partition 1 holds Count 10..=19; Flag is true for even counts.
    let expected: Vec<String> = (15..20)
        .filter(|i| i % 2 == 0)
        .map(|i| keys(1, i - 10).rk().to_owned())
        .collect();
    let got: Vec<&str> = rows.iter().map(|r| r["RowKey"].as_str().unwrap()).collect();
    assert_eq!(got, expected);
    for r in &rows {
        assert_eq!(r["PartitionKey"], keys(1, 0).pk());
        let mut names: Vec<&str> = r
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|n| !n.starts_with("Timestamp") && !n.ends_with("Key"))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["Count", "Text"], "{r}");
    }
    // Several partitions go to parts of a directory, one each.
    let parts = dir.join("parts");
    tablekit(&[
        "export",
        t.name(),
        "--out",
        arg(&parts),
        "--partition",
        keys(0, 0).pk(),
        "--partition",
        keys(2, 0).pk(),
    ])
    .expect(0);
    let mut all = lines(&read_text(&parts.join("part-00001.jsonl")));
    all.extend(lines(&read_text(&parts.join("part-00002.jsonl"))));
    assert_eq!(all.len(), 20);
    assert!(all.iter().all(|r| r["PartitionKey"] != keys(1, 0).pk()));

    // A filter `query` would refuse is refused before any request; so is --select of a key.
    let bad = tablekit(&[
        "--verbose",
        "export",
        t.name(),
        "--out",
        arg(&dir.join("bad.jsonl")),
        "--filter",
        "Count gt",
    ])
    .expect(2);
    assert!(bad.stderr.contains("--filter"), "{}", bad.stderr);
    assert!(!dir.join("bad.jsonl").exists());
    tablekit(&[
        "export",
        t.name(),
        "--out",
        arg(&dir.join("bad2.jsonl")),
        "--select",
        "RowKey",
    ])
    .expect(2);
}

#[tokio::test]
async fn since_exports_what_was_written_after_a_time_and_is_refused_on_cosmos() {
    let t = table("CliSince").await;
    seed(&t, 2, 5).await;
    let before = t.query::<Properties>().allow_scan().stream();
    let stamps: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(before)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|s| s.timestamp)
        .collect();
    let newest = stamps.into_iter().max().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    for rk in ["n1", "n2", "n3"] {
        t.upsert_replace(&Entity::try_new("later", rk, Properties::new().with("N", 1)).unwrap())
            .await
            .unwrap();
    }
    let since = (newest + chrono::Duration::milliseconds(600)).to_rfc3339();
    let dir = scratch("since");
    let out = dir.join("changes.jsonl");
    tablekit(&["export", t.name(), "--out", arg(&out), "--since", &since]).expect(0);
    let got: Vec<String> = lines(&read_text(&out))
        .iter()
        .map(|r| r["RowKey"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["n1", "n2", "n3"]);

    // On a Cosmos DB endpoint, refused before any request (the host does not even resolve).
    let cosmos = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=https://acct.table.cosmos.azure.invalid/";
    let refused = run_on(
        cosmos,
        &[
            "export",
            "Orders",
            "--out",
            arg(&dir.join("c.jsonl")),
            "--since",
            "2026-11-01",
        ],
    )
    .expect(2);
    assert!(refused.stderr.contains("Cosmos DB"), "{}", refused.stderr);
    tablekit(&[
        "export",
        t.name(),
        "--out",
        arg(&dir.join("x.jsonl")),
        "--since",
        "yesterday",
    ])
    .expect(2);
}

#[tokio::test]
async fn copy_scoped_by_filter_and_selection_verifies_within_its_scope() {
    let src = table("CliScopeCopy").await;
    seed(&src, 2, 10).await;
    let dst = tablekit_testkit::unique_table_name("CliScopeCopyDst");
    let dir = scratch("scope-copy");
    tablekit(&[
        "copy",
        src.name(),
        &dst,
        "--create",
        "--filter",
        "Count lt 5",
        "--select",
        "Count",
        "--verify",
        "--checkpoint",
        arg(&dir.join("cp")),
    ])
    .expect(0);
    let dst = account().table(&dst).unwrap();
    let copied = contents(&dst).await;
    assert_eq!(copied.len(), 5);
    for (pk, rk, props) in &copied {
        assert_eq!(pk, keys(0, 0).pk());
        assert_eq!(props.len(), 1, "{rk}: {props:?}");
        assert!(matches!(props.get("Count"), Some(EdmValue::Int32(n)) if *n < 5));
    }
}

#[tokio::test]
async fn delete_extra_makes_the_destination_equal_after_a_dry_run_that_changes_nothing() {
    let src = table("CliExtraSrc").await;
    seed(&src, 3, 10).await;
    let dst = table("CliExtraDst").await;
    seed(&dst, 3, 10).await;
    // Extras: one inside a copied partition, a partition of its own, and one between keys.
    let extra = [
        (keys(0, 0).pk().to_owned(), "zz-extra".to_owned()),
        ("a-only-dst".to_owned(), "1".to_owned()),
        (keys(1, 0).pk().to_owned(), format!("{}-x", keys(1, 4).rk())),
    ];
    for (pk, rk) in &extra {
        dst.upsert_replace(&Entity::try_new(pk.as_str(), rk.as_str(), Properties::new()).unwrap())
            .await
            .unwrap();
    }
    // One source entity missing from the destination.
    dst.delete(&keys(2, 3), IfMatch::Any).await.unwrap();
    let before = contents(&dst).await;
    let dir = scratch("extra");
    let dry = tablekit(&[
        "copy",
        src.name(),
        dst.name(),
        "--delete-extra",
        "--dry-run",
    ])
    .expect(0);
    let mut listed: Vec<(String, String)> = dry
        .stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f[0], "extra", "{l}");
            (f[1].to_owned(), f[2].to_owned())
        })
        .collect();
    listed.sort();
    let mut expected = extra.to_vec();
    expected.sort();
    assert_eq!(listed, expected);
    assert!(
        dry.stderr.contains("would copy 30 entities"),
        "{}",
        dry.stderr
    );
    assert_eq!(contents(&dst).await, before, "a dry run writes nothing");
    assert!(
        std::fs::read_dir(".").unwrap().flatten().all(|e| !e
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{}-to-", src.name()))),
        "a dry run writes no checkpoint"
    );

    // Scoped to one partition: only that partition's extra goes.
    tablekit(&[
        "copy",
        src.name(),
        dst.name(),
        "--partition",
        keys(0, 0).pk(),
        "--delete-extra",
        "--checkpoint",
        arg(&dir.join("one")),
    ])
    .expect(0);
    let now = contents(&dst).await;
    assert!(
        !now.iter()
            .any(|(pk, rk, _)| (pk, rk) == (&extra[0].0, &extra[0].1))
    );
    assert!(
        now.iter()
            .any(|(pk, rk, _)| (pk, rk) == (&extra[1].0, &extra[1].1))
    );

    let run = tablekit(&[
        "copy",
        src.name(),
        dst.name(),
        "--delete-extra",
        "--verify",
        "--checkpoint",
        arg(&dir.join("all")),
    ])
    .expect(0);
    assert!(run.stderr.contains("deleted 2 entities"), "{}", run.stderr);
    assert!(run.stderr.contains("0 differ"), "{}", run.stderr);
    assert_eq!(contents(&dst).await, contents(&src).await);
}
