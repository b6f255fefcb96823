//! Batch planning: splitting at 100 operations and below 4 MiB of real body, duplicates and
//! partitions refused with the caller's indices (PATTERNS.md claim 56).

use tablekit_core::batch::{BatchPlan, Operation};
use tablekit_core::limits::MAX_TRANSACTION_BYTES;
use tablekit_core::wire::{encode, parse_response};
use tablekit_core::{Entity, Error, IfMatch, Keys, Limit, Properties};

const SERVICE: &str = "http://127.0.0.1:10002/devstoreaccount1";

/// An insert whose body carries `payload` bytes of binary (4/3 of that on the wire, base64).
fn insert(pk: &str, rk: usize, payload: usize) -> Operation {
    let value = Properties::new().with("Payload", vec![7u8; payload]);
    Operation::insert(&Entity::try_new(pk, format!("{rk:06}"), value).unwrap()).unwrap()
}

#[test]
fn two_hundred_fifty_operations_split_100_100_50_in_order() {
    let plan = BatchPlan::best_effort((0..250).map(|i| insert("p", i, 10))).unwrap();
    let txs = encode(&plan, SERVICE, "T").unwrap();
    let sizes: Vec<usize> = txs.iter().map(|t| t.indices.len()).collect();
    assert_eq!(sizes, [100, 100, 50]);
    let all: Vec<usize> = txs.iter().flat_map(|t| t.indices.iter().copied()).collect();
    assert_eq!(
        all,
        (0..250).collect::<Vec<_>>(),
        "every caller index once, in order"
    );
    assert!(txs.iter().all(|t| t.body.len() <= MAX_TRANSACTION_BYTES));
}

#[test]
fn bodies_that_would_reach_4_mib_are_split_just_below_it() {
    // 60,000 bytes are 80,000 on the wire (base64): about 52 fit one body.
    let ops: Vec<Operation> = (0..100).map(|i| insert("p", i, 60_000)).collect();
    let plan = BatchPlan::best_effort(ops.clone()).unwrap();
    let txs = encode(&plan, SERVICE, "T").unwrap();
    assert!(txs.len() >= 2, "100 × 80 KB needs more than one 4 MiB body");
    let mut next = 0;
    for tx in &txs {
        assert!(
            tx.body.len() <= MAX_TRANSACTION_BYTES,
            "{} bytes",
            tx.body.len()
        );
        next += tx.indices.len();
        if next < ops.len() {
            // The split is as late as possible: the next operation would not have fit.
            let mut with_next: Vec<Operation> =
                tx.indices.iter().map(|&i| ops[i].clone()).collect();
            with_next.push(ops[next].clone());
            let err = encode(&BatchPlan::atomic(with_next).unwrap(), SERVICE, "T").unwrap_err();
            assert!(
                matches!(err, Error::LimitExceeded { limit: Limit::TransactionBytes, actual } if actual > MAX_TRANSACTION_BYTES)
            );
        }
    }
    assert_eq!(next, 100);
}

#[test]
fn two_operations_on_one_entity_are_refused_with_both_indices() {
    let ops = vec![
        insert("p", 1, 1),
        insert("p", 2, 1),
        Operation::delete(("p", "000001"), IfMatch::Any).unwrap(),
    ];
    for plan in [BatchPlan::best_effort(ops.clone()), BatchPlan::atomic(ops)] {
        match plan {
            Err(Error::DuplicateInTransaction {
                keys,
                first: 0,
                second: 2,
            }) => assert_eq!(keys.rk(), "000001"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn atomic_plans_refuse_what_cannot_be_one_transaction() {
    assert!(
        BatchPlan::atomic((0..100).map(|i| insert("p", i, 1))).is_ok(),
        "100 is allowed"
    );
    let err = BatchPlan::atomic((0..101).map(|i| insert("p", i, 1))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                limit: Limit::TransactionOperations,
                actual: 101
            }
        ),
        "{err}"
    );
    let err =
        BatchPlan::atomic([insert("a", 1, 1), insert("a", 2, 1), insert("b", 3, 1)]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::CrossPartitionTransaction {
                first: 0,
                second: 2,
                ..
            }
        ),
        "{err}"
    );
    let plan = BatchPlan::atomic((0..80).map(|i| insert("p", i, 60_000))).unwrap();
    let err = encode(&plan, SERVICE, "T").unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                limit: Limit::TransactionBytes,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        BatchPlan::atomic(Vec::new()).is_err(),
        "an empty transaction is refused"
    );
}

#[test]
fn best_effort_groups_by_partition_in_order_of_appearance() {
    let plan =
        BatchPlan::best_effort([insert("b", 0, 1), insert("a", 1, 1), insert("b", 2, 1)]).unwrap();
    let txs = encode(&plan, SERVICE, "T").unwrap();
    let groups: Vec<(&str, Vec<usize>)> = txs
        .iter()
        .map(|t| (t.partition_key.as_str(), t.indices.clone()))
        .collect();
    assert_eq!(groups, [("b", vec![0, 2]), ("a", vec![1])]);
}

#[test]
fn the_body_is_a_well_formed_changeset() {
    let keys = Keys::new("O'Brien", "r 1").unwrap();
    let ops = vec![
        Operation::insert(&Entity::new(
            Keys::new("O'Brien", "r0").unwrap(),
            Properties::new().with("A", 1),
        ))
        .unwrap(),
        Operation::merge(
            &Entity::new(keys.clone(), Properties::new().with("B", 2)),
            IfMatch::Any,
        )
        .unwrap(),
        Operation::delete(
            Keys::new("O'Brien", "r2").unwrap(),
            IfMatch::ETag(tablekit_core::ETag::new("W/\"x\"")),
        )
        .unwrap(),
    ];
    let tx = encode(&BatchPlan::atomic(ops).unwrap(), SERVICE, "Emp")
        .unwrap()
        .remove(0);
    let body = String::from_utf8(tx.body).unwrap();
    let boundary = tx
        .content_type
        .strip_prefix("multipart/mixed; boundary=")
        .unwrap();
    assert!(
        body.starts_with(&format!("--{boundary}\r\n"))
            && body.ends_with(&format!("--{boundary}--\r\n"))
    );
    assert!(body.contains(&format!("POST {SERVICE}/Emp HTTP/1.1\r\n")));
    assert!(body.contains(&format!(
        "MERGE {SERVICE}/Emp(PartitionKey='O%27%27Brien',RowKey='r%201') HTTP/1.1\r\n"
    )));
    assert!(body.contains(&format!(
        "DELETE {SERVICE}/Emp(PartitionKey='O%27%27Brien',RowKey='r2') HTTP/1.1\r\n"
    )));
    assert!(body.contains("If-Match: *\r\n") && body.contains("If-Match: W/\"x\"\r\n"));
    assert_eq!(body.matches("Content-Type: application/http").count(), 3);
    assert!(
        parse_response(&body).is_empty(),
        "a request has no status lines"
    );
}
