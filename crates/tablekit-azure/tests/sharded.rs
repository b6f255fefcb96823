//! Sharded accounts against three Azurite instances (three accounts): routing by the stable
//! hash, one shard per partition query and every shard per scan, bulk writes split by shard
//! with one report in input order, a changed shard list refused, and bad input refused
//! before any request.

mod common;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use chrono::Utc;
use futures::{StreamExt as _, TryStreamExt as _};
use tablekit_azure::{
    Account, BulkOptions, SHARD_MARKER_PARTITION, ShardedAccount, ShardedTable, TablePermissions,
    TableSas, shard_hash,
};
use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::filter::Filter;
use tablekit_core::{Entity, Error, ErrorKind, IfMatch, Properties};
use tablekit_testkit::{Azurite, unique_table_name};

const SHARDS: usize = 3;

/// Four emulators for the whole test binary: shards 0–2, and a spare account to stand in
/// for "another account" in a changed list.
fn emulators() -> &'static [Azurite] {
    static ALL: OnceLock<Vec<Azurite>> = OnceLock::new();
    ALL.get_or_init(|| {
        (0..=SHARDS)
            .map(|_| Azurite::start().expect("azurite"))
            .collect()
    })
}

/// A new handle (fresh metrics) on emulator `i`'s account.
fn account(i: usize) -> Account {
    Account::from_connection_string(&emulators()[i].connection_string())
        .expect("connection string")
        .with_settings(common::fast_retries())
        .expect("settings")
}

fn accounts(order: &[usize]) -> Vec<Account> {
    order.iter().map(|&i| account(i)).collect()
}

fn requests(account: &Account) -> u64 {
    account.metrics().snapshot().requests()
}

fn counts(table: &ShardedTable) -> Vec<u64> {
    table
        .shards()
        .iter()
        .map(|t| requests(t.account()))
        .collect()
}

fn delta(after: &[u64], before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

async fn created(prefix: &str) -> ShardedTable {
    let sharded = ShardedAccount::new(accounts(&[0, 1, 2])).unwrap();
    let table = sharded.table(&unique_table_name(prefix)).unwrap();
    table.create().await.unwrap();
    table
}

fn entity(pk: &str, rk: &str, v: i64) -> Entity<Properties> {
    Entity::try_new(pk, rk, Properties::new().with("V", v)).unwrap()
}

/// Partition keys covering every shard.
fn partitions(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("customer-{i:04}")).collect()
}

/// Every entity of one shard's table, read directly (marker included).
async fn shard_rows(table: &ShardedTable, shard: usize) -> Vec<(String, String)> {
    table.shards()[shard]
        .query::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.keys.partition_key.to_string(), s.keys.row_key.to_string()))
        .collect()
}

#[test]
fn shard_of_is_pinned_for_known_keys() {
    // Computed once by an independent implementation; these must never change.
    assert_eq!(shard_hash("Sales"), 0xc606_630f_e723_8572);
    assert_eq!(shard_hash("customer-000042"), 0x69b6_fb83_abad_0989);
    assert_eq!(shard_hash("Ünïcode"), 0xa01a_10ae_dda0_6f5a);
    let accounts: Vec<Account> = (0..7)
        .map(|i| {
            Account::from_connection_string(&format!(
                "DefaultEndpointsProtocol=http;AccountName=acct{i};AccountKey={};TableEndpoint=http://127.0.0.1:1/acct{i}",
                tablekit_testkit::ACCOUNT_KEY
            ))
            .unwrap()
        })
        .collect();
    let over = |n: usize| ShardedAccount::new(accounts[..n].to_vec()).unwrap();
    assert_eq!(
        [2, 3, 4, 7].map(|n| over(n).shard_of("Sales")),
        [1, 2, 3, 5]
    );
    assert_eq!(
        [2, 3, 4, 7].map(|n| over(n).shard_of("customer-000042")),
        [0, 1, 1, 2]
    );
    assert_eq!(
        [2, 3, 4, 7].map(|n| over(n).shard_of("Ünïcode")),
        [1, 1, 2, 4]
    );
    assert_eq!(over(1).shard_of("anything"), 0);
}

