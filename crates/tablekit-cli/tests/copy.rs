//! `tablekit copy` between two accounts (the second reaches the emulator through a proxy, so
//! it is another endpoint with its own connection string), with `--verify`.

mod support;

use support::*;
use tablekit::core::{Entity, Properties};
use tablekit_testkit::fixtures::proxied;

#[tokio::test]
async fn a_copy_to_another_account_verifies_and_a_tampered_entity_is_detected() {
    let src = table("CliCopySrc").await;
    seed(&src, 8, 30).await;
    let p = proxied(tablekit_testkit::fixtures::fast_retries());
    let dst_cs = connection_string(&emulator().with_table(p.table.endpoint_for(&emulator().table)));
    let dst_name = tablekit_testkit::unique_table_name("CliCopyDst");
    let dir = scratch("copy");
    let cp = dir.join("copy.checkpoint");
    let run = tablekit(&[
        "--verbose",
        "copy",
        src.name(),
        &dst_name,
        "--dst-connection-string",
        &dst_cs,
        "--create",
        "--split",
        "3",
        "--verify",
        "--checkpoint",
        arg(&cp),
    ])
    .expect(0);
    assert!(run.stderr.contains("copied 240 entities"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("verified 8 partitions (240 source entities): 0 differ"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("requests (destination)"),
        "{}",
        run.stderr
    );
    assert!(
        p.table.stats().requests_seen > 0,
        "the destination account was used"
    );
    let dst = account().table(&dst_name).unwrap();
    assert_eq!(contents(&dst).await, contents(&src).await);

    // Tamper with one entity's value, add one partition, remove another's entity.
    let (pk, rk, mut props) = contents(&dst).await.swap_remove(40);
    props.insert("Count", 999_999_i32);
    dst.upsert_replace(&Entity::try_new(pk.clone(), rk, props).unwrap())
        .await
        .unwrap();
    dst.upsert_replace(&Entity::try_new("zz-extra", "1", Properties::new()).unwrap())
        .await
        .unwrap();
    let keys = keys(5, 7);
    dst.delete(&keys, tablekit::core::IfMatch::Any)
        .await
        .unwrap();

    let verify = run_on(
        &dst_cs,
        &[
            "copy",
            src.name(),
            &dst_name,
            "--verify-only",
            "--dst-connection-string",
            &dst_cs,
        ],
    )
    .expect(4);
    let lines: Vec<&str> = verify.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", verify.stdout);
    assert!(
        lines[0].starts_with(&format!("differs\t{pk}\tsource 30 entities")),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("differs\tpé'005\tsource 30 entities")
            && lines[1].contains("destination 29"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("extra\tzz-extra"), "{}", lines[2]);
    assert!(verify.stderr.contains("3 differ"), "{}", verify.stderr);

    // Copying again repairs the tampered and deleted entities (the extra one stays).
    tablekit(&[
        "copy",
        src.name(),
        &dst_name,
        "--dst-connection-string",
        &dst_cs,
        "--checkpoint",
        arg(&cp),
    ])
    .expect(0);
    let after = run_on(
        &dst_cs,
        &[
            "copy",
            src.name(),
            &dst_name,
            "--verify-only",
            "--dst-connection-string",
            &dst_cs,
        ],
    )
    .expect(4);
    assert_eq!(after.stdout.lines().collect::<Vec<_>>(), [lines[2]]);
}

#[tokio::test]
async fn a_copy_to_a_missing_table_without_create_fails_cleanly() {
    let src = table("CliCopyMissing").await;
    seed(&src, 1, 3).await;
    let dir = scratch("copy-missing");
    let missing = tablekit_testkit::unique_table_name("CliCopyNone");
    let run = tablekit(&[
        "copy",
        src.name(),
        &missing,
        "--checkpoint",
        arg(&dir.join("cp")),
    ])
    .expect(1);
    assert!(
        run.stderr.contains("does not exist: pass --create"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("refused"),
        "not reported row by row: {}",
        run.stderr
    );
    // The same for an import.
    let file = dir.join("in.jsonl");
    std::fs::write(&file, r#"{"PartitionKey":"p","RowKey":"r"}"#).unwrap();
    let run = tablekit(&["import", &missing, "--in", arg(&file)]).expect(1);
    assert!(
        run.stderr.contains("does not exist: pass --create"),
        "{}",
        run.stderr
    );
}

/// The destination's request counts by kind, from the `--verbose` summary line.
fn destination_requests(stderr: &str) -> std::collections::HashMap<String, usize> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("requests (destination):"))
        .unwrap_or_else(|| panic!("no destination summary in {stderr}"));
    let inside = &line[line.find('[').unwrap() + 1..line.find(']').unwrap()];
    inside
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

/// A copy writes inserts into a table that holds none of the source's entities (no read, no
/// replace); into one that holds them, an identical entity costs its transaction one read and
/// a different one is replaced, after which the later pages are written with
/// insert-or-replace straight away.
#[tokio::test]
async fn a_copy_inserts_into_an_empty_table_and_replaces_only_what_differs() {
    let src = table("CliCopyIns").await;
    seed(&src, 4, 30).await;
    let dst = table("CliCopyInsDst").await;
    // Another account, so that the destination's requests are counted apart; one range of
    // pages of 30 entities: one page (and one transaction) per partition, in order.
    let cs = connection_string(&emulator());
    let copy = |cp: &str| {
        tablekit(&[
            "--verbose",
            "copy",
            src.name(),
            dst.name(),
            "--dst-connection-string",
            &cs,
            "--page-size",
            "30",
            "--checkpoint",
            cp,
        ])
        .expect(0)
    };
    let dir = scratch("copy-inserts");
    let (first, second, third) = (dir.join("1.cp"), dir.join("2.cp"), dir.join("3.cp"));

    let run = copy(arg(&first));
    let n = destination_requests(&run.stderr);
    assert_eq!(n.get("entity.transaction"), Some(&4), "{}", run.stderr);
    assert_eq!(
        n.get("entity.query"),
        None,
        "nothing to settle: {}",
        run.stderr
    );
    assert_eq!(contents(&dst).await, contents(&src).await);

    // Everything there already, identical: each insert transaction meets 409 and its range is
    // read once; nothing is written again.
    let run = copy(arg(&second));
    let n = destination_requests(&run.stderr);
    assert_eq!(n.get("entity.transaction"), Some(&4), "{}", run.stderr);
    assert_eq!(n.get("entity.query"), Some(&4), "{}", run.stderr);
    assert!(run.stderr.contains("copied 120 entities"), "{}", run.stderr);

    // One entity of the first partition differs: it is replaced, and the pages after the
    // next one go straight to insert-or-replace (the next one may already be in flight).
    let (pk, rk, mut props) = contents(&dst).await.swap_remove(7);
    assert_eq!(pk, keys(0, 7).pk());
    props.insert("Count", -1_i32);
    dst.upsert_replace(&Entity::try_new(pk, rk, props).unwrap())
        .await
        .unwrap();
    let run = copy(arg(&third));
    let n = destination_requests(&run.stderr);
    // First page: the insert, the read, the replace; then one transaction per page.
    assert_eq!(n.get("entity.transaction"), Some(&5), "{}", run.stderr);
    let reads = n.get("entity.query").copied().unwrap_or(0);
    assert!((1..=2).contains(&reads), "{}", run.stderr);
    assert!(run.stderr.contains("copied 120 entities"), "{}", run.stderr);
    assert_eq!(contents(&dst).await, contents(&src).await);
}