#[test]
fn no_accounts_or_the_same_account_twice_is_refused() {
    let err = ShardedAccount::new(Vec::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = ShardedAccount::new(vec![account(0), account(1), account(0)]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("accounts 0 and 2"), "{err}");
}

#[tokio::test]
async fn each_entity_lands_in_the_shard_shard_of_names() {
    let table = created("ShRoute").await;
    let pks = partitions(30);
    for (i, pk) in pks.iter().enumerate() {
        table.insert(&entity(pk, "a", i as i64)).await.unwrap();
        table.upsert_replace(&entity(pk, "b", 1)).await.unwrap();
    }
    let mut seen = 0;
    let mut used = BTreeSet::new();
    for shard in 0..SHARDS {
        for (pk, rk) in shard_rows(&table, shard).await {
            if pk == SHARD_MARKER_PARTITION {
                continue;
            }
            assert_eq!(table.shard_of(&pk), shard, "{pk}/{rk} in shard {shard}");
            used.insert(shard);
            seen += 1;
        }
    }
    assert_eq!(seen, 60, "every entity is in exactly one shard");
    assert_eq!(used.len(), SHARDS, "30 partitions reach every shard");
    // Routed reads, merges and deletes find them.
    let pk = &pks[7];
    let got = table.get::<Properties>((pk.as_str(), "a")).await.unwrap();
    assert_eq!(got.unwrap().value.get_i64("V").unwrap(), Some(7));
    table
        .merge(&entity(pk, "a", 70), IfMatch::Any)
        .await
        .unwrap();
    table
        .delete((pk.as_str(), "b"), IfMatch::Any)
        .await
        .unwrap();
    let rows = shard_rows(&table, table.shard_of(pk)).await;
    assert!(rows.contains(&(pk.clone(), "a".into())));
    assert!(!rows.contains(&(pk.clone(), "b".into())));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_partition_query_asks_one_shard_and_a_scan_asks_every_shard_once() {
    let table = created("ShCount").await;
    let pks = partitions(12);
    let ops = pks
        .iter()
        .flat_map(|pk| (0..3).map(move |r| entity(pk, &format!("r{r}"), r)))
        .map(|e| Operation::insert(&e).unwrap())
        .collect();
    assert!(
        table
            .bulk_write(ops, BulkOptions::default())
            .await
            .unwrap()
            .is_complete()
    );

    let before = counts(&table);
    let pk = &pks[5];
    let rows = table
        .query_partition::<Properties>(pk)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let mut expected = vec![0; SHARDS];
    expected[table.shard_of(pk)] = 1;
    assert_eq!(delta(&counts(&table), &before), expected);

    let before = counts(&table);
    let all = table
        .scan::<Properties>()
        .allow_scan()
        .collect()
        .await
        .unwrap();
    assert_eq!(delta(&counts(&table), &before), vec![1; SHARDS]);
    assert_eq!(all.len(), 36, "the markers are left out");
    assert!(
        all.iter()
            .all(|s| s.keys.partition_key.as_str() != SHARD_MARKER_PARTITION)
    );
    let keys: Vec<_> = all
        .iter()
        .map(|s| (s.keys.partition_key.to_string(), s.keys.row_key.to_string()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "merged in key order over every shard");
    // Across pages too: 2 entities per page, each shard's pages merged as they come.
    let before = counts(&table);
    let paged = table
        .scan::<Properties>()
        .allow_scan()
        .with_page_size(2)
        .collect()
        .await
        .unwrap();
    let paged: Vec<_> = paged
        .iter()
        .map(|s| (s.keys.partition_key.to_string(), s.keys.row_key.to_string()))
        .collect();
    assert_eq!(paged, sorted);
    assert!(delta(&counts(&table), &before).iter().all(|n| *n >= 4));

    // A scan whose filter pins a partition reads only its shard.
    let before = counts(&table);
    let one = table
        .scan::<Properties>()
        .filter(Filter::partition(pk).and(Filter::ge("V", 1_i64)))
        .stream()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert_eq!(one.len(), 2);
    assert_eq!(delta(&counts(&table), &before), expected);
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_scan_that_meets_an_error_in_one_shard_yields_it_and_ends() {
    let table = created("ShScanErr").await;
    for pk in partitions(12) {
        table.insert(&entity(&pk, "a", 1)).await.unwrap();
    }
    // A shard loses its table behind the handle's back (after the marker check).
    table.shards()[1].delete_table().await.unwrap();
    let items: Vec<_> = table
        .scan::<Properties>()
        .allow_scan()
        .stream()
        .collect::<Vec<_>>()
        .await;
    let last = items.last().unwrap();
    assert_eq!(
        last.as_ref().unwrap_err().kind(),
        ErrorKind::NotFound,
        "{last:?}"
    );
    assert_eq!(
        items.iter().filter(|i| i.is_err()).count(),
        1,
        "one error, then the end"
    );
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_bulk_write_is_split_by_shard_and_reported_in_input_order() {
    let table = created("ShBulk").await;
    let pks = partitions(20);
    // Index 17 will collide with an entity written first: only it fails.
    let taken = entity(&pks[17], "r0", -1);
    table.insert(&taken).await.unwrap();
    let ops: Vec<Operation> = (0..200)
        .map(|i| {
            let e = entity(&pks[i % 20], &format!("r{}", i / 20), i as i64);
            Operation::insert(&e).unwrap()
        })
        .collect();
    let per_shard: Vec<usize> = (0..SHARDS)
        .map(|s| pks.iter().filter(|pk| table.shard_of(pk) == s).count())
        .collect();
    assert!(per_shard.iter().all(|n| *n > 0), "{per_shard:?}");
    let before = counts(&table);
    let progress = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = progress.clone();
    let report = table
        .bulk_write(
            ops,
            BulkOptions::default().with_progress(move |p| seen.lock().unwrap().push(*p)),
        )
        .await
        .unwrap();
    assert_eq!(report.outcomes.len(), 200);
    let failures: Vec<usize> = report.failures().map(|(i, _)| i).collect();
    assert_eq!(failures, vec![17]);
    assert_eq!(
        report.outcomes[17].error().unwrap().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(report.written(), 199);
    // One transaction per partition, plus the one resent without the refused insert.
    assert_eq!(report.transactions, 21);
    let sent = delta(&counts(&table), &before);
    let expected: Vec<u64> = (0..SHARDS)
        .map(|s| per_shard[s] as u64 + u64::from(table.shard_of(&pks[17]) == s))
        .collect();
    assert_eq!(
        sent, expected,
        "each shard got its own partitions' transactions"
    );
    let last = *progress.lock().unwrap().last().unwrap();
    assert_eq!((last.done, last.failed, last.total), (200, 1, Some(200)));
    // Each entity is in its own shard, with the value of its input index.
    for i in [0_usize, 33, 199] {
        let pk = &pks[i % 20];
        let rk = format!("r{}", i / 20);
        let stored = table
            .shard_for(pk)
            .get::<Properties>((pk.as_str(), rk.as_str()));
        let stored = stored.await.unwrap().unwrap();
        assert_eq!(stored.value.get_i64("V").unwrap(), Some(i as i64));
    }
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_changed_shard_count_order_or_account_is_refused() {
    let table = created("ShMark").await;
    let name = table.name().to_owned();
    let pk = "customer-0001";
    table.insert(&entity(pk, "a", 1)).await.unwrap();

    for (order, what) in [
        (&[0, 1][..], "over 3 shards and is now used over 2"),
        (&[0, 1, 2, 3][..], "over 3 shards and is now used over 4"),
        (&[1, 0, 2][..], "reordered or replaced"),
        (&[0, 2, 1][..], "reordered or replaced"),
        (&[0, 1, 3][..], "reordered or replaced"),
    ] {
        let other = ShardedAccount::new(accounts(order))
            .unwrap()
            .table(&name)
            .unwrap();
        let err = other.get::<Properties>((pk, "a")).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidConfig { part, .. } if part == "shards"),
            "{order:?}: {err}"
        );
        assert!(err.to_string().contains(what), "{order:?}: {err}");
        // Only the markers were read: one point read per shard, nothing routed.
        assert_eq!(counts(&other), vec![1; order.len()], "{order:?}");
        let err = other.insert(&entity(pk, "b", 2)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{order:?}: {err}");
        // Nothing is created or marked by a list that disagrees.
        let err = other.create_if_not_exists().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{order:?}: {err}");
    }
    // The spare account got no table from the refused lists.
    let spare = account(3).table(&name).unwrap();
    assert!(!spare.delete_table_if_exists().await.unwrap());
    // The original list still works.
    let same = ShardedAccount::new(accounts(&[0, 1, 2]))
        .unwrap()
        .table(&name)
        .unwrap();
    assert!(same.get::<Properties>((pk, "a")).await.unwrap().is_some());
    assert_eq!(counts(&same).iter().sum::<u64>(), SHARDS as u64 + 1);
    // A second use of the handle checks nothing again.
    same.get::<Properties>((pk, "a")).await.unwrap();
    assert_eq!(counts(&same).iter().sum::<u64>(), SHARDS as u64 + 2);
    // A shard that lost its table makes the set incomplete; creating completes it.
    table.shards()[2].delete_table().await.unwrap();
    let fresh = || {
        ShardedAccount::new(accounts(&[0, 1, 2]))
            .unwrap()
            .table(&name)
            .unwrap()
    };
    let err = fresh().verify().await.unwrap_err();
    assert!(err.to_string().contains("shard 2"), "{err}");
    assert!(err.to_string().contains("no table"), "{err}");
    assert!(fresh().create_if_not_exists().await.unwrap());
    fresh().verify().await.unwrap();
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn a_table_not_created_as_sharded_is_refused_and_not_adopted_when_it_holds_data() {
    let name = unique_table_name("ShPlain");
    let plain = account(1).table(&name).unwrap();
    plain.create().await.unwrap();
    plain.insert(&entity("someone", "x", 1)).await.unwrap();
    let table = ShardedAccount::new(accounts(&[0, 1, 2]))
        .unwrap()
        .table(&name)
        .unwrap();
    let err = table.verify().await.unwrap_err();
    assert!(err.to_string().contains("no table"), "{err}");
    let err = table.create_if_not_exists().await.unwrap_err();
    assert!(err.to_string().contains("holds entities"), "{err}");
    let err = table.verify().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    // Emptied, it is adopted; a second call changes nothing.
    plain.delete(("someone", "x"), IfMatch::Any).await.unwrap();
    assert!(table.create_if_not_exists().await.unwrap());
    assert!(!table.create_if_not_exists().await.unwrap());
    let err = table.create().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    table.delete_table().await.unwrap();
    let err = table.delete_table().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn transactions_stay_in_one_shard_and_cross_shard_atomic_batches_are_refused_unsent() {
    let table = created("ShTx").await;
    let pks = partitions(10);
    let a = &pks[0];
    let b = pks
        .iter()
        .find(|pk| table.shard_of(pk) != table.shard_of(a))
        .unwrap();
    table.verify().await.unwrap();
    let before = counts(&table);
    let err = BatchPlan::atomic([
        Operation::insert(&entity(a, "1", 1)).unwrap(),
        Operation::insert(&entity(b, "1", 1)).unwrap(),
    ])
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::CrossPartitionTransaction {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(counts(&table), before, "nothing sent");

    // A best-effort plan over two shards: one transaction in each, the caller's indices kept.
    let plan = BatchPlan::best_effort([
        Operation::insert(&entity(a, "1", 1)).unwrap(),
        Operation::insert(&entity(b, "1", 2)).unwrap(),
        Operation::insert(&entity(a, "2", 3)).unwrap(),
    ])
    .unwrap();
    let outcomes = table.submit(&plan).await.unwrap();
    let indices: Vec<Vec<usize>> = outcomes.iter().map(|o| o.indices.clone()).collect();
    assert_eq!(indices, vec![vec![0, 2], vec![1]]);
    let mut expected = vec![0; SHARDS];
    expected[table.shard_of(a)] += 1;
    expected[table.shard_of(b)] += 1;
    assert_eq!(delta(&counts(&table), &before), expected);

    // An atomic transaction that fails names the caller's index within its shard's plan.
    let plan = BatchPlan::atomic([
        Operation::insert(&entity(b, "9", 1)).unwrap(),
        Operation::insert(&entity(b, "1", 1)).unwrap(),
    ])
    .unwrap();
    let err = table.submit(&plan).await.unwrap_err();
    assert!(matches!(err, Error::BatchFailed { index: 1, .. }), "{err}");

    // The step-by-step builder: refused before sending across shards or for a bad step, one
    // request to its partition's shard otherwise.
    let before = counts(&table);
    let err = table
        .transaction()
        .insert(&entity(a, "t1", 1))
        .upsert_merge(&entity(b, "t1", 1))
        .submit()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::CrossPartitionTransaction {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{err}"
    );
    let err = table
        .transaction()
        .insert(&entity(a, "t1", 1))
        .delete(("bad/key", "x"), IfMatch::Any)
        .submit()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchFailed { index: 1, .. }), "{err}");
    let err = table
        .transaction()
        .insert(&entity(SHARD_MARKER_PARTITION, "t1", 1))
        .submit()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(counts(&table), before, "nothing sent");
    let outcome = table
        .transaction()
        .insert(&entity(b, "t1", 1))
        .upsert_replace(&entity(b, "t2", 2))
        .submit()
        .await
        .unwrap();
    assert_eq!(outcome.indices, vec![0, 1]);
    let mut expected = vec![0; SHARDS];
    expected[table.shard_of(b)] = 1;
    assert_eq!(delta(&counts(&table), &before), expected);
    let rows = shard_rows(&table, table.shard_of(b)).await;
    assert!(rows.contains(&(b.clone(), "t2".into())));
    table.delete_table().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let table = ShardedAccount::new(accounts(&[0, 1, 2]))
        .unwrap()
        .table(&unique_table_name("ShBad"))
        .unwrap();
    let marker = entity(SHARD_MARKER_PARTITION, "x", 1);
    let err = table.insert(&marker).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = table.upsert_merge(&marker).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = table
        .delete((SHARD_MARKER_PARTITION, "marker"), IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = table
        .query_partition::<Properties>(SHARD_MARKER_PARTITION)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = table.get::<Properties>(("bad/key", "x")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let err = table
        .bulk_write(Vec::new(), BulkOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let twice = vec![
        Operation::insert(&entity("p", "r", 1)).unwrap(),
        Operation::upsert_replace(&entity("q", "r", 1)).unwrap(),
        Operation::delete(("p", "r"), IfMatch::Any).unwrap(),
    ];
    let err = table
        .bulk_write(twice, BulkOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::DuplicateInTransaction {
                first: 0,
                second: 2,
                ..
            }
        ),
        "{err}"
    );
    let plan = BatchPlan::best_effort([Operation::insert(&marker).unwrap()]).unwrap();
    let err = table.submit(&plan).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert_eq!(counts(&table), vec![0; SHARDS], "no request was sent");
}

#[tokio::test]
async fn a_shard_may_authenticate_with_a_sas_of_its_own() {
    let table = created("ShSas").await;
    let keyed = account(1);
    let token = TableSas::new(
        table.name(),
        TablePermissions::ALL,
        Utc::now() + chrono::Duration::minutes(10),
    )
    .with_protocol(tablekit_azure::SasProtocol::HttpsAndHttp)
    .sign(&keyed)
    .unwrap();
    let by_sas =
        Account::from_sas(keyed.name(), keyed.endpoints().clone(), &token.to_query()).unwrap();
    assert!(!by_sas.has_key());
    let mixed = ShardedAccount::new(vec![account(0), by_sas, account(2)])
        .unwrap()
        .table(table.name())
        .unwrap();
    let pk = partitions(30)
        .into_iter()
        .find(|pk| mixed.shard_of(pk) == 1)
        .unwrap();
    mixed.insert(&entity(&pk, "s", 5)).await.unwrap();
    let stored = table.shards()[1]
        .get::<Properties>((pk.as_str(), "s"))
        .await
        .unwrap();
    assert_eq!(stored.unwrap().value.get_i64("V").unwrap(), Some(5));
    assert_eq!(
        mixed
            .scan::<Properties>()
            .allow_scan()
            .collect()
            .await
            .unwrap()
            .len(),
        1
    );
    table.delete_table().await.unwrap();
}
